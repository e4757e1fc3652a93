"""What a Django task is as a cairnq task, and back.

The cairnq task of a Django task:

    name      the task's import path (``Task.module_path``)
    queue     ``queue_name``;  priority: ``priority`` (both -100..100, higher first)
    payload   {"args": [...], "kwargs": {...}} (+ "run_after": ISO 8601 when deferred)
    result    {"return_value": ..., "started_at_ms": ...}
    error     a cairnq envelope whose details carry Django's TaskError fields:
              exception_class_path, traceback, started_at_ms, worker_id

Statuses: queued -> READY, running -> RUNNING, succeeded -> SUCCESSFUL, failed
and canceled -> FAILED (a cancel reads as an error of cairnq.errors.TaskCanceled).
"""

from __future__ import annotations

from datetime import datetime
from datetime import timezone as dt_timezone
from typing import Any

from cairnq.contrib.django._django import (
    DjangoTask,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    import_string,
    settings,
    timezone,
)
from cairnq.models import Task

__all__ = [
    "STATUS",
    "error_details",
    "ms_of",
    "payload_of",
    "resolve_task",
    "success_result",
    "task_result",
    "when",
]

STATUS = {
    "queued": TaskResultStatus.READY,
    "running": TaskResultStatus.RUNNING,
    "succeeded": TaskResultStatus.SUCCESSFUL,
    "failed": TaskResultStatus.FAILED,
    "canceled": TaskResultStatus.FAILED,
}
_CANCELED_CLASS = "cairnq.errors.TaskCanceled"
_ENVELOPE_CLASS = "cairnq.errors.TaskError"  # an error some other worker wrote


def payload_of(args: Any, kwargs: Any, run_after: datetime | None) -> dict[str, Any]:
    payload: dict[str, Any] = {"args": list(args), "kwargs": dict(kwargs)}
    if run_after is not None:
        payload["run_after"] = run_after.isoformat()
    return payload


def success_result(value: Any, started_at_ms: int) -> dict[str, Any]:
    return {"return_value": value, "started_at_ms": started_at_ms}


def error_details(
    exception_class_path: str, traceback: str, started_at_ms: int, worker_id: str
) -> dict[str, Any]:
    return {
        "exception_class_path": exception_class_path,
        "traceback": traceback,
        "started_at_ms": started_at_ms,
        "worker_id": worker_id,
    }


def when(ms: int | None) -> datetime | None:
    """An epoch-ms time as Django wants it: aware in UTC, or naive local
    time when USE_TZ is off."""
    if ms is None:
        return None
    moment = datetime.fromtimestamp(ms / 1000, tz=dt_timezone.utc)
    return moment if settings.USE_TZ else timezone.make_naive(moment)


def ms_of(moment: datetime) -> int:
    """Epoch milliseconds of a datetime (naive: in Django's current time zone)."""
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment)
    return int(moment.timestamp() * 1000)


def resolve_task(name: str) -> DjangoTask:
    """The Django task whose import path is ``name``; ValueError if there is none."""
    try:
        found = import_string(name)
    except ImportError as exc:
        raise ValueError(f"{name!r} does not import: {exc}") from exc
    if not isinstance(found, DjangoTask):
        raise ValueError(f"{name!r} is a {type(found).__name__}, not a Django task")  # noqa: TRY004
    return found


def _wrapped(result: Any) -> bool:
    """A result our worker wrote (another SDK's handler may have settled the task)."""
    return isinstance(result, dict) and result.keys() == {"return_value", "started_at_ms"}


def _errors(row: Task) -> list[TaskError]:
    error = row.error
    if isinstance(error, dict):
        details = error.get("details") or {}
        path = details.get("exception_class_path")
        if isinstance(path, str):
            return [TaskError(exception_class_path=path, traceback=str(details.get("traceback")))]
        text = f"{error.get('type', 'TaskError')}: {error.get('message', '')} ({error.get('code')})"
        return [TaskError(exception_class_path=_ENVELOPE_CLASS, traceback=text)]
    if row.status == "canceled":
        return [
            TaskError(exception_class_path=_CANCELED_CLASS, traceback=f"task {row.id} was canceled")
        ]
    return []


def _latest_attempt(row: Task) -> tuple[int | None, str | None]:
    """(start in epoch ms, worker id) of the latest attempt, as far as the row tells."""
    started: Any = None
    worker = row.worker_id
    if row.status == "running":
        # A running row says when its lease was last taken or renewed: the
        # claim, or the latest heartbeat since.
        started = row.updated_at_ms
    elif row.status == "succeeded" and _wrapped(row.result):
        started = row.result["started_at_ms"]
    elif isinstance(row.error, dict):
        details = row.error.get("details") or {}
        started = details.get("started_at_ms")
        worker = worker or details.get("worker_id")
    return (started if type(started) is int else None), worker


def task_result(row: Task, alias: str, task: DjangoTask | None = None) -> TaskResult:
    """Django's TaskResult for a cairnq task row."""
    if task is None:
        try:
            task = resolve_task(row.name)
        except ValueError as exc:
            raise TaskResultDoesNotExist(f"{row.id}: {exc}") from exc
    payload = row.payload if isinstance(row.payload, dict) else {}
    run_after = payload.get("run_after")
    changes: dict[str, Any] = {"backend": alias}
    if task.queue_name != row.queue:
        changes["queue_name"] = row.queue
    if task.priority != row.priority:
        changes["priority"] = row.priority
    if isinstance(run_after, str):
        changes["run_after"] = datetime.fromisoformat(run_after)
    if task.backend != alias or len(changes) > 1:
        task = task.using(**changes)
    started_ms, worker = _latest_attempt(row)
    started = when(started_ms)
    result = TaskResult(
        task=task,
        id=row.id,
        status=STATUS[row.status],
        enqueued_at=when(row.created_at_ms),
        started_at=started,
        finished_at=when(row.completed_at_ms),
        last_attempted_at=started,
        args=payload.get("args", []),
        kwargs=payload.get("kwargs", {}),
        backend=alias,
        errors=_errors(row),
        # cairnq records the worker of the latest attempt only: it stands for
        # each attempt, so ``attempts`` (their count) is cairnq's attempt.
        worker_ids=[worker or "unknown"] * row.attempt,
    )
    if row.status == "succeeded":
        value = row.result["return_value"] if _wrapped(row.result) else row.result
        object.__setattr__(result, "_return_value", value)
    return result
