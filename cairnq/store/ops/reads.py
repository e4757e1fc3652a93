"""Reads: one task (by id or key), its status, lists, counts, the schema."""

from __future__ import annotations

import builtins
from typing import Any

from cairnq.models import STATUSES, Task, TaskRef, TaskStatus
from cairnq.store.ops.core import StoreCore
from cairnq.store.validation import (
    INT64_MAX,
    check_int,
    check_list_window,
    check_status,
    check_task_id,
    check_text,
)

__all__ = ["ReadOps"]


class ReadOps(StoreCore):
    async def get(self, task_id: str) -> Task | None:
        check_task_id(task_id)
        return self._first(await self._fetch("get", {"id": task_id}))

    async def get_by_key(self, key: str) -> Task | None:
        check_text("key", key, empty=True)
        return self._first(await self._fetch("get_by_key", {"key": key}))

    async def get_status(self, task_id: str) -> TaskRef | None:
        check_task_id(task_id)
        rows = await self._fetch("get_status", {"id": task_id})
        return TaskRef(rows[0][0], rows[0][1]) if rows else None

    async def get_status_by_key(self, key: str) -> TaskRef | None:
        check_text("key", key, empty=True)
        rows = await self._fetch("get_status_by_key", {"key": key})
        return TaskRef(rows[0][0], rows[0][1]) if rows else None

    async def list(
        self,
        *,
        status: TaskStatus | None = None,
        queue: str | None = None,
        name: str | None = None,
        root_id: str | None = None,
        correlation_id: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> builtins.list[Task]:
        check_status(status)
        check_text("queue", queue, optional=True)
        check_text("name", name, optional=True)
        check_text("root_id", root_id, optional=True)
        check_text("correlation_id", correlation_id, optional=True)
        check_list_window(limit, offset)
        params: dict[str, Any] = {
            "status": status,
            "queue": queue,
            "name": name,
            "root_id": root_id,
            "correlation_id": correlation_id,
            "limit": limit,
            "offset": offset,
        }
        return self._tasks(await self._fetch("list", params))

    async def existing_keys(self, keys: builtins.list[str]) -> set[str]:
        """Which of ``keys`` name a task (periodic schedules look up their
        recorded fires this way: each key by primary key, one statement)."""
        for key in keys:
            check_text("key", key, empty=True)
        if not keys:
            return set()
        return {row[0] for row in await self._fetch("existing_keys", {"keys": list(keys)})}

    async def periodic_latest(self) -> builtins.list[Task]:
        """The newest task of each periodic schedule (metadata
        ``"cairnq.periodic"``), in schedule order; reads every task."""
        return self._tasks(await self._fetch("periodic_latest", {}))

    async def stats(self, queue: str | None = None) -> dict[str, dict[TaskStatus, int]]:
        check_text("queue", queue, optional=True)
        rows = await self._fetch("stats", {"queue": queue})
        out: dict[str, dict[TaskStatus, int]] = {}
        if queue is not None:
            out[queue] = dict.fromkeys(STATUSES, 0)
        for q, status, count in rows:
            counts = out.get(q)
            if counts is None:
                counts = out[q] = dict.fromkeys(STATUSES, 0)
            counts[status] = int(count)
        return out

    async def queue_depth(self, queue: str, max_depth: int) -> int:
        check_text("queue", queue)
        check_int("max_depth", max_depth, minimum=0, maximum=INT64_MAX)
        rows = await self._fetch("queue_depth", {"queue": queue, "max_depth": max_depth})
        return int(rows[0][0]) if rows and rows[0][0] is not None else 0

    async def schema_version(self) -> int:
        """``cairnq_meta.schema_version`` (0 if absent). Informational: the
        protocol major is what must match. (An addition to 0.15.1.)"""
        rows = await self._fetch("schema_version", {})
        return int(rows[0][0]) if rows else 0

    async def applied_migrations(self) -> builtins.list[tuple[str, int]]:
        """The migration ledger: ``(file name, applied at ms)``, by name. (An
        addition to 0.15.1.)"""
        return [(row[0], int(row[1])) for row in await self._fetch("applied_migrations", {})]
