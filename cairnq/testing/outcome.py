"""``Outcome``: how one task stood when a test helper was done with it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from cairnq.models import Task

__all__ = ["Outcome"]


@dataclass(frozen=True)
class Outcome:
    """One task as a helper left it: ``status`` is the task's status in the
    database then ("succeeded", "failed", "canceled"; "queued" for a retry
    not yet due; "running" after a lost lease). ``error`` is the error
    envelope (``{"message": ..., "type": ..., ...}``) of a failed attempt,
    ``exception`` what the handler raised (``run_once`` only: ``drain`` sees
    the worker's side, not the handler's frames)."""

    id: str
    name: str
    queue: str
    status: str
    result: Any
    error: Optional[dict[str, Any]]
    attempt: int
    task: Task
    exception: Optional[BaseException] = None

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"

    @classmethod
    def of(cls, task: Task, exception: Optional[BaseException] = None) -> "Outcome":
        return cls(
            id=task.id,
            name=task.name,
            queue=task.queue,
            status=task.status,
            result=task.result,
            error=task.error,
            attempt=task.attempt,
            task=task,
            exception=exception,
        )

    def __repr__(self) -> str:
        detail = f" error={self.error.get('message')!r}" if self.error else ""
        return f"<Outcome {self.name} {self.id} {self.status} attempt={self.attempt}{detail}>"
