"""OpenTelemetry tracing (cairnq.observability.tracing) with the real SDK.

The cross-process test runs a producer and a worker as two real processes,
each with its own ``TracerProvider`` and ``InMemorySpanExporter``, each
writing its finished spans to a JSON file; the test joins them by trace id.
In-process tests pass a provider to ``instrument()`` (no global provider is
set) and always ``uninstrument()``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Iterator

import pytest

from processes import Procs

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

from cairnq.observability import tracing  # noqa: E402

# Shared by both scripts: a provider of their own, and the spans as JSON.
SPANS_PRELUDE = """
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import cairnq
from cairnq.observability import tracing

EXPORTER = InMemorySpanExporter()
PROVIDER = TracerProvider()
PROVIDER.add_span_processor(SimpleSpanProcessor(EXPORTER))
tracing.instrument(PROVIDER)

def client():
    if ARGS["dialect"] == "sqlite":
        return cairnq.CairnQ.sqlite(ARGS["target"])
    return cairnq.CairnQ.postgres(ARGS["target"])

def dump(path):
    out = []
    for s in EXPORTER.get_finished_spans():
        out.append({
            "name": s.name, "kind": s.kind.name,
            "trace_id": format(s.context.trace_id, "032x"),
            "span_id": format(s.context.span_id, "016x"),
            "parent": format(s.parent.span_id, "016x") if s.parent else None,
            "parent_trace": format(s.parent.trace_id, "032x") if s.parent else None,
            "attributes": dict(s.attributes),
            "status": s.status.status_code.name,
            "links": [{"trace_id": format(l.context.trace_id, "032x"),
                       "span_id": format(l.context.span_id, "016x"),
                       "attributes": dict(l.attributes or {})} for l in s.links],
            "events": [{"name": e.name, "attributes": dict(e.attributes or {})} for e in s.events],
        })
    with open(path, "w") as f:
        json.dump(out, f)
"""

PRODUCER = """
async def main():
    tracer = PROVIDER.get_tracer("test-app")
    async with client() as q:
        with tracer.start_as_current_span("request"):
            ids = {
                "ok": (await q.submit("ok", {"n": 1}, metadata={"tenant": "a"})).id,
                "boom": (await q.submit("boom", None, max_attempts=1)).id,
                "pair1": (await q.submit("pair", 1)).id,
                "pair2": (await q.submit("pair", 2)).id,
            }
    with open("ids.json", "w") as f:
        json.dump(ids, f)
    dump("producer_spans.json")

asyncio.run(main())
"""

WORKER = """
from opentelemetry import trace

async def main():
    async with client() as q:
        w = cairnq.Worker(q.store, ["default"], poll_interval_ms=50)
        inner = PROVIDER.get_tracer("test-handler")

        @w.task("ok")
        async def ok(ctx, payload):
            assert trace.get_current_span() is ctx.span
            with inner.start_as_current_span("handler work"):
                pass
            return payload

        @w.task("boom")
        async def boom(ctx, payload):
            raise ValueError("boom went the handler")

        @w.task("pair", batch=2)
        async def pair(contexts):
            return None

        run = asyncio.ensure_future(w.run())
        while True:
            counts = (await q.stats()).get("default", {})
            if counts.get("succeeded", 0) + counts.get("failed", 0) >= ARGS["total"]:
                break
            await asyncio.sleep(0.05)
        w.stop()
        await run
    dump("worker_spans.json")

asyncio.run(main())
"""


def _by_name(spans: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in spans}


def _run(procs: Procs, label: str, script: str, args: dict[str, Any]) -> None:
    proc = procs.start(label, SPANS_PRELUDE + script, args)
    code = proc.wait(timeout=90)
    assert code == 0, (procs.tmp_path / f"{label}.out").read_text()


def test_producer_and_consumer_are_one_trace_across_two_processes(backend, tmp_path: Path) -> None:
    procs = Procs(tmp_path)
    args = {"dialect": backend.dialect, "target": backend.target, "total": 4}
    try:
        _run(procs, "producer", PRODUCER, args)
        _run(procs, "worker", WORKER, args)
    finally:
        procs.cleanup()
    ids = json.loads((tmp_path / "ids.json").read_text())
    produced = json.loads((tmp_path / "producer_spans.json").read_text())
    consumed = json.loads((tmp_path / "worker_spans.json").read_text())
    request = _by_name(produced)["request"]
    sends = {s["attributes"]["messaging.message.id"]: s for s in produced if s["kind"] == "PRODUCER"}
    assert set(sends) == set(ids.values())
    for task_id, send in sends.items():
        assert send["trace_id"] == request["trace_id"] and send["parent"] == request["span_id"]
        assert send["name"] == f"{send['attributes']['cairnq.task.name']} send"
        assert send["attributes"]["messaging.system"] == "cairnq"
        assert send["attributes"]["messaging.operation.type"] == "send"
        assert send["attributes"]["messaging.destination.name"] == "default"

    processes = _by_name(consumed)
    # A single task: the producer span is both the parent and the link.
    ok, send_ok = processes["ok process"], sends[ids["ok"]]
    assert ok["kind"] == "CONSUMER"
    assert ok["trace_id"] == request["trace_id"]
    assert ok["parent"] == send_ok["span_id"]
    assert [(l["trace_id"], l["span_id"]) for l in ok["links"]] == [(send_ok["trace_id"], send_ok["span_id"])]
    assert ok["attributes"] == {
        "messaging.system": "cairnq",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "default",
        "messaging.message.id": ids["ok"],
        "cairnq.task.name": "ok",
        "cairnq.task.attempt": 1,
        "cairnq.task.outcome": "succeeded",
    }
    assert ok["status"] == "UNSET"
    # The handler's own span is a child of the consumer span.
    work = processes["handler work"]
    assert work["parent"] == ok["span_id"] and work["trace_id"] == request["trace_id"]

    boom = processes["boom process"]
    assert boom["parent"] == sends[ids["boom"]]["span_id"]
    assert boom["attributes"]["cairnq.task.outcome"] == "failed"
    assert boom["status"] == "ERROR"
    [event] = boom["events"]
    assert event["name"] == "exception"
    assert event["attributes"]["exception.type"] == "ValueError"
    assert event["attributes"]["exception.message"] == "boom went the handler"

    # A batch: one span, a link to each task's producer span.
    pair = processes["pair process"]
    assert pair["kind"] == "CONSUMER" and pair["parent"] is None
    assert pair["attributes"]["messaging.batch.message_count"] == 2
    linked = {l["attributes"]["messaging.message.id"]: l["span_id"] for l in pair["links"]}
    assert linked == {ids["pair1"]: sends[ids["pair1"]]["span_id"], ids["pair2"]: sends[ids["pair2"]]["span_id"]}
    assert {e["attributes"]["messaging.message.id"]: e["attributes"]["cairnq.task.outcome"] for e in pair["events"]} == {
        ids["pair1"]: "succeeded",
        ids["pair2"]: "succeeded",
    }


# -- in process ------------------------------------------------------------------


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """Tracing on, into a provider of the test's own (the global one untouched)."""
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    tracing.instrument(provider)
    try:
        yield exported
    finally:
        tracing.uninstrument()


async def _drain(backend: Any, client: Any, names: tuple[str, ...], total: int) -> None:
    w = backend.worker(poll_interval_ms=20, store=client.store)
    for name in names:

        @w.task(name)
        async def handler(ctx: Any, payload: Any) -> Any:
            return payload

    run = asyncio.ensure_future(w.run())
    while True:
        counts = (await client.stats()).get("default", {})
        if counts.get("succeeded", 0) + counts.get("failed", 0) >= total:
            break
        await asyncio.sleep(0.02)
    w.stop()
    await run


async def test_a_malformed_or_foreign_trace_entry_starts_a_new_trace(backend, exporter) -> None:
    q = backend.client()
    await q.connect()
    bad = [
        {"cairnq.trace": {"traceparent": "00-not-a-trace-context-01"}},
        {"cairnq.trace": {"traceparent": "00-" + "0" * 32 + "-" + "0" * 16 + "-01"}},  # all-zero ids
        {"cairnq.trace": {"traceparent": 17}},
        {"cairnq.trace": "00-abc"},
    ]
    ids = [(await q.submit("t", i, metadata=m)).id for i, m in enumerate(bad)]
    # The user's own entry is left as it is (never overwritten by ours).
    assert [(await q.get(i)).metadata for i in ids] == bad  # type: ignore[union-attr]
    exporter.clear()
    await _drain(backend, q, ("t",), len(bad))
    spans = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.CONSUMER]
    assert sorted(s.attributes["messaging.message.id"] for s in spans) == sorted(ids)
    for span in spans:
        assert span.parent is None and list(span.links) == []
        assert span.attributes["cairnq.task.outcome"] == "succeeded"
    assert len({s.context.trace_id for s in spans}) == len(spans)


async def test_submit_keeps_user_metadata_and_does_not_mutate_it(backend, exporter) -> None:
    q = backend.client()
    await q.connect()
    mine = {"tenant": "a"}
    task = await q.submit("t", None, metadata=mine)
    assert mine == {"tenant": "a"}
    assert task.metadata["tenant"] == "a"
    carrier = task.metadata["cairnq.trace"]
    assert set(carrier) == {"traceparent"}
    [send] = exporter.get_finished_spans()
    assert carrier["traceparent"] == f"00-{send.context.trace_id:032x}-{send.context.span_id:016x}-{send.context.trace_flags:02x}"
    assert send.kind is SpanKind.PRODUCER and send.parent is None  # no active span: a new trace


async def test_a_failed_submit_ends_its_span_with_the_error(backend, exporter) -> None:
    from opentelemetry import trace

    from cairnq.errors import AlreadyExists

    q = backend.client()
    await q.connect()
    await q.submit("t", None, key="once")
    exporter.clear()
    with pytest.raises(AlreadyExists):
        await q.submit("t", None, key="once", conflict="reject")
    assert not trace.get_current_span().get_span_context().is_valid  # no span left current
    [send] = exporter.get_finished_spans()
    assert send.kind is SpanKind.PRODUCER and send.status.status_code is StatusCode.ERROR
    assert (send.status.description or "").startswith("AlreadyExists")
    assert [e.name for e in send.events] == ["exception"]
    assert "messaging.message.id" not in send.attributes


async def test_span_names_and_attributes_follow_each_task_name_and_queue(backend, exporter) -> None:
    q = backend.client()
    await q.connect()
    shapes = [("a", "q1"), ("b", "q1"), ("a", "q2"), ("a", "q1")]
    ids = [(await q.submit(name, None, queue=queue)).id for name, queue in shapes]
    sends = exporter.get_finished_spans()
    assert [(s.name, s.attributes["cairnq.task.name"], s.attributes["messaging.destination.name"])
            for s in sends] == [(f"{n} send", n, queue) for n, queue in shapes]  # fmt: skip
    assert [s.attributes["messaging.message.id"] for s in sends] == ids
    w = backend.worker(("q1", "q2"), poll_interval_ms=20, store=q.store)
    for name in ("a", "b"):

        @w.task(name)
        async def handler(ctx: Any, payload: Any) -> Any:
            return None

    run = asyncio.ensure_future(w.run())
    try:
        for task_id in ids:
            await q.wait(task_id, timeout_ms=20_000)
    finally:
        w.stop()
        await run
    seen = {
        s.attributes["messaging.message.id"]: (
            s.name, s.attributes["cairnq.task.name"], s.attributes["messaging.destination.name"]
        )
        for s in exporter.get_finished_spans()
        if s.kind is SpanKind.CONSUMER
    }
    assert seen == {i: (f"{n} process", n, queue) for i, (n, queue) in zip(ids, shapes)}


async def test_a_settled_traced_call_is_freed_without_the_garbage_collector(
    backend, exporter
) -> None:
    # The span a context refers to (ctx._span) must not keep a cycle through
    # the worker's hold back to the contexts: each call would then wait for
    # the garbage collector (which, in a drain, costs more than the spans).
    import gc
    import weakref

    q = backend.client()
    await q.connect()
    w = backend.worker(poll_interval_ms=20, store=q.store)
    seen: list[Any] = []

    @w.task("t")
    async def t(ctx: Any, payload: Any) -> Any:
        seen.append(weakref.ref(ctx))
        return payload

    run = asyncio.ensure_future(w.run())
    gc.collect()
    gc.disable()
    try:
        for i in range(3):
            await q.call("t", i, timeout_ms=20_000)
        w.stop()
        await run
        assert len(seen) == 3
        assert [ref() for ref in seen] == [None, None, None]
    finally:
        gc.enable()
        if not run.done():
            w.stop()
            await run
    assert len([s for s in exporter.get_finished_spans() if s.kind is SpanKind.CONSUMER]) == 3


async def test_call_and_ctx_submit_carry_the_trace(backend, exporter) -> None:
    q = backend.client()
    await q.connect()
    w = backend.worker(poll_interval_ms=20, store=q.store)

    @w.task("parent")
    async def parent(ctx: Any, payload: Any) -> Any:
        child = await ctx.submit("child", payload)
        return child.id

    @w.task("child")
    async def child(ctx: Any, payload: Any) -> Any:
        return payload

    run = asyncio.ensure_future(w.run())
    try:
        child_id = await q.call("parent", 5, timeout_ms=20_000)
        await q.wait(child_id, timeout_ms=20_000)
    finally:
        w.stop()
        await run
    spans = {s.name: s for s in exporter.get_finished_spans()}
    chain = ["parent send", "parent process", "child send", "child process"]
    assert set(chain) <= set(spans)
    for up, down in zip(chain, chain[1:]):
        assert spans[down].parent.span_id == spans[up].context.span_id  # type: ignore[union-attr]
    assert len({spans[n].context.trace_id for n in chain}) == 1


async def test_failing_handler_span_has_error_status(backend, exporter) -> None:
    q = backend.client()
    await q.connect()
    await q.submit("f", None, max_attempts=2)
    w = backend.worker(poll_interval_ms=20, store=q.store, retry_backoff_ms=1)

    @w.task("f")
    async def f(ctx: Any, payload: Any) -> Any:
        raise RuntimeError(f"attempt {ctx.attempt}")

    run = asyncio.ensure_future(w.run())
    while (await q.stats())["default"]["failed"] < 1:
        await asyncio.sleep(0.02)
    w.stop()
    await run
    spans = sorted(
        (s for s in exporter.get_finished_spans() if s.kind is SpanKind.CONSUMER),
        key=lambda s: s.attributes["cairnq.task.attempt"],
    )
    assert [(s.attributes["cairnq.task.attempt"], s.attributes["cairnq.task.outcome"]) for s in spans] == [
        (1, "retried"),
        (2, "failed"),
    ]
    for span in spans:
        assert span.status.status_code is StatusCode.ERROR
        assert [e.name for e in span.events] == ["exception"]


async def test_tracing_off_writes_no_key_and_makes_no_span(backend) -> None:
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    tracing.instrument(provider)
    tracing.uninstrument()  # on, then off again: as if never on
    q = backend.client()
    await q.connect()
    seen: list[Any] = []
    w = backend.worker(poll_interval_ms=20, store=q.store)

    @w.task("t")
    async def t(ctx: Any, payload: Any) -> Any:
        seen.append(ctx.span)
        return (await ctx.submit("u", None, metadata={"k": 1})).id

    @w.task("u")
    async def u(ctx: Any, payload: Any) -> Any:
        return None

    run = asyncio.ensure_future(w.run())
    try:
        task = await q.submit("t", None)
        done = await q.wait(task.id, timeout_ms=20_000)
        child = await q.wait(done.result, timeout_ms=20_000)
    finally:
        w.stop()
        await run
    assert task.metadata == {} and child.metadata == {"k": 1}
    assert seen == [None]
    assert exported.get_finished_spans() == ()


@pytest.mark.interop
async def test_a_task_from_the_reference_sdk_starts_a_new_trace(backend, exporter) -> None:
    import refsdk

    script = """
    async def main():
        if ARGS["dialect"] == "sqlite":
            q = cairnq.CairnQ.sqlite(ARGS["target"])
        else:
            q = cairnq.CairnQ.postgres(ARGS["target"])
        await q.connect()
        task = await q.submit("from_ref", {"n": 1}, metadata={"origin": "ref"})
        await q.close()
        return task.id
    emit(asyncio.run(main()))
    """
    q = backend.client()
    await q.connect()  # our migrations first; the reference opens the database as it is
    task_id = refsdk.run(script, {"dialect": backend.dialect, "target": backend.target})
    assert (await q.get(task_id)).metadata == {"origin": "ref"}  # type: ignore[union-attr]
    await _drain(backend, q, ("from_ref",), 1)
    [span] = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.CONSUMER]
    assert span.attributes["messaging.message.id"] == task_id
    assert span.attributes["cairnq.task.outcome"] == "succeeded"
    assert span.parent is None and list(span.links) == []


async def test_tracestate_travels_with_the_traceparent(backend, exporter) -> None:
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

    q = backend.client()
    await q.connect()
    upstream = SpanContext(
        0x0AF7651916CD43DD8448EB211C80319C,
        0xB7AD6B7169203331,
        is_remote=True,
        trace_flags=TraceFlags(1),
        trace_state=TraceState([("vendor", "v1")]),
    )
    with trace.use_span(NonRecordingSpan(upstream)):
        task = await q.submit("t", None)
    carrier = task.metadata["cairnq.trace"]
    assert carrier["tracestate"] == "vendor=v1"
    assert carrier["traceparent"].startswith("00-0af7651916cd43dd8448eb211c80319c-")
    exporter.clear()
    await _drain(backend, q, ("t",), 1)
    [span] = exporter.get_finished_spans()
    assert span.context.trace_id == upstream.trace_id
    assert span.parent is not None and span.parent.trace_state.get("vendor") == "v1"


@pytest.mark.parametrize(
    "traceparent, valid",
    [
        ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", True),
        ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", True),  # not sampled
        (" 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01 ", True),  # padded
        ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0x", False),
        ("00-0af7651916cd43dd8448eb211c80319c_b7ad6b7169203331-01", False),
        ("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-later", True),  # a later version may add fields
        ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-later", False),
        ("ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", False),
        ("00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01", False),  # uppercase
        ("00-" + "0" * 32 + "-b7ad6b7169203331-01", False),
        ("00-0af7651916cd43dd8448eb211c80319c-" + "0" * 16 + "-01", False),
        ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01", False),
        ("", False),
    ],
)
def test_traceparent_rules(traceparent: str, valid: bool) -> None:
    api = tracing._otel()
    found = tracing.producer_context(api, {"cairnq.trace": {"traceparent": traceparent}})
    assert (found is not None) == valid
    if valid:
        assert found.is_valid and found.is_remote and found.span_id == 0xB7AD6B7169203331
        assert found.trace_flags == int(traceparent.strip()[53:55], 16)


async def test_canceled_and_lease_lost_outcomes(backend, exporter) -> None:
    from cairnq.errors import LostLease

    q = backend.client()
    await q.connect()
    w = backend.worker(poll_interval_ms=20, store=q.store)
    started = asyncio.Event()

    @w.task("waits")
    async def waits(ctx: Any, payload: Any) -> Any:
        started.set()
        while not await ctx.canceled():
            await asyncio.sleep(0.02)
        return "done anyway"  # the cancel request wins over this result

    @w.task("gone")
    async def gone(ctx: Any, payload: Any) -> Any:
        raise LostLease(ctx.task_id)

    run = asyncio.ensure_future(w.run())
    try:
        waiting = await q.submit("waits", None)
        await asyncio.wait_for(started.wait(), 20)
        await q.cancel(waiting.id)
        assert (await q.wait(waiting.id, timeout_ms=20_000)).status == "canceled"
        await q.submit("gone", None)
        while len([s for s in exporter.get_finished_spans() if s.kind is SpanKind.CONSUMER]) < 2:
            await asyncio.sleep(0.02)
    finally:
        w.stop()
        await run
    outcomes = {
        s.attributes["cairnq.task.name"]: (s.attributes["cairnq.task.outcome"], s.status.status_code)
        for s in exporter.get_finished_spans()
        if s.kind is SpanKind.CONSUMER
    }
    assert outcomes == {"waits": ("canceled", StatusCode.UNSET), "gone": ("lease_lost", StatusCode.UNSET)}


async def test_a_plain_def_handler_runs_in_the_consumer_span(backend, exporter) -> None:
    from opentelemetry import trace

    q = backend.client()
    await q.connect()
    w = backend.worker(poll_interval_ms=20, store=q.store)
    seen: list[bool] = []

    @w.task("sync")
    def sync(ctx: Any, payload: Any) -> Any:  # runs in a thread
        seen.append(trace.get_current_span() is ctx.span and ctx.span.is_recording())
        return payload

    run = asyncio.ensure_future(w.run())
    try:
        assert await q.call("sync", 3, timeout_ms=20_000) == 3
    finally:
        w.stop()
        await run
    assert seen == [True]


async def test_a_provider_that_raises_leaves_the_task_running_untraced(backend, caplog) -> None:
    from opentelemetry.trace import NoOpTracerProvider

    class Broken(NoOpTracerProvider):
        def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
            tracer = super().get_tracer(*args, **kwargs)

            class Raising(type(tracer)):  # type: ignore[misc]
                def start_span(self, *a: Any, **k: Any) -> Any:
                    raise RuntimeError("broken provider")

            return Raising()

    q = backend.client()
    await q.connect()
    task = await q.submit("t", 1)  # submitted before tracing: only the worker side is traced
    tracing.instrument(Broken())
    try:
        w = backend.worker(poll_interval_ms=20, store=q.store)

        @w.task("t")
        async def t(ctx: Any, payload: Any) -> Any:
            return payload + 1

        run = asyncio.ensure_future(w.run())
        try:
            assert (await q.wait(task.id, timeout_ms=20_000)).result == 2
        finally:
            w.stop()
            await run
    finally:
        tracing.uninstrument()
    assert "starting the span for 't' failed" in caplog.text


async def test_a_handler_past_max_run_ms_ends_its_span_with_an_error(backend, exporter) -> None:
    from opentelemetry import trace

    q = backend.client()
    await q.connect()
    w = backend.worker(poll_interval_ms=20, store=q.store, max_run_ms=100)
    current: list[bool] = []

    @w.task("slow")
    async def slow(ctx: Any, payload: Any) -> Any:
        current.append(trace.get_current_span() is ctx.span)  # through the timeout's own task
        await asyncio.sleep(5)

    task = await q.submit("slow", None, max_attempts=1)
    run = asyncio.ensure_future(w.run())
    try:
        assert (await q.wait(task.id, timeout_ms=20_000)).status == "failed"
    finally:
        w.stop()
        await run
    [span] = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.CONSUMER]
    assert current == [True]
    assert span.attributes["cairnq.task.outcome"] == "failed"
    assert span.status.status_code is StatusCode.ERROR and "max_run_ms" in (span.status.description or "")


async def test_a_failing_batch_records_each_task_and_the_error(backend, exporter) -> None:
    q = backend.client()
    await q.connect()
    ids = [(await q.submit("b", i, max_attempts=1)).id for i in range(3)]
    w = backend.worker(poll_interval_ms=20, store=q.store)

    @w.task("b", batch=3)
    async def b(contexts: Any) -> Any:
        raise KeyError("batch broke")

    run = asyncio.ensure_future(w.run())
    try:
        for task_id in ids:
            assert (await q.wait(task_id, timeout_ms=20_000)).status == "failed"
    finally:
        w.stop()
        await run
    spans = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.CONSUMER]
    assert sum(s.attributes["messaging.batch.message_count"] for s in spans) == 3
    settled = {}
    for span in spans:
        assert span.status.status_code is StatusCode.ERROR
        assert len(span.links) == span.attributes["messaging.batch.message_count"]
        assert [e.name for e in span.events][0] == "exception"
        for event in span.events[1:]:
            settled[event.attributes["messaging.message.id"]] = event.attributes["cairnq.task.outcome"]
    assert settled == {task_id: "failed" for task_id in ids}


def test_opentelemetry_is_not_imported_while_tracing_is_off(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = """
import asyncio, sys
import cairnq

async def main():
    async with cairnq.CairnQ.sqlite(sys.argv[1]) as q:
        w = cairnq.Worker(q.store, ["default"], poll_interval_ms=20)

        @w.task("t")
        async def t(ctx, payload):
            return (await ctx.submit("u", None)).id

        @w.task("u")
        async def u(ctx, payload):
            return None

        run = asyncio.ensure_future(w.run())
        child = await q.call("t", None, timeout_ms=20_000)
        await q.wait(child, timeout_ms=20_000)
        w.stop()
        await run

asyncio.run(main())
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
assert loaded == [], loaded
print("ok")
"""
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "q.db")], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
