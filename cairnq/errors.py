"""Exceptions raised by cairnq, and the error envelope stored with failed tasks.

The envelope is wire format shared with every other SDK: a JSON object with
exactly the keys ``type``, ``code``, ``message``, ``retryable``, ``details``.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = [
    "CairnQError",
    "AlreadyExists",
    "QueueFull",
    "TaskTimeout",
    "TaskFailed",
    "TaskCanceled",
    "LostLease",
    "ProtocolVersionMismatch",
    "UnsupportedBackend",
    "SchemaMismatch",
    "StoreClosed",
    "SerializationError",
    "TaskError",
    "error_envelope",
    "exception_envelope",
    "as_envelope",
]


class CairnQError(Exception):
    """Base class of every error cairnq raises on purpose."""


class AlreadyExists(CairnQError):
    """A keyed submit with ``conflict="reject"`` found the key taken."""

    def __init__(self, key: str) -> None:
        super().__init__(f"task with key {key!r} already exists")
        self.key = key


class QueueFull(CairnQError):
    """Backpressure: the queue stayed at its limit for ``max_queue_wait_ms``."""

    def __init__(self, queue: str, max_depth: int, waited_ms: int) -> None:
        super().__init__(
            f"queue {queue!r} still holds {max_depth} or more queued tasks after "
            f"{waited_ms}ms; refusing to enqueue more"
        )
        self.queue = queue
        self.max_depth = max_depth
        self.waited_ms = waited_ms


class TaskTimeout(CairnQError):
    """A wait ran out of time. The task itself is untouched and keeps going."""

    def __init__(
        self,
        task_id: str,
        *,
        timeout_ms: int | None = None,
        task: Any = None,
        key: str | None = None,
    ) -> None:
        subject = f"key {key}" if key is not None else f"task {task_id}"
        if timeout_ms is None:
            text = f"{subject} did not finish in time"
        else:
            text = f"{subject} did not finish within {timeout_ms}ms: {_diagnose(task, key)}"
        super().__init__(text)
        self.task_id = task_id
        self.timeout_ms = timeout_ms
        self.task = task
        self.key = key


def _diagnose(task: Any, key: str | None = None) -> str:
    """Best guess at why a task is not finished, from its last snapshot (in
    0.15.1's words: users match on them)."""
    if task is None:
        if key is not None:
            return "no task under this key — never submitted, or already purged?"
        return "task not found — wrong database file, or already purged?"
    status = getattr(task, "status", None)
    attempts = f"(attempt {getattr(task, 'attempt', 0)}/{getattr(task, 'max_attempts', 0)})"
    if status == "queued":
        wait_ms = getattr(task, "run_at_ms", 0) - int(time.time() * 1000)
        if getattr(task, "attempt", 0) == 0 and wait_ms <= 0:
            return (
                "never claimed by a worker — is a worker running with a handler for "
                f"'{task.name}' on queue '{task.queue}', against this same database?"
            )
        later = f", next run in ~{wait_ms}ms" if wait_ms > 0 else ""
        return f"still queued {attempts}{later}"
    if getattr(task, "cancel_requested_at_ms", None) is not None:
        return "cancel requested, waiting for the handler to observe it"
    return f"still running {attempts}"


class TaskFailed(CairnQError):
    """``call()`` found the task failed; carries the stored error envelope."""

    def __init__(self, error: dict[str, Any] | None) -> None:
        env = error if isinstance(error, dict) else {}
        self.error: dict[str, Any] = env
        self.type: str = env.get("type", "TaskError")
        self.code: str = env.get("code", "task_error")
        self.message: str = env.get("message", "task failed")
        self.retryable: bool = bool(env.get("retryable", False))
        self.details: dict[str, Any] = env.get("details") or {}  # a stored null reads as {}
        super().__init__(self.message)


class TaskCanceled(CairnQError):
    """``call()`` found the task canceled."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"task {task_id} was canceled")
        self.task_id = task_id


class LostLease(CairnQError):
    """An ownership-checked write matched no row: this worker no longer owns the task."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"lost lease on task {task_id}")
        self.task_id = task_id


class ProtocolVersionMismatch(CairnQError):
    """The database speaks a protocol major this SDK does not."""


class UnsupportedBackend(CairnQError):
    """The operation needs a capability this store does not have."""


class SchemaMismatch(CairnQError):
    """PostgreSQL: the connection resolves to a different schema than the installation."""


class StoreClosed(CairnQError):
    """The store is closing or closed (an in-memory SQLite store cannot reopen)."""


class SerializationError(CairnQError):
    """A value is not strict JSON (NaN, Infinity, sets, bytes, objects, ...)."""


class TaskError(CairnQError):
    """Raise from a handler to record a failure with chosen fields.

    Not retryable unless ``retryable=True``: a handler raising this has decided.
    """

    def __init__(
        self,
        message: str,
        *,
        code: str = "task_error",
        retryable: bool = False,
        type: str | None = None,  # noqa: A002 - the envelope's field name
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.retryable = retryable
        self.type = type or "TaskError"
        self.details = details or {}

    def envelope(self) -> dict[str, Any]:
        return error_envelope(
            type=self.type,
            code=self.code,
            message=str(self),
            retryable=self.retryable,
            details=self.details,
        )


def error_envelope(
    *,
    type: str,  # noqa: A002
    code: str,
    message: str,
    retryable: bool,
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The five-key envelope, keys in wire order."""
    return {
        "type": type,
        "code": code,
        "message": message,
        "retryable": retryable,
        "details": details if details is not None else {},
    }


def exception_envelope(exc: BaseException, *, retryable: bool = True) -> dict[str, Any]:
    """Envelope for an ordinary exception a handler raised."""
    return error_envelope(
        type=type(exc).__name__, code="handler_error", message=str(exc), retryable=retryable
    )


def as_envelope(error: Any, retryable: bool) -> tuple[dict[str, Any], bool]:
    """Normalize whatever ``ctx.fail`` was given into (envelope, retryable)."""
    if isinstance(error, TaskError):
        return error.envelope(), error.retryable
    if isinstance(error, BaseException):
        return exception_envelope(error, retryable=retryable), retryable
    if isinstance(error, dict):
        return error, retryable
    return TaskError(str(error), retryable=retryable).envelope(), retryable


class DatabaseReplaced(CairnQError):
    """The SQLite file a store had open was deleted or replaced by another
    file under the same path. The store reopens the path (creating it anew if
    it is gone, as a fresh start would); this reports that it did."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"SQLite database {path!r} {reason}; reopened the path")
        self.path = path
        self.reason = reason
