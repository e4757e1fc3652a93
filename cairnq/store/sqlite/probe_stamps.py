"""Where a waiter finds the stamp of the read it decided to sleep on.

A waiter (a claim loop, a ``call()``) reads (nothing to claim, the task not
finished yet), then sleeps until the next change; the change counters noted
just before its read (its **stamp**) are where that sleep counts from, so a
commit landing between the read and the sleep ends the sleep at once.

Stamps belong to the task that read, not to the store: two claim loops on one
store, or fifty concurrent ``call()``s, each sleep on their own read. A stamp
that another waiter's later read had overwritten would hide the commits in
between, and the waiter would sleep through them (up to its poll interval).
A task's stamps are kept in a book in its context: the tasks it starts
(a claim loop's idle wait runs in one) see its book and take its stamps, and
a task that reads starts a book of its own rather than write in one it
inherited (a handler's ``call()`` does not overwrite its claim loop's stamp).
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from typing import Any, Hashable, Optional

__all__ = ["note_stamp", "take_stamp"]

Stamp = tuple[int, int]  # (our commits, the file's data_version), just before the read


class _Book:
    __slots__ = ("owner", "stamps")

    def __init__(self, owner: Optional[asyncio.Task[Any]]) -> None:
        self.owner = owner
        self.stamps: dict[tuple[Hashable, str], Stamp] = {}


_BOOK: ContextVar[Optional[_Book]] = ContextVar("cairnq_sqlite_probe_stamps", default=None)


def note_stamp(store_key: Hashable, kind: str, stamp: Stamp) -> None:
    """The current task's last read of ``kind`` on the connection ``store_key``."""
    book = _BOOK.get()
    owner = asyncio.current_task()  # (the engine reads only from coroutines on its loop)
    if book is None or book.owner is not owner:
        book = _Book(owner)
        _BOOK.set(book)
    book.stamps[(store_key, kind)] = stamp


def take_stamp(store_key: Hashable, kind: str) -> Optional[Stamp]:
    """The stamp of the current task's (or the task that started it) last read
    of ``kind`` on ``store_key``, once; None if there is none."""
    book = _BOOK.get()
    if book is None:
        return None
    return book.stamps.pop((store_key, kind), None)
