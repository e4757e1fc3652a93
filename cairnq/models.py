"""Task records and the small value types around them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Literal, Mapping, TypeVar, Union

__all__ = [
    "TaskStatus",
    "STATUSES",
    "TERMINAL",
    "is_terminal_status",
    "TaskRef",
    "TaskDef",
    "task_name",
    "Task",
    "TASK_COLUMNS",
]

TaskStatus = Literal["queued", "running", "succeeded", "failed", "canceled"]
STATUSES: tuple[TaskStatus, ...] = ("queued", "running", "succeeded", "failed", "canceled")
TERMINAL: tuple[TaskStatus, ...] = ("succeeded", "failed", "canceled")
_TERMINAL = frozenset(TERMINAL)

# Column order of cairnq_tasks as created by migration 0001: `select *` and
# `returning *` yield exactly this, in every SDK's database.
TASK_COLUMNS: tuple[str, ...] = (
    "id", "name", "queue", "status", "payload", "result", "error", "metadata",
    "progress", "message", "attempt", "max_attempts", "priority", "worker_id",
    "lease_until_ms", "run_at_ms", "cancel_requested_at_ms", "parent_id", "root_id",
    "correlation_id", "created_at_ms", "updated_at_ms", "completed_at_ms",
)  # fmt: skip

def is_terminal_status(status: str) -> bool:
    return status in _TERMINAL

P = TypeVar("P")
R = TypeVar("R")

@dataclass(frozen=True)
class TaskDef(Generic[P, R]):
    """A typed handle on a task name: ``TaskDef[dict, dict]("summarize")``."""

    name: str

def task_name(task: Union[str, TaskDef[Any, Any]]) -> str:
    return task.name if isinstance(task, TaskDef) else task

@dataclass(frozen=True)
class TaskRef:
    """Just enough of a task to poll on: its id and status."""

    id: str
    status: TaskStatus

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "TaskRef":
        return cls(row["id"], row["status"])

    @property
    def is_terminal(self) -> bool:
        return self.status in _TERMINAL

@dataclass
class Task:
    """One row of cairnq_tasks, JSON columns decoded."""

    id: str
    name: str
    queue: str
    status: TaskStatus
    payload: Any
    metadata: dict[str, Any]
    result: Any = None
    error: dict[str, Any] | None = None
    progress: float | None = None
    message: str | None = None
    attempt: int = 0
    max_attempts: int = 3
    priority: int = 0
    worker_id: str | None = None
    lease_until_ms: int | None = None
    run_at_ms: int = 0
    cancel_requested_at_ms: int | None = None
    parent_id: str | None = None
    root_id: str | None = None
    correlation_id: str | None = None
    created_at_ms: int = 0
    updated_at_ms: int = 0
    completed_at_ms: int | None = None

    @classmethod
    def from_row(cls, row: Any, json_is_text: bool = True) -> "Task":
        """Build from a mapping row (any object ``dict()`` accepts)."""
        from cairnq._speedups import decode_mapping

        return decode_mapping(dict(row), json_is_text)

    @property
    def is_terminal(self) -> bool:
        return self.status in _TERMINAL

    @property
    def cancel_requested(self) -> bool:
        return self.cancel_requested_at_ms is not None

    @property
    def queued(self) -> bool:
        return self.status == "queued"

    @property
    def running(self) -> bool:
        return self.status == "running"

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"

    @property
    def failed(self) -> bool:
        return self.status == "failed"

    @property
    def canceled(self) -> bool:
        return self.status == "canceled"
