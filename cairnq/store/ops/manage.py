"""A client's writes on existing tasks: cancel, retry (by id or key), purge."""

from __future__ import annotations

from typing import Any

from cairnq.models import Task, TaskStatus
from cairnq.store.ops.core import StoreCore
from cairnq.store.validation import check_task_id, check_text, validate_purge_input

__all__ = ["ManageOps"]


class ManageOps(StoreCore):
    async def cancel(self, task_id: str) -> Task | None:
        check_task_id(task_id)
        return self._first(await self._fetch("cancel", {"id": task_id}))

    async def retry(self, task_id: str, *, reset_attempt: bool = False) -> Task | None:
        check_task_id(task_id)
        params = {"id": task_id, "reset_attempt": bool(reset_attempt)}
        return self._first(await self._fetch("retry", params))

    async def cancel_by_key(self, key: str) -> Task | None:
        return await self._by_key(key, "cancel", {})

    async def retry_by_key(self, key: str, *, reset_attempt: bool = False) -> Task | None:
        return await self._by_key(key, "retry", {"reset_attempt": bool(reset_attempt)})

    async def _by_key(self, key: str, statement: str, extra: dict[str, Any]) -> Task | None:
        """``statement`` on the key's task, under the key's lock."""
        check_text("key", key, empty=True)
        async with self._transaction() as fetch:
            await fetch("lock_key", {"key": key})
            rows = await fetch("get_key", {"key": key})
            if not rows:
                return None
            return self._first(await fetch(statement, {"id": rows[0][0], **extra}))

    async def purge(
        self,
        *,
        older_than_ms: int = 0,
        queue: str | None = None,
        status: TaskStatus | None = None,
        name: str | None = None,
        limit: int = 1_000,
    ) -> list[str]:
        validate_purge_input(older_than_ms=older_than_ms, status=status, limit=limit)
        check_text("queue", queue, optional=True)
        check_text("name", name, optional=True)
        params = {
            "older_than_ms": older_than_ms,
            "queue": queue,
            "status": status,
            "name": name,
            "limit": limit,
        }
        return [row[0] for row in await self._fetch("purge", params)]
