"""``submit``: check, encode, wait for room, insert; keyed submits in one
transaction that resolves the key's conflict first."""

from __future__ import annotations

from typing import Any

from cairnq._ids import new_id
from cairnq.errors import AlreadyExists
from cairnq.models import Task
from cairnq.store.driver import Fetch
from cairnq.store.ops.core import CONFLICTS, Conflict
from cairnq.store.ops.policies import PolicyOps
from cairnq.store.validation import check_submit

__all__ = ["SubmitOps"]


class SubmitOps(PolicyOps):
    async def submit(
        self,
        *,
        name: str,
        payload: Any = None,
        queue: str = "default",
        key: str | None = None,
        conflict: Conflict = "reuse",
        max_attempts: int = 3,
        priority: int = 0,
        metadata: dict[str, Any] | None = None,
        parent_id: str | None = None,
        root_id: str | None = None,
        correlation_id: str | None = None,
        delay_ms: int = 0,
    ) -> Task:
        check_submit(
            conflict, CONFLICTS, max_attempts, delay_ms, priority, name, queue,
            key, parent_id, root_id, correlation_id, metadata,
        )  # fmt: skip
        # Encoded before anything waits or writes: a bad value costs nothing.
        payload_json = "{}" if payload is None else self._encode(payload)
        metadata_json = self._encode(metadata) if metadata else "{}"
        if self._gate is not None:
            await self._gate.acquire(queue)
        task_id = new_id("task")
        params = {
            "id": task_id,
            "name": name,
            "queue": queue,
            "payload": payload_json,
            "metadata": metadata_json,
            "max_attempts": max_attempts,
            "priority": priority,
            "delay_ms": delay_ms,
            "parent_id": parent_id,
            "root_id": root_id or task_id,
            "correlation_id": correlation_id,
        }
        if key is None:
            return self._task((await self._fetch("insert_task", params))[0])
        return await self._submit_keyed(key, conflict, params)

    async def _submit_keyed(self, key: str, conflict: Conflict, params: dict[str, Any]) -> Task:
        """Insert under ``key`` unless its task wins the conflict: under the
        key's lock, so concurrent submits of one key agree."""
        async with self._transaction() as fetch:
            await fetch("lock_key", {"key": key})
            existing = await self._keyed_task(fetch, key)
            if existing is not None:
                if conflict == "reject":
                    raise AlreadyExists(key)
                if _keeps(existing, conflict):
                    return existing
                if existing.status in ("queued", "running"):
                    # replace: the old task steps aside (a running one is flagged)
                    await fetch("cancel", {"id": existing.id})
            task = self._task((await fetch("insert_task", params))[0])
            await fetch("upsert_key", {"key": key, "task_id": task.id})
            return task

    async def _keyed_task(self, fetch: Fetch, key: str) -> Task | None:
        rows = await fetch("get_key", {"key": key})
        if not rows:
            return None
        # Re-read inside the transaction: a purge may have cascaded the key away
        # between snapshots, in which case the key is free.
        return self._first(await fetch("get", {"id": rows[0][0]}))


def _keeps(existing: Task, conflict: Conflict) -> bool:
    """Whether ``conflict`` hands back the key's existing task instead of a new one."""
    status = existing.status
    live = status == "queued" or status == "running"
    if conflict == "reuse":
        return live
    return conflict == "reuse-succeeded" and (live or status == "succeeded")
