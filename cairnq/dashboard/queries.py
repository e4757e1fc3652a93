"""What the dashboard reads: pages of tasks, the overview, and the filters
that select them, over a ``CairnQ`` client.

Every read is a store method backed by a statement in ``protocol/sql``;
nothing here writes SQL. Pages are keyset-paginated (a cursor names the last
row shown), so page 10,000 costs what page 1 costs. Bad user input raises
``FilterError`` with a message fit to show.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Mapping, Optional

from cairnq._ids import now_ms
from cairnq.models import STATUSES, TERMINAL, Task, TaskStatus
from cairnq.store.ops.browse import BrowseOrder, Keyset

if TYPE_CHECKING:
    from cairnq.client import CairnQ

__all__ = [
    "FilterError",
    "TaskFilter",
    "TaskPage",
    "SORTS",
    "Sort",
    "task_page",
    "QueueRow",
    "MinuteBucket",
    "WorkerRow",
    "RunningTask",
    "Overview",
    "overview",
]

Sort = Literal["newest", "oldest", "finished_newest", "finished_oldest"]
SORTS: tuple[Sort, ...] = ("newest", "oldest", "finished_newest", "finished_oldest")
SORT_LABELS: dict[Sort, str] = {
    "newest": "Created, newest first",
    "oldest": "Created, oldest first",
    "finished_newest": "Finished, newest first",
    "finished_oldest": "Finished, oldest first",
}
PAGE_SIZES = (20, 50, 100, 200)
DEFAULT_PAGE_SIZE = 50
_TEXT_MAX = 1_000  # longer filter text is a mistake, not a query


class FilterError(ValueError):
    """A filter, sort or cursor the dashboard cannot use; ``str()`` is fit to show."""


@dataclass(frozen=True)
class TaskFilter:
    """The list's filters: every field optional, each an equality except the
    creation time range ``[created_from_ms, created_to_ms)``. ``key`` names at
    most one task (it is looked up first)."""

    status: Optional[TaskStatus] = None
    queue: Optional[str] = None
    name: Optional[str] = None
    key: Optional[str] = None
    root_id: Optional[str] = None
    correlation_id: Optional[str] = None
    created_from_ms: Optional[int] = None
    created_to_ms: Optional[int] = None

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> "TaskFilter":
        """From a page's query string (blank fields are no filter). Times are
        ISO 8601 (``2026-12-01T10:00``, a zone offset or ``Z``; UTC when none)
        or epoch milliseconds. Raises ``FilterError``."""
        values: dict[str, Any] = {}
        for name in ("queue", "name", "key", "root_id", "correlation_id"):
            text = _field(query, name)
            if text is not None:
                values[name] = text
        status = _field(query, "status")
        if status is not None:
            if status not in STATUSES:
                raise FilterError(f"status must be one of {', '.join(STATUSES)}; got {status!r}")
            values["status"] = status
        for name in ("created_from", "created_to"):
            text = _field(query, name)
            if text is not None:
                values[f"{name}_ms"] = parse_time(name, text)
        flt = cls(**values)
        if (
            flt.created_from_ms is not None
            and flt.created_to_ms is not None
            and flt.created_from_ms >= flt.created_to_ms
        ):
            raise FilterError("created_from must be before created_to")
        return flt

    def query(self) -> dict[str, str]:
        """The query-string fields that rebuild this filter (for links)."""
        out: dict[str, str] = {}
        for name in ("status", "queue", "name", "key", "root_id", "correlation_id"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.created_from_ms is not None:
            out["created_from"] = str(self.created_from_ms)
        if self.created_to_ms is not None:
            out["created_to"] = str(self.created_to_ms)
        return out

    @property
    def empty(self) -> bool:
        return not self.query()


@dataclass(frozen=True)
class TaskPage:
    """One page: its tasks and the cursor of the next page (None at the end)."""

    tasks: list[Task]
    next_cursor: Optional[str]
    sort: Sort
    limit: int


def parse_time(name: str, text: str) -> int:
    """Epoch ms from ISO 8601 (UTC unless it says otherwise) or from digits."""
    if text.isdigit():
        ms = int(text)
    else:
        try:
            when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise FilterError(
                f"{name}: {text!r} is not a time (use ISO 8601, e.g. 2026-12-01T10:00, "
                "or epoch milliseconds)"
            ) from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.timezone.utc)
        ms = int(when.timestamp() * 1000)
    if not 0 <= ms < 2**48:
        raise FilterError(f"{name}: {text!r} is out of range")
    return ms


def _field(query: Mapping[str, str], name: str) -> Optional[str]:
    value = query.get(name)
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    if len(value) > _TEXT_MAX or "\x00" in value:
        raise FilterError(f"{name}: too long or not text")
    return value


def _encode_cursor(keyset: Keyset) -> str:
    completed, task_id = keyset
    raw = f"{'' if completed is None else completed}|{task_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> Keyset:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        completed, task_id = raw.split("|", 1)
        position = (int(completed) if completed else None, task_id)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise FilterError("the page cursor is not valid; start from the first page") from None
    if not task_id or len(task_id) > 100:
        raise FilterError("the page cursor is not valid; start from the first page")
    return position


async def task_page(
    client: CairnQ,
    flt: TaskFilter,
    *,
    sort: str = "newest",
    cursor: Optional[str] = None,
    limit: int = DEFAULT_PAGE_SIZE,
) -> TaskPage:
    """One page of tasks matching ``flt`` in ``sort`` order, after ``cursor``
    (the ``next_cursor`` of the page before; None for the first page).

    ``finished_*`` sorts show finished tasks only (by completion time); a
    ``status`` filter of queued or running with them is a ``FilterError``.
    """
    if sort not in SORTS:
        raise FilterError(f"sort must be one of {', '.join(SORTS)}; got {sort!r}")
    if not 1 <= limit <= max(PAGE_SIZES):
        raise FilterError(f"page size must be between 1 and {max(PAGE_SIZES)}")
    order: BrowseOrder = sort  # narrowed by the check against SORTS
    finished = sort.startswith("finished")
    if finished and flt.status is not None and flt.status not in TERMINAL:
        raise FilterError(f"a {flt.status} task has not finished: sort it by creation time")
    after = _decode_cursor(cursor) if cursor else None
    if after is not None and finished and after[0] is None:
        raise FilterError("the page cursor is not valid; start from the first page")
    if flt.key is not None:  # names one task: a single page, nothing after it
        task = None if after is not None else await client.get_by_key(flt.key)
        tasks = [task] if task is not None and _matches(task, flt, finished) else []
        return TaskPage(tasks, None, order, limit)
    rows = await client.store.browse(
        order,
        status=flt.status,
        queue=flt.queue,
        name=flt.name,
        root_id=flt.root_id,
        correlation_id=flt.correlation_id,
        created_from_ms=flt.created_from_ms,
        created_to_ms=flt.created_to_ms,
        after=after,
        limit=limit + 1,
    )
    more = len(rows) > limit
    rows = rows[:limit]
    next_cursor = None
    if more and rows:
        last = rows[-1]
        next_cursor = _encode_cursor((last.completed_at_ms if finished else None, last.id))
    return TaskPage(rows, next_cursor, order, limit)


def _matches(task: Task, flt: TaskFilter, finished: bool) -> bool:
    if finished and task.status not in TERMINAL:
        return False
    for name in ("status", "queue", "name", "root_id", "correlation_id"):
        wanted = getattr(flt, name)
        if wanted is not None and getattr(task, name) != wanted:
            return False
    created = task.created_at_ms
    if flt.created_from_ms is not None and created < flt.created_from_ms:
        return False
    return flt.created_to_ms is None or created < flt.created_to_ms


# -- the overview -------------------------------------------------------------------


@dataclass(frozen=True)
class QueueRow:
    """One queue: its count per status, how many queued tasks are not due
    yet (``scheduled``), and how long its longest-waiting due task has
    waited (None when nothing is due)."""

    queue: str
    counts: dict[TaskStatus, int]
    scheduled: int
    oldest_due_age_ms: Optional[int]


@dataclass(frozen=True)
class MinuteBucket:
    """Tasks that finished in one minute, by final status."""

    minute_start_ms: int
    succeeded: int = 0
    failed: int = 0
    canceled: int = 0

    @property
    def finished(self) -> int:
        return self.succeeded + self.failed + self.canceled

    @property
    def failure_rate(self) -> Optional[float]:
        """Failed over succeeded + failed; None with neither."""
        settled = self.succeeded + self.failed
        return None if settled == 0 else self.failed / settled


@dataclass(frozen=True)
class WorkerRow:
    """A worker id seen holding a task, or finishing one, in the window."""

    worker_id: str
    running: int
    finished_recently: int
    last_seen_ms: int


@dataclass(frozen=True)
class RunningTask:
    id: str
    name: str
    queue: str
    worker_id: Optional[str]
    attempt: int
    max_attempts: int
    progress: Optional[float]
    message: Optional[str]
    lease_until_ms: Optional[int]
    updated_at_ms: int


@dataclass(frozen=True)
class Overview:
    """Everything the overview page shows, read at ``generated_at_ms``."""

    generated_at_ms: int
    window_ms: int
    queues: list[QueueRow]
    throughput: list[MinuteBucket]
    workers: list[WorkerRow]
    running: list[RunningTask]
    running_truncated: bool = False
    totals: dict[TaskStatus, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the live updates and ``/api/overview`` send it):
        the fields, nested dataclasses as dicts."""
        return asdict(self)


WINDOW_MS = 3_600_000
RUNNING_SHOWN = 200


async def overview(
    client: CairnQ, *, now: Optional[int] = None, window_ms: int = WINDOW_MS
) -> Overview:
    """The overview as of ``now`` (epoch ms; the clock by default): queues ×
    statuses, per-minute finishes over ``window_ms``, workers seen in that
    window, and the running tasks (at most ``RUNNING_SHOWN``)."""
    at = now_ms() if now is None else now
    since = at - window_ms
    store = client.store
    queue_rows = await store.browse_queues(at)
    minutes = await store.browse_finished_per_minute(since)
    running_rows = await store.browse_running(RUNNING_SHOWN + 1)
    finishers = await store.browse_recent_workers(since)

    queues: dict[str, dict[str, Any]] = {}
    totals: dict[TaskStatus, int] = dict.fromkeys(STATUSES, 0)
    for queue, status, count, scheduled, oldest_due in queue_rows:
        entry = queues.setdefault(
            queue, {"counts": dict.fromkeys(STATUSES, 0), "scheduled": 0, "oldest": None}
        )
        entry["counts"][status] = int(count)
        totals[status] += int(count)
        entry["scheduled"] += int(scheduled or 0)
        if oldest_due is not None:
            entry["oldest"] = at - int(oldest_due)
    queue_list = [
        QueueRow(q, e["counts"], e["scheduled"], e["oldest"]) for q, e in sorted(queues.items())
    ]

    buckets: dict[int, dict[str, int]] = {}
    for minute, status, count in minutes:
        buckets.setdefault(int(minute), {})[status] = int(count)
    first = since // 60_000 + 1
    last = at // 60_000
    throughput = [
        MinuteBucket(m * 60_000, **{s: buckets.get(m, {}).get(s, 0) for s in TERMINAL})
        for m in range(first, last + 1)
    ]

    running = [
        RunningTask(
            id=r[0], name=r[1], queue=r[2], worker_id=r[3], attempt=int(r[4]),
            max_attempts=int(r[5]), progress=r[6], message=r[7],
            lease_until_ms=None if r[8] is None else int(r[8]), updated_at_ms=int(r[9]),
        )
        for r in running_rows[:RUNNING_SHOWN]
    ]  # fmt: skip
    workers: dict[str, list[int]] = {}
    for r in running:
        if r.worker_id is not None:
            seen = workers.setdefault(r.worker_id, [0, 0, 0])
            seen[0] += 1
            seen[2] = max(seen[2], r.updated_at_ms)
    for worker_id, finished, last_seen in finishers:
        seen = workers.setdefault(worker_id, [0, 0, 0])
        seen[1] = int(finished)
        seen[2] = max(seen[2], int(last_seen))
    worker_list = sorted(
        (WorkerRow(w, v[0], v[1], v[2]) for w, v in workers.items()),
        key=lambda w: (-w.last_seen_ms, w.worker_id),
    )
    return Overview(
        generated_at_ms=at,
        window_ms=window_ms,
        queues=queue_list,
        throughput=throughput,
        workers=worker_list,
        running=running,
        running_truncated=len(running_rows) > RUNNING_SHOWN,
        totals=totals,
    )
