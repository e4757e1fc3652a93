"""Coalescing completions: the handlers that return in one turn of the loop
settle together in one statement: ``complete_many`` when they all returned
the same value (typically None), ``complete_each`` (each task its own result)
otherwise.

A drain thus writes one completion statement per poll instead of one per
task. Per task the outcome is exactly ``complete``'s: succeeded, or canceled
where a cancel won, or LostLease.

Three ways in: ``complete`` (awaitable, for a caller that goes on
afterwards), ``complete_later`` (a callback with the outcome, for a call
that has nothing left to do: its task ends at once instead of waiting for
the write, which saves a future, a wake-up and a task step per task), and
``complete_group`` (one callback for many tasks, their results encoded
already: the quick calls of a claim, ``book.QuickHold``).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

from cairnq.errors import LostLease

if TYPE_CHECKING:
    from cairnq.store.ports import WorkerPort

__all__ = ["Completions", "GroupOutcome", "Outcome"]

# Told of the settlement: (final status, None) or (None, the exception:
# LostLease, or whatever the write raised).
Outcome = Callable[[Optional[str], Optional[BaseException]], None]
# Told of a group's settlement: ({task id: final status} for the tasks
# settled, None), where a group's id missing from it lost its lease; or
# (None, the exception the write raised).
GroupOutcome = Callable[[Optional[Mapping[str, str]], Optional[BaseException]], None]


class Completions:
    def __init__(self, port: WorkerPort) -> None:
        self._port = port
        # What the next settlement takes: the task ids and their results as
        # JSON text or None, in step, as the statement takes them; who is told
        # of each task queued alone (its id and its callback, in step: no
        # tuple per task), and of each group.
        self._ids: list[str] = []
        self._results: list[Optional[str]] = []
        self._told_ids: list[str] = []
        self._told: list[Outcome] = []
        self._groups: list[GroupOutcome] = []
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
        self._told_ids.append(task_id)
        self._told.append(told)
        if self._pending is None:
            self._begin()

    def complete_group(self, task_ids: list[str], results_json: list[Optional[str]], told: GroupOutcome) -> None:
        """Queue the completions of ``task_ids`` with their results, JSON text
        from ``encode`` (or None), in step; ``told`` runs once they are
        written (or refused)."""
        self._ids += task_ids
        self._results += results_json
        self._groups.append(told)
        if self._pending is None:
            self._begin()

    def encode(self, result: Any) -> str:
        """``result`` as the store writes it (SerializationError otherwise)."""
        return self._port.encode(result)

    def _begin(self) -> None:
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
            _, _, _, tolds, groups = self._take()
            for told in tolds:
                told(None, asyncio.CancelledError())
            for group in groups:
                group(None, asyncio.CancelledError())
            _call_all(ended)

    async def _settle(self) -> None:
        self._pending = None
        ids, results, told_ids, tolds, groups = self._take()
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
                for group in groups:
                    group(None, exc)
                if not isinstance(exc, Exception):
                    raise
                return
            get = settled.get
            for task_id, told in zip(told_ids, tolds):
                status = get(task_id)
                if status is None:
                    told(None, LostLease(task_id))
                else:
                    told(status, None)
            for group in groups:
                group(settled, None)
        finally:
            self._writing -= 1
            del self._on_way[id(ended)]
            _call_all(ended)

    def _take(
        self,
    ) -> tuple[list[str], list[Optional[str]], list[str], list[Outcome], list[GroupOutcome]]:
        """What is queued, and a fresh queue for what comes next."""
        taken = self._ids, self._results, self._told_ids, self._told, self._groups
        self._ids, self._results, self._told_ids, self._told, self._groups = [], [], [], [], []
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
