"""How the PostgreSQL claim and probe statements get their queue and name
values: three safe ways, measured side by side (issue 11).

    python bench/claim_binding.py [--rounds 3] [--modes literals,unnamed,custom] [--workloads ...]

Modes:
  literals  the values written into the text as escaped literals, slot by slot
            (what runs): a prepared statement per (queue, name) combination
  unnamed   every value bound; the claim and probe statements sent unprepared:
            the unnamed statement, parsed and planned with the values each call
  custom    every value bound; prepared, with plan_cache_mode=force_custom_plan
            on every connection (PostgreSQL has no per-statement setting, so
            every statement is planned on every execution)

Workloads (PostgreSQL, a fresh database each):
  claim_idle    store.claim(names=["idle"]) against 20k queued "busy" tasks:
                the probe finds nothing (bench/workloads.py claim_idle)
  draw_idle     the claim statement alone for "idle" (no probe, no
                transaction: the worker's draw after a wakeup), same backlog
  claim_busy    store.claim(names=["busy"]) taking one task of the backlog
  drain_c64     bench/workloads.py drain_c64 (tasks/s)
  call_latency  submit + wait against a worker process (p50 ms)

Each (mode, workload) runs in a process of its own; the order of the modes
rotates between rounds. Prints the median [min-max] per cell.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

MODES = ("literals", "unnamed", "custom")
WORKLOADS = ("claim_idle", "draw_idle", "claim_busy", "drain_c64", "call_latency")
HIGHER_IS_BETTER = {"drain_c64"}


# -- the modes ----------------------------------------------------------------------------


def apply_mode(mode: str, dsn: str) -> str:
    """Patch this process's cairnq for ``mode``; returns the DSN to use."""
    if mode == "literals":
        return dsn
    from cairnq._sql import load_statements
    from cairnq.store import pg_pool
    from cairnq.store.postgres import store as pg_store
    from cairnq.store.postgres.params import positional_statement

    def bind_all(self: Any, stmt: Any, params: dict[str, Any]) -> tuple[str, list[Any]]:
        text, names = self._positional_for(stmt.name)
        return text, [params[n] for n in names]

    pg_store.PostgresStore._bind_with_literals = bind_all  # type: ignore[method-assign]
    if mode == "custom":
        option = quote("-c plan_cache_mode=force_custom_plan")
        return dsn + ("&" if "?" in dsn else "?") + f"options={option}"
    statements = load_statements("postgres")
    unprepared = {positional_statement(statements[n].text)[0] for n in statements if statements[n].plan_per_value}
    run = pg_pool._Session._run

    async def run_unprepared(self: Any, text: str, values: Any, prepare: bool) -> Any:
        return await run(self, text, values, prepare and text not in unprepared)

    pg_pool._Session._run = run_unprepared  # type: ignore[method-assign]
    return dsn


# -- the workloads (run in a child process) -----------------------------------------------------


async def _backlog(dsn: str, n: int) -> Any:
    import psycopg

    from cairnq import CairnQ
    from workloads import _submit_many

    q = CairnQ.postgres(dsn)
    for _ in range(0, n, 2_000):
        await _submit_many(q, 2_000, name="busy")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("analyze cairnq_tasks")
    return q


async def _median_us(runs: int, op: Any) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        await op()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1e6


async def claim_idle(dsn: str, o: dict[str, Any]) -> dict[str, Any]:
    from workloads import claim_idle as shared

    return await shared("postgres", dsn, o)  # type: ignore[no-any-return]


async def draw_idle(dsn: str, o: dict[str, Any]) -> dict[str, Any]:
    q = await _backlog(dsn, o["backlog"])
    store = q.store

    async def take(draw: Any) -> Any:
        return await draw(["idle"], 1)

    async def op() -> None:
        draw = store._claim_session(["default"], "bench", 30_000, ["idle"], take, probe=False, single_draw=True)
        assert await draw == []

    value = await _median_us(o["claims"], op)
    await q.close()
    return {"value": value, "unit": "us per idle-name draw (median)"}


async def claim_busy(dsn: str, o: dict[str, Any]) -> dict[str, Any]:
    q = await _backlog(dsn, o["backlog"])
    store = q.store

    async def op() -> None:
        assert len(await store.claim(queues=["default"], worker_id="bench", names=["busy"])) == 1

    value = await _median_us(o["claims"], op)
    await q.close()
    return {"value": value, "unit": "us per claim of one task (median)"}


async def drain_c64(dsn: str, o: dict[str, Any]) -> dict[str, Any]:
    from workloads import drain_c64 as shared

    return await shared("postgres", dsn, o)  # type: ignore[no-any-return]


async def call_latency(dsn: str, o: dict[str, Any], mode: str) -> dict[str, Any]:
    from cairnq import CairnQ
    from workloads import timed_calls

    worker = subprocess.Popen(
        [sys.executable, "-I", __file__, "serve", mode, dsn],
        stdin=subprocess.DEVNULL,
        cwd=tempfile.gettempdir(),
    )
    try:
        async with CairnQ.postgres(dsn) as q:
            await q.call("ready", timeout_ms=60_000)
            samples = await timed_calls(q, o["calls"])
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    return {"value": statistics.median(samples), "unit": "ms per call (p50)"}


def serve(mode: str, dsn: str) -> None:
    from cairnq import Worker

    worker = Worker.postgres(apply_mode(mode, dsn), concurrency=4)

    @worker.task("echo")
    async def echo(ctx: Any, payload: Any) -> Any:
        return payload

    @worker.task("ready")
    async def ready(ctx: Any) -> str:
        return "ok"

    worker.serve()


def child(mode: str, workload: str, dsn: str, options: dict[str, Any]) -> None:
    from workloads import DEFAULTS

    o = dict(DEFAULTS, **options)
    target = apply_mode(mode, dsn)
    fn = globals()[workload]
    extra = (mode,) if workload == "call_latency" else ()
    print(json.dumps(asyncio.run(fn(target, o, *extra))))


# -- the driver -----------------------------------------------------------------------------------


def run_one(mode: str, workload: str, options: dict[str, Any]) -> float:
    from backends import create_database, drop_database, dsn_for

    name = create_database()
    try:
        proc = subprocess.run(
            [sys.executable, "-I", __file__, "run", mode, workload, dsn_for(name), json.dumps(options)],
            capture_output=True,
            text=True,
            timeout=900,
            cwd=tempfile.gettempdir(),
        )
    finally:
        drop_database(name)
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} {workload} failed:\n{proc.stderr[-3000:]}")
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["value"])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "run":
        child(sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5]))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        serve(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--options", default="{}", help="JSON overrides for bench/workloads.py DEFAULTS")
    args = parser.parse_args()
    modes = args.modes.split(",")
    options = json.loads(args.options)
    samples: dict[tuple[str, str], list[float]] = {}
    for workload in args.workloads.split(","):
        for r in range(args.rounds):
            for mode in modes[r % len(modes) :] + modes[: r % len(modes)]:
                value = run_one(mode, workload, options)
                samples.setdefault((workload, mode), []).append(value)
                print(f"  {workload:<13} {mode:<9} {value:,.1f}", file=sys.stderr, flush=True)
    print("| workload | " + " | ".join(modes) + " |")
    print("|---|" + "---:|" * len(modes))
    for workload in args.workloads.split(","):
        cells = []
        for mode in modes:
            s = samples[(workload, mode)]
            cells.append(f"{statistics.median(s):,.1f} [{min(s):,.1f}-{max(s):,.1f}]")
        better = "higher" if workload in HIGHER_IS_BETTER else "lower"
        print(f"| {workload} ({better} is better) | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
