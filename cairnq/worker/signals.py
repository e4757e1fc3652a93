"""Waiting for the first of a few things without a task for each.

The claim loop sleeps until news of work, a stop, or a finished call, many
times a second under load. ``asyncio.wait`` over ``Event.wait()`` tasks costs
a task per event, then cancelling and gathering them: five loop turns from
the news to the claim. A ``Signal`` settles the waiter's one future directly,
so the loop resumes on the next turn (two after a store wake, which finishes
a task of its own).

``unless`` goes further for a wait that is itself a coroutine (the store's
idle wait): it runs in the waiting task, so the news resumes the claim loop
on the next turn, and a signal set meanwhile interrupts it by cancelling
that task, a cancellation ``unless`` takes back (``Task.uncancel``) so
nothing above it sees one.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any, Awaitable, Optional

__all__ = ["Signal", "first_of", "unless"]


class Signal:
    """A flag like ``asyncio.Event`` (``set``, ``clear``, ``is_set``) whose
    setting settles the futures ``first_of`` registers with it."""

    __slots__ = ("_flag", "_waiters", "_interrupts")

    def __init__(self) -> None:
        self._flag = False
        self._waiters: set[asyncio.Future[None]] = set()
        self._interrupts: set[_Interrupt] = set()  # (of tasks waiting in ``unless``)

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
        interrupts, self._interrupts = self._interrupts, set()
        for interrupt in interrupts:
            interrupt.fire()

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


async def unless(wait: Awaitable[Any], *signals: Signal) -> tuple[bool, Any]:
    """Await ``wait`` in this task unless one of ``signals`` is set first:
    (True, what it returned), or (False, None) when a signal was set before
    it was done (it is then cancelled where it waits) or it raised. Cancelling
    the caller cancels ``wait`` as awaiting it would."""
    if any(s._flag for s in signals):
        _discard(wait)
        return False, None
    task = asyncio.current_task()
    assert task is not None
    interrupt = _Interrupt(task)
    for s in signals:
        s._interrupts.add(interrupt)
    try:
        result = await wait
    except asyncio.CancelledError:
        if not interrupt.taken_back():
            raise
        return False, None
    except Exception:
        # (as first_of over a task of it: the wait's error stays with it.) A
        # wait that turned our cancellation into that error leaves its count
        # on the task all the same: taken back, as below.
        interrupt.taken_back()
        return False, None
    finally:
        interrupt.resting = False
        for s in signals:
            s._interrupts.discard(interrupt)
    if interrupt.sent:  # (the wait swallowed the cancellation)
        interrupt.taken_back()
        return False, None
    return True, result


class _Interrupt:
    """A task waiting in ``unless``, and whether a signal cancelled it."""

    __slots__ = ("task", "resting", "sent")

    def __init__(self, task: "asyncio.Task[Any]") -> None:
        self.task = task
        self.resting = True  # still awaiting the wait
        self.sent = False

    def fire(self) -> None:
        if self.sent or not self.resting:
            return
        if self.task is asyncio.current_task():
            # Set from within the wait itself: cancelled now, the task would
            # be hit at its next await, wherever that is. Once it rests.
            asyncio.get_running_loop().call_soon(self.fire)
            return
        self.sent = True
        self.task.cancel()

    def taken_back(self) -> bool:
        """The cancellation was ours: undo its count (3.11+), so nothing
        above (``asyncio.timeout``, a TaskGroup) takes it for its own. False
        when another cancellation is pending as well: that one goes on."""
        if not self.sent:
            return False
        self.sent = False
        if sys.version_info >= (3, 11):
            return self.task.uncancel() == 0
        return True


def _discard(wait: Awaitable[Any]) -> None:
    """A wait that will not be awaited: closed (no "never awaited" warning)."""
    if asyncio.iscoroutine(wait):
        wait.close()
