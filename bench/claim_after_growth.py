"""A SQLite claim for several task names after the table grew past the size its
planner statistics were taken at.

    python bench/claim_after_growth.py                       # 20,000 finished rows
    python bench/claim_after_growth.py --finished 100000 --claims 20

The life of a new deployment, compressed: the database is created, a first
task is submitted, and the planner statistics are taken while the table holds
that one row (by a store's open, or by any process's ANALYZE: this script runs
one itself, so every build starts from the same statistics). Then the table
grows (``--finished`` finished rows, and a backlog of two names) and a store
opens it, as a worker restarting would, and claims 64 tasks at a time for
both names. Reported: the claim's median time, through the public store API.

A/B two builds by running the same command with each interpreter:

    OLD/bin/python bench/claim_after_growth.py
    NEW/bin/python bench/claim_after_growth.py

Statistics that say "one row" made this claim walk the whole table for each
candidate until SQLite next measured the table; see docs/sqlite.md,
"Planner statistics".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import tempfile
import time

from cairnq import CairnQ

NAMES = ["resize", "thumbnail"]


def grow(db: str, finished: int, queued: int) -> None:
    """Rows written past the store, as a bulk load or a busy first hour would."""
    now = int(time.time() * 1000)
    with sqlite3.connect(db) as conn:
        conn.execute(
            "with recursive g(i) as (select 1 union all select i + 1 from g where i < ?)"
            " insert into cairnq_tasks (id, name, queue, status, payload, metadata, run_at_ms, root_id,"
            " created_at_ms, updated_at_ms, completed_at_ms)"
            " select printf('task_done%022d', i), 'resize', 'default', 'succeeded', '{}', '{}', ?,"
            " printf('task_done%022d', i), ?, ?, ? from g",
            (finished, now, now, now, now),
        )
        conn.execute(
            "with recursive g(i) as (select 1 union all select i + 1 from g where i < ?)"
            " insert into cairnq_tasks (id, name, queue, status, payload, metadata, run_at_ms, root_id,"
            " created_at_ms, updated_at_ms)"
            " select printf('task_todo%022d', i), case i % 2 when 0 then 'resize' else 'thumbnail' end,"
            " 'default', 'queued', '{}', '{}', ?, printf('task_todo%022d', i), ?, ? from g",
            (queued, now - 1000, now, now),
        )


async def run(finished: int, claims: int) -> dict[str, float]:
    db = os.path.join(tempfile.mkdtemp(prefix="cairnq-growth-"), "tasks.db")
    async with CairnQ.sqlite(db) as q:
        await q.submit("resize")
    with sqlite3.connect(db) as conn:
        conn.execute("analyze cairnq_tasks")  # taken at one row
    grow(db, finished, 64 * claims)
    store = CairnQ.sqlite(db).store
    await store.connect()
    try:
        times = []
        for _ in range(claims):
            started = time.perf_counter()
            tasks = await store.claim(queues=["default"], worker_id="bench", limit=64, names=NAMES)
            times.append(time.perf_counter() - started)
            assert len(tasks) == 64, len(tasks)
    finally:
        await store.close()
    return {"finished_rows": finished, "claims": claims, "claim_ms_p50": statistics.median(times) * 1000,
            "claim_ms_max": max(times) * 1000}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--finished", type=int, default=20_000)
    parser.add_argument("--claims", type=int, default=10)
    args = parser.parse_args()
    result = asyncio.run(run(args.finished, args.claims))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
