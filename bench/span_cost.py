"""What one traced task costs in OpenTelemetry SDK calls, without a database.

    python bench/span_cost.py [--n 20000]

Per-operation times (µs, median of 5 runs) with the SDK's TracerProvider,
SimpleSpanProcessor and InMemorySpanExporter, the set-up of the
``{"tracing": "memory"}`` drain:

* ``bare span``: start and end one span, nothing else (the floor);
* ``+ attributes``: with the consumer span's attributes, and its outcome;
* ``+ parent``: and a remote parent (a SpanContext made from a stored
  traceparent; the sampler and the span take the parent's path);
* ``+ link``: and a link to that same context;
* ``+ made current``: and attached as the current span while it runs;
* ``cairnq consumer span``: what the worker does per traced task: read the
  stored traceparent, start the span (attributes, parent and link), make it
  current, record the outcome, end it (cairnq.observability.tracing), for a
  context and a hold made per call as the worker makes them (what the call
  leaves to the garbage collector counts too);
* ``cairnq producer span``: a traced submit around a submit that returns at
  once (span, traceparent into a copy of the metadata, task id attribute).

The lines run in turn, round after round (``--rounds``), so that a neighbour's
load on a shared machine spreads over all of them.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any, ClassVar

# The stored producer context of every task here.
_TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
_SPAN_ID = 0xB7AD6B7169203331


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--n", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=5)
    o = p.parse_args()

    from opentelemetry import context, trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags

    from cairnq.observability import tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.instrument(provider)
    tracer = provider.get_tracer("bench")
    attributes: dict[str, Any] = {
        "messaging.system": "cairnq",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "default",
        "messaging.message.id": "task_01M8TN8T689KRDA6P0RQTV3WBB",
        "cairnq.task.name": "noop",
        "cairnq.task.attempt": 1,
    }

    def remote() -> Any:
        return SpanContext(_TRACE_ID, _SPAN_ID, True, TraceFlags(1))

    def bare() -> None:
        tracer.start_span("noop process", kind=SpanKind.CONSUMER).end()

    def with_attributes() -> None:
        span = tracer.start_span(
            "noop process", kind=SpanKind.CONSUMER, attributes=dict(attributes)
        )
        span.set_attribute("cairnq.task.outcome", "succeeded")
        span.end()

    def with_parent(link: bool = False, current: bool = False) -> None:
        producer = remote()
        span = tracer.start_span(
            "noop process",
            context=trace.set_span_in_context(NonRecordingSpan(producer)),
            kind=SpanKind.CONSUMER,
            attributes=dict(attributes),
            links=[Link(producer)] if link else (),
        )
        token = context.attach(trace.set_span_in_context(span)) if current else None
        span.set_attribute("cairnq.task.outcome", "succeeded")
        span.end()
        if token is not None:
            context.detach(token)

    task = _Task()
    reg = _Reg()

    async def settle(settings: Any, reg: Any, contexts: list[Any], hold: Any) -> None:
        tracing.settled_outcome(hold, contexts[0], "succeeded")
        hold.settled()

    def consumer() -> None:
        contexts = [_Task()]  # a call's own context, and a hold that refers to it
        _run_to_end(tracing.run_traced(settle, None, reg, contexts, _Hold(contexts)))

    async def submit(**kwargs: Any) -> Any:
        return task

    def producer() -> None:
        _run_to_end(tracing.traced_submit(submit, "noop", "default", {"tenant": "a"}))

    lines: list[tuple[str, Callable[[], None]]] = [
        ("bare span", bare),
        ("+ attributes", with_attributes),
        ("+ parent", with_parent),
        ("+ link", lambda: with_parent(link=True)),
        ("+ made current", lambda: with_parent(link=True, current=True)),
        ("cairnq consumer span", consumer),
        ("cairnq producer span", producer),
    ]
    runs: dict[str, list[float]] = {label: [] for label, _ in lines}
    for _ in range(o.rounds):
        for label, fn in lines:
            exporter.clear()
            started = time.perf_counter()
            for _ in range(o.n):
                fn()
            runs[label].append((time.perf_counter() - started) / o.n * 1e6)
    for label, _ in lines:
        r = runs[label]
        print(f"{label:<22} {statistics.median(r):7.1f} µs  [{min(r):.1f}-{max(r):.1f}]")


def _run_to_end(coro: Any) -> None:
    try:
        coro.send(None)  # nothing in it suspends: it runs to the end at once
    except StopIteration:
        pass


class _Task:
    """What run_traced reads of a context (and what the submit returns)."""

    id = "task_01M8TN8T689KRDA6P0RQTV3WBB"
    task_id = "task_01M8TN8T689KRDA6P0RQTV3WBB"
    queue = "default"
    attempt = 1
    metadata: ClassVar[dict[str, Any]] = {
        "cairnq.trace": {"traceparent": f"00-{_TRACE_ID:032x}-{_SPAN_ID:016x}-01"}
    }
    _span: Any = None


class _Reg:
    name = "noop"
    style = "ctx_payload"


class _Hold:
    """The worker's hold on a call: like the worker's, it refers to the
    call's contexts."""

    def __init__(self, contexts: list[Any]) -> None:
        self.contexts = contexts

    def handler_done(self) -> None:
        pass

    def settled(self) -> None:
        pass


if __name__ == "__main__":
    main()
