"""``TaskContext``: what a handler gets for each task it runs.

One per task, whether the handler takes one task or a batch: lease,
cancellation and settlement are per task. Every write goes through an
ownership check in the database; locally the context also refuses writes
once it knows the lease is lost (no round trip) and makes settling twice a
no-op.

The worker tells a context what it learns about the attempt (the lease is
gone, the task settled, a cancel was requested, the handler started) through
the functions under "The worker's side" at the end of this module, and only
through them: the context's state stays private to this module. The same
functions report the attempt's steps as events (``cairnq.events``, kinds
``task.*``), each behind one ``channel.on`` test, so nothing is built or
timed while nobody listens.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Mapping, Optional, TypeVar, Union

from cairnq import events

from cairnq._backoff import DEFAULT_RETRY_BACKOFF_MAX_MS, DEFAULT_RETRY_BACKOFF_MS, fail_delay_ms
from cairnq._wait import DEFAULT_POLL_MS, MAX_POLL_MS, poll_wait
from cairnq.errors import LostLease, as_envelope
from cairnq.models import Task, TaskDef, task_name
from cairnq.observability import tracing
from cairnq.observability.tracing import settled_outcome

if TYPE_CHECKING:
    from cairnq.observability.tracing import CallSpan
    from cairnq.store.base import TaskStore

__all__ = ["TaskContext"]

T = TypeVar("T")

_CLAIMED = events.channel("task.claimed")
_STARTED = events.channel("task.started")
_LEASE_LOST = events.channel("task.lease_lost")
_SETTLED = events.group(*events.SETTLEMENT_KINDS)
# On while some event needs the handler's start time (task.started, and every
# kind that reports run_s): the worker tests it before ``mark_started``.
RUN_TIMED = events.group(
    "task.started", *events.SETTLEMENT_KINDS, "task.lease_lost", "batch.settled"
)
# A settlement's final status, as the store answered it -> the channel of its kind.
_BY_STATUS = {
    "succeeded": events.channel("task.succeeded"),
    "queued": events.channel("task.retried"),
    "failed": events.channel("task.failed"),
    "canceled": events.channel("task.canceled"),
}
_TRACING = tracing.STATE
_clock = time.perf_counter
_emit_task = events.emit_task


class TaskContext:
    # When the worker called the handler (perf_counter), recorded only while
    # some event reports run_s; a class default keeps construction as it was.
    _run_started: Optional[float] = None
    # What most attempts never change: class defaults, set on the instance
    # when they do (a worker builds one context per task it runs).
    _lost = False
    _settled = False
    _lease_event: Optional[asyncio.Event] = None
    # The call's consumer span while tracing is on (cairnq.observability.tracing).
    _span: Optional[CallSpan] = None

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
        self._cancel_seen = task.cancel_requested_at_ms is not None

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
    def span(self) -> Any:
        """The OpenTelemetry span this task runs in (the call's CONSUMER span,
        also the current span while the handler runs), for attributes and
        events of the handler's own; None while tracing is off."""
        return None if self._span is None else self._span.span

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

    # -- state, kept by the writes below and by the worker's side (the functions
    # at the end of this module). The methods stay for code written against
    # 0.15.1, which called them.

    def _mark_lease_lost(self) -> None:
        if not self._lost:
            if _LEASE_LOST.on:
                _emit(_LEASE_LOST, self, None)
            if self._span is not None:
                self._span.outcome(self, "lease_lost")
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
        if _SETTLED.on or self._span is not None:
            _settled(self, getattr(task, "status", None) or "succeeded", None)
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
        if _SETTLED.on or self._span is not None:
            _settled(self, getattr(task, "status", None) or "succeeded", None)
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
        if _SETTLED.on or self._span is not None:
            _settled(self, _failed_status(self, task, retryable), envelope)
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
        submit = self._store.submit
        if _TRACING.on:
            queue = kwargs.pop("queue", "default")
            metadata = kwargs.pop("metadata", None)
            return await tracing.traced_submit(
                submit,
                task_name(name),
                queue,
                metadata,
                payload=payload,
                parent_id=self._task.id,
                root_id=self._task.root_id or self._task.id,
                correlation_id=self._task.correlation_id,
                **kwargs,
            )
        return await submit(
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


# -- the worker's side -------------------------------------------------------------
# The one way the worker (execution.py, heartbeat.py, worker.py) tells a
# context what it learned about the attempt; no other module touches a
# context's private state. Each function also reports the step as an event
# where one is due. Callers test the channel (or group) named in a docstring
# first where it says so: with nobody listening, an event costs that one
# attribute read.


def new_contexts(
    store: TaskStore,
    tasks: Iterable[Task],
    worker_id: str,
    lease_ms: int,
    backoff_ms: int,
    backoff_max_ms: int,
) -> list[TaskContext]:
    """The contexts for tasks the worker claimed: what ``TaskContext(store,
    task, worker_id, lease_ms, retry_backoff_ms=..., retry_backoff_max_ms=...)``
    builds, without the call (a keyword call costs more than the stores)."""
    made = []
    new = object.__new__
    for task in tasks:
        ctx = new(TaskContext)
        ctx._store = store
        ctx._task = task
        ctx._worker_id = worker_id
        ctx._lease_ms = lease_ms
        ctx._backoff_ms = backoff_ms
        ctx._backoff_max_ms = backoff_max_ms
        ctx._cancel_seen = task.cancel_requested_at_ms is not None
        made.append(ctx)
    return made


def report_claimed(contexts: Iterable[TaskContext]) -> None:
    """Emit ``task.claimed`` for each; callers test ``channel("task.claimed").on``
    first. ``wait_s``: the claim's time (the row's ``updated_at_ms``, written
    by the claim) minus the time the task was due, both the database's clock."""
    for ctx in contexts:
        task = ctx._task
        wait_s = (task.updated_at_ms - task.run_at_ms) / 1000
        _emit_task(_CLAIMED, "task.claimed", task, ctx._worker_id, wait_s if wait_s > 0.0 else 0.0, None, None)


def mark_started(contexts: Iterable[TaskContext]) -> float:
    """The handler is about to be called for ``contexts``: record the time
    (run_s counts from it) and emit ``task.started``; returns the time.
    Callers test ``RUN_TIMED.on`` first."""
    now = _clock()
    listening = _STARTED.on
    for ctx in contexts:
        ctx._run_started = now
        if listening:
            _emit_task(_STARTED, "task.started", ctx._task, ctx._worker_id, None, None, None)
    return now


def left_to_write(ctx: TaskContext) -> bool:
    """Whether the worker still has the outcome of ``ctx``'s attempt to
    write: the handler did not settle it, and its lease is not known lost."""
    return not (ctx._settled or ctx._lost)


def mark_completed(ctx: TaskContext, status: str) -> None:
    """The worker's completion settled the task with final ``status``
    ("succeeded", or "canceled" where a cancel won)."""
    ctx._settled = True
    if status == "canceled":
        ctx._cancel_seen = True
    if _SETTLED.on or ctx._span is not None:
        _settled(ctx, status, None)


def mark_each_completed(
    contexts: Iterable[TaskContext], ids: Iterable[str], settled: Mapping[str, str]
) -> list[tuple[str, TaskContext]]:
    """``mark_completed`` for each context whose task id (``ids``, in step)
    has a final status in ``settled``; returns the others, (id, context)."""
    missing = []
    for task_id, ctx in zip(ids, contexts):
        status = settled.get(task_id)
        if status is None:
            missing.append((task_id, ctx))
            continue
        ctx._settled = True  # (mark_completed's body, inline: a frame less a task)
        if status == "canceled":
            ctx._cancel_seen = True
        if _SETTLED.on or ctx._span is not None:
            _settled(ctx, status, None)
    return missing


def mark_failed(ctx: TaskContext, answer: Any, envelope: dict[str, Any], retryable: bool) -> None:
    """The worker's failure write for ``ctx`` is done; ``answer``: what the
    store returned (the row: its status says retried, failed or canceled)."""
    ctx._settled = True
    if _SETTLED.on or ctx._span is not None:
        _settled(ctx, _failed_status(ctx, answer, retryable), envelope)


def mark_settled(ctx: TaskContext) -> None:
    """Nothing more is to be written for ``ctx`` (its outcome stands
    elsewhere); no event of its own."""
    ctx._settled = True


def mark_lease_lost(ctx: TaskContext) -> None:
    """The worker learned that it no longer holds the task (a heartbeat or a
    settlement found it gone): writes are refused locally from now on."""
    ctx._mark_lease_lost()


def mark_abandoned(ctx: TaskContext) -> None:
    """The handler ran past max_run_ms: its writes are refused locally, as
    after a lost lease, but no lease was lost (the worker fails the task)."""
    ctx._lost = True
    if ctx._lease_event is not None:
        ctx._lease_event.set()


def mark_cancel_requested(ctx: TaskContext) -> None:
    """A heartbeat saw the task's cancel request."""
    ctx._cancel_seen = True


def report_lease_gone(ctx: TaskContext) -> None:
    """The worker writes nothing more for ``ctx`` (the handler raised
    LostLease, or a failure write found somebody else's lease): emits
    ``task.lease_lost`` unless the context already reported its loss. Leaves
    the context's state as it is."""
    if not ctx._lost and not ctx._settled:
        if _LEASE_LOST.on:
            _emit(_LEASE_LOST, ctx, None)
        if ctx._span is not None:
            ctx._span.outcome(ctx, "lease_lost")


def _failed_status(ctx: TaskContext, answer: Any, retryable: bool) -> str:
    status = getattr(answer, "status", None)
    if isinstance(status, str):
        return status
    # A wrapped store that does not hand the row back: what the statement does.
    task = ctx._task
    return "queued" if retryable and task.attempt < task.max_attempts else "failed"


def _settled(ctx: TaskContext, status: str, error: Optional[dict[str, Any]]) -> None:
    """A settlement: its event (if anybody listens) and its span's outcome (if traced)."""
    if _SETTLED.on:
        _emit_settled(ctx, status, error)
    if ctx._span is not None:
        settled_outcome(ctx._span, ctx, status, error)


def _emit_settled(ctx: TaskContext, status: str, error: Optional[dict[str, Any]]) -> None:
    channel = _BY_STATUS.get(status)
    if channel is not None and channel.on:
        _emit(channel, ctx, error if status == "queued" or status == "failed" else None)


def _emit(channel: events.Channel, ctx: TaskContext, error: Optional[dict[str, Any]]) -> None:
    """A settlement or a lost lease: run_s since the handler started, if known."""
    started = ctx._run_started
    run_s = None if started is None else _clock() - started
    _emit_task(channel, channel.kind, ctx._task, ctx._worker_id, None, run_s, error)
