"""``cairnq demo``: the main job on the embedded default, end to end.

Creates a SQLite file, submits N tasks, drains them with a worker in the same
process, and reports the throughput of each phase.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from typing import Any

import cairnq
from cairnq import CairnQ, Worker


def add_parser(commands: Any) -> None:
    p = commands.add_parser("demo", help="submit and drain tasks on a local SQLite file")
    p.add_argument("--tasks", type=int, default=5_000, help="tasks to run (default 5000)")
    p.add_argument("--concurrency", type=int, default=64, help="handler calls in flight (default 64)")
    p.add_argument("--db", default=None, help="SQLite file (default: a new temporary file)")
    p.set_defaults(run=run)


class Bar:
    """A one-line progress bar on stderr (plain lines when not a terminal)."""

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total, self.tty = label, total, sys.stderr.isatty()
        self.started = time.perf_counter()

    def show(self, done: int) -> None:
        if not self.tty:
            return
        width = 30
        filled = int(width * done / max(1, self.total))
        rate = done / max(1e-9, time.perf_counter() - self.started)
        sys.stderr.write(
            f"\r{self.label:<8} [{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} {rate:,.0f}/s"
        )
        sys.stderr.flush()

    def finish(self, done: int) -> float:
        elapsed = time.perf_counter() - self.started
        self.show(done)
        if self.tty:
            sys.stderr.write("\n")
        return elapsed


async def _demo(path: str, n: int, concurrency: int) -> None:
    async with CairnQ.sqlite(path) as tasks:
        print(f"cairnq {cairnq.__version__} ({cairnq.SPEEDUPS} kernels) on {path}")
        bar = Bar("submit", n)
        submitted = 0

        async def producer(ids: range) -> None:
            nonlocal submitted
            for i in ids:
                await tasks.submit("demo.square", {"n": i})
                submitted += 1
                if submitted % 250 == 0:
                    bar.show(submitted)

        lanes = 64
        await asyncio.gather(*(producer(range(k, n, lanes)) for k in range(lanes)))
        submit_s = bar.finish(submitted)

        worker = Worker(tasks.store, ["default"], concurrency=concurrency)
        done = 0

        @worker.task("demo.square")
        async def square(ctx: Any, payload: dict[str, int]) -> dict[str, int]:
            nonlocal done
            done += 1
            return {"square": payload["n"] ** 2}

        bar = Bar("drain", n)
        async with worker.background():
            while done < n:
                bar.show(done)
                await asyncio.sleep(0.05)
        drain_s = bar.finish(done)
        stats = (await tasks.stats())["default"]
        sample = (await tasks.list(status="succeeded", limit=1))[0]
        print(f"submitted {n} tasks in {submit_s:.2f}s ({n / submit_s:,.0f}/s, 64 producers)")
        print(f"drained   {n} tasks in {drain_s:.2f}s ({n / drain_s:,.0f}/s, concurrency {concurrency})")
        print(f"status    {stats}")
        print(f"e.g.      {sample.id} {sample.payload} -> {sample.result}")


def run(args: argparse.Namespace) -> int:
    if args.tasks < 1 or args.concurrency < 1:
        print("cairnq demo: --tasks and --concurrency must be >= 1", file=sys.stderr)
        return 2
    path = args.db
    cleanup = path is None
    if path is None:
        path = os.path.join(tempfile.mkdtemp(prefix="cairnq-demo-"), "tasks.db")
    try:
        asyncio.run(_demo(path, args.tasks, args.concurrency))
    finally:
        if cleanup:
            for suffix in ("", "-wal", "-shm"):
                try:
                    os.remove(path + suffix)
                except FileNotFoundError:
                    pass
            os.rmdir(os.path.dirname(path))
    return 0
