"""Where a drain spends its time: a sampling profile of one worker draining
no-op tasks, folded into self time per function.

    python bench/profile_drain.py                         # SQLite, 20,000 tasks, concurrency 64
    python bench/profile_drain.py --db postgresql://127.0.0.1:5432/test --tasks 10000
    CAIRNQ_PURE_PYTHON=1 python bench/profile_drain.py    # the same with the Python twins

The queue is bulk-loaded first (outside the profile, the same INSERT ... SELECT
as bench/memory.py); the profile covers the worker only, from its first claim
to the last settlement. The table lists the functions with the most self time
(time on the CPU in that function's own code, not its callees), grouped into
the layers that matter for tuning: the database driver, JSON, our kernels, the
event loop, and cairnq's own Python.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import sys
import tempfile
from typing import Any

from pyinstrument import Profiler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cairnq  # noqa: E402
from memory import client, counting_worker, drained, prepare_backlog  # noqa: E402

LAYERS = [  # first match wins; matched against "file:function"
    ("waiting in epoll (idle, not CPU)", ("poll", "select")),
    ("sqlite3 / libpq (database calls)", ("sqlite3", "psycopg", "execute", "fetchall", "commit")),
    ("orjson / json", ("orjson", "json")),
    ("compiled kernels", ("_speedups",)),
    ("event loop", ("asyncio", "selectors", "events.py", "base_events", "futures", "tasks.py")),
    ("cairnq", ("cairnq",)),
]


def layer_of(where: str) -> str:
    for label, needles in LAYERS:
        if any(n in where for n in needles):
            return label
    return "other"


def fold(frame: Any, out: dict[str, float]) -> None:
    # A synthetic "[self]" child carries its parent's own time, which the
    # parent's total_self_time already counts.
    if not frame.is_synthetic:
        where = f"{frame.file_path_short or frame.file_path or '?'}:{frame.function}"
        out[where] += frame.total_self_time
    for child in frame.children:
        fold(child, out)


async def drain(db: str, concurrency: int, tasks: int) -> tuple[float, Profiler]:
    async with client(db) as q:
        worker, done = counting_worker(q.store, concurrency)
        profiler = Profiler(interval=0.0005, async_mode="disabled")
        profiler.start()
        elapsed = await drained(worker, done, tasks, 0.02, ended=profiler.stop)
        return elapsed, profiler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", help="SQLite path or Postgres DSN (default: a temp SQLite file)")
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--top", type=int, default=18)
    args = parser.parse_args()
    tmp = None
    db = args.db
    if db is None:
        tmp = tempfile.mkdtemp(prefix="cairnq-profile-")
        db = os.path.join(tmp, "profile.db")
    asyncio.run(prepare_backlog(db, args.tasks))
    elapsed, profiler = asyncio.run(drain(db, args.concurrency, args.tasks))
    session = profiler.last_session
    assert session is not None
    root = session.root_frame()
    per_function: dict[str, float] = collections.defaultdict(float)
    if root is not None:
        fold(root, per_function)
    total = sum(per_function.values()) or 1.0
    per_layer: dict[str, float] = collections.defaultdict(float)
    for where, t in per_function.items():
        per_layer[layer_of(where)] += t
    print(f"kernels: {cairnq.SPEEDUPS}; {args.tasks} tasks at concurrency {args.concurrency} on "
          f"{'PostgreSQL' if db.startswith(('postgres://', 'postgresql://')) else 'SQLite'}: "
          f"{elapsed:.2f}s, {args.tasks / elapsed:,.0f} tasks/s, "
          f"{elapsed / args.tasks * 1e6:.0f} us per task wall, {total / args.tasks * 1e6:.0f} us sampled")  # fmt: skip
    print("\nself time by layer (us per task, share):")
    for label, t in sorted(per_layer.items(), key=lambda kv: -kv[1]):
        print(f"  {label:<36} {t / args.tasks * 1e6:7.1f}  {t / total:6.1%}")
    print(f"\ntop {args.top} functions by self time (us per task, share):")
    for where, t in sorted(per_function.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"  {where[-70:]:<70} {t / args.tasks * 1e6:7.1f}  {t / total:6.1%}")


if __name__ == "__main__":
    main()
