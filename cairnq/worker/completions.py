"""Coalescing completions: the handlers that return in one turn of the loop
settle together in one statement: ``complete_many`` when they all returned
the same value (typically None), ``complete_each`` (each task its own result)
otherwise.

A drain thus writes one completion statement per poll instead of one per
task. Per task the outcome is exactly ``complete``'s: succeeded, or canceled
where a cancel won, or LostLease.

Two ways in: ``complete`` (awaitable, for a caller that goes on afterwards)
and ``complete_later`` (a callback with the outcome, for a call that has
nothing left to do: its task ends at once instead of waiting for the write,
which saves a future, a wake-up and a task step per task).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Callable, Optional

from cairnq.errors import LostLease

if TYPE_CHECKING:
    from cairnq.store.ports import WorkerPort

__all__ = ["Completions", "Outcome"]

# Told of the settlement: (final status, None) or (None, the exception:
# LostLease, or whatever the write raised).
Outcome = Callable[[Optional[str], Optional[BaseException]], None]


class Completions:
    def __init__(self, port: WorkerPort) -> None:
        self._port = port
        # What the next settlement takes, as three lists in step (task ids,
        # their results as JSON text or None, who is told): no tuple per task,
        # and the ids and results go to the statement as they are.
        self._ids: list[str] = []
        self._results: list[Optional[str]] = []
        self._told: list[Outcome] = []
        self._pending: Optional[asyncio.Task[None]] = None  # a settlement not yet begun
        self._writing = 0  # statements on their way
        self._taken_waiters: list[asyncio.Future[None]] = []  # for the queued ones' write

    async def complete(self, task_id: str, result: Any) -> str:
        """Settle one task; returns its final status. Raises SerializationError
        (nothing written) or LostLease."""
        # Encoded by the store's own encoder: the same bytes complete() writes.
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.complete_later(task_id, result, lambda status, exc: _resolve(future, status, exc))
        return await future

    def complete_later(self, task_id: str, result: Any, told: Outcome) -> None:
        """Queue one task's completion; ``told(status, exc)`` runs once it is
        written (or refused). Raises SerializationError at once (nothing is
        queued)."""
        result_json = None if result is None else self._port.encode(result)
        self._ids.append(task_id)
        self._results.append(result_json)
        self._told.append(told)
        if self._pending is None:
            # The task's first step runs on the loop's next turn, after every
            # handler that returns in this one: it takes all their completions.
            self._writing += 1
            self._pending = asyncio.get_running_loop().create_task(self._settle())
            self._pending.add_done_callback(self._ended)

    @property
    def idle(self) -> bool:
        """Nothing queued or being written."""
        return not self._ids and not self._writing

    def queued_written(self) -> "asyncio.Future[None]":
        """Done once the completions queued now are written or refused (at
        once if none is queued). Not the ones queued later: in a steady
        stream there may never be a moment with none queued."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._ids:
            self._taken_waiters.append(future)
        else:
            future.set_result(None)
        return future

    def _ended(self, task: "asyncio.Task[None]") -> None:
        if self._pending is task:  # cancelled before its first step: it took nothing
            self._pending = None
            self._writing -= 1
            waiters, self._taken_waiters = self._taken_waiters, []
            for told in self._take()[2]:
                told(None, asyncio.CancelledError())
            _wake_all(waiters)

    async def _settle(self) -> None:
        self._pending = None
        ids, results, tolds = self._take()
        waiters, self._taken_waiters = self._taken_waiters, []
        try:
            try:
                first = results[0]
                if results.count(first) == len(results):
                    settled = await self._port.complete_many_deferred(ids, first)
                else:
                    settled = await self._port.complete_each_deferred(ids, results)
            except BaseException as exc:
                for told in tolds:
                    told(None, exc)
                if not isinstance(exc, Exception):
                    raise
                return
            get = settled.get
            for task_id, told in zip(ids, tolds):
                status = get(task_id)
                if status is None:
                    told(None, LostLease(task_id))
                else:
                    told(status, None)
        finally:
            self._writing -= 1
            _wake_all(waiters)

    def _take(self) -> tuple[list[str], list[Optional[str]], list[Outcome]]:
        """What is queued, and a fresh queue for what comes next."""
        taken = self._ids, self._results, self._told
        self._ids, self._results, self._told = [], [], []
        return taken


def _wake_all(waiters: "list[asyncio.Future[None]]") -> None:
    for waiter in waiters:
        if not waiter.done():
            waiter.set_result(None)


def _resolve(future: "asyncio.Future[str]", status: Optional[str], exc: Optional[BaseException]) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        assert status is not None
        future.set_result(status)
