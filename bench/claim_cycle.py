"""Where a SQLite drain's claim cycle goes: the worker's own steps between statements.

    python bench/claim_cycle.py                      # 20,000 no-op tasks, concurrency 64
    python bench/claim_cycle.py --tasks 5000 --concurrency 16
    python bench/claim_cycle.py --sleep-ms 1         # handlers that await a 1 ms sleep

A worker drains a bulk-loaded backlog (as ``drain_statements.py``) while its
statements are timed (``drain_statements.TimedConnection``) and so are the
worker's own steps of each claim: the rows' decode, the claim plan, the
dispatch, the shared task's first steps (the handlers, and within them the
flush of the quick calls that returned), and the pass over a written group
of completions. The table gives each
one's median per claim and its share of a task; the stretches list, per claim,
the median time from the claim's COMMIT to the start of each step that follows
it, up to the next claim's BEGIN: what is left between them is the event
loop's turns and the code the table does not name. Then how many tasks
the claims took (the most frequent sizes): with ``--sleep-ms`` the handlers
suspend, and what frees slots is their sleeps ending.

The steps are timed by wrapping private methods of the worker and the store
(bench only): a rename there shows here as a missing step, not as an error.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from drain_statements import TimedConnection, _kind  # noqa: E402
from memory import client, counting_worker, drained, prepare_backlog  # noqa: E402

Marks = list[tuple[str, float, float]]

# (where, method, label): the worker's steps of a claim, in the order they run.
STEPS = (
    ("cairnq.store.ops.core:StoreCore", "_tasks", "decode rows"),
    ("cairnq.worker.claims:ClaimPlanner", "_calls", "plan calls"),
    ("cairnq.worker.worker:Worker", "_dispatch", "dispatch"),
    ("cairnq.worker.starter:_SharedStep", "_first_steps", "first steps"),
    ("cairnq.worker.book:QuickHold", "flush", "flush"),
    ("cairnq.worker.book:QuickHold", "_written", "written"),
)


def _timed(fn: Callable[..., Any], label: str, marks: Marks) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        try:
            return fn(*args, **kwargs)
        finally:
            marks.append((label, started, time.monotonic()))

    return timed


def _wrap_steps(marks: Marks) -> list[str]:
    """Wrap each step found; the labels of those not found."""
    import importlib

    missing = []
    for where, method, label in STEPS:
        module, _, cls_name = where.partition(":")
        cls = getattr(importlib.import_module(module), cls_name, None)
        fn = getattr(cls, method, None) if cls is not None else None
        if fn is None:
            missing.append(label)
            continue
        setattr(cls, method, _timed(fn, label, marks))
    return missing


async def drain(
    db: str, concurrency: int, tasks: int, marks: Marks, sizes: collections.Counter[int], sleep_s: float = 0.0
) -> float:
    def record(sql: str, started: float, ended: float) -> None:
        marks.append((_kind(sql), started, ended))

    def fetched(sql: str, started: float, ended: float) -> None:
        marks.append((_kind(sql) + ", rows fetched", started, ended))

    async with client(db) as q:
        await q.store.connect()
        engine = q.store._engine  # bench only: the store's one engine
        engine.conn = TimedConnection(engine.conn, record, fetched)
        worker, done = counting_worker(q.store, concurrency, sleep_s)
        dispatch = worker._dispatch  # bench only: the claim's calls, counted

        def counted(calls: list[Any]) -> None:
            sizes[sum(len(tasks) for _, tasks in calls)] += 1
            dispatch(calls)

        worker._dispatch = counted  # type: ignore[method-assign]
        return await drained(worker, done, tasks, 0.005)


def report(marks: Marks, tasks: int, elapsed: float, sizes: collections.Counter[int]) -> None:
    marks.sort(key=lambda mark: mark[1])
    claims = sum(1 for label, _, _ in marks if label == "BEGIN")
    print(f"{tasks:,} tasks, {claims} claims: {tasks / elapsed:,.0f} tasks/s, {elapsed / tasks * 1e6:.1f} us a task")
    durations: dict[str, list[float]] = collections.defaultdict(list)
    for label, started, ended in marks:
        durations[label].append(ended - started)
    print(f"{'step (or statement)':<44}{'calls':>7}{'median us':>11}{'us/task':>9}")
    for label, spans in sorted(durations.items(), key=lambda kv: -sum(kv[1])):
        print(f"{label[:44]:<44}{len(spans):>7}{statistics.median(spans) * 1e6:>11.1f}{sum(spans) / tasks * 1e6:>9.2f}")
    # From each claim's COMMIT to each step after it, up to the next BEGIN.
    after: dict[str, list[float]] = collections.defaultdict(list)
    committed = None
    for label, started, ended in marks:
        if label == "COMMIT":
            committed = ended
            continue
        if committed is not None:
            after[label].append(started - committed)
            if label == "BEGIN":
                committed = None
    print("\nfrom a claim's COMMIT to the start of (median us):")
    for label, gaps in sorted(after.items(), key=lambda kv: statistics.median(kv[1])):
        if len(gaps) * 2 >= claims:  # (steps of most claims: not the odd read)
            print(f"  {label[:40]:<40}{statistics.median(gaps) * 1e6:>9.1f}")
    common = ", ".join(f"{size} x{count}" for size, count in sizes.most_common(6))
    print(f"\ntasks a claim: {tasks / max(1, sum(sizes.values())):.1f} on average; most often {common}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--sleep-ms", type=float, default=0.0, help="each handler awaits a sleep this long")
    args = parser.parse_args()
    db = os.path.join(tempfile.mkdtemp(prefix="cairnq-cycle-"), "drain.db")
    asyncio.run(prepare_backlog(db, args.tasks))
    marks: Marks = []
    missing = _wrap_steps(marks)
    if missing:
        print(f"(not found, not timed: {', '.join(missing)})")
    sizes: collections.Counter[int] = collections.Counter()
    elapsed = asyncio.run(drain(db, args.concurrency, args.tasks, marks, sizes, args.sleep_ms / 1000))
    report(marks, args.tasks, elapsed, sizes)


if __name__ == "__main__":
    main()
