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
# (task id, its result as JSON text or None, who is told)
_Waiting = tuple[str, Optional[str], Outcome]


class Completions:
    def __init__(self, port: WorkerPort) -> None:
        self._port = port
        self._waiting: list[_Waiting] = []
        self._pending: Optional[asyncio.Task[None]] = None  # a settlement not yet begun
        self._writing = 0  # statements on their way

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
        self._waiting.append((task_id, result_json, told))
        if self._pending is None:
            # The task's first step runs on the loop's next turn, after every
            # handler that returns in this one: it takes all their completions.
            self._writing += 1
            self._pending = asyncio.get_running_loop().create_task(self._settle())
            self._pending.add_done_callback(self._ended)

    @property
    def idle(self) -> bool:
        """Nothing queued or being written."""
        return not self._waiting and not self._writing

    def _ended(self, task: "asyncio.Task[None]") -> None:
        if self._pending is task:  # cancelled before its first step: it took nothing
            self._pending = None
            self._writing -= 1
            waiting, self._waiting = self._waiting, []
            for _, _, told in waiting:
                told(None, asyncio.CancelledError())

    async def _settle(self) -> None:
        self._pending = None
        waiting, self._waiting = self._waiting, []
        try:
            ids = [task_id for task_id, _, _ in waiting]
            results = [result_json for _, result_json, _ in waiting]
            try:
                if all(r == results[0] for r in results):
                    settled = await self._port.complete_many_deferred(ids, results[0])
                else:
                    settled = await self._port.complete_each_deferred(ids, results)
            except BaseException as exc:
                for _, _, told in waiting:
                    told(None, exc)
                if not isinstance(exc, Exception):
                    raise
                return
            get = settled.get
            for task_id, _, told in waiting:
                status = get(task_id)
                if status is None:
                    told(None, LostLease(task_id))
                else:
                    told(status, None)
        finally:
            self._writing -= 1


def _resolve(future: "asyncio.Future[str]", status: Optional[str], exc: Optional[BaseException]) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        assert status is not None
        future.set_result(status)
