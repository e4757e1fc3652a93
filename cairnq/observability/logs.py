"""One JSON object per log line, with the fields of the task being run.

``JsonFormatter`` writes ``time`` (UTC, ISO 8601), ``level``, ``logger``,
``message``, then ``task_id``, ``queue``, ``task_name``, ``attempt`` and
``worker_id`` where they apply, and ``exception`` (the traceback) if any.

Task fields come from a context variable set when a handler starts (a
``task.started`` subscriber: the event is emitted inside the call's own
asyncio task, so the variable is seen by the handler and whatever it awaits,
and by nothing else). In a batch call the fields name the batch's first task
and ``batch_size`` says how many it holds. A log call's ``extra=`` with any
of these keys wins over the context.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from datetime import datetime, timezone
from typing import Any, Callable, Optional

import orjson

from cairnq import events

__all__ = ["JsonFormatter", "TASK_FIELDS", "track_tasks", "current_task_fields"]

TASK_FIELDS = ("task_id", "queue", "task_name", "attempt", "worker_id", "batch_size")

_current: contextvars.ContextVar[Optional[dict[str, Any]]] = contextvars.ContextVar(
    "cairnq_log_task", default=None
)


def current_task_fields() -> Optional[dict[str, Any]]:
    """The task fields of the handler running in this context, or None."""
    return _current.get()


def _on_started(event: events.TaskEvent) -> None:
    fields = _current.get()
    if fields is not None and fields.get("_call") is asyncio_current_task():
        fields["batch_size"] = fields.get("batch_size", 1) + 1  # another task of this batch
        return
    _current.set(
        {
            "task_id": event.task_id,
            "queue": event.queue,
            "task_name": event.name,
            "attempt": event.attempt,
            "worker_id": event.worker_id,
            "_call": asyncio_current_task(),
        }
    )


def asyncio_current_task() -> Any:
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running loop
        return None


def track_tasks() -> Callable[[], None]:
    """Set the task fields around every handler call from now on; returns
    the function that stops it."""
    return events.subscribe(_on_started, ("task.started",))


class JsonFormatter(logging.Formatter):
    """``logging.Formatter`` writing one JSON object per record.

    ``static``: fields written on every line (the CLI puts the worker id
    there, so the worker's own lines carry it too)."""

    def __init__(self, static: Optional[dict[str, Any]] = None) -> None:
        super().__init__()
        self.static: dict[str, Any] = dict(static or {})

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(self.static)
        fields = _current.get()
        if fields is not None:
            for key in TASK_FIELDS:
                if key in fields:
                    line[key] = fields[key]
        for key in TASK_FIELDS:
            value = record.__dict__.get(key)
            if value is not None:
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(line, default=str).decode()
