"""``run_once(handler, payload, on=client)``: one handler call, no worker.

The task is real: submitted to the store (at the highest priority, so that
the claim that follows takes it), claimed under a worker id of its own, and
run through the worker's own call path (``cairnq.worker.execution.run_call``)
with a real ``TaskContext``, so what the handler returns or raises is settled
exactly as a worker settles it. ``ctx.progress``, ``ctx.heartbeat`` and
``ctx.submit`` write to the store; children stay queued for a worker (or a
``drain``) to run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import uuid
from typing import Any, Optional, Union

from cairnq.client import CairnQ
from cairnq.context import TaskContext
from cairnq.models import TaskDef
from cairnq.store.base import TaskStore
from cairnq.store.validation import INT32_MAX
from cairnq.testing.outcome import Outcome
from cairnq.worker import DEFAULT_RETRY_BACKOFF_MAX_MS, DEFAULT_RETRY_BACKOFF_MS, Handler, Worker
from cairnq.worker.execution import CallSettings, run_call
from cairnq.worker.registry import Registration, Registry
from cairnq.worker.store_port import StorePort

__all__ = ["run_once"]

Where = Union[CairnQ, TaskStore, Worker]


class _Hold:
    """The call's hold (``execution.CallHold``): set once nothing is left to write."""

    def __init__(self) -> None:
        self.done = asyncio.Event()

    def handler_done(self) -> None:
        pass

    def settled(self) -> None:
        self.done.set()


def _store_of(on: Where) -> TaskStore:
    if isinstance(on, TaskStore):
        return on
    if isinstance(on, (CairnQ, Worker)):
        return on.store
    raise TypeError(f"on= must be a CairnQ, a Worker or a TaskStore, got {type(on).__name__}")


def _registration(
    name: str, handler: Handler, batch: Optional[int], raised: list[BaseException]
) -> Registration:
    """The handler's registration as a worker would make it (its call style),
    calling through a wrapper that keeps what the handler raised."""
    registry = Registry({})
    registry.register(name, handler, batch=batch)
    reg = registry.by_name[name]
    is_async = reg.is_async

    async def keep_raised(*args: Any) -> Any:
        try:
            if is_async:
                return await handler(*args)
            value = await asyncio.to_thread(handler, *args)  # as the worker runs a plain def
            return await value if inspect.isawaitable(value) else value
        except BaseException as exc:
            raised.append(exc)
            raise

    return dataclasses.replace(reg, fn=keep_raised, is_async=True)


async def run_once(
    handler: Handler,
    payload: Any = None,
    *,
    on: Where,
    name: Union[str, TaskDef[Any, Any], None] = None,
    queue: str = "default",
    metadata: Optional[dict[str, Any]] = None,
    max_attempts: int = 1,
    batch: bool = False,
    lease_ms: int = 30_000,
    max_run_ms: Optional[int] = None,
    retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS,
    retry_backoff_max_ms: int = DEFAULT_RETRY_BACKOFF_MAX_MS,
) -> Outcome:
    """Submit ``payload`` as a task for ``handler``, claim it and run the
    handler once with a real ``TaskContext``; returns the task's
    :class:`Outcome` once what the handler left is settled (``exception``:
    what it raised, if anything).

    ``on``: the store to use (a ``CairnQ``, a ``Worker`` or a ``TaskStore``).
    ``name``: the task name (default: the function's name, as
    ``@worker.task`` derives it). ``max_attempts`` defaults to 1, so a
    failure is final (``status == "failed"``); with more, a retryable
    failure leaves the task ``queued`` for its next attempt. ``batch=True``
    calls a batch handler with a batch of one. ``lease_ms`` is the lease the
    handler holds (nothing renews it: ``ctx.heartbeat()`` does, as in a worker).
    """
    store = _store_of(on)
    if isinstance(name, TaskDef):
        name = name.name
    if name is None:
        name = getattr(handler, "__name__", None)
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError("run_once: cannot derive a task name from the handler; pass name=")
    raised: list[BaseException] = []
    reg = _registration(name, handler, 1 if batch else None, raised)
    task = await store.submit(
        name=name, payload=payload, queue=queue, metadata=metadata,
        max_attempts=max_attempts, priority=INT32_MAX,
    )  # fmt: skip
    worker_id = f"worker_test_{uuid.uuid4().hex[:16]}"
    claimed = await store.claim(
        queues=[queue], worker_id=worker_id, lease_ms=lease_ms, limit=1, names=[name]
    )
    if not claimed or claimed[0].id != task.id:
        other = claimed[0].id if claimed else "nothing"
        raise RuntimeError(
            f"run_once: claimed {other} instead of {task.id}; another task of {name!r} on "
            f"queue {queue!r} is due at the highest priority (run_once needs to claim its own)"
        )
    ctx = TaskContext(
        store, claimed[0], worker_id, lease_ms,
        retry_backoff_ms=retry_backoff_ms, retry_backoff_max_ms=retry_backoff_max_ms,
    )  # fmt: skip
    problems: list[BaseException] = []
    settings = CallSettings(
        port=StorePort(store, worker_id, lease_ms),
        retry_backoff_ms=retry_backoff_ms,
        retry_backoff_max_ms=retry_backoff_max_ms,
        max_run_ms=max_run_ms,
        report=lambda exc, info: problems.append(exc),
    )
    hold = _Hold()
    await run_call(settings, reg, [ctx], hold)
    await hold.done.wait()  # a lone completion is written after run_call returns
    if problems:
        raise problems[0]  # the settlement itself failed (store down, say)
    final = await store.get(task.id)
    assert final is not None
    return Outcome.of(final, raised[0] if raised else None)
