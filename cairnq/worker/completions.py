"""Coalescing completions: the handlers that return in one turn of the loop
settle together in one statement: ``complete_many`` when they all returned
the same value (typically None), ``complete_each`` (each task its own result)
otherwise.

A drain thus writes one completion statement per poll instead of one per
task. Per task the outcome is exactly ``complete``'s: succeeded, or canceled
where a cancel won, or LostLease.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Optional

from cairnq.errors import LostLease

if TYPE_CHECKING:
    from cairnq.store.ports import WorkerPort

__all__ = ["Completions"]

# (task id, its result as JSON text or None, the future its caller awaits)
_Waiting = tuple[str, Optional[str], "asyncio.Future[str]"]


class Completions:
    def __init__(self, port: WorkerPort) -> None:
        self._port = port
        self._waiting: list[_Waiting] = []
        self._scheduled = False

    async def complete(self, task_id: str, result: Any) -> str:
        """Settle one task; returns its final status. Raises SerializationError
        (nothing written) or LostLease."""
        # Encoded by the store's own encoder: the same bytes complete() writes.
        result_json = None if result is None else self._port.encode(result)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[str] = loop.create_future()
        self._waiting.append((task_id, result_json, future))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush)
        return await future

    def _flush(self) -> None:
        self._scheduled = False
        waiting, self._waiting = self._waiting, []
        asyncio.get_running_loop().create_task(self._settle(waiting))

    async def _settle(self, waiting: list[_Waiting]) -> None:
        ids = [task_id for task_id, _, _ in waiting]
        results = [result_json for _, result_json, _ in waiting]
        try:
            if all(r == results[0] for r in results):
                settled = await self._port.complete_many_deferred(ids, results[0])
            else:
                settled = await self._port.complete_each_deferred(ids, results)
        except BaseException as exc:
            for _, _, future in waiting:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for task_id, _, future in waiting:
            if future.done():
                continue
            status = settled.get(task_id)
            if status is None:
                future.set_exception(LostLease(task_id))
            else:
                future.set_result(status)
