"""OpenTelemetry tracing: a PRODUCER span per submit, a CONSUMER span per call.

Optional (``pip install "cairnq-fast[otel]"``, the ``opentelemetry-api`` package)
and off until ``instrument()`` is called; ``uninstrument()`` turns it off
again. Nothing of OpenTelemetry is imported before ``instrument()``, and
while it is off the worker and the submit paths pay one attribute read
(``STATE.on``). We never configure a provider: spans go to the tracer of the
provider passed to ``instrument(tracer_provider=...)``, or else of whatever
global provider the application set up (the API's ``get_tracer``).

Propagation. A submit (``CairnQ.submit``, ``CairnQ.call``, ``ctx.submit``)
runs in a PRODUCER span ``<task name> send`` and stores that span's W3C trace
context in the task's metadata under ``METADATA_KEY``::

    metadata["cairnq.trace"] = {"traceparent": "00-<trace>-<span>-01", "tracestate": "..."}

(``tracestate`` only when there is one). A user's own ``cairnq.trace`` entry
is left as it is; the user's dict is never mutated (a copy is stored). Other
SDKs see an ordinary metadata entry and ignore it.

The worker runs each single-task call in a CONSUMER span ``<task name>
process`` whose parent is the producer's context and which also links to it
(the messaging conventions' "creation context" link), so the request that
enqueued the work and the work are one trace across processes and hosts. A
batch call gets one CONSUMER span, a new trace with a link to each task's
producer context. A task without the entry (submitted with tracing off, or
by another SDK) or with a malformed one starts a new trace: never an error.
The handler runs with the consumer span as the current span (``ctx.span``
too), so spans it starts are its children; the span ends once every task of
the call is settled.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

# A context is typed Any here: cairnq.context imports this module, never the
# other way round (the contexts are only handed in).
TaskContext = Any

__all__ = ["METADATA_KEY", "STATE", "instrument", "is_instrumented", "uninstrument"]

log = logging.getLogger("cairnq.tracing")

METADATA_KEY = "cairnq.trace"
SYSTEM = "cairnq"
T = TypeVar("T")

# A settlement's final status -> the outcome recorded on the span.
_OUTCOMES = {
    "succeeded": "succeeded",
    "queued": "retried",
    "failed": "failed",
    "canceled": "canceled",
}


class _State:
    """What the hot paths read: ``on`` and, while on, the tracer."""

    on = False
    tracer: Any = None


STATE = _State()


def instrument(tracer_provider: Any = None) -> None:
    """Trace submits and task executions from now on. ``tracer_provider``:
    an OpenTelemetry ``TracerProvider`` to use instead of the global one."""
    try:
        from opentelemetry import trace
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            'cairnq tracing needs the OpenTelemetry API: pip install "cairnq-fast[otel]"'
        ) from exc
    from cairnq import __version__

    STATE.tracer = trace.get_tracer("cairnq", __version__, tracer_provider)
    _otel()  # resolve the API's pieces now, not on the first task
    STATE.on = True


def uninstrument() -> None:
    """Stop tracing (spans already started still end)."""
    STATE.on = False
    STATE.tracer = None


def is_instrumented() -> bool:
    return STATE.on


class _Otel:
    """The OpenTelemetry API's pieces, imported once on first use."""

    def __init__(self) -> None:
        from opentelemetry import context, trace

        self.context = context
        self.trace = trace
        self.SpanContext = trace.SpanContext
        # One shared TraceFlags per value: a stored context's flags are one
        # of these instead of a new object per task (kept by the span).
        self.flags = [trace.TraceFlags(value) for value in range(256)]
        self.TraceState = trace.TraceState
        self.empty = context.Context()
        self.Link = trace.Link
        self.Status = trace.Status
        self.ERROR = trace.StatusCode.ERROR
        self.CONSUMER = trace.SpanKind.CONSUMER
        self.PRODUCER = trace.SpanKind.PRODUCER


_api: _Otel | None = None


def _otel() -> _Otel:
    global _api
    if _api is None:
        _api = _Otel()
    return _api


# -- producer ------------------------------------------------------------------


async def traced_submit(
    submit: Callable[..., Awaitable[T]], name: str, queue: str, metadata: Any, **kwargs: Any
) -> T:
    """Run ``submit(name=..., queue=..., metadata=..., **kwargs)`` (a store's
    submit) in a PRODUCER span, the span's context in the task's metadata."""
    api = _otel()
    span_name, attributes = _bases(_producer_bases, name, queue, "send")
    # What start_as_current_span does, without its two context managers: the
    # span current while the submit runs, an Exception recorded (status
    # ERROR), the span ended however the submit ends.
    span = STATE.tracer.start_span(span_name, kind=api.PRODUCER, attributes=attributes)
    token = api.context.attach(api.trace.set_span_in_context(span))
    try:
        task = await submit(name=name, queue=queue, metadata=_with_trace(span, metadata), **kwargs)
        task_id = getattr(task, "id", None)
        if isinstance(task_id, str):
            span.set_attribute("messaging.message.id", task_id)
        return task
    except Exception as exc:
        span.record_exception(exc)
        span.set_status(api.Status(api.ERROR, f"{type(exc).__name__}: {exc}"))
        raise
    finally:
        api.context.detach(token)
        span.end()


def _with_trace(span: Any, metadata: Any) -> Any:
    """A copy of ``metadata`` with ``span``'s W3C trace context under
    METADATA_KEY; ``metadata`` itself when it is not a dict (validation
    explains that) or already has the key (the user's entry wins)."""
    if metadata is not None and (not isinstance(metadata, dict) or METADATA_KEY in metadata):
        return metadata
    sc = span.get_span_context()
    if not sc.is_valid:  # no SDK behind the API: nothing to carry
        return metadata
    # The W3C version-00 header, formatted here: the same text the SDK's
    # TraceContext propagator writes, without its context lookups.
    carrier = {"traceparent": f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{sc.trace_flags:02x}"}
    if sc.trace_state:
        carrier["tracestate"] = sc.trace_state.to_header()
    out = dict(metadata) if metadata else {}
    out[METADATA_KEY] = carrier
    return out


# -- consumer ------------------------------------------------------------------


# W3C Trace Context, level 1: version-trace_id-parent_id-flags, lowercase hex;
# a later version may append fields, version 00 may not. The version-00 form
# (all that this and other SDKs write) has its own pattern: no version check.
_TRACEPARENT_00 = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")


def producer_context(api: _Otel, metadata: Any) -> Any:
    """The valid remote SpanContext stored in ``metadata``, or None (absent
    or malformed: a new trace, never an error)."""
    carrier = metadata.get(METADATA_KEY) if type(metadata) is dict else None
    if type(carrier) is not dict:
        return None
    parent = carrier.get("traceparent")
    if type(parent) is not str:
        return None
    match = _TRACEPARENT_00.fullmatch(parent)
    if match is not None:
        trace_hex, span_hex, flags = match.groups()
    else:
        match = _TRACEPARENT.fullmatch(parent.strip())
        if match is None:
            return None
        version, trace_hex, span_hex, flags, rest = match.groups()
        if version == "ff" or (version == "00" and rest):
            return None
    trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
    if not trace_id or not span_id:
        return None
    state = carrier.get("tracestate")
    trace_state = None
    if type(state) is str and state:
        try:
            trace_state = api.TraceState.from_header([state])
        except Exception:  # noqa: BLE001 - a bad tracestate loses the state, not the trace
            trace_state = None
    return api.SpanContext(trace_id, span_id, True, api.flags[int(flags, 16)], trace_state)


class CallSpan:
    """The consumer span of one call, shared by its contexts (``ctx._span``);
    it stands in for the worker's hold and ends the span once the call's
    tasks are all settled."""

    __slots__ = ("_batch", "_failed", "_hold", "span")

    def __init__(self, span: Any, hold: Any, batch: bool) -> None:
        self.span = span
        self._hold = hold
        self._batch = batch
        self._failed = False

    # -- the worker's hold, passed through ----------------------------------
    def handler_done(self) -> None:
        hold = self._hold
        if hold is not None:
            hold.handler_done()

    def settled(self) -> None:
        hold = self._hold
        if hold is None:
            return  # settled already (a hold settles once)
        # Let go of the hold: it refers to the call's contexts, which refer to
        # this object (ctx._span). Kept, that cycle would leave each call's
        # objects (contexts, task rows, its asyncio task and coroutine) to the
        # garbage collector instead of reference counting: in a traced drain
        # it cost more than the spans themselves.
        self._hold = None
        try:
            self.span.end()
        finally:
            hold.settled()

    # -- what the call came to ----------------------------------------------
    def outcome(self, ctx: TaskContext, outcome: str, message: str | None = None) -> None:
        """Task ``ctx`` settled with ``outcome`` (succeeded, retried, failed,
        canceled, lease_lost)."""
        span = self.span
        if self._batch:
            span.add_event(
                "cairnq.task.settled",
                {"messaging.message.id": ctx.task_id, "cairnq.task.outcome": outcome},
            )
        else:
            span.set_attribute("cairnq.task.outcome", outcome)
        if (outcome == "failed" or outcome == "retried") and not self._failed:
            self._failed = True
            api = _otel()
            span.set_status(api.Status(api.ERROR, message or f"task {outcome}"))

    def error(self, exc: BaseException) -> None:
        """The handler raised ``exc``."""
        self.span.record_exception(exc)


def settled_outcome(span: CallSpan, ctx: TaskContext, status: str, envelope: Any = None) -> None:
    """Record a settlement's final store ``status`` on the call's span."""
    message = envelope.get("message") if isinstance(envelope, dict) else None
    span.outcome(ctx, _OUTCOMES.get(status, status), message if isinstance(message, str) else None)


# (task name, queue) -> a span's name and the attributes every span of that
# task name and queue shares, built once per operation ("send", "process").
# The SDK copies a span's attributes: the producer passes these as they are
# (read-only), the consumer a dict of them with the task's own values added.
_Base = tuple[str, Mapping[str, Any]]
_producer_bases: dict[tuple[str, str], _Base] = {}
_consumer_bases: dict[tuple[str, str], _Base] = {}
_MAX_BASES = 4096  # task names and queues come from code; a bound all the same


def _bases(cache: dict[tuple[str, str], _Base], name: str, queue: str, operation: str) -> _Base:
    base = cache.get((name, queue))
    if base is None:
        if len(cache) >= _MAX_BASES:
            cache.clear()
        attributes = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": operation,
            "messaging.operation.name": operation,
            "messaging.destination.name": queue,
            "cairnq.task.name": name,
        }
        base = cache[(name, queue)] = (f"{name} {operation}", MappingProxyType(attributes))
    return base


async def run_traced(
    run: Any, settings: Any, reg: Any, contexts: list[TaskContext], hold: Any
) -> None:
    """``run(settings, reg, contexts, hold)`` (the worker's ``run_call``) in a
    CONSUMER span that is the current span while the handler runs."""
    api = _otel()
    batch = reg.style == "batch"
    first = contexts[0]
    span_name, base = _bases(_consumer_bases, reg.name, first.queue, "process")
    if batch:
        attributes = {**base, "messaging.batch.message_count": len(contexts)}
        links = []
        for ctx in contexts:
            producer = producer_context(api, ctx.metadata)
            if producer is not None:
                links.append(api.Link(producer, {"messaging.message.id": ctx.task_id}))
        parent = api.empty
    else:
        attributes = {
            **base,
            "messaging.message.id": first.task_id,
            "cairnq.task.attempt": first.attempt,
        }
        producer = producer_context(api, first.metadata)
        if producer is None:
            links, parent = [], api.empty
        else:
            links = [api.Link(producer)]
            parent = api.trace.set_span_in_context(api.trace.NonRecordingSpan(producer))
    try:
        span = STATE.tracer.start_span(
            span_name, context=parent, kind=api.CONSUMER, attributes=attributes, links=links
        )
    except Exception:  # a provider that breaks its promise not to raise: run the call untraced
        log.exception("cairnq tracing: starting the span for %r failed", reg.name)
        span = api.trace.INVALID_SPAN
    call_span = CallSpan(span, hold, batch)
    for ctx in contexts:
        ctx._span = call_span
    token = api.context.attach(api.trace.set_span_in_context(span))
    try:
        await run(settings, reg, contexts, call_span)
    finally:
        api.context.detach(token)
