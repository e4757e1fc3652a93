"""Reads for browsing a database (the dashboard): keyset pages of tasks and
the overview's aggregates. Additions to 0.15.1; every one is a statement in
``protocol/sql/<dialect>/browse_*.sql`` that reaches an index
(``tests/store/test_browse_plans.py`` pins the plans).

Pages are keyset-paginated: the caller hands back the position of the last
row it showed, so a deep page costs what the first one does. Task ids are
``task_<ULID>`` (OPERATIONS.md), so id order is creation order and a
creation-time range is an id range.
"""

from __future__ import annotations

import builtins
from typing import Any, Literal, Optional

from cairnq._ids import new_ulid
from cairnq.models import Task, TaskStatus
from cairnq.store.ops.core import StoreCore
from cairnq.store.validation import INT64_MAX, check_int, check_status, check_text

__all__ = ["BrowseOps", "BrowseOrder", "BROWSE_ORDERS", "Keyset", "ID_FLOOR", "ID_CEILING"]

BrowseOrder = Literal["newest", "oldest", "finished_newest", "finished_oldest"]
BROWSE_ORDERS: tuple[BrowseOrder, ...] = (
    "newest",
    "oldest",
    "finished_newest",
    "finished_oldest",
)
# Below and above every task id: "task_" is a prefix of each (so sorts
# first), and no ULID starts with "Z" (the first character is 0-7).
ID_FLOOR = "task_"
ID_CEILING = "task_ZZZZZZZZZZZZZZZZZZZZZZZZZZZ"
# A page position: (completed_at_ms, id) of the last row shown; the
# completion time is None for the creation-ordered pages.
Keyset = tuple[Optional[int], str]
_PAGE_MAX = 10_000
# Rare among a long history: listed from the status index and sorted, not
# by walking the primary key past every finished task.
_UNFINISHED = ("queued", "running")
_ULID_TIME_MAX = 2**48 - 1
# An SDK may stamp a task's id and its created_at_ms apart (two clock
# reads): the id range is this much wider and created_at_ms decides.
_SLACK_MS = 300_000


def _id_bound(ms: int) -> str:
    """Sorts after every task id of an earlier millisecond and before every
    one of ``ms`` or later: "task_" and the ULID's time part."""
    return "task_" + new_ulid(min(max(ms, 0), _ULID_TIME_MAX))[:10]


class BrowseOps(StoreCore):
    async def browse(
        self,
        order: BrowseOrder = "newest",
        *,
        status: Optional[TaskStatus] = None,
        queue: Optional[str] = None,
        name: Optional[str] = None,
        root_id: Optional[str] = None,
        correlation_id: Optional[str] = None,
        created_from_ms: Optional[int] = None,
        created_to_ms: Optional[int] = None,
        after: Optional[Keyset] = None,
        limit: int = 50,
    ) -> builtins.list[Task]:
        """One page of tasks in ``order``, after the position ``after`` (None:
        the first page), created in ``[created_from_ms, created_to_ms)`` when
        given, and each given filter an equality. The ``finished_*`` orders return finished tasks
        only, by completion time."""
        if order not in BROWSE_ORDERS:
            raise ValueError(f"order must be one of {BROWSE_ORDERS}, got {order!r}")
        check_status(status)
        for what, value in (
            ("queue", queue),
            ("name", name),
            ("root_id", root_id),
            ("correlation_id", correlation_id),
        ):
            check_text(what, value, optional=True)
        for what, ms in (("created_from_ms", created_from_ms), ("created_to_ms", created_to_ms)):
            if ms is not None:
                check_int(what, ms, minimum=0, maximum=_ULID_TIME_MAX)
        check_int("limit", limit, minimum=1, maximum=_PAGE_MAX)
        finished = order.startswith("finished")
        descending = order.endswith("newest")
        if after is None:
            after_ms: Optional[int] = (INT64_MAX if descending else -1) if finished else None
            after_id = ID_CEILING if descending else ID_FLOOR
        else:
            after_ms, after_id = after
            check_text("after id", after_id)
            if finished:
                check_int("after completed_at_ms", after_ms, minimum=-1, maximum=INT64_MAX)
        params: dict[str, Any] = {
            "status": status,
            "queue": queue,
            "name": name,
            "root_id": root_id,
            "correlation_id": correlation_id,
            "id_above": ID_FLOOR if created_from_ms is None else _id_bound(created_from_ms - _SLACK_MS),
            "id_below": ID_CEILING if created_to_ms is None else _id_bound(created_to_ms + _SLACK_MS),
            "created_from_ms": 0 if created_from_ms is None else created_from_ms,
            "created_to_ms": INT64_MAX if created_to_ms is None else created_to_ms,
            "after_id": after_id,
            "limit": limit,
        }
        if finished:
            params["after_completed_ms"] = after_ms
        statement = f"browse_{order}"
        if status is not None:
            if not finished and status in _UNFINISHED:
                statement = f"browse_unfinished_{order}"
            elif finished:
                statement = f"browse_{order}_one_status"
        return self._tasks(await self._fetch(statement, params))

    async def browse_queues(self, now_ms: int) -> builtins.list[tuple[Any, ...]]:
        """``(queue, status, count, scheduled, oldest_due_ms)`` per queue and
        status: ``scheduled`` counts queued tasks due after ``now_ms``,
        ``oldest_due_ms`` is the earliest due time of the others (or None)."""
        check_int("now_ms", now_ms, minimum=0, maximum=INT64_MAX)
        return [tuple(r) for r in await self._fetch("browse_queues", {"now_ms": now_ms})]

    async def browse_finished_per_minute(self, since_ms: int) -> builtins.list[tuple[Any, ...]]:
        """``(minute, status, count)``: tasks finished since ``since_ms`` per
        minute (epoch ms // 60,000) and final status."""
        check_int("since_ms", since_ms, minimum=0, maximum=INT64_MAX)
        rows = await self._fetch("browse_finished_per_minute", {"since_ms": since_ms})
        return [tuple(r) for r in rows]

    async def browse_running(self, limit: int) -> builtins.list[tuple[Any, ...]]:
        """At most ``limit`` running tasks, by worker: ``(id, name, queue,
        worker_id, attempt, max_attempts, progress, message, lease_until_ms,
        updated_at_ms)``."""
        check_int("limit", limit, minimum=1, maximum=_PAGE_MAX)
        return [tuple(r) for r in await self._fetch("browse_running", {"limit": limit})]

    async def browse_recent_workers(self, since_ms: int) -> builtins.list[tuple[Any, ...]]:
        """``(worker_id, finished, last_seen_ms)`` for each worker that
        finished a task since ``since_ms``."""
        check_int("since_ms", since_ms, minimum=0, maximum=INT64_MAX)
        rows = await self._fetch("browse_recent_workers", {"since_ms": since_ms})
        return [tuple(r) for r in rows]
