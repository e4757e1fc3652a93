"""Would the event loop go straight back to polling? The group-commit test.

Both write paths (the SQLite engine, the PostgreSQL batcher) hold a write
back for one loop turn so that the writes issued in the same turn share one
commit. When nothing else is runnable, nothing could join the batch: the
write may commit at once, inline, and skip the turn.

A write that blocks (SQLite's fsync) must also not hold the loop past a
timer's due time: ``nothing_due_before`` looks at the loop's timers.

Only asyncio's own loops (``BaseEventLoop``: the default selector loop, the
proactor) let us see the run queue and the timers, through their private
``_ready`` deque and ``_scheduled`` heap; they are read here and nowhere else. Fallback: on a loop without it (uvloop, or
any other implementation) the answer is always "something may be ready", so
every write takes the batched path: still correct and group-committed, one
loop turn later for a lone write.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["nothing_else_ready", "nothing_due_before", "can_see_run_queue"]


def can_see_run_queue(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop`` shows its run queue (else nothing_else_ready is
    always False on it)."""
    return getattr(loop, "_ready", None) is not None


def nothing_else_ready(loop: asyncio.AbstractEventLoop, ignore: Any = None, quiet: Any = None) -> bool:
    """True when no callback but ``ignore`` (a handle of the caller's own,
    if any) and handles of ``quiet`` (a callback of the caller's own whose
    delay costs nothing, if any) waits in ``loop``'s run queue: the loop
    would poll next. False when the run queue holds something else, or
    cannot be seen."""
    ready = getattr(loop, "_ready", None)  # asyncio's run queue (a deque)
    if ready is None:
        return False
    if not ready:
        return True
    for handle in ready:  # (returns at the first other one: rarely past the first)
        if handle is not ignore and (quiet is None or getattr(handle, "_callback", None) != quiet):
            return False
    return True


def nothing_due_before(loop: asyncio.AbstractEventLoop, deadline: float, ignore: Any = None) -> bool:
    """True when no live timer of ``loop`` but ``ignore`` (a handle of the
    caller's own, if any) is due before ``deadline`` (loop time). False when
    the timers cannot be seen."""
    scheduled = getattr(loop, "_scheduled", None)  # asyncio's timers (a heap by due time)
    if scheduled is None:
        return False
    if not scheduled:
        return True
    earliest = scheduled[0]
    if earliest is not ignore and not earliest.cancelled():
        return bool(earliest.when() >= deadline)
    # The top of the heap is ours or dead (asyncio drops cancelled timers
    # lazily): look through the rest, rarely more than a few.
    return all(
        h.when() >= deadline for h in scheduled if h is not ignore and not h.cancelled()
    )
