"""One heartbeat loop for every lease a worker holds.

Each beat renews all live leases with a single ``heartbeat_batch``,
however many calls and batches they belong to. An id missing from the reply
lost its lease (unless it was settled meanwhile) and only that context is
flagged; a cancel flag in the reply is recorded on its context. The loop runs
while there are leases and stops when there are none.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Callable, Iterable

if TYPE_CHECKING:
    from cairnq.context import TaskContext
    from cairnq.worker.store_port import StorePort

__all__ = ["Heartbeats"]

Report = Callable[[BaseException, dict[str, Any]], None]


class Heartbeats:
    def __init__(self, port: StorePort, interval_ms: int, report: Report) -> None:
        self._port = port
        self._interval_s = interval_ms / 1000
        self._report = report
        self._live: dict[str, TaskContext] = {}
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._live)

    def hold(self, contexts: Iterable[TaskContext]) -> None:
        for ctx in contexts:
            self._live[ctx.task_id] = ctx
        if self._live and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._run())

    def release(self, ctx: TaskContext) -> None:
        # Only this very context: the same task may already be held again, by
        # its next attempt, claimed before this one's release ran.
        if self._live.get(ctx.task_id) is ctx:
            del self._live[ctx.task_id]

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        while self._live:
            await asyncio.sleep(self._interval_s)
            await self.beat()

    async def beat(self) -> None:
        """Renew every live lease now."""
        live = self._live
        for task_id in [i for i, c in live.items() if c.settled or c.lost_lease]:
            del live[task_id]
        if not live:
            return
        sent = list(live.items())
        ids = [task_id for task_id, _ in sent]
        try:
            beats = await self._port.beat(ids)
        except Exception as exc:
            self._report(exc, {"phase": "execute", "task_id": ids[0]})
            return
        for task_id, ctx in sent:
            # The reply is about the attempt that was live when the beat was
            # sent. If that attempt ended meanwhile (a retryable failure) and
            # the task was claimed again, its id is missing from the reply
            # without the new attempt having lost anything: leave it alone.
            if live.get(task_id) is not ctx:
                continue
            cancel = beats.get(task_id)
            if cancel is not None:
                ctx._observe_cancel(cancel)
            elif not ctx.settled:  # settled meanwhile is fine; otherwise it is gone
                ctx._mark_lease_lost()
                del live[task_id]
