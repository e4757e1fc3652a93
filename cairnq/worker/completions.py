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
        # Told when a settlement ends: the next one's list (it takes what is
        # queued), and one list per settlement on its way.
        self._next_told: list[Callable[[], None]] = []
        self._on_way: dict[int, list[Callable[[], None]]] = {}  # by id: lists compare equal

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
        """Done once the completions queued or on their way now are written
        or refused (at once if there are none). Not the ones queued later: in
        a steady stream there may never be a moment with none."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        lists = list(self._on_way.values())
        if self._ids:
            lists.append(self._next_told)
        left = len(lists)
        if not left:
            future.set_result(None)
            return future

        def one_ended() -> None:
            nonlocal left
            left -= 1
            if not left and not future.done():
                future.set_result(None)

        for told in lists:
            told.append(one_ended)
        return future

    def _ended(self, task: "asyncio.Task[None]") -> None:
        if self._pending is task:  # cancelled before its first step: it took nothing
            self._pending = None
            self._writing -= 1
            ended, self._next_told = self._next_told, []
            for told in self._take()[2]:
                told(None, asyncio.CancelledError())
            _call_all(ended)

    async def _settle(self) -> None:
        self._pending = None
        ids, results, tolds = self._take()
        ended, self._next_told = self._next_told, []
        self._on_way[id(ended)] = ended
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
            del self._on_way[id(ended)]
            _call_all(ended)

    def _take(self) -> tuple[list[str], list[Optional[str]], list[Outcome]]:
        """What is queued, and a fresh queue for what comes next."""
        taken = self._ids, self._results, self._told
        self._ids, self._results, self._told = [], [], []
        return taken


def _call_all(callbacks: list[Callable[[], None]]) -> None:
    for callback in callbacks:
        callback()


def _resolve(future: "asyncio.Future[str]", status: Optional[str], exc: Optional[BaseException]) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        assert status is not None
        future.set_result(status)
