"""Coalescing completions: the handlers that return in one turn of the loop
settle together, one ``complete_many`` statement per distinct result.

A drain of handlers returning the same value (typically None) thus writes one
statement per poll instead of one per task. Per task the outcome is exactly
``complete``'s: succeeded, or canceled where a cancel won, or LostLease.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Optional

from cairnq.errors import LostLease

if TYPE_CHECKING:
    from cairnq.store.base import TaskStore

__all__ = ["Completions"]

_Waiter = tuple[str, "asyncio.Future[str]"]


class Completions:
    def __init__(self, store: TaskStore, worker_id: str) -> None:
        self._store = store
        self._worker_id = worker_id
        self._groups: dict[Optional[str], list[_Waiter]] = {}
        self._scheduled = False

    async def complete(self, task_id: str, result: Any) -> str:
        """Settle one task; returns its final status. Raises SerializationError
        (nothing written) or LostLease."""
        # Encoded by the store's own encoder: the same bytes complete() writes.
        result_json = None if result is None else self._store._encode(result)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[str] = loop.create_future()
        self._groups.setdefault(result_json, []).append((task_id, future))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush)
        return await future

    def _flush(self) -> None:
        self._scheduled = False
        groups, self._groups = self._groups, {}
        loop = asyncio.get_running_loop()
        for result_json, waiters in groups.items():
            loop.create_task(self._settle(result_json, waiters))

    async def _settle(self, result_json: Optional[str], waiters: list[_Waiter]) -> None:
        try:
            settled = await self._store._complete_many_json(
                [task_id for task_id, _ in waiters], self._worker_id, result_json, ride=True
            )
        except BaseException as exc:
            for _, future in waiters:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for task_id, future in waiters:
            if future.done():
                continue
            status = settled.get(task_id)
            if status is None:
                future.set_exception(LostLease(task_id))
            else:
                future.set_result(status)
