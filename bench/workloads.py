"""Workloads for the side-by-side comparison, public API only.

Run by ``bench/compare.py`` under two interpreters (ours, and the reference
SDK's virtualenv), so whichever ``cairnq`` the interpreter has is measured:

    python -I bench/workloads.py <workload> <sqlite|postgres> <path-or-dsn> [json-options]

Prints one JSON object: {"value": ..., "unit": ..., ...}. Every workload gets
a fresh database from the caller. The floors (``limit_*``, ``floor_*``: no
SDK) live in ``bench/floors.py`` and are run by name through here too.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

# The bench directory, for its sibling modules (``-I`` leaves it off sys.path).
sys.path.insert(0, str(Path(__file__).resolve().parent))

from floors import (  # noqa: E402
    CALL_WARM_UP,
    limit_commit1,
    limit_commit64,
    limit_commit1_schema,
    limit_commit64_schema,
    floor_drain,
    floor_drain_pipelined,
    floor_drain_riding,
    floor_get,
    floor_submit_seq,
    floor_call,
    floor_call_processes,
    latency,
)
from sdk_client import client as _client, submit_many as _submit_many  # noqa: E402

DEFAULTS = {
    "submit_n": 2_000,
    "concurrent_n": 10_000,
    "get_n": 5_000,
    "cancel_n": 1_000,
    # Purged 1,000 a call: at 5,000 the timed span (~35 ms) was short enough
    # for one full collection of the cyclic GC (~10 ms) to move the row by a
    # quarter, depending on where the allocations put it.
    "purge_n": 20_000,
    "drain_n": 5_000,
    "backlog": 20_000,
    "claims": 300,
    "calls": 100,
    "call_gap_ms": 0,  # call_latency's calls back to back
    "e2e_seconds": 5.0,
    "limit_n": 2_000,
}



def _worker(dialect: str, target: str, **kwargs: Any) -> Any:
    from cairnq import Worker

    if dialect == "sqlite":
        return Worker.sqlite(target, **kwargs)
    return Worker.postgres(target, **kwargs)




# -- client operations -----------------------------------------------------------


async def submit_seq(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    async with _client(dialect, target) as q:
        await q.submit("warm")
        n = o["submit_n"]
        started = time.perf_counter()
        for i in range(n):
            await q.submit("noop", {"i": i})
        return {"value": n / (time.perf_counter() - started), "unit": "submits/s"}


async def submit_concurrent(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    async with _client(dialect, target) as q:
        await q.submit("warm")
        n = o["concurrent_n"]
        started = time.perf_counter()
        await _submit_many(q, n, lanes=64)
        return {"value": n / (time.perf_counter() - started), "unit": "submits/s (64 in flight)"}


async def get(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    async with _client(dialect, target) as q:
        task = await q.submit("noop", {"payload": "x" * 100})
        await q.get(task.id)  # (prepared, as the floor's first read prepares its statement)
        n = o["get_n"]
        started = time.perf_counter()
        for _ in range(n):
            await q.get(task.id)
        return {"value": n / (time.perf_counter() - started), "unit": "gets/s"}


async def cancel(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    async with _client(dialect, target) as q:
        n = o["cancel_n"]
        ids = [(await q.submit("noop")).id for _ in range(n)]
        started = time.perf_counter()
        for task_id in ids:
            await q.cancel(task_id)
        return {"value": n / (time.perf_counter() - started), "unit": "cancels/s"}


async def purge(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    async with _client(dialect, target) as q:
        n = o["purge_n"]
        await _submit_many(q, n)
        ids = [task.id for task in await q.list(limit=n)]

        async def cancel_lane(k: int) -> None:  # set-up: finished rows to purge
            for task_id in ids[k::64]:
                await q.cancel(task_id)

        await asyncio.gather(*(cancel_lane(k) for k in range(64)))
        started = time.perf_counter()
        deleted = 0
        while True:
            ids = await q.purge(limit=1_000)
            deleted += len(ids)
            if len(ids) < 1_000:
                break
        assert deleted == n, deleted
        return {"value": n / (time.perf_counter() - started), "unit": "rows purged/s"}


async def claim_idle(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    async with _client(dialect, target) as q:
        for start in range(0, o["backlog"], 2_000):
            await _submit_many(q, 2_000, name="busy")
        await q.close()
        await q.connect()
        store = q.store
        samples = []
        for _ in range(o["claims"]):
            started = time.perf_counter()
            claimed = await store.claim(queues=["default"], worker_id="bench", names=["idle"])
            samples.append(time.perf_counter() - started)
            assert claimed == []
        return {"value": statistics.median(samples) * 1e6, "unit": "us per idle-name claim (median)"}


# -- the worker ----------------------------------------------------------------------


async def _drain(
    dialect: str,
    target: str,
    o: dict[str, Any],
    concurrency: int,
    batch: int | None,
    distinct: bool = False,
    work: str | None = None,
) -> dict[str, Any]:
    from cairnq import Worker

    floor = _bare_span_per_task() if o.get("tracing") == "floor" else None
    exported = _trace_to_memory(o["tracing"]) if o.get("tracing") and floor is None else None
    async with _client(dialect, target) as q:
        n = o["drain_n"]
        await _submit_many(q, n)  # traced too: every task carries a producer context
        # ``--options '{"claim_batch": 32}'``: draws of at most that many
        # calls (only when given: the keyword is passed to no SDK otherwise).
        extra = {"claim_batch": o["claim_batch"]} if "claim_batch" in o else {}
        if work == "flaky":
            extra["retry_backoff_ms"] = 1  # at once: the drain times the worker, not the backoff
        worker = Worker(q.store, ["default"], concurrency=concurrency, poll_interval_ms=100, **extra)
        # The drain ends when the n-th handler call has returned and the
        # worker has stopped (a graceful stop writes every settlement first);
        # counted in the process, so the clock is not read by polling stats()
        # on the worker's own loop (which the floor loop does not pay either).
        ran = [0]
        all_ran = asyncio.Event()

        def count(k: int) -> None:
            ran[0] += k
            if ran[0] >= n:
                all_ran.set()

        if batch:

            @worker.task("noop", batch=batch)
            async def noop_batch(contexts: Any) -> None:
                count(len(contexts))
                return None

        else:

            @worker.task("noop")
            async def noop(ctx: Any, payload: Any) -> Any:
                if work == "sleep":
                    await asyncio.sleep(0.001)  # I/O-bound work: the loop is free meanwhile
                elif work == "cpu":
                    end = time.perf_counter() + 0.001  # 1 ms of CPU, holding the loop
                    while time.perf_counter() < end:
                        pass
                elif work == "flaky" and payload["i"] % 50 == 0 and ctx.attempt == 1:
                    raise RuntimeError("transient")  # one call in 50 fails once, then succeeds
                if floor is not None:
                    floor()
                count(1)
                return {"i": payload["i"]} if distinct else None

        unsubscribe = _subscribe_counter() if o.get("events") == "count" else None
        metrics = (
            _serve_metrics(worker, float(o.get("scrape_s", 0.5)))
            if o.get("metrics") == "prometheus"
            else None
        )
        passes = CollectorPasses() if o.get("gc") == "count" else None
        if passes is not None:
            passes.start()
        started = time.perf_counter()
        run = asyncio.ensure_future(worker.run())
        await all_ran.wait()
        worker.stop()
        await run
        elapsed = time.perf_counter() - started
        if passes is not None:
            passes.stop()
        succeeded = (await q.stats())["default"]["succeeded"]
        assert succeeded == n, f"{succeeded} of {n} tasks succeeded after the worker stopped"
        if unsubscribe is not None:
            unsubscribe()
        if metrics is not None:
            metrics()
        if exported is not None:
            from cairnq.observability import tracing

            tracing.uninstrument()
            exported.flush()
            spans = sum(1 for s in exported.get_finished_spans() if s.kind.name == "CONSUMER")
            assert spans >= n, spans  # every task ran in a recorded span
        out: dict[str, Any] = {"value": n / elapsed, "unit": "tasks/s"}
        if passes is not None:
            out["gc_passes"] = passes.passes
        return out


class CollectorPasses:
    """The garbage collector's passes per generation, and the time spent in
    them, between ``start()`` and ``stop()`` (``gc.callbacks``). A drain
    reports them with ``--options '{"gc": "count"}'``; ``drain_statements.py``
    prints them."""

    def __init__(self) -> None:
        self.passes = [0, 0, 0]
        self.spent = [0.0, 0.0, 0.0]
        self._began: float | None = None

    def start(self) -> None:
        gc.callbacks.append(self._callback)

    def stop(self) -> None:
        gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        elif self._began is not None:  # (a pass already under way at start() is not counted)
            generation = info["generation"]
            self.passes[generation] += 1
            self.spent[generation] += time.perf_counter() - self._began
            self._began = None


def _serve_metrics(worker: Any, scrape_s: float) -> Callable[[], None]:
    """Prometheus metrics on (``--options '{"metrics": "prometheus"}'``): the
    endpoint served on a free port, scraped every ``scrape_s`` (option
    ``scrape_s``, default 0.5: far more often than a real scrape interval; 0:
    not during the drain) from a thread, and once at the end to check the
    count. Returns what stops it."""
    import threading
    import urllib.request

    from cairnq.observability import serve_metrics

    server = serve_metrics(worker, port=0)
    url = f"http://127.0.0.1:{server.port}/metrics"
    done = threading.Event()

    def scrape() -> None:
        while scrape_s > 0 and not done.wait(scrape_s):
            urllib.request.urlopen(url, timeout=10).read()

    scraper = threading.Thread(target=scrape, daemon=True)
    scraper.start()

    def stop() -> None:
        done.set()
        scraper.join()
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        assert "cairnq_tasks_succeeded_total{" in text, "no task counted"
        server.close()

    return stop


def _bare_span_per_task() -> Callable[[], None]:
    """The floor of tracing a task with the OpenTelemetry SDK: cairnq's
    tracing off, the handler starts and ends one bare span (no attributes,
    no links) recorded into memory (``{"tracing": "floor"}``)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    tracer = provider.get_tracer("floor")

    def one_span() -> None:
        tracer.start_span("noop").end()

    return one_span


def _trace_to_memory(how: str) -> Any:
    """Tracing on, every span recorded by the OpenTelemetry SDK into memory
    (the cost of tracing with a real pipeline): ``{"tracing": "memory"}``
    exports each span as it ends (SimpleSpanProcessor), ``"memory-batch"``
    from the SDK's background thread (BatchSpanProcessor, what production
    set-ups use). Returns the exporter, with a ``flush()`` for the batch one."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from cairnq.observability import tracing

    if how not in ("memory", "memory-batch"):
        raise ValueError(f"tracing: expected 'memory' or 'memory-batch', got {how!r}")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    if how == "memory":
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=1 << 20))
    exporter.flush = provider.force_flush  # type: ignore[attr-defined]
    tracing.instrument(provider)
    return exporter


def _subscribe_counter() -> Any:
    """One subscriber to every event kind that counts them (the cost of the
    instrumentation seam with a listener: ``--options '{"events": "count"}'``)."""
    from cairnq import events

    counts: dict[str, int] = {}

    def count(event: Any) -> None:
        counts[event.kind] = counts.get(event.kind, 0) + 1

    return events.subscribe(count)


async def drain_c8(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    return await _drain(dialect, target, o, 8, None)


async def drain_c64(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    return await _drain(dialect, target, o, 64, None)


async def drain_distinct_c64(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    """drain_c64 with handlers that each return a different result."""
    return await _drain(dialect, target, o, 64, None, distinct=True)


async def drain_batch64(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    return await _drain(dialect, target, o, 1, 64)


# Handlers that do some work: what the worker costs on real rows, against the
# bound the handler itself sets (1 ms of sleep at concurrency c: c x 1,000
# tasks/s; 1 ms of CPU: 1,000 tasks/s, one process).


async def drain_sleep1ms_c64(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    out = await _drain(dialect, target, o, 64, None, work="sleep")
    return dict(out, bound=64_000)


async def drain_sleep1ms_c256(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    out = await _drain(dialect, target, o, 256, None, work="sleep")
    return dict(out, bound=256_000)


async def drain_flaky_c64(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    """drain_c64 where one task in 50 fails its first attempt (a transient
    error) and is retried at once; tasks/s counts the tasks, not the calls."""
    return await _drain(dialect, target, o, 64, None, work="flaky")


async def drain_cpu1ms_c64(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    out = await _drain(dialect, target, dict(o, drain_n=min(o["drain_n"], 2_000)), 64, None, work="cpu")
    return dict(out, bound=1_000)


def _serve_worker(dialect: str, target: str, concurrency: int) -> subprocess.Popen[str]:
    """A worker process (same interpreter, same SDK) answering "echo"."""
    code = f"""
import sys
sys.argv = ["worker"]
from cairnq import Worker
worker = (Worker.sqlite if {dialect!r} == "sqlite" else Worker.postgres)({target!r}, concurrency={concurrency})
@worker.task("echo")
async def echo(ctx, payload):
    return payload
@worker.task("ready")
async def ready(ctx):
    return "ok"
worker.serve()
"""
    return subprocess.Popen([sys.executable, "-I", "-c", code], cwd=os.path.dirname(os.path.abspath(__file__)) + "/..", stdin=subprocess.DEVNULL)


async def _with_worker(dialect: str, target: str, concurrency: int, body: Callable[[Any], Any]) -> Any:
    async with _client(dialect, target) as q:
        await q.connect()
        proc = _serve_worker(dialect, target, concurrency)
        try:
            await q.call("ready", timeout_ms=60_000)  # the worker is up and polling
            return await body(q)
        finally:
            proc.terminate()
            proc.wait(timeout=30)


# The warm-up's budget: the reference's calls each wait for its worker's
# poll (about 0.5 s), so it warms up with what fits in this.
CALL_WARM_UP_S = 5.0


async def timed_calls(q: Any, n: int, gap_ms: float = 0) -> list[float]:
    """``n`` "echo" calls in a row, each checked (``gap_ms`` apart, untimed);
    their times in ms."""
    samples = []
    for i in range(n):
        if gap_ms and i:
            await asyncio.sleep(gap_ms / 1000)
        started = time.perf_counter()
        assert await q.call("echo", {"i": i}, timeout_ms=30_000) == {"i": i}
        samples.append((time.perf_counter() - started) * 1000)
    return samples


async def call_latency(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    async def body(q: Any) -> dict[str, Any]:
        # Sampled once the database is warm, as the floors are (CALL_WARM_UP).
        warm_until = time.perf_counter() + CALL_WARM_UP_S
        for i in range(CALL_WARM_UP):
            if time.perf_counter() > warm_until:
                break
            await q.call("echo", {"i": -1 - i}, timeout_ms=30_000)
        return latency(await timed_calls(q, o["calls"], o["call_gap_ms"]), "ms per call (p50)")

    return await _with_worker(dialect, target, 4, body)  # type: ignore[no-any-return]


async def e2e_throughput(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    async def body(q: Any) -> dict[str, Any]:
        done = 0
        deadline = time.perf_counter() + o["e2e_seconds"]

        async def producer(k: int) -> None:
            nonlocal done
            i = 0
            while time.perf_counter() < deadline:
                await q.call("echo", {"p": k, "i": i}, timeout_ms=30_000)
                done += 1
                i += 1

        started = time.perf_counter()
        await asyncio.gather(*(producer(k) for k in range(4)))
        return {"value": done / (time.perf_counter() - started), "unit": "calls/s (4 producers)"}

    return await _with_worker(dialect, target, 16, body)  # type: ignore[no-any-return]


WORKLOADS: dict[str, Callable[..., Any]] = {
    f.__name__: f
    for f in (
        submit_seq, submit_concurrent, get, cancel, purge, claim_idle,
        drain_c8, drain_c64, drain_distinct_c64, drain_batch64, call_latency, e2e_throughput,
        drain_sleep1ms_c64, drain_sleep1ms_c256, drain_cpu1ms_c64, drain_flaky_c64,
        limit_commit1, limit_commit1_schema, limit_commit64, limit_commit64_schema,
        floor_drain, floor_drain_pipelined, floor_drain_riding, floor_get, floor_submit_seq, floor_call, floor_call_processes,
    )
}  # fmt: skip


def main() -> None:
    name, dialect, target = sys.argv[1:4]
    options = dict(DEFAULTS, **(json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}))
    fn = WORKLOADS[name]
    run: Callable[[Any], Any] = asyncio.run
    if options.get("loop") == "uvloop":  # ``--options '{"loop": "uvloop"}'`` (uvloop installed)
        import uvloop

        run = uvloop.run
    result = run(fn(dialect, target, options)) if asyncio.iscoroutinefunction(fn) else fn(dialect, target, options)
    try:
        import cairnq

        result["sdk"] = cairnq.__version__
    except ImportError:
        result["sdk"] = None
    print(json.dumps(result))


if __name__ == "__main__":
    main()
