"""A worker's writes on the tasks it holds, each checked against the lease:
heartbeats, progress, completion (one, many, or inside the caller's own
transaction) and failure.

The ``_heartbeat_batch`` / ``_complete_*_json`` forms take arguments already
checked and encoded; ``deferred=True`` sends their statement deferred (see
``driver.py``). The worker port uses them for the writes nobody awaits."""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Sequence

from cairnq._speedups import decode_beats
from cairnq.errors import LostLease
from cairnq.models import Task, TaskStatus
from cairnq.store.ops.core import StoreCore
from cairnq.store.validation import (
    DURATION_MS_MAX,
    check_int,
    check_lease_ms,
    check_message,
    check_progress,
    check_task_id,
    check_task_ids,
    check_text,
)

__all__ = ["SettleOps"]


class SettleOps(StoreCore):
    # -- leases --------------------------------------------------------------

    async def heartbeat(self, *, task_id: str, worker_id: str, lease_ms: int = 30_000) -> Task:
        check_lease_ms(lease_ms)
        check_task_id(task_id)
        check_text("worker_id", worker_id)
        params = {"id": task_id, "worker_id": worker_id, "lease_ms": lease_ms}
        return await self._owned(task_id, "heartbeat", params)

    async def heartbeat_batch(
        self, *, task_ids: Sequence[str], worker_id: str, lease_ms: int = 30_000
    ) -> dict[str, bool]:
        """Renew every lease in ``task_ids``: ``{id: cancel_requested}`` for each
        one still held. Absent ids lost their lease; this never raises LostLease."""
        check_lease_ms(lease_ms)
        check_text("worker_id", worker_id)
        check_task_ids(task_ids)
        return await self._heartbeat_batch(task_ids, worker_id, lease_ms, deferred=False)

    async def _heartbeat_batch(
        self, task_ids: Sequence[str], worker_id: str, lease_ms: int, *, deferred: bool
    ) -> dict[str, bool]:
        """``heartbeat_batch`` on checked input; ``deferred``: sent deferred."""
        if not task_ids:
            return {}
        params = {"ids": list(task_ids), "worker_id": worker_id, "lease_ms": lease_ms}
        fetch = self._fetch_deferred if deferred else self._fetch
        beats = decode_beats(await fetch("heartbeat_batch", params))
        if len(beats) < 2:
            return beats
        # In the order asked (as 0.15.1 gives it), not the statement's row order.
        return {task_id: beats[task_id] for task_id in task_ids if task_id in beats}

    async def progress(
        self,
        *,
        task_id: str,
        worker_id: str,
        progress: float | None,
        message: str | None,
    ) -> Task:
        check_progress(progress)
        check_message("message", message)
        check_task_id(task_id)
        check_text("worker_id", worker_id)
        params = {
            "id": task_id,
            "worker_id": worker_id,
            "progress": None if progress is None else float(progress),
            "message": message,
        }
        return await self._owned(task_id, "progress", params)

    # -- settling ----------------------------------------------------------------

    async def succeed(self, *, task_id: str, worker_id: str, result: Any) -> Task:
        check_task_id(task_id)
        check_text("worker_id", worker_id)
        params = {
            "id": task_id,
            "worker_id": worker_id,
            "result": self._result_json(result),
            "message": None,
        }
        return await self._owned(task_id, "succeed", params)

    async def complete(self, *, task_id: str, worker_id: str, result: Any) -> Task:
        check_task_id(task_id)
        check_text("worker_id", worker_id)
        params = {"id": task_id, "worker_id": worker_id, "result": self._result_json(result)}
        return await self._owned(task_id, "complete", params)

    async def complete_many(
        self, *, task_ids: Sequence[str], worker_id: str, result: Any
    ) -> dict[str, TaskStatus]:
        """``complete`` for several tasks sharing one result, in one statement.
        Returns ``{id: final status}`` for the tasks settled ("succeeded", or
        "canceled" where a cancel won); a missing id lost its lease. (An
        addition to the 0.15.1 surface; the worker settles drains with it.)"""
        check_text("worker_id", worker_id)
        check_task_ids(task_ids)
        return await self._complete_many_json(
            task_ids, worker_id, self._result_json(result), deferred=False
        )

    async def _complete_many_json(
        self, task_ids: Sequence[str], worker_id: str, result_json: str | None, *, deferred: bool
    ) -> dict[str, TaskStatus]:
        """``complete_many`` with the result already JSON text; ``deferred``: sent deferred."""
        if not task_ids:
            return {}
        params = {"ids": list(task_ids), "worker_id": worker_id, "result": result_json}
        fetch = self._fetch_deferred if deferred else self._fetch
        return dict(await fetch("complete_many", params))  # (rows of (id, status))

    async def _complete_each_json(
        self,
        task_ids: Sequence[str],
        worker_id: str,
        results_json: Sequence[str | None],
        *,
        deferred: bool,
    ) -> dict[str, TaskStatus]:
        """complete for each id with the result at the same position (JSON
        text already encoded, or None): one statement. ``{id: final status}``
        for the settled ones; an id missing lost its lease."""
        if not task_ids:
            return {}
        params = {
            "ids": list(task_ids),
            "worker_id": worker_id,
            "results": list(results_json),
        }
        fetch = self._fetch_deferred if deferred else self._fetch
        return dict(await fetch("complete_each", params))  # (rows of (id, status))

    async def complete_in(
        self,
        *,
        task_id: str,
        worker_id: str,
        write: Callable[[Any], Awaitable[Any]],
    ) -> tuple[Task, Any]:
        """Run ``write(session)`` and ``complete`` in one transaction (Postgres)."""
        async with self._transaction_with_session() as (fetch, session):
            value = await write(session)
            params = {"id": task_id, "worker_id": worker_id, "result": self._result_json(value)}
            rows = await fetch("complete", params)
            if not rows:
                raise LostLease(task_id)
            return self._task(rows[0]), value

    async def fail(
        self,
        *,
        task_id: str,
        worker_id: str,
        error: dict[str, Any],
        retryable: bool = True,
        delay_ms: int = 0,
    ) -> Task:
        check_int("delay_ms", delay_ms, minimum=0, maximum=DURATION_MS_MAX)
        check_task_id(task_id)
        check_text("worker_id", worker_id)
        params = {
            "id": task_id,
            "worker_id": worker_id,
            "error": self._error_json(error, retryable),
            "retryable": bool(retryable),
            "delay_ms": delay_ms,
        }
        return await self._owned(task_id, "fail", params)
