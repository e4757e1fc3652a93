"""Drain throughput of ``cairnq worker --processes N`` (issue 14, part 2).

    python bench/processes.py [--dialects sqlite,postgres] [--sizes 5000,50000]
        [--processes 1,2,4] [--handlers noop,cpu1ms] [--rounds 3] [--rounds-large 2]
        [--concurrency 64] [--json FILE]

Each cell: a fresh database (a SQLite file in a temporary directory, or a new
PostgreSQL database), a bulk-loaded backlog of N queued "noop" tasks (one
INSERT ... SELECT, bench/memory.py), then the real command

    python -m cairnq --db DB worker benchapp:setup --processes P --concurrency 64 --poll-interval-ms 100

until every task succeeded, then SIGTERM. The handler returns at once (noop)
or burns 1 ms of CPU holding the loop (cpu1ms). Reported: drain throughput
from the first completion to the last (the tasks' own updated_at_ms, so
interpreter start-up is not counted), its median over the rounds, and the
wall time from launch to done.

``--overhead`` instead compares one worker process under the supervisor
(``cli.supervisor.supervise`` with one child, the code path of --processes N
for N > 1) with plain ``cairnq worker`` on the no-op drain, and reports the
supervisor's own CPU time (/proc/PID/stat) over the run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent))

from memory import prepare_backlog  # noqa: E402

ADMIN_DSN = os.environ.get("CAIRNQ_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")

APP = """
import os, time

HANDLER = os.environ.get("BENCH_HANDLER", "noop")


async def noop(ctx, payload):
    return None


async def cpu1ms(ctx, payload):
    end = time.perf_counter() + 0.001  # 1 ms of CPU, holding the loop
    while time.perf_counter() < end:
        pass


def setup(worker):
    worker.register("noop", cpu1ms if HANDLER == "cpu1ms" else noop)
"""

# One child under the supervisor, built as the CLI builds its children.
SUPERVISED_ONE = """
import os, sys
from cairnq.cli.supervisor import supervise
sys.exit(supervise(sys.argv[1:], os.environ, 1))
"""


# -- databases ----------------------------------------------------------------------


class Database:
    def __init__(self, dialect: str, workdir: Path) -> None:
        self.dialect = dialect
        self.name = f"cairnq_bench_{uuid.uuid4().hex[:10]}"
        if dialect == "sqlite":
            self.target = str(workdir / f"{self.name}.db")
        else:
            import psycopg

            with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
                conn.execute(f'create database "{self.name}"')
            self.target = ADMIN_DSN.rpartition("/")[0] + "/" + self.name

    def drop(self) -> None:
        if self.dialect == "sqlite":
            for suffix in ("", "-wal", "-shm"):
                Path(self.target + suffix).unlink(missing_ok=True)
            return
        import psycopg

        with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
            conn.execute(f'drop database if exists "{self.name}" with (force)')

    def query(self, sql: str) -> Any:
        if self.dialect == "sqlite":
            conn = sqlite3.connect(self.target, timeout=30)
            try:
                return conn.execute(sql).fetchone()
            finally:
                conn.close()
        import psycopg

        with psycopg.connect(self.target, autocommit=True) as conn:
            return conn.execute(sql).fetchone()

    def succeeded(self) -> int:
        return int(self.query("select count(*) from cairnq_tasks where status = 'succeeded'")[0])

    def completion_span_ms(self) -> int:
        lo, hi = self.query(
            "select min(updated_at_ms), max(updated_at_ms) from cairnq_tasks where status = 'succeeded'"
        )
        return int(hi - lo)


# -- one run ------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """user + system CPU of the process itself (not of its children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def worker_command(target: str, processes: int, concurrency: int) -> list[str]:
    return [
        sys.executable, "-m", "cairnq", "--db", target, "worker", "benchapp:setup",
        "--processes", str(processes), "--concurrency", str(concurrency), "--poll-interval-ms", "100",
    ]  # fmt: skip


def run_cell(
    dialect: str, n: int, processes: int, handler: str, concurrency: int, workdir: Path, mode: str = "cli"
) -> dict[str, Any]:
    db = Database(dialect, workdir)
    try:
        asyncio.run(prepare_backlog(db.target, n))
        env = dict(os.environ, BENCH_HANDLER=handler)
        env.pop("CAIRNQ_DB", None)
        if mode == "supervised-one":
            child = [
                sys.executable, "-m", "cairnq", "worker", "benchapp:setup",
                "--concurrency", str(concurrency), "--poll-interval-ms", "100",
            ]  # fmt: skip
            argv = [sys.executable, "-c", SUPERVISED_ONE, *child]
            env["CAIRNQ_DB"] = db.target
        else:
            argv = worker_command(db.target, processes, concurrency)
        started = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL)
        try:
            while db.succeeded() < n:
                if proc.poll() is not None:
                    raise RuntimeError(f"the worker exited with {proc.returncode}")
                time.sleep(0.1)
            wall = time.perf_counter() - started
            own_cpu = cpu_seconds(proc.pid)
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        span_ms = max(1, db.completion_span_ms())
        return {
            "dialect": dialect, "tasks": n, "processes": processes, "handler": handler, "mode": mode,
            "tasks_per_s": round((n - 1) * 1000 / span_ms), "wall_s": round(wall, 2),
            "launcher_cpu_s": round(own_cpu, 3), "exit": code,
        }  # fmt: skip
    finally:
        db.drop()


def median_cell(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return dict(
        rows[0],
        tasks_per_s=round(statistics.median(r["tasks_per_s"] for r in rows)),
        tasks_per_s_all=[r["tasks_per_s"] for r in rows],
        wall_s=round(statistics.median(r["wall_s"] for r in rows), 2),
        launcher_cpu_s=round(statistics.median(r["launcher_cpu_s"] for r in rows), 3),
        rounds=len(rows),
    )


def cells(args: argparse.Namespace) -> Iterator[tuple[str, int, str, int]]:
    for dialect in args.dialects.split(","):
        for n in (int(x) for x in args.sizes.split(",")):
            for handler in args.handlers.split(","):
                for processes in (int(x) for x in args.processes.split(",")):
                    yield dialect, n, handler, processes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dialects", default="sqlite,postgres")
    parser.add_argument("--sizes", default="5000,50000")
    parser.add_argument("--processes", default="1,2,4")
    parser.add_argument("--handlers", default="noop,cpu1ms")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rounds-large", type=int, default=2, help="rounds for sizes above 10000")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--overhead", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="cairnq-processes-") as tmp:
        workdir = Path(tmp)
        (workdir / "benchapp.py").write_text(APP)
        if args.overhead:
            plan = [
                (d, n, "noop", 1, mode)
                for d in args.dialects.split(",")
                for n in (int(x) for x in args.sizes.split(","))
                for mode in ("cli", "supervised-one")
            ]
        else:
            plan = [(d, n, h, p, "cli") for d, n, h, p in cells(args)]
        by_cell: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        rounds = max(args.rounds, args.rounds_large)
        # Rounds interleave the cells, so a slow spell on the shared machine
        # lands on all of them rather than on one.
        for r in range(rounds):
            for dialect, n, handler, processes, mode in plan:
                if n > 10_000 and r >= args.rounds_large or n <= 10_000 and r >= args.rounds:
                    continue
                row = run_cell(dialect, n, processes, handler, args.concurrency, workdir, mode)
                print(json.dumps(row), flush=True)
                by_cell.setdefault((dialect, n, handler, processes, mode), []).append(row)
        results = [median_cell(rows) for rows in by_cell.values()]
    print("\nmedians:")
    for row in results:
        print(json.dumps(row))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
