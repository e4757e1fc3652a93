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
    "TASK_LAYOUT",
    "TASK_COLUMN_KINDS",
    "JSON_COLUMNS",
    "EPOCH_MS_COLUMNS",
    "KIND_PLAIN",
    "KIND_JSON",
    "KIND_EPOCH_MS",
    "KIND_REAL",
]

TaskStatus = Literal["queued", "running", "succeeded", "failed", "canceled"]
STATUSES: tuple[TaskStatus, ...] = ("queued", "running", "succeeded", "failed", "canceled")
TERMINAL: tuple[TaskStatus, ...] = ("succeeded", "failed", "canceled")
_TERMINAL = frozenset(TERMINAL)

# How a column of cairnq_tasks reads back: as stored; JSON (text in SQLite,
# jsonb in PostgreSQL); an epoch-milliseconds integer (some drivers hand a
# bigint back as str); a real (SQLite hands a whole-valued REAL back as int).
KIND_PLAIN, KIND_JSON, KIND_EPOCH_MS, KIND_REAL = 0, 1, 2, 3

# The row layout, written once: cairnq_tasks' columns in the order migration
# 0001 creates them (`select *` and `returning *` yield exactly this, in every
# SDK's database), each with its kind. The row kernels (_speedups/rows*.py*)
# and the echo of an insert derive from it; tests/store/test_row_layout.py holds it
# to both dialects' migrated tables.
TASK_LAYOUT: tuple[tuple[str, int], ...] = (
    ("id", KIND_PLAIN), ("name", KIND_PLAIN), ("queue", KIND_PLAIN), ("status", KIND_PLAIN),
    ("payload", KIND_JSON), ("result", KIND_JSON), ("error", KIND_JSON),
    ("metadata", KIND_JSON), ("progress", KIND_REAL), ("message", KIND_PLAIN),
    ("attempt", KIND_PLAIN), ("max_attempts", KIND_PLAIN), ("priority", KIND_PLAIN),
    ("worker_id", KIND_PLAIN), ("lease_until_ms", KIND_EPOCH_MS), ("run_at_ms", KIND_EPOCH_MS),
    ("cancel_requested_at_ms", KIND_EPOCH_MS), ("parent_id", KIND_PLAIN), ("root_id", KIND_PLAIN),
    ("correlation_id", KIND_PLAIN), ("created_at_ms", KIND_EPOCH_MS),
    ("updated_at_ms", KIND_EPOCH_MS), ("completed_at_ms", KIND_EPOCH_MS),
)  # fmt: skip
TASK_COLUMNS: tuple[str, ...] = tuple(name for name, _ in TASK_LAYOUT)
TASK_COLUMN_KINDS: tuple[int, ...] = tuple(kind for _, kind in TASK_LAYOUT)
JSON_COLUMNS: tuple[str, ...] = tuple(n for n, kind in TASK_LAYOUT if kind == KIND_JSON)
EPOCH_MS_COLUMNS: tuple[str, ...] = tuple(n for n, kind in TASK_LAYOUT if kind == KIND_EPOCH_MS)

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
