"""Delivery and settlement: run one call, then settle what the handler left.

Outcome of the call -> what happens to every task it did not settle itself:

    returned            complete(result)   (a batch: each task's result from a
                                            returned {task_id: result} mapping;
                                            returned None: no results)
    batch returned      fail(TypeError,    a handler bug, deterministic, so
      anything else       not retryable)   not retried (0.15.1 succeeded the
                                            tasks with no result, silently)
    raised LostLease    nothing is written
    ran past max_run_ms fail(handler_timeout, retryable)
    raised TaskError    fail(its envelope, its retryable)
    raised anything     fail(handler_error, retryable)

Cancel wins over all of these in the statements themselves. Leftovers of a
batch settle concurrently (and so share a commit). A lone task's completion
is handed to the worker's coalesced completions without waiting for it: the
call's asyncio task ends when the handler returns, and the call's hold on
the worker (leases, resources, bytes) is released once the write is done. A
lone task's failure is written the same way, in a task of its own. A
batch's leftovers are handed over together, the batch waiting on one future.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from dataclasses import dataclass
from functools import partial
from typing import Any, Awaitable, Callable, Coroutine, Mapping, Optional, Protocol

from cairnq import events
from cairnq._backoff import fail_delay_ms
from cairnq.context import (
    RUN_TIMED,
    TaskContext,
    mark_abandoned,
    mark_completed,
    mark_failed,
    mark_lease_lost,
    mark_settled,
    mark_started,
    report_lease_gone,
)
from cairnq.errors import (
    LostLease,
    SerializationError,
    TaskError,
    error_envelope,
    exception_envelope,
)
from cairnq.observability import tracing
from cairnq.worker.registry import Registration
from cairnq.worker.store_port import StorePort

__all__ = ["CallHold", "CallSettings", "run_call", "no_handler", "tell_completed"]

Report = Callable[[BaseException, dict[str, Any]], None]

_BATCH_SETTLED = events.channel("batch.settled")
_LEASE_LOST = events.channel("task.lease_lost")
_TRACING = tracing.STATE  # its ``on``: the one read a call pays while tracing is off
_clock = time.perf_counter
_new_tuple = tuple.__new__


@dataclass(frozen=True)
class CallSettings:
    """What running and settling a call needs from its worker."""

    port: StorePort
    retry_backoff_ms: int
    retry_backoff_max_ms: int
    max_run_ms: Optional[int]
    report: Report


class _Timeout:
    """Marker outcome: the call ran past max_run_ms."""


class CallHold(Protocol):
    """A call's hold on its worker: the concurrency slot (until the handler
    is done) and the rest (leases, resources, bytes: until every task of the
    call is settled)."""

    def handler_done(self) -> None: ...

    def settled(self) -> None: ...


async def run_call(
    settings: CallSettings,
    reg: Registration,
    contexts: list[TaskContext],
    hold: CallHold,
    begun: Optional[Awaitable[Any]] = None,
) -> None:
    """Run the handler for ``contexts`` and settle every task it left unsettled.
    ``hold.handler_done()`` as soon as the handler is done, before settling
    (the call no longer counts against the worker's concurrency from there);
    ``hold.settled()`` once nothing is left to write, possibly after this
    coroutine ended (a lone completion is handed to the worker's coalesced
    completions and the call's task ends at once). Never raises but for
    cancellation: what goes wrong is reported.

    ``begun``: the handler was already called (a quick call promoted, see
    ``quick.py``: an async handler of one task, no max_run_ms); awaiting it
    goes on from there."""
    if _TRACING.on and type(hold) is not tracing.CallSpan:
        # Again, inside a consumer span that stands in for the hold.
        run = run_call if begun is None else partial(run_call, begun=begun)
        await tracing.run_traced(run, settings, reg, contexts, hold)
        return
    handed_off = False
    try:
        started = mark_started(contexts) if RUN_TIMED.on and begun is None else None
        try:
            if begun is not None:
                outcome: Any = await begun
            elif settings.max_run_ms is None and reg.is_async and reg.style != "batch":
                ctx = contexts[0]  # the common shape, without the general path's frames
                outcome = await (
                    reg.fn(ctx, ctx.payload) if reg.style == "ctx_payload" else reg.fn(ctx)
                )
            else:
                outcome = await _invoke(settings, reg, contexts)
            raised: Optional[BaseException] = None
        except LostLease as exc:
            hold.handler_done()
            if _LEASE_LOST.on or _BATCH_SETTLED.on or type(hold) is tracing.CallSpan:
                _report_dropped(reg, contexts, started, exc)
            return  # we no longer own these tasks: write nothing
        except Exception as exc:  # the handler failed: settled below
            outcome, raised = None, exc
            if type(hold) is tracing.CallSpan:
                hold.error(exc)
        hold.handler_done()
        if started is not None and reg.style == "batch" and _BATCH_SETTLED.on:
            _report_batch(settings, reg, contexts, started, raised, outcome)
        if raised is None and reg.style != "batch" and outcome is not _Timeout:
            ctx = contexts[0]
            if ctx.settled or ctx.lost_lease:
                return
            try:
                handed_off = settings.port.complete_later(
                    ctx.task_id, outcome, partial(_completed_later, settings, ctx, hold)
                )
            except SerializationError as exc:
                await _guarded(settings, ctx, lambda c: _unserializable(settings, c, exc))
                return
            if not handed_off:
                await _guarded(settings, ctx, lambda c: _complete(settings, c, outcome))
            return
        if reg.style != "batch":
            # A single call that failed (or ran out of time): its write goes
            # on in a task of its own and the call's task ends here, as after
            # a completion. Awaited here, it would make a handler that never
            # suspends look like one that does (``starter.py``): the calls
            # after it would move to another task, and its handler's next
            # calls would each get a task of their own.
            _apart(_settled_apart(settings, reg, contexts, outcome, raised, hold))
            handed_off = True
            return
        await _settle(settings, reg, contexts, outcome, raised)
    except Exception as exc:
        settings.report(exc, {"phase": "execute", "task_id": contexts[0].task_id})
    finally:
        if not handed_off:
            hold.settled()


# Settlements going on apart from their calls (a reference each until done).
_APART: set["asyncio.Task[None]"] = set()


def _apart(settlement: Coroutine[Any, Any, None]) -> None:
    """Run ``settlement`` in a task of its own, kept until it ends."""
    task = asyncio.get_running_loop().create_task(settlement)
    _APART.add(task)
    task.add_done_callback(_APART.discard)


async def _settled_apart(
    settings: CallSettings,
    reg: Registration,
    contexts: list[TaskContext],
    outcome: Any,
    raised: Optional[BaseException],
    hold: CallHold,
) -> None:
    """``_settle``, apart from its call; the hold is settled when it ends."""
    try:
        await _settle(settings, reg, contexts, outcome, raised)
    except Exception as exc:
        settings.report(exc, {"phase": "execute", "task_id": contexts[0].task_id})
    finally:
        hold.settled()


def _completed_later(
    settings: CallSettings,
    ctx: TaskContext,
    hold: CallHold,
    status: Optional[str],
    exc: Optional[BaseException],
) -> None:
    """A handed-off completion was written (or refused)."""
    try:
        tell_completed(settings, ctx, status, exc)
    finally:
        hold.settled()


def tell_completed(
    settings: CallSettings, ctx: TaskContext, status: Optional[str], exc: Optional[BaseException]
) -> None:
    """Tell ``ctx`` how its handed-off completion went: written with final
    ``status``, or refused with ``exc`` (LostLease, or what the write raised)."""
    if exc is None:
        assert status is not None
        mark_completed(ctx, status)
    elif isinstance(exc, LostLease):
        mark_lease_lost(ctx)
    elif isinstance(exc, Exception):
        settings.report(exc, {"phase": "execute", "task_id": ctx.task_id})


async def _invoke(settings: CallSettings, reg: Registration, contexts: list[TaskContext]) -> Any:
    if reg.style == "batch":
        args: tuple[Any, ...] = (contexts,)
    elif reg.style == "ctx_payload":
        args = (contexts[0], contexts[0].payload)
    else:
        args = (contexts[0],)
    if settings.max_run_ms is None:
        return await _call(reg, args)
    handler = asyncio.ensure_future(_call(reg, args))
    done, _ = await asyncio.wait((handler,), timeout=settings.max_run_ms / 1000)
    if done:
        return handler.result()
    # Over time: nothing the handler does from here on counts. Flag the leases
    # first so its writes are refused locally, then abandon it (a thread running
    # a plain-def handler cannot be stopped; only its result is ignored).
    for ctx in contexts:
        mark_abandoned(ctx)
    handler.cancel()
    handler.add_done_callback(_consume)
    return _Timeout


async def _call(reg: Registration, args: tuple[Any, ...]) -> Any:
    if reg.is_async:
        return await reg.fn(*args)
    value = await asyncio.to_thread(reg.fn, *args)
    if inspect.isawaitable(value):
        value = await value
    return value


def _consume(task: "asyncio.Future[Any]") -> None:
    if not task.cancelled():
        task.exception()  # abandoned handler: its outcome is deliberately dropped


async def _settle(
    settings: CallSettings,
    reg: Registration,
    contexts: list[TaskContext],
    outcome: Any,
    raised: Optional[BaseException],
) -> None:
    leftovers = [ctx for ctx in contexts if not ctx.settled]
    if outcome is _Timeout:
        envelope = error_envelope(
            type="HandlerTimeout",
            code="handler_timeout",
            message=(
                f"handler for {reg.name!r} exceeded max_run_ms={settings.max_run_ms}ms; "
                "the attempt was abandoned"
            ),
            retryable=True,
        )
        await _each(settings, leftovers, lambda ctx: _fail(settings, ctx, envelope, True))
        return
    if raised is not None:
        if isinstance(raised, TaskError):
            envelope, retryable = raised.envelope(), raised.retryable
        else:
            envelope, retryable = exception_envelope(raised, retryable=True), True
        await _each(settings, leftovers, lambda ctx: _fail(settings, ctx, envelope, retryable))
        return
    if reg.style == "batch":
        if outcome is not None and not isinstance(outcome, Mapping):
            envelope = exception_envelope(_not_a_batch_result(reg, outcome), retryable=False)
            await _each(settings, leftovers, lambda ctx: _fail(settings, ctx, envelope, False))
            return
        await _complete_batch(settings, leftovers, outcome if outcome is not None else {})
    else:
        await _each(settings, leftovers, lambda ctx: _complete(settings, ctx, outcome))


def _report_dropped(
    reg: Registration, contexts: list[TaskContext], started: Optional[float], exc: LostLease
) -> None:
    """The handler raised LostLease: events for what the worker will not write."""
    for ctx in contexts:
        report_lease_gone(ctx)
    if started is not None and reg.style == "batch" and _BATCH_SETTLED.on:
        _BATCH_SETTLED.emit(_batch_event(reg, contexts, started, exc))


def _report_batch(
    settings: CallSettings,
    reg: Registration,
    contexts: list[TaskContext],
    started: float,
    raised: Optional[BaseException],
    outcome: Any,
) -> None:
    if raised is None and outcome is _Timeout:
        raised = TimeoutError(
            f"batch handler for {reg.name!r} exceeded max_run_ms={settings.max_run_ms}ms"
        )
    _BATCH_SETTLED.emit(_batch_event(reg, contexts, started, raised))


def _batch_event(
    reg: Registration, contexts: list[TaskContext], started: float, error: Optional[BaseException]
) -> events.BatchEvent:
    first, run_s = contexts[0], _clock() - started
    return _new_tuple(
        events.BatchEvent,
        ("batch.settled", reg.name, first.queue, len(contexts), first.worker_id, run_s, error),
    )


def _not_a_batch_result(reg: Registration, outcome: Any) -> TypeError:
    return TypeError(
        f"batch handler for {reg.name!r} returned {type(outcome).__name__}; "
        "expected a dict of task id -> result, or None"
    )


async def _each(
    settings: CallSettings,
    contexts: list[TaskContext],
    settle: Callable[[TaskContext], Any],
) -> None:
    if len(contexts) == 1:
        await _guarded(settings, contexts[0], settle)
    elif contexts:
        await asyncio.gather(*(_guarded(settings, ctx, settle) for ctx in contexts))


async def _complete_batch(
    settings: CallSettings, contexts: list[TaskContext], results: Mapping[str, Any]
) -> None:
    """Complete what a batch handler left, each task with its entry in
    ``results``. The completions go to the worker's coalesced completions
    together and the batch waits on one future for all of them, where
    awaiting each would cost a task, two coroutines and a future per task;
    each context still hears its own outcome, as ``_complete`` tells it. A
    result that cannot be stored fails its own task only. Where the store's
    ``complete`` is not cairnq's own, each goes through it (``_complete``)."""
    pending = [ctx for ctx in contexts if not ctx.lost_lease]
    if not pending:
        return
    countdown = _Countdown()
    interrupted: list[BaseException] = []

    def told(ctx: TaskContext, status: Optional[str], exc: Optional[BaseException]) -> None:
        if exc is not None and not isinstance(exc, Exception):
            interrupted.append(exc)  # the settlement was cancelled: so is this call
        _completed_later(settings, ctx, countdown, status, exc)

    get = results.get
    refused = settings.port.complete_all_later(
        [(ctx.task_id, get(ctx.task_id), partial(told, ctx)) for ctx in pending]
    )
    if refused is None:  # the store's complete is wrapped: each through it
        await _each(settings, pending, lambda c: _complete(settings, c, get(c.task_id)))
        return
    countdown.left = len(pending) - len(refused)  # (none is told before this coroutine suspends)
    for i, error in refused:
        ctx = pending[i]
        if isinstance(error, SerializationError):
            await _guarded(settings, ctx, partial(_unserializable, settings, exc=error))
        else:
            settings.report(error, {"phase": "execute", "task_id": ctx.task_id})
    if countdown.left:
        await countdown.done
    if interrupted:
        raise interrupted[0]


class _Countdown:
    """The hold ``_completed_later`` settles for each task of a batch: done
    once every one has been told."""

    __slots__ = ("left", "done")

    def __init__(self) -> None:
        self.left = 0
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def handler_done(self) -> None:
        pass

    def settled(self) -> None:
        self.left -= 1
        if not self.left and not self.done.done():
            self.done.set_result(None)


async def _guarded(
    settings: CallSettings, ctx: TaskContext, settle: Callable[[TaskContext], Any]
) -> None:
    """A settlement's failure is reported, never raised: the worker goes on."""
    try:
        await settle(ctx)
    except Exception as exc:
        settings.report(exc, {"phase": "execute", "task_id": ctx.task_id})


async def _complete(settings: CallSettings, ctx: TaskContext, result: Any) -> None:
    if ctx.lost_lease:
        return
    try:
        status = await settings.port.complete(ctx.task_id, result)
    except SerializationError as exc:
        await _unserializable(settings, ctx, exc)
        return
    except LostLease:
        mark_lease_lost(ctx)
        return
    mark_completed(ctx, status)


async def _unserializable(settings: CallSettings, ctx: TaskContext, exc: SerializationError) -> None:
    """The handler's result cannot be stored: the task fails, not retried."""
    envelope = error_envelope(
        type="SerializationError",
        code="unserializable_result",
        message=f"handler result is not JSON-serializable: {exc.__cause__ or exc}",
        retryable=False,
    )
    await _fail(settings, ctx, envelope, False)


async def _fail(
    settings: CallSettings, ctx: TaskContext, envelope: dict[str, Any], retryable: bool
) -> None:
    delay = fail_delay_ms(
        ctx.attempt,
        retryable=retryable,
        base_ms=settings.retry_backoff_ms,
        max_ms=settings.retry_backoff_max_ms,
    )
    try:
        answer = await settings.port.fail(
            ctx.task_id, envelope, retryable=retryable, delay_ms=delay
        )
    except LostLease:
        report_lease_gone(ctx)  # somebody else owns it now; their outcome stands
        mark_settled(ctx)
        return
    mark_failed(ctx, answer, envelope, retryable)


async def no_handler(settings: CallSettings, contexts: list[TaskContext], hold: CallHold) -> None:
    """A claimed name with no handler (unregistered mid-run): fail it for good."""
    hold.handler_done()
    try:
        for ctx in contexts:
            envelope = error_envelope(
                type="NoHandler",
                code="no_handler",
                message=f"no handler registered for {ctx.name!r}",
                retryable=False,
            )
            await _guarded(settings, ctx, lambda c: _fail(settings, c, envelope, False))
    finally:
        hold.settled()
