"""``CairnQ``: the API-side handle. Submit, inspect, wait for and manage tasks."""

from __future__ import annotations

import builtins
from typing import Any, Optional, Union

from cairnq._wait import (
    DEFAULT_POLL_MS,
    MAX_POLL_MS,
    poll_wait,
    poll_wait_by_key,
    poll_wait_submitted,
)
from cairnq.backpressure import DEFAULT_MAX_WAIT_MS, QueueDepthLimit
from cairnq.errors import TaskCanceled, TaskFailed
from cairnq.models import Task, TaskDef, TaskRef, TaskStatus, task_name
from cairnq.observability import tracing
from cairnq.retention import Retention, RetentionSweeper
from cairnq.store.base import Conflict, TaskStore
from cairnq.store.factory import postgres_store, sqlite_store
from cairnq.watch import Watch

__all__ = ["CairnQ"]

_TRACING = tracing.STATE


class CairnQ:
    """A thin handle over a ``TaskStore`` plus SDK-side wait/call.

    ``max_queue_depth`` installs backpressure on the store (so every submit
    path honours it, a worker's ``ctx.submit`` included). ``retention`` (ms, or
    a ``Retention``) sweeps finished tasks for as long as this handle is open.
    """

    def __init__(
        self,
        store: TaskStore,
        *,
        max_queue_depth: Optional[QueueDepthLimit] = None,
        max_queue_wait_ms: int = DEFAULT_MAX_WAIT_MS,
        retention: Union[int, Retention, None] = None,
    ) -> None:
        if not isinstance(store, TaskStore):
            raise TypeError(f"store must be a TaskStore, got {type(store).__name__}")
        self._store = store
        if max_queue_depth is not None:
            store.use_backpressure(max_queue_depth, max_queue_wait_ms=max_queue_wait_ms)
        self._sweeper: RetentionSweeper | None = None
        if retention is not None:
            if isinstance(retention, bool) or not isinstance(retention, (int, Retention)):
                raise TypeError("retention must be an int (ms) or a Retention")
            policy = Retention(older_than_ms=retention) if isinstance(retention, int) else retention
            self._sweeper = RetentionSweeper(store, policy)
            store.use_retention(self._sweeper)

    @classmethod
    def sqlite(cls, path: str, *, busy_timeout_ms: int = 5_000, **kwargs: Any) -> "CairnQ":
        synchronous = kwargs.pop("synchronous", None)
        store = sqlite_store(path, busy_timeout_ms=busy_timeout_ms, synchronous=synchronous)
        return cls(store, **kwargs)

    @classmethod
    def postgres(
        cls,
        source: Any,
        *,
        min_size: int = 1,
        max_size: int = 10,
        schema: Optional[str] = None,
        **kwargs: Any,
    ) -> "CairnQ":
        store = postgres_store(source, min_size=min_size, max_size=max_size, schema=schema)
        return cls(store, **kwargs)

    @property
    def store(self) -> TaskStore:
        return self._store

    async def connect(self) -> None:
        await self._store.connect()

    async def close(self) -> None:
        """Stop retention (waiting for a sweep in flight), then close the store."""
        if self._sweeper is not None:
            await self._sweeper.stop()
        await self._store.close()

    async def __aenter__(self) -> "CairnQ":
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- submit and inspect -------------------------------------------------

    async def submit(
        self,
        name: Union[str, TaskDef[Any, Any]],
        payload: Any = None,
        *,
        key: Optional[str] = None,
        queue: str = "default",
        conflict: Conflict = "reuse",
        max_attempts: int = 3,
        priority: int = 0,
        metadata: Optional[dict[str, Any]] = None,
        delay_ms: int = 0,
    ) -> Task:
        """Enqueue a task. With ``key``, ``conflict`` decides what an existing
        task under that key means: ``reuse`` (return it while queued/running),
        ``reuse-succeeded`` (also when succeeded), ``reject`` (AlreadyExists),
        ``replace`` (cancel it, enqueue anew). While tracing is on
        (``cairnq.observability.tracing``) it runs in a PRODUCER span whose
        context the task carries in ``metadata["cairnq.trace"]``."""
        if _TRACING.on:
            return await tracing.traced_submit(
                self._store.submit,
                task_name(name),
                queue,
                metadata,
                payload=payload,
                key=key,
                conflict=conflict,
                max_attempts=max_attempts,
                priority=priority,
                delay_ms=delay_ms,
            )
        return await self._store.submit(
            name=task_name(name),
            payload=payload,
            queue=queue,
            key=key,
            conflict=conflict,
            max_attempts=max_attempts,
            priority=priority,
            metadata=metadata,
            delay_ms=delay_ms,
        )

    async def get(self, task_id: str) -> Optional[Task]:
        return await self._store.get(task_id)

    async def get_by_key(self, key: str) -> Optional[Task]:
        return await self._store.get_by_key(key)

    async def get_status(self, task_id: str) -> Optional[TaskRef]:
        return await self._store.get_status(task_id)

    async def get_status_by_key(self, key: str) -> Optional[TaskRef]:
        return await self._store.get_status_by_key(key)

    async def list(
        self,
        *,
        status: Optional[TaskStatus] = None,
        queue: Optional[str] = None,
        name: Optional[str] = None,
        root_id: Optional[str] = None,
        correlation_id: Optional[str] = None,
        limit: int = 100,
        offset: int = 0,
    ) -> builtins.list[Task]:
        """Newest first, every given filter an equality."""
        return await self._store.list(
            status=status,
            queue=queue,
            name=name,
            root_id=root_id,
            correlation_id=correlation_id,
            limit=limit,
            offset=offset,
        )

    async def stats(self, queue: Optional[str] = None) -> dict[str, dict[TaskStatus, int]]:
        """``{queue: {status: count}}``, every status present (zero-filled)."""
        return await self._store.stats(queue)

    async def queue_depth(self, queue: str, max_depth: int) -> int:
        """Headroom: ``max_depth`` minus the queued tasks, floored at 0."""
        return await self._store.queue_depth(queue, max_depth)

    # -- manage -----------------------------------------------------------------

    async def cancel(self, task_id: str) -> Optional[Task]:
        """Cancel a queued task; flag a running one (it finalizes as canceled)."""
        return await self._store.cancel(task_id)

    async def cancel_by_key(self, key: str) -> Optional[Task]:
        return await self._store.cancel_by_key(key)

    async def retry(self, task_id: str, *, reset_attempt: bool = False) -> Optional[Task]:
        """Requeue a failed or canceled task now."""
        return await self._store.retry(task_id, reset_attempt=reset_attempt)

    async def retry_by_key(self, key: str, *, reset_attempt: bool = False) -> Optional[Task]:
        return await self._store.retry_by_key(key, reset_attempt=reset_attempt)

    async def purge(
        self,
        *,
        older_than_ms: int = 0,
        queue: Optional[str] = None,
        status: Optional[TaskStatus] = None,
        name: Optional[str] = None,
        limit: int = 1_000,
    ) -> builtins.list[str]:
        """Delete up to ``limit`` finished tasks, oldest first; returns their ids."""
        return await self._store.purge(
            older_than_ms=older_than_ms, queue=queue, status=status, name=name, limit=limit
        )

    # -- wait and call -----------------------------------------------------------

    async def wait(
        self,
        task_id: str,
        *,
        timeout_ms: int = 30_000,
        poll_ms: int = DEFAULT_POLL_MS,
        max_poll_ms: int = MAX_POLL_MS,
    ) -> Task:
        """The finished task (any terminal status). TaskTimeout leaves the task
        running; ``wait(err.task_id)`` picks the wait back up."""
        return await poll_wait(
            self._store, task_id, timeout_ms=timeout_ms, poll_ms=poll_ms, max_poll_ms=max_poll_ms
        )

    async def wait_by_key(
        self,
        key: str,
        *,
        timeout_ms: int = 30_000,
        poll_ms: int = DEFAULT_POLL_MS,
        max_poll_ms: int = MAX_POLL_MS,
    ) -> Task:
        """Wait for whatever task ``key`` points at (re-resolved on every poll)."""
        return await poll_wait_by_key(
            self._store, key, timeout_ms=timeout_ms, poll_ms=poll_ms, max_poll_ms=max_poll_ms
        )

    async def call(
        self,
        name: Union[str, TaskDef[Any, Any]],
        payload: Any = None,
        *,
        timeout_ms: int = 30_000,
        poll_ms: int = DEFAULT_POLL_MS,
        max_poll_ms: int = MAX_POLL_MS,
        **submit_kwargs: Any,
    ) -> Any:
        """Submit and wait: the result, or TaskFailed / TaskCanceled / TaskTimeout."""
        task = await self.submit(name, payload, **submit_kwargs)
        if _own_wait(self):
            # Its status is known (the submit returned the row): the first
            # read is the one the finish notification asks for.
            done = await poll_wait_submitted(
                self._store, task, timeout_ms=timeout_ms, poll_ms=poll_ms, max_poll_ms=max_poll_ms
            )
        else:
            done = await self.wait(
                task.id, timeout_ms=timeout_ms, poll_ms=poll_ms, max_poll_ms=max_poll_ms
            )
        if done.status == "succeeded":
            return done.result
        if done.status == "failed":
            raise TaskFailed(done.error)
        raise TaskCanceled(done.id)

    # -- watch (an addition to the 0.15.1 surface) --------------------------------

    def watch(
        self,
        on_signal: Any,
        *,
        queues: Optional[builtins.list[str]] = None,
        poll_ms: Optional[int] = None,
    ) -> Watch:
        """Call ``on_signal(WatchSignal)`` on changes; returns a handle whose
        ``stop()`` (or calling it) unsubscribes. See ``cairnq.watch``."""
        return Watch.start(self._store, on_signal, queues=queues, poll_ms=poll_ms)


def _own_wait(client: CairnQ) -> bool:
    """``wait`` is ours (not overridden in a subclass or replaced on the
    instance): ``call`` may wait through ``poll_wait`` directly."""
    return "wait" not in client.__dict__ and type(client).wait is CairnQ.wait
