"""Waiting for the first of a few things without a task for each.

The claim loop sleeps until news of work, a stop, or a finished call, many
times a second under load. ``asyncio.wait`` over ``Event.wait()`` tasks costs
a task per event, then cancelling and gathering them: five loop turns from
the news to the claim. A ``Signal`` settles the waiter's one future directly,
so the loop resumes on the next turn (two after a store wake, which finishes
a task of its own).
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

__all__ = ["Signal", "first_of"]


class Signal:
    """A flag like ``asyncio.Event`` (``set``, ``clear``, ``is_set``) whose
    setting settles the futures ``first_of`` registers with it."""

    __slots__ = ("_flag", "_waiters")

    def __init__(self) -> None:
        self._flag = False
        self._waiters: set[asyncio.Future[None]] = set()

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        if self._flag:
            return
        self._flag = True
        waiters, self._waiters = self._waiters, set()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def clear(self) -> None:
        self._flag = False

    async def wait(self) -> None:
        """Until set (at once if it is)."""
        await first_of(self)


def _settle(waiter: "asyncio.Future[None]", _: Any) -> None:
    if not waiter.done():
        waiter.set_result(None)


async def first_of(*signals: Signal, future: Optional["asyncio.Future[Any]"] = None) -> None:
    """Return once any of ``signals`` is set or ``future`` is done. A
    ``future`` still pending then is cancelled (and awaited): the caller
    owns it and wants it over. Cancelling the caller does the same."""
    if any(s._flag for s in signals) or (future is not None and future.done()):
        if future is not None and not future.done():
            await _cancelled(future)
        return
    waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    for s in signals:
        s._waiters.add(waiter)
    settle = None
    if future is not None:
        settle = lambda done: _settle(waiter, done)  # noqa: E731
        future.add_done_callback(settle)
    try:
        await waiter
    finally:
        for s in signals:
            s._waiters.discard(waiter)
        if future is not None and not future.done():
            assert settle is not None
            future.remove_done_callback(settle)
            await _cancelled(future)


async def _cancelled(future: "asyncio.Future[Any]") -> None:
    future.cancel()
    await asyncio.gather(future, return_exceptions=True)
