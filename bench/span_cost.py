"""What one traced task costs in OpenTelemetry SDK calls, without a database.

    python bench/span_cost.py [--n 20000]

Per-operation times (µs, median of 5 runs) with the SDK's TracerProvider,
SimpleSpanProcessor and InMemorySpanExporter, the set-up of the
``{"tracing": "memory"}`` drain:

* ``bare span``: start and end one span, nothing else (the floor);
* ``span + attributes``: the consumer span's attributes, and its outcome;
* ``cairnq consumer span``: what the worker does per traced task: read the
  stored traceparent, start the span (attributes, parent and link), make it
  current, record the outcome, end it (cairnq.observability.tracing).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=20_000)
    n = p.parse_args().n

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind

    from cairnq.observability import tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.instrument(provider)
    tracer = provider.get_tracer("bench")
    attributes = {
        "messaging.system": "cairnq",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "default",
        "messaging.message.id": "task_01M8TN8T689KRDA6P0RQTV3WBB",
        "cairnq.task.name": "noop",
        "cairnq.task.attempt": 1,
    }

    def bare() -> None:
        tracer.start_span("noop process", kind=SpanKind.CONSUMER).end()

    def with_attributes() -> None:
        span = tracer.start_span("noop process", kind=SpanKind.CONSUMER, attributes=attributes)
        span.set_attribute("cairnq.task.outcome", "succeeded")
        span.end()

    task = _Task()
    reg = _Reg()

    async def settle(settings: Any, reg: Any, contexts: list[Any], hold: Any) -> None:
        tracing.settled_outcome(hold, contexts[0], "succeeded")
        hold.settled()


    def consumer() -> None:
        coro = tracing.run_traced(settle, None, reg, [task], _Hold())
        try:
            coro.send(None)  # runs to the end: nothing in it suspends
        except StopIteration:
            pass

    for label, fn in (("bare span", bare), ("span + attributes", with_attributes), ("cairnq consumer span", consumer)):
        runs = []
        for _ in range(5):
            exporter.clear()
            started = time.perf_counter()
            for _ in range(n):
                fn()
            runs.append((time.perf_counter() - started) / n * 1e6)
        print(f"{label:<22} {statistics.median(runs):7.1f} µs  [{min(runs):.1f}-{max(runs):.1f}]", flush=True)


class _Task:
    """What run_traced reads of a context."""

    task_id = "task_01M8TN8T689KRDA6P0RQTV3WBB"
    queue = "default"
    attempt = 1
    metadata = {"cairnq.trace": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
    _span: Any = None


class _Reg:
    name = "noop"
    style = "ctx_payload"


class _Hold:
    def handler_done(self) -> None:
        pass

    def settled(self) -> None:
        pass


if __name__ == "__main__":
    main()
