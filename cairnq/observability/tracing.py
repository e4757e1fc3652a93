"""OpenTelemetry tracing: a PRODUCER span per submit, a CONSUMER span per call.

Optional (``pip install "cairnq[otel]"``, the ``opentelemetry-api`` package)
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
from typing import Any, Awaitable, Callable, Optional, TypeVar

# A context is typed Any here: cairnq.context imports this module, never the
# other way round (the contexts are only handed in).
TaskContext = Any

__all__ = ["METADATA_KEY", "STATE", "instrument", "uninstrument", "is_instrumented"]

log = logging.getLogger("cairnq.tracing")

METADATA_KEY = "cairnq.trace"
SYSTEM = "cairnq"
T = TypeVar("T")

# A settlement's final status -> the outcome recorded on the span.
_OUTCOMES = {"succeeded": "succeeded", "queued": "retried", "failed": "failed", "canceled": "canceled"}


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
            'cairnq tracing needs the OpenTelemetry API: pip install "cairnq[otel]"'
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
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.context = context
        self.trace = trace
        self.propagator = TraceContextTextMapPropagator()
        self.SpanContext = trace.SpanContext
        self.TraceFlags = trace.TraceFlags
        self.TraceState = trace.TraceState
        self.empty = context.Context()
        self.Link = trace.Link
        self.Status = trace.Status
        self.ERROR = trace.StatusCode.ERROR
        self.CONSUMER = trace.SpanKind.CONSUMER
        self.PRODUCER = trace.SpanKind.PRODUCER


_api: Optional[_Otel] = None


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
    attributes = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": queue,
        "cairnq.task.name": name,
    }
    with STATE.tracer.start_as_current_span(
        f"{name} send", kind=api.PRODUCER, attributes=attributes
    ) as span:
        task = await submit(name=name, queue=queue, metadata=_with_trace(api, metadata), **kwargs)
        task_id = getattr(task, "id", None)
        if isinstance(task_id, str):
            span.set_attribute("messaging.message.id", task_id)
        return task


def _with_trace(api: _Otel, metadata: Any) -> Any:
    """A copy of ``metadata`` with the current trace context under
    METADATA_KEY; ``metadata`` itself when it is not a dict (validation
    explains that) or already has the key (the user's entry wins)."""
    if metadata is not None and (not isinstance(metadata, dict) or METADATA_KEY in metadata):
        return metadata
    carrier: dict[str, str] = {}
    api.propagator.inject(carrier)
    if not carrier:  # no valid span context (e.g. the API with no SDK behind it)
        return metadata
    out = dict(metadata) if metadata else {}
    out[METADATA_KEY] = carrier
    return out


# -- consumer ------------------------------------------------------------------


# W3C Trace Context, level 1: version-trace_id-parent_id-flags, lowercase hex;
# a later version may append fields, version 00 may not.
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
        except Exception:  # a bad tracestate loses the state, not the trace
            trace_state = None
    return api.SpanContext(
        trace_id, span_id, is_remote=True, trace_flags=api.TraceFlags(int(flags, 16)), trace_state=trace_state
    )


class CallSpan:
    """The consumer span of one call, shared by its contexts (``ctx._span``);
    it stands in for the worker's hold and ends the span once the call's
    tasks are all settled."""

    __slots__ = ("span", "_hold", "_batch", "_failed")

    def __init__(self, span: Any, hold: Any, batch: bool) -> None:
        self.span = span
        self._hold = hold
        self._batch = batch
        self._failed = False

    # -- the worker's hold, passed through ----------------------------------
    def handler_done(self) -> None:
        self._hold.handler_done()

    def settled(self) -> None:
        try:
            self.span.end()
        finally:
            self._hold.settled()

    # -- what the call came to ----------------------------------------------
    def outcome(self, ctx: TaskContext, outcome: str, message: Optional[str] = None) -> None:
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
        if outcome == "failed" or outcome == "retried":
            if not self._failed:
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


async def run_traced(run: Any, settings: Any, reg: Any, contexts: list[TaskContext], hold: Any) -> None:
    """``run(settings, reg, contexts, hold)`` (the worker's ``run_call``) in a
    CONSUMER span that is the current span while the handler runs."""
    api = _otel()
    batch = reg.style == "batch"
    first = contexts[0]
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": first.queue,
        "cairnq.task.name": reg.name,
    }
    if batch:
        attributes["messaging.batch.message_count"] = len(contexts)
        links = []
        for ctx in contexts:
            producer = producer_context(api, ctx.metadata)
            if producer is not None:
                links.append(api.Link(producer, {"messaging.message.id": ctx.task_id}))
        parent = api.empty
    else:
        attributes["messaging.message.id"] = first.task_id
        attributes["cairnq.task.attempt"] = first.attempt
        producer = producer_context(api, first.metadata)
        if producer is None:
            links, parent = [], api.empty
        else:
            links = [api.Link(producer)]
            parent = api.trace.set_span_in_context(api.trace.NonRecordingSpan(producer))
    try:
        span = STATE.tracer.start_span(
            f"{reg.name} process", context=parent, kind=api.CONSUMER, attributes=attributes, links=links
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
