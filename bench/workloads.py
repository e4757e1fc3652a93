"""Workloads for the side-by-side comparison, public API only.

Run by ``bench/compare.py`` under two interpreters (ours, and the reference
SDK's virtualenv), so whichever ``cairnq`` the interpreter has is measured:

    python -I bench/workloads.py <workload> <sqlite|postgres> <path-or-dsn> [json-options]

Prints one JSON object: {"value": ..., "unit": ..., ...}. Every workload gets
a fresh database from the caller.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

DEFAULTS = {
    "submit_n": 2_000,
    "concurrent_n": 10_000,
    "get_n": 5_000,
    "cancel_n": 1_000,
    "purge_n": 5_000,
    "drain_n": 5_000,
    "backlog": 20_000,
    "claims": 300,
    "calls": 100,
    "e2e_seconds": 5.0,
    "limit_n": 2_000,
}


def _client(dialect: str, target: str) -> Any:
    from cairnq import CairnQ

    return CairnQ.sqlite(target) if dialect == "sqlite" else CairnQ.postgres(target)


def _worker(dialect: str, target: str, **kwargs: Any) -> Any:
    from cairnq import Worker

    if dialect == "sqlite":
        return Worker.sqlite(target, **kwargs)
    return Worker.postgres(target, **kwargs)


async def _submit_many(q: Any, n: int, name: str = "noop", lanes: int = 64) -> None:
    async def lane(k: int) -> None:
        for i in range(k, n, lanes):
            await q.submit(name, {"i": i})

    await asyncio.gather(*(lane(k) for k in range(lanes)))


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
        for task in await q.list(limit=n):
            await q.cancel(task.id)
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
        worker = Worker(q.store, ["default"], concurrency=concurrency, poll_interval_ms=100)
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
        started = time.perf_counter()
        run = asyncio.ensure_future(worker.run())
        await all_ran.wait()
        worker.stop()
        await run
        elapsed = time.perf_counter() - started
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
        return {"value": n / elapsed, "unit": "tasks/s"}


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


async def call_latency(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    async def body(q: Any) -> dict[str, Any]:
        samples = []
        for i in range(o["calls"]):
            started = time.perf_counter()
            assert await q.call("echo", {"i": i}, timeout_ms=30_000) == {"i": i}
            samples.append((time.perf_counter() - started) * 1000)
        samples.sort()
        return {
            "value": statistics.median(samples),
            "p95": samples[int(len(samples) * 0.95) - 1],
            "unit": "ms per call (p50)",
        }

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


# -- physical limits (no SDK at all) --------------------------------------------------


Row = Callable[[int, int, str], Any]  # (sequence, now in ms, task id) -> the insert's parameters


def _bare_table(conn: sqlite3.Connection) -> tuple[str, Row]:
    """A table with the columns a submit fills and no secondary index."""
    conn.execute(
        "create table if not exists cairnq_tasks (id text primary key, name text not null, queue text not null"
        " default 'default', status text not null, payload text not null, metadata text not null default '{}',"
        " max_attempts integer not null default 3, priority integer not null default 0, run_at_ms integer not null,"
        " root_id text, created_at_ms integer not null, updated_at_ms integer not null)"
    )
    sql = (
        "insert into cairnq_tasks (id, name, queue, status, payload, metadata, max_attempts, priority, run_at_ms,"
        " root_id, created_at_ms, updated_at_ms) values (?, 'noop', 'default', 'queued', ?, '{}', 3, 0, ?, ?, ?, ?)"
    )
    return sql, lambda j, now, task_id: (task_id, json.dumps({"i": j}), now, task_id, now, now)


def _cairnq_schema(conn: sqlite3.Connection) -> tuple[str, Row]:
    """The real schema (the migration files, run by bare sqlite3) and the very
    insert statement submit runs."""
    root = Path(__file__).resolve().parent.parent / "protocol"
    conn.execute("pragma foreign_keys = on")
    for migration in sorted((root / "migrations" / "sqlite").glob("*.sql")):
        conn.executescript(migration.read_text())
    sql = (root / "sql" / "sqlite" / "insert_task.sql").read_text()
    return sql, lambda j, now, task_id: {
        "id": task_id, "name": "noop", "queue": "default", "payload": json.dumps({"i": j}),
        "metadata": "{}", "max_attempts": 3, "priority": 0, "run_at_ms": now, "parent_id": None,
        "root_id": task_id, "correlation_id": None, "now_ms": now,
    }  # fmt: skip


def _limit(target: str, o: dict[str, Any], rows_per_commit: int, *, cairnq_schema: bool = False) -> dict[str, Any]:
    """A bare sqlite3 loop inserting the rows a submit writes, one or 64 per
    transaction, at the default durability (WAL, synchronous=FULL): into a
    table without secondary indexes, or into the cairnq schema (the disk's
    limit for the very rows and indexes a submit writes, without any SDK)."""
    conn = sqlite3.connect(target, isolation_level=None)
    conn.execute("pragma journal_mode = wal")
    sql, row = _cairnq_schema(conn) if cairnq_schema else _bare_table(conn)
    n = o["limit_n"] * (1 if rows_per_commit == 1 else 4)
    started = time.perf_counter()
    for i in range(0, n, rows_per_commit):
        if rows_per_commit > 1:
            conn.execute("begin")
        for j in range(i, i + rows_per_commit):
            now = int(time.time() * 1000)
            conn.execute(sql, row(j, now, f"task_{j:026d}"))
        if rows_per_commit > 1:
            conn.execute("commit")
    unit = f"rows/s ({rows_per_commit} per commit{', cairnq schema' if cairnq_schema else ''})"
    return {"value": n / (time.perf_counter() - started), "unit": unit}


def limit_commit1(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    return _limit(target, o, 1)


def limit_commit64(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    return _limit(target, o, 64)


def limit_commit1_schema(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    return _limit(target, o, 1, cairnq_schema=True)


def limit_commit64_schema(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    return _limit(target, o, 64, cairnq_schema=True)


# -- the floor: the protocol's own drain statements, no SDK -----------------------------

PROTOCOL = Path(__file__).resolve().parent.parent / "protocol"


def _statement(dialect: str, name: str) -> str:
    return (PROTOCOL / "sql" / dialect / f"{name}.sql").read_text()


def _drain_backlog(dialect: str, target: str, n: int) -> None:
    """n due "noop" tasks in "default", submitted through our SDK (which also
    migrates the schema), then closed: the floor loop finds what a drain finds."""

    async def fill() -> None:
        async with _client(dialect, target) as q:
            await _submit_many(q, n)

    asyncio.run(fill())


def _floor_sqlite(target: str, n: int, batch: int) -> float:
    """stdlib sqlite3, one connection, WAL, synchronous=FULL (the store's
    default durability): per transaction, claim ``batch`` tasks and complete
    them with ``complete_many``, the statements a worker's drain runs."""
    claim, complete = _statement("sqlite", "claim_one_queue_one_name"), _statement("sqlite", "complete_many")
    conn = sqlite3.connect(target, isolation_level=None)
    conn.execute("pragma journal_mode = wal")
    conn.execute("pragma synchronous = full")
    done = 0
    started = time.perf_counter()
    while done < n:
        now = int(time.time() * 1000)
        conn.execute("begin immediate")
        rows = conn.execute(claim, {
            "worker_id": "floor", "lease_until_ms": now + 30_000, "now_ms": now,
            "queue": "default", "name": "noop", "limit": batch,
        }).fetchall()  # fmt: skip
        ids = [row[0] for row in rows]
        settled = conn.execute(
            complete, {"ids": json.dumps(ids), "result": None, "worker_id": "floor", "now_ms": now}
        ).fetchall()
        conn.execute("commit")
        if not ids:
            raise RuntimeError(f"the floor loop ran dry after {done} of {n} tasks")
        done += len(settled)
    elapsed = time.perf_counter() - started
    conn.close()
    return n / elapsed


def _pg_positional(name: str) -> tuple[str, tuple[str, ...]]:
    """A PostgreSQL statement with psycopg's %s placeholders (named parameters
    cut out by cairnq's literal-aware splitter; no value is ever pasted in)."""
    from cairnq._sql import split_params

    chunks, slots = split_params(_statement("postgres", name))
    return "%s".join(chunk.replace("%", "%%") for chunk in chunks), slots


async def _floor_pg_lane(target: str, n_goal: list[int], batch: int, worker: str) -> None:
    """One connection claiming and settling until the shared goal is met."""
    import psycopg

    claim, claim_slots = _pg_positional("claim_one_queue_one_name")
    complete, complete_slots = _pg_positional("complete_many")
    empty_since: float | None = None
    async with await psycopg.AsyncConnection.connect(target, autocommit=False) as conn:
        while n_goal[0] > 0:
            values = {"worker_id": worker, "lease_ms": 30_000, "queue": "default", "name": "noop", "limit": batch}
            cur = await conn.execute(claim, [values[s] for s in claim_slots], prepare=True)
            ids = [row[0] for row in await cur.fetchall()]
            if not ids:  # the last rows are locked by the other lane, about to be settled
                await conn.rollback()
                empty_since = empty_since or time.perf_counter()
                if time.perf_counter() - empty_since > 5:
                    raise RuntimeError(f"the floor loop ran dry with {n_goal[0]} tasks to go")
                await asyncio.sleep(0.001)
                continue
            empty_since = None
            settle = {"ids": ids, "result": None, "worker_id": worker}
            cur = await conn.execute(complete, [settle[s] for s in complete_slots], prepare=True)
            n_goal[0] -= len(await cur.fetchall())
            await conn.commit()


def _floor_pg(target: str, n: int, batch: int, lanes: int) -> float:
    """psycopg (its C implementation), server-side prepared statements, one
    transaction per claim + complete_many; ``lanes`` connections at once
    (two: one claims while the other commits, the floor for an SDK that
    overlaps its round trips)."""
    goal = [n]  # tasks still to settle, shared by the lanes

    async def run() -> float:
        started = time.perf_counter()
        await asyncio.gather(*(_floor_pg_lane(target, goal, batch, f"floor-{k}") for k in range(lanes)))
        return n / (time.perf_counter() - started)

    return asyncio.run(run())


def floor_drain(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    """The floor of ``drain_c64``: its claim and settlement statements in a bare
    loop, 64 tasks a transaction, same schema and durability, no SDK."""
    n = o["drain_n"]
    _drain_backlog(dialect, target, n)
    if dialect == "sqlite":
        return {"value": _floor_sqlite(target, n, 64), "unit": "tasks/s (bare loop, 64 a transaction)"}
    return {"value": _floor_pg(target, n, 64, 1), "unit": "tasks/s (bare loop, 64 a transaction)"}


def floor_drain_pipelined(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    """PostgreSQL: the bare loop on two connections at once (round trips overlapped)."""
    if dialect != "postgres":
        raise SystemExit("floor_drain_pipelined is a PostgreSQL floor")
    n = o["drain_n"]
    _drain_backlog(dialect, target, n)
    return {"value": _floor_pg(target, n, 64, 2), "unit": "tasks/s (bare loop, 2 connections)"}


# -- the client operations' floors: their own statement in a bare loop, no SDK ------------


def _fresh_schema(dialect: str, target: str) -> str | None:
    """The schema (migrated by our SDK, then closed) and one task's id."""

    async def make() -> str:
        async with _client(dialect, target) as q:
            return (await q.submit("noop", {"payload": "x" * 100})).id  # type: ignore[no-any-return]

    return asyncio.run(make())


def _sqlite_floor_conn(target: str) -> sqlite3.Connection:
    """stdlib sqlite3 at the store's durability: WAL, synchronous=FULL, autocommit."""
    conn = sqlite3.connect(target, isolation_level=None)
    conn.execute("pragma journal_mode = wal")
    conn.execute("pragma synchronous = full")
    return conn


async def _pg_floor_conn(target: str) -> Any:
    """psycopg (its C implementation) with the pool's connection settings:
    autocommit, statements prepared server-side at once, ``$n`` placeholders
    (raw cursor), json/jsonb read as text."""
    import psycopg
    from psycopg.adapt import Loader

    class JsonText(Loader):
        def load(self, data: Any) -> str:
            return bytes(data).decode("utf-8")

    conn = await psycopg.AsyncConnection.connect(
        target, autocommit=True, prepare_threshold=0, cursor_factory=psycopg.AsyncRawCursor
    )
    conn.adapters.register_loader("jsonb", JsonText)
    conn.adapters.register_loader("json", JsonText)
    return conn


def _pg_dollar(name: str) -> tuple[str, tuple[str, ...]]:
    """A PostgreSQL statement with ``$n`` placeholders (cairnq's literal-aware
    splitter; no value is ever pasted in) and the order of its parameters."""
    from cairnq.store.postgres.params import positional_statement

    return positional_statement(_statement("postgres", name))  # type: ignore[no-any-return]


def _submit_row(i: int) -> dict[str, Any]:
    task_id = f"task_{i:026d}"
    return {
        "id": task_id, "name": "noop", "queue": "default", "payload": json.dumps({"i": i}), "metadata": "{}",
        "max_attempts": 3, "priority": 0, "delay_ms": 0, "parent_id": None, "root_id": task_id,
        "correlation_id": None,
    }  # fmt: skip


async def _floor_pg_get(target: str, task_id: str, n: int) -> float:
    sql, slots = _pg_dollar("get")
    conn = await _pg_floor_conn(target)
    try:
        cur = conn.cursor()
        values = [{"id": task_id}[s] for s in slots]
        await cur.execute(sql, values, prepare=True)
        await cur.fetchall()
        started = time.perf_counter()
        for _ in range(n):
            await cur.execute(sql, values, prepare=True)
            await cur.fetchall()
        return n / (time.perf_counter() - started)
    finally:
        await conn.close()


async def _floor_pg_submit_seq(target: str, n: int) -> float:
    sql, slots = _pg_dollar("insert_task")
    conn = await _pg_floor_conn(target)
    try:
        cur = conn.cursor()
        warm = dict(_submit_row(n), name="warm")
        await cur.execute(sql, [warm[s] for s in slots], prepare=True)
        await cur.fetchall()
        started = time.perf_counter()
        for i in range(n):
            row = _submit_row(i)
            await cur.execute(sql, [row[s] for s in slots], prepare=True)
            await cur.fetchall()
        return n / (time.perf_counter() - started)
    finally:
        await conn.close()


def floor_get(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    """The floor of ``get``: the ``get`` statement by primary key, one connection, prepared."""
    task_id = _fresh_schema(dialect, target)
    n = o["get_n"]
    if dialect == "postgres":
        return {
            "value": asyncio.run(_floor_pg_get(target, task_id, n)),
            "unit": "gets/s (bare loop)",
        }
    sql = _statement("sqlite", "get")
    conn = _sqlite_floor_conn(target)
    conn.execute(sql, {"id": task_id}).fetchall()
    started = time.perf_counter()
    for _ in range(n):
        conn.execute(sql, {"id": task_id}).fetchall()
    value = n / (time.perf_counter() - started)
    conn.close()
    return {"value": value, "unit": "gets/s (bare loop)"}


def floor_submit_seq(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    """The floor of ``submit_seq``: the ``insert_task`` statement, one row per
    transaction (PostgreSQL: autocommit, prepared, the returned row fetched;
    SQLite: WAL, synchronous=FULL, the SDK's own bound values)."""
    _fresh_schema(dialect, target)
    n = o["submit_n"]
    if dialect == "postgres":
        return {
            "value": asyncio.run(_floor_pg_submit_seq(target, n)),
            "unit": "submits/s (bare loop, 1 a commit)",
        }
    sql = _statement("sqlite", "insert_task")
    conn = _sqlite_floor_conn(target)
    started = time.perf_counter()
    for i in range(n):
        now = int(time.time() * 1000)
        row = _submit_row(i)
        conn.execute(sql, dict(row, run_at_ms=now, now_ms=now))
    value = n / (time.perf_counter() - started)
    conn.close()
    return {"value": value, "unit": "submits/s (bare loop, 1 a commit)"}


async def _floor_pg_call(target: str, n: int) -> list[float]:
    """submit, claim, complete and get on one connection, each on its own
    (three commits and a read): the round trips a call cannot avoid."""
    insert, insert_slots = _pg_dollar("insert_task")
    claim, claim_slots = _pg_dollar("claim_one_queue_one_name")
    complete, complete_slots = _pg_dollar("complete")
    get_sql, get_slots = _pg_dollar("get")
    conn = await _pg_floor_conn(target)
    samples = []
    try:
        cur = conn.cursor()
        for i in range(-20, n):  # 20 to warm up
            started = time.perf_counter()
            row = dict(_submit_row(i + 20), name="echo", payload=json.dumps({"i": i}))
            await cur.execute(insert, [row[s] for s in insert_slots], prepare=True)
            await cur.fetchall()
            values = {
                "worker_id": "floor",
                "lease_ms": 30_000,
                "queue": "default",
                "name": "echo",
                "limit": 1,
            }
            await cur.execute(claim, [values[s] for s in claim_slots], prepare=True)
            (claimed,) = await cur.fetchall()
            done = {"id": claimed[0], "result": row["payload"], "worker_id": "floor"}
            await cur.execute(complete, [done[s] for s in complete_slots], prepare=True)
            await cur.fetchall()
            await cur.execute(get_sql, [{"id": claimed[0]}[s] for s in get_slots], prepare=True)
            await cur.fetchall()
            if i >= 0:
                samples.append((time.perf_counter() - started) * 1000)
    finally:
        await conn.close()
    return samples


def _floor_sqlite_call(target: str, n: int) -> list[float]:
    """SQLite: submit, claim, complete and get on one stdlib sqlite3
    connection, each write its own commit (WAL, synchronous=FULL): the
    commits and the read a call cannot avoid."""
    insert, complete = _statement("sqlite", "insert_task"), _statement("sqlite", "complete")
    claim, get_sql = _statement("sqlite", "claim_one_queue_one_name"), _statement("sqlite", "get")
    conn = _sqlite_floor_conn(target)
    samples = []
    try:
        for i in range(-20, n):  # 20 to warm up
            started = time.perf_counter()
            now = int(time.time() * 1000)
            row = dict(_submit_row(i + 20), name="echo", payload=json.dumps({"i": i}))
            conn.execute(insert, dict(row, run_at_ms=now, now_ms=now))
            now = int(time.time() * 1000)
            (claimed,) = conn.execute(claim, {
                "worker_id": "floor", "lease_until_ms": now + 30_000, "now_ms": now,
                "queue": "default", "name": "echo", "limit": 1,
            }).fetchall()  # fmt: skip
            now = int(time.time() * 1000)
            done = {"id": claimed[0], "result": row["payload"], "worker_id": "floor", "now_ms": now}
            conn.execute(complete, done).fetchall()
            conn.execute(get_sql, {"id": claimed[0]}).fetchall()
            if i >= 0:
                samples.append((time.perf_counter() - started) * 1000)
    finally:
        conn.close()
    return samples


def floor_call(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    """The floor of ``call_latency`` in one process: its three commits and
    the caller's read in a bare loop on one connection (no process hops, no
    wake-ups). Below what any cross-process call can reach: see
    ``floor_call_processes`` for that one."""
    _fresh_schema(dialect, target)
    if dialect == "postgres":
        samples = sorted(asyncio.run(_floor_pg_call(target, o["calls"])))
    else:
        samples = sorted(_floor_sqlite_call(target, o["calls"]))
    return {
        "value": statistics.median(samples),
        "p95": samples[int(len(samples) * 0.95) - 1],
        "unit": "ms per call (bare loop, p50)",
    }


# The channels the protocol's trigger notifies (protocol/migrations/postgres/
# 0003_notify.sql): the queue's name on cairnq_queued when a task becomes
# claimable, the task's id on cairnq_done when it reaches a terminal state.
QUEUED_CHANNEL, DONE_CHANNEL = "cairnq_queued", "cairnq_done"
TERMINAL = ("succeeded", "failed", "canceled")

# The bare worker of floor_call_processes: its own process, stdlib sqlite3 or
# psycopg only (no cairnq), running the protocol's statements handed to it in
# argv[1] (JSON; the PostgreSQL ones already in $n form, converted by the
# parent; the one statement spelled here is the LISTEN, its channel quoted by
# psycopg.sql.Identifier as the SDK does). It echoes each "echo" task's payload
# as its result. PostgreSQL: woken by cairnq_queued, it claims (limit 1) and
# completes until nothing is left; SQLite: it spins on PRAGMA data_version and
# claims when another connection has committed. Either way it drains once at
# start (a task inserted before it listened is not lost) and exits when its
# parent is gone.
_BARE_WORKER = r"""
import json, os, sys, time

cfg = json.loads(sys.argv[1])
target, st = cfg["target"], cfg["statements"]
parent = os.getppid()

if cfg["dialect"] == "postgres":
    import psycopg
    from psycopg import sql as pgsql
    from psycopg.adapt import Loader

    class JsonText(Loader):
        def load(self, data):
            return bytes(data).decode("utf-8")

    work = psycopg.connect(target, autocommit=True, prepare_threshold=0, cursor_factory=psycopg.RawCursor)
    work.adapters.register_loader("jsonb", JsonText)
    work.adapters.register_loader("json", JsonText)
    listen = psycopg.connect(target, autocommit=True)
    listen.execute(pgsql.SQL("listen {}").format(pgsql.Identifier(cfg["channel"])))
    claim, claim_slots = st["claim_one_queue_one_name"]
    complete, complete_slots = st["complete"]
    claim_values = {"worker_id": "floor", "lease_ms": 30_000, "queue": "default", "name": "echo", "limit": 1}
    claim_args = [claim_values[s] for s in claim_slots]
    cur = work.cursor()

    def drain():
        while True:
            cur.execute(claim, claim_args, prepare=True)
            rows = cur.fetchall()
            if not rows:
                return
            names = [c.name for c in cur.description]
            id_at, payload_at = names.index("id"), names.index("payload")
            for row in rows:
                done = {"id": row[id_at], "result": row[payload_at], "worker_id": "floor"}
                cur.execute(complete, [done[s] for s in complete_slots], prepare=True)
                cur.fetchall()

    drain()
    while os.getppid() == parent:
        for _ in listen.notifies(timeout=1.0, stop_after=1):
            pass
        drain()
else:
    import sqlite3

    conn = sqlite3.connect(target, isolation_level=None)
    conn.execute("pragma journal_mode = wal")
    conn.execute("pragma synchronous = full")
    version, probe = st["data_version"], st["claimable_probe_one_queue_one_name"]
    claim, complete = st["claim_one_queue_one_name"], st["complete"]
    last, pending, spins = None, True, 0
    while True:
        (now_version,) = conn.execute(version).fetchone()
        if now_version != last:
            last, pending = now_version, True
        if not pending:
            spins += 1
            if spins & 0xFFFF == 0 and os.getppid() != parent:
                break
            continue
        now = int(time.time() * 1000)
        cur = conn.execute(claim, {
            "worker_id": "floor", "lease_until_ms": now + 30_000, "now_ms": now,
            "queue": "default", "name": "echo", "limit": 1,
        })
        rows = cur.fetchall()
        if not rows:
            pending = False
            continue
        names = [c[0] for c in cur.description]
        id_at, payload_at = names.index("id"), names.index("payload")
        for row in rows:
            now = int(time.time() * 1000)
            done = {"id": row[id_at], "result": row[payload_at], "worker_id": "floor", "now_ms": now}
            conn.execute(complete, done).fetchall()
        # Another task queued before the version was read leaves no change to
        # wake on: a read (no write lock, so no clash with the caller's next
        # insert) says whether to claim again.
        now = int(time.time() * 1000)
        (due, _expired) = conn.execute(probe, {"queue": "default", "name": "echo", "now_ms": now}).fetchone()
        pending = bool(due)
"""


def _spawn_bare_worker(dialect: str, target: str) -> subprocess.Popen[bytes]:
    """The bare worker (``_BARE_WORKER``) in a process of its own, same
    interpreter, handed the protocol's statements it runs."""
    if dialect == "postgres":
        names = ("claim_one_queue_one_name", "complete")
        statements: dict[str, Any] = {name: list(_pg_dollar(name)) for name in names}
    else:
        names = (
            "data_version", "claim_one_queue_one_name", "complete", "claimable_probe_one_queue_one_name"
        )  # fmt: skip
        statements = {name: _statement("sqlite", name) for name in names}
    cfg = {
        "dialect": dialect, "target": target, "statements": statements, "channel": QUEUED_CHANNEL,
    }  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-I", "-c", _BARE_WORKER, json.dumps(cfg)],
        cwd=os.path.dirname(os.path.abspath(__file__)) + "/..",
        stdin=subprocess.DEVNULL,
    )


def _alive(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        raise RuntimeError(f"the bare worker exited ({proc.returncode})")


def _floor_pg_call_processes(target: str, n: int, proc: subprocess.Popen[bytes]) -> list[float]:
    """The caller: one connection inserts, and reads the task back with
    ``get``; another LISTENs on cairnq_done and is woken by the trigger when
    the worker's ``complete`` commits. psycopg's sync API (no event loop in
    the way), prepared statements, autocommit."""
    import psycopg
    from psycopg import sql as pgsql
    from psycopg.adapt import Loader

    class JsonText(Loader):
        def load(self, data: Any) -> str:
            return bytes(data).decode("utf-8")

    insert, insert_slots = _pg_dollar("insert_task")
    get_sql, get_slots = _pg_dollar("get")
    conn = psycopg.connect(
        target, autocommit=True, prepare_threshold=0, cursor_factory=psycopg.RawCursor
    )
    listen = psycopg.connect(target, autocommit=True)
    samples = []
    try:
        conn.adapters.register_loader("jsonb", JsonText)
        conn.adapters.register_loader("json", JsonText)
        listen.execute(pgsql.SQL("listen {}").format(pgsql.Identifier(DONE_CHANNEL)))
        cur = conn.cursor()
        for i in range(-20, n):  # 20 to warm up (the first also waits for the worker to start)
            started = time.perf_counter()
            row = dict(_submit_row(i + 20), name="echo", payload=json.dumps({"i": i}))
            await_until = started + 30
            cur.execute(insert, [row[s] for s in insert_slots], prepare=True)
            cur.fetchall()
            while row["id"] not in [note.payload for note in listen.notifies(timeout=1.0, stop_after=1)]:
                _alive(proc)
                if time.perf_counter() > await_until:
                    raise RuntimeError(f"no {DONE_CHANNEL} notification for {row['id']} in 30 s")
            cur.execute(get_sql, [{"id": row["id"]}[s] for s in get_slots], prepare=True)
            (got,) = cur.fetchall()
            if i >= 0:
                samples.append((time.perf_counter() - started) * 1000)
            names = [c.name for c in cur.description]
            assert got[names.index("status")] == "succeeded", got
            assert json.loads(got[names.index("result")]) == {"i": i}, got
    finally:
        conn.close()
        listen.close()
    return samples


def _floor_sqlite_call_processes(target: str, n: int, proc: subprocess.Popen[bytes]) -> list[float]:
    """The caller: inserts (its own commit), then spins on PRAGMA
    data_version and reads the task with ``get`` each time another
    connection has committed, until the task is terminal."""
    insert, get_sql = _statement("sqlite", "insert_task"), _statement("sqlite", "get")
    version = _statement("sqlite", "data_version")
    conn = _sqlite_floor_conn(target)
    samples = []
    try:
        (last,) = conn.execute(version).fetchone()  # own commits never move it: read once, kept
        for i in range(-20, n):  # 20 to warm up (the first also waits for the worker to start)
            started = time.perf_counter()
            await_until = started + 30
            now = int(time.time() * 1000)
            row = dict(_submit_row(i + 20), name="echo", payload=json.dumps({"i": i}))
            conn.execute(insert, dict(row, run_at_ms=now, now_ms=now))
            spins = 0
            while True:
                (now_version,) = conn.execute(version).fetchone()
                if now_version != last:
                    last = now_version
                    cur = conn.execute(get_sql, {"id": row["id"]})
                    (got,) = cur.fetchall()
                    names = [c[0] for c in cur.description]
                    if got[names.index("status")] in TERMINAL:
                        break
                spins += 1
                if spins & 0xFFF == 0:
                    _alive(proc)
                    if time.perf_counter() > await_until:
                        raise RuntimeError(f"{row['id']} not settled by the bare worker in 30 s")
            if i >= 0:
                samples.append((time.perf_counter() - started) * 1000)
            assert got[names.index("status")] == "succeeded", got
            assert json.loads(got[names.index("result")]) == {"i": i}, got
    finally:
        conn.close()
    return samples


def floor_call_processes(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    """The floor of ``call_latency`` across two processes, as a call really
    runs: a bare worker in a second process (``_BARE_WORKER``: stdlib sqlite3
    or psycopg, no cairnq) must be woken by the submit, and the caller woken
    back by the settlement; no SDK on either side.

    PostgreSQL: both wake-ups are the protocol trigger's notifications
    (cairnq_queued for the worker, cairnq_done for the caller, on a second
    connection), then the caller's ``get``. SQLite has no notification: both
    sides spin on PRAGMA data_version with no sleep at all, the lowest
    wake-up latency there is, bought with a core each (a floor, not a design
    to copy: on this 2-core machine the pair holds both cores while it runs).
    """
    _fresh_schema(dialect, target)
    proc = _spawn_bare_worker(dialect, target)
    try:
        if dialect == "postgres":
            samples = _floor_pg_call_processes(target, o["calls"], proc)
        else:
            samples = _floor_sqlite_call_processes(target, o["calls"], proc)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    samples.sort()
    return {
        "value": statistics.median(samples),
        "p95": samples[int(len(samples) * 0.95) - 1],
        "unit": "ms per call (bare, 2 procs, p50)",
    }


WORKLOADS: dict[str, Callable[..., Any]] = {
    f.__name__: f
    for f in (
        submit_seq, submit_concurrent, get, cancel, purge, claim_idle,
        drain_c8, drain_c64, drain_distinct_c64, drain_batch64, call_latency, e2e_throughput,
        drain_sleep1ms_c64, drain_sleep1ms_c256, drain_cpu1ms_c64,
        limit_commit1, limit_commit1_schema, limit_commit64, limit_commit64_schema,
        floor_drain, floor_drain_pipelined, floor_get, floor_submit_seq, floor_call, floor_call_processes,
    )
}  # fmt: skip


def main() -> None:
    name, dialect, target = sys.argv[1:4]
    options = dict(DEFAULTS, **(json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}))
    fn = WORKLOADS[name]
    result = asyncio.run(fn(dialect, target, options)) if asyncio.iscoroutinefunction(fn) else fn(dialect, target, options)
    try:
        import cairnq

        result["sdk"] = cairnq.__version__
    except ImportError:
        result["sdk"] = None
    print(json.dumps(result))


if __name__ == "__main__":
    main()
