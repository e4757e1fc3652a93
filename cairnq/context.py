"""``TaskContext``: what a handler gets for each task it runs.

One per task, whether the handler takes one task or a batch: lease,
cancellation and settlement are per task. Every write goes through an
ownership check in the database; locally the context also refuses writes
once it knows the lease is lost (no round trip) and makes settling twice a
no-op.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Optional, TypeVar, Union

from cairnq._backoff import DEFAULT_RETRY_BACKOFF_MAX_MS, DEFAULT_RETRY_BACKOFF_MS, fail_delay_ms
from cairnq._wait import DEFAULT_POLL_MS, MAX_POLL_MS, poll_wait
from cairnq.errors import LostLease, as_envelope
from cairnq.models import Task, TaskDef, task_name

if TYPE_CHECKING:
    from cairnq.store.base import TaskStore

__all__ = ["TaskContext"]

T = TypeVar("T")


class TaskContext:
    def __init__(
        self,
        store: TaskStore,
        task: Task,
        worker_id: str,
        lease_ms: int,
        *,
        retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS,
        retry_backoff_max_ms: int = DEFAULT_RETRY_BACKOFF_MAX_MS,
    ) -> None:
        self._store = store
        self._task = task
        self._worker_id = worker_id
        self._lease_ms = lease_ms
        self._backoff_ms = retry_backoff_ms
        self._backoff_max_ms = retry_backoff_max_ms
        self._lost = False
        self._lease_event: asyncio.Event | None = None
        self._cancel_seen = task.cancel_requested_at_ms is not None
        self._settled = False

    def __repr__(self) -> str:
        return f"<TaskContext {self._task.name} {self._task.id} attempt={self._task.attempt}>"

    # -- what the handler reads ------------------------------------------------

    @property
    def task_id(self) -> str:
        return self._task.id

    @property
    def name(self) -> str:
        return self._task.name

    @property
    def queue(self) -> str:
        return self._task.queue

    @property
    def attempt(self) -> int:
        return self._task.attempt

    @property
    def worker_id(self) -> str:
        return self._worker_id

    @property
    def metadata(self) -> dict[str, Any]:
        return self._task.metadata

    @property
    def root_id(self) -> Optional[str]:
        return self._task.root_id

    @property
    def correlation_id(self) -> Optional[str]:
        return self._task.correlation_id

    @property
    def payload(self) -> Any:
        return self._task.payload

    @property
    def settled(self) -> bool:
        """True once the task was finalized, by the handler or by the worker."""
        return self._settled

    @property
    def lost_lease(self) -> bool:
        """True once this worker knows it no longer owns the task: nothing the
        handler writes is recorded any more, so side effects should stop."""
        return self._lost

    @property
    def lease_lost(self) -> asyncio.Event:
        """Set when the lease is lost; await it to race work against it."""
        if self._lease_event is None:
            self._lease_event = asyncio.Event()
            if self._lost:
                self._lease_event.set()
        return self._lease_event

    # -- state the worker and the writes below maintain ------------------------

    def _mark_lease_lost(self) -> None:
        self._lost = True
        if self._lease_event is not None:
            self._lease_event.set()

    def _mark_settled(self) -> None:
        self._settled = True

    def _observe(self, task: Optional[Task]) -> Optional[Task]:
        """Note a fresh snapshot's cancel request; hands the snapshot back."""
        if task is not None and task.cancel_requested_at_ms is not None:
            self._cancel_seen = True
        return task

    def _observe_cancel(self, cancel_requested: bool) -> None:
        if cancel_requested:
            self._cancel_seen = True

    def _require_lease(self) -> None:
        if self._lost:
            raise LostLease(self._task.id)

    async def _owned(self, write: Callable[[], Awaitable[T]]) -> T:
        """Run an ownership-checked write; a LostLease flags this context."""
        self._require_lease()
        try:
            result = await write()
        except LostLease:
            self._mark_lease_lost()
            raise
        if isinstance(result, Task):
            self._observe(result)
        return result

    # -- writes ------------------------------------------------------------------

    async def progress(self, value: Optional[float], message: Optional[str] = None) -> Task:
        """Record progress (None leaves a field as it is)."""
        self._require_lease()
        if self._settled:
            raise LostLease(self._task.id)
        return await self._owned(
            lambda: self._store.progress(
                task_id=self._task.id, worker_id=self._worker_id, progress=value, message=message
            )
        )

    async def heartbeat(self) -> Task:
        """Extend the lease by the worker's ``lease_ms`` now."""
        self._require_lease()
        if self._settled:
            raise LostLease(self._task.id)
        return await self._owned(
            lambda: self._store.heartbeat(
                task_id=self._task.id, worker_id=self._worker_id, lease_ms=self._lease_ms
            )
        )

    async def canceled(self) -> bool:
        """Cooperative cancel check; free once a heartbeat or write has seen the flag."""
        if self._cancel_seen:
            return True
        ref = await self._store.get(self._task.id)
        if ref is None:
            return True
        self._observe(ref)
        return self._cancel_seen or ref.status == "canceled"

    async def succeed(self, result: Any = None) -> Optional[Task]:
        """Finish now as succeeded (a cancel requested meanwhile wins: the task
        finishes canceled and the result is dropped). None if already settled."""
        self._require_lease()
        if self._settled:
            return None
        task = await self._owned(
            lambda: self._store.complete(
                task_id=self._task.id, worker_id=self._worker_id, result=result
            )
        )
        self._settled = True
        return task

    async def succeed_in(self, write: Callable[[Any], Awaitable[Any]]) -> Optional[Task]:
        """PostgreSQL: run ``write(session)`` and the settlement in one transaction;
        ``write``'s return value is the result. None if already settled."""
        self._require_lease()
        if self._settled:
            return None
        task, _ = await self._owned(
            lambda: self._store.complete_in(
                task_id=self._task.id, worker_id=self._worker_id, write=write
            )
        )
        self._observe(task)
        self._settled = True
        return task

    async def fail(self, error: Any = "task failed", *, retryable: bool = True) -> Optional[Task]:
        """Finish this attempt as failed. ``error``: a message, an exception (a
        TaskError carries its own retryability) or a ready envelope dict.
        Retryable failures are requeued after this attempt's backoff while
        attempts remain. None if already settled."""
        self._require_lease()
        if self._settled:
            return None
        envelope, retryable = as_envelope(error, retryable)
        delay = fail_delay_ms(
            self._task.attempt,
            retryable=retryable,
            base_ms=self._backoff_ms,
            max_ms=self._backoff_max_ms,
        )
        task = await self._owned(
            lambda: self._store.fail(
                task_id=self._task.id,
                worker_id=self._worker_id,
                error=envelope,
                retryable=retryable,
                delay_ms=delay,
            )
        )
        self._settled = True
        return task

    async def submit(
        self, name: Union[str, TaskDef[Any, Any]], payload: Any = None, **kwargs: Any
    ) -> Task:
        """Submit a child task: parent, root and correlation ids are wired from
        this one. Keywords as for ``TaskStore.submit`` (queue defaults to
        "default", not this task's queue)."""
        self._require_lease()
        for wired in ("parent_id", "root_id", "correlation_id"):
            if wired in kwargs:
                raise TypeError(f"ctx.submit() sets {wired} itself")
        return await self._store.submit(
            name=task_name(name),
            payload=payload,
            parent_id=self._task.id,
            root_id=self._task.root_id or self._task.id,
            correlation_id=self._task.correlation_id,
            **kwargs,
        )

    async def wait(
        self, task_id: str, *, timeout_ms: int = 30_000, poll_ms: int = DEFAULT_POLL_MS
    ) -> Task:
        """Wait for another task (e.g. a child) to finish."""
        return await poll_wait(
            self._store, task_id, timeout_ms=timeout_ms, poll_ms=poll_ms, max_poll_ms=MAX_POLL_MS
        )
