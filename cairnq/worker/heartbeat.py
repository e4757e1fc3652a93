"""One heartbeat loop for every lease a worker holds.

Each round renews all live leases with a single ``heartbeat_batch``,
however many calls and batches they belong to. An id missing from the reply
lost its lease (unless it was settled meanwhile) and only that context is
flagged; a cancel flag in the reply is recorded on its context. The loop runs
while there are leases and stops when there are none.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional

from cairnq import events
from cairnq.context import mark_cancel_requested, mark_lease_lost

if TYPE_CHECKING:
    from cairnq.context import TaskContext
    from cairnq.worker.store_port import StorePort

__all__ = ["Heartbeats"]

Report = Callable[[BaseException, dict[str, Any]], None]

_HEARTBEAT = events.channel("heartbeat")
_clock = time.perf_counter
_new_tuple = tuple.__new__


class Heartbeats:
    def __init__(self, port: StorePort, interval_ms: int, report: Report) -> None:
        self._port = port
        self._interval_s = interval_ms / 1000
        self._report = report
        self._live: dict[str, TaskContext] = {}
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._live)

    def hold(self, contexts: Iterable[TaskContext], ids: Optional[Iterable[str]] = None) -> None:
        """Renew these leases from now on; ``ids``: their task ids, in the
        same order, where the caller has them at hand."""
        if ids is None:
            ids = [ctx.task_id for ctx in contexts]
        self._live.update(zip(ids, contexts))
        if self._live and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._run())

    def release(self, ctx: TaskContext, task_id: Optional[str] = None) -> None:
        self.release_each((ctx,), (ctx.task_id if task_id is None else task_id,))

    def release_each(self, contexts: Iterable[TaskContext], ids: Iterable[str]) -> None:
        """Stop renewing these leases (``ids``: their task ids, in step)."""
        live = self._live
        for ctx, task_id in zip(contexts, ids):
            # Only this very context: the same task may already be held again,
            # by its next attempt, claimed before this one's release ran.
            if live.get(task_id) is ctx:
                del live[task_id]

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        while self._live:
            await asyncio.sleep(self._interval_s)
            await self.renew_now()

    async def renew_now(self) -> None:
        """Renew every live lease now."""
        live = self._live
        for task_id in [i for i, c in live.items() if c.settled or c.lost_lease]:
            del live[task_id]
        if not live:
            return
        sent = list(live.items())
        ids = [task_id for task_id, _ in sent]
        began = _clock() if _HEARTBEAT.on else None
        try:
            beats = await self._port.beat(ids)
        except Exception as exc:
            self._report(exc, {"phase": "execute", "task_id": ids[0]})
            if began is not None:
                _report_round(sent[0][1].worker_id, began, len(ids), 0, 0, exc)
            return
        lost = 0
        for task_id, ctx in sent:
            # The reply is about the attempt that was live when the round was
            # sent. If that attempt ended meanwhile (a retryable failure) and
            # the task was claimed again, its id is missing from the reply
            # without the new attempt having lost anything: leave it alone.
            if live.get(task_id) is not ctx:
                continue
            cancel = beats.get(task_id)
            if cancel is not None:
                if cancel:
                    mark_cancel_requested(ctx)
            elif not ctx.settled:  # settled meanwhile is fine; otherwise it is gone
                mark_lease_lost(ctx)
                del live[task_id]
                lost += 1
        if began is not None:
            cancel_requested = sum(1 for flag in beats.values() if flag)
            _report_round(sent[0][1].worker_id, began, len(ids), lost, cancel_requested, None)


def _report_round(
    worker_id: str,
    began: float,
    leases: int,
    lost: int,
    cancel_requested: int,
    error: Optional[BaseException],
) -> None:
    if _HEARTBEAT.on:  # still: a handler may have unsubscribed meanwhile
        _HEARTBEAT.emit(
            _new_tuple(
                events.HeartbeatEvent,
                ("heartbeat", worker_id, leases, lost, cancel_requested, _clock() - began, error),
            )
        )
