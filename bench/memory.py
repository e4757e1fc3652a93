"""Memory under load: a worker draining a deep backlog, and the byte budget.

    python bench/memory.py drain [--tasks 1000000] [--concurrency 64] [--db PATH_OR_DSN]
    python bench/memory.py budget [--tasks 200] [--payload-mb 1] [--budget-mb 8]

``drain`` bulk-loads N queued tasks (one INSERT ... SELECT, outside the
measurement), drains them all with one worker in this process, and samples the
process RSS every 250 ms: the peak must not grow with N (the worker holds at
most ``concurrency`` calls and their settlements, never the backlog).

``budget`` submits large payloads and runs a worker with
``max_in_flight_bytes``: it reports the largest sum of running payload sizes
seen, which must stay within the budget plus one claim's worth.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import tempfile
import time
from typing import Any, Callable

from cairnq import CairnQ, Worker


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def bulk_load(db: str, n: int) -> None:
    now = int(time.time() * 1000)
    if db.startswith(("postgres://", "postgresql://")):
        import psycopg

        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute(
                "insert into cairnq_tasks (id, name, queue, status, payload, metadata, run_at_ms, root_id,"
                " created_at_ms, updated_at_ms) select 'task_mem' || lpad(g::text, 22, '0'), 'noop', 'default',"
                " 'queued', jsonb_build_object('i', g), '{}'::jsonb, %s, 'task_mem' || g, %s, %s"
                " from generate_series(1, %s) as g",
                [now, now, now, n],
            )
            conn.execute("vacuum analyze cairnq_tasks")
        return
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("begin")
    conn.execute(
        "with recursive g(i) as (select 1 union all select i + 1 from g where i < ?)"
        " insert into cairnq_tasks (id, name, queue, status, payload, metadata, run_at_ms, root_id,"
        " created_at_ms, updated_at_ms) select printf('task_mem%022d', i), 'noop', 'default', 'queued',"
        " '{\"i\":' || i || '}', '{}', ?, 'task_mem' || i, ?, ? from g",
        (n, now, now, now),
    )
    conn.execute("commit")
    conn.execute("analyze cairnq_tasks")
    conn.close()


def client(db: str) -> CairnQ:
    return CairnQ.postgres(db) if db.startswith(("postgres://", "postgresql://")) else CairnQ.sqlite(db)


async def prepare_backlog(db: str, n: int) -> None:
    """Migrate ``db`` (a connect does it), then bulk-load ``n`` queued no-op tasks."""
    async with client(db) as q:
        await q.connect()
    bulk_load(db, n)


def counting_worker(store: Any, concurrency: int, sleep_s: float = 0.0) -> tuple[Worker, Callable[[], int]]:
    """A worker for the bulk-loaded tasks, and how many its handler has run:
    a no-op, or with ``sleep_s`` one that awaits ``asyncio.sleep(sleep_s)``
    first (I/O-bound work)."""
    worker = Worker(store, ["default"], concurrency=concurrency, poll_interval_ms=100)
    done = 0

    @worker.task("noop")
    async def noop(ctx: Any) -> None:
        nonlocal done
        if sleep_s:  # (without it the handler returns on its first step, as a no-op's does)
            await asyncio.sleep(sleep_s)
        done += 1

    return worker, lambda: done


async def drained(
    worker: Worker, done: Callable[[], int], tasks: int, poll_s: float, ended: Callable[[], None] | None = None
) -> float:
    """Run ``worker`` until ``done()`` reaches ``tasks``; the wall time from
    its start to then (``ended`` runs right after, before the worker stops)."""
    started = time.perf_counter()
    run = asyncio.ensure_future(worker.run())
    while done() < tasks:
        await asyncio.sleep(poll_s)
    elapsed = time.perf_counter() - started
    if ended is not None:
        ended()
    worker.stop()
    await run
    return elapsed


async def drain(db: str, n: int, concurrency: int) -> dict[str, Any]:
    await prepare_backlog(db, n)
    async with client(db) as q:
        worker, done = counting_worker(q.store, concurrency)
        start_rss, peak, samples = rss_mb(), 0.0, []
        started = time.perf_counter()
        async with worker.background():
            while done() < n:
                await asyncio.sleep(0.25)
                now = rss_mb()
                peak = max(peak, now)
                samples.append(now)
        elapsed = time.perf_counter() - started
        left = (await q.stats()).get("default", {}).get("queued", 0)
    return {
        "tasks": n, "concurrency": concurrency, "seconds": round(elapsed, 1),
        "tasks_per_s": round(n / elapsed), "rss_start_mb": round(start_rss, 1),
        "rss_peak_mb": round(peak, 1), "rss_end_mb": round(samples[-1] if samples else start_rss, 1),
        "queued_left": left,
    }  # fmt: skip


async def budget(db: str, n: int, payload_mb: float, budget_mb: float) -> dict[str, Any]:
    blob = "x" * int(payload_mb * 1024 * 1024)
    async with client(db) as q:
        for i in range(n):
            await q.submit("big", {"i": i, "blob": blob})
        limit = int(budget_mb * 1024 * 1024)
        worker = Worker(q.store, ["default"], concurrency=64, max_in_flight_bytes=limit, poll_interval_ms=50)
        running: dict[str, int] = {}
        peak_bytes, done = 0, 0

        @worker.task("big")
        async def big(ctx: Any, payload: dict[str, Any]) -> None:
            nonlocal peak_bytes, done
            running[ctx.task_id] = len(payload["blob"])
            peak_bytes = max(peak_bytes, sum(running.values()))
            await asyncio.sleep(0.01)
            del running[ctx.task_id]
            done += 1

        peak_rss = 0.0
        async with worker.background():
            while done < n:
                await asyncio.sleep(0.05)
                peak_rss = max(peak_rss, rss_mb())
    return {
        "tasks": n, "payload_mb": payload_mb, "budget_mb": budget_mb,
        "peak_running_payload_mb": round(peak_bytes / 1024 / 1024, 2), "rss_peak_mb": round(peak_rss, 1),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=("drain", "budget"))
    parser.add_argument("--tasks", type=int, default=None)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--payload-mb", type=float, default=1.0)
    parser.add_argument("--budget-mb", type=float, default=8.0)
    parser.add_argument("--db", default=None, help="SQLite path or Postgres DSN (default: a temp SQLite file)")
    args = parser.parse_args()
    db = args.db or os.path.join(tempfile.mkdtemp(prefix="cairnq-mem-"), "mem.db")
    if args.mode == "drain":
        result = asyncio.run(drain(db, args.tasks or 1_000_000, args.concurrency))
    else:
        result = asyncio.run(budget(db, args.tasks or 200, args.payload_mb, args.budget_mb))
    print(result)


if __name__ == "__main__":
    main()
