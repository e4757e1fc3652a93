"""A large, realistic table of tasks, written straight into a migrated
database (test data only: far faster than submitting a million tasks).

The shape is a production history: a month of tasks with ULID ids of their
creation time, most finished, a few queued or running, skewed over queues
and names. Used by the dashboard's plan tests and its page benchmark.
"""

from __future__ import annotations

import random
import sqlite3
from typing import Any, Iterator

from cairnq._ids import new_ulid

COLUMNS = (
    "id", "name", "queue", "status", "payload", "result", "error", "metadata", "attempt",
    "max_attempts", "priority", "worker_id", "lease_until_ms", "run_at_ms", "correlation_id",
    "created_at_ms", "updated_at_ms", "completed_at_ms",
)  # fmt: skip
QUEUES = ("default",) * 8 + ("mail", "img", "billing", "reports", "webhooks", "search")
NAMES = tuple(f"job.{n}" for n in range(20))
ERROR = '{"type":"Boom","message":"it broke","retryable":false}'
DAY_MS = 86_400_000


def rows(count: int, now_ms: int, *, days: int = 30, seed: int = 7) -> Iterator[tuple[Any, ...]]:
    """``count`` rows in creation order over the ``days`` before ``now_ms``."""
    rnd = random.Random(seed)
    start = now_ms - days * DAY_MS
    step = (days * DAY_MS) / count
    for i in range(count):
        created = int(start + i * step)
        roll = rnd.random()
        age = now_ms - created
        # the newest tasks are the unfinished ones, as in a live queue
        if age < 600_000 and roll < 0.5:
            status = "queued"
        elif age < 600_000 and roll < 0.52:
            status = "running"
        elif roll < 0.03:
            status = "failed"
        elif roll < 0.05:
            status = "canceled"
        else:
            status = "succeeded"
        done = status in ("succeeded", "failed", "canceled")
        completed = created + rnd.randrange(5, 60_000) if done else None
        worker = f"worker_{rnd.randrange(16):02d}" if status != "queued" and status != "canceled" else None
        yield (
            "task_" + new_ulid(created),
            rnd.choice(NAMES),
            rnd.choice(QUEUES),
            status,
            '{"n":%d}' % i,
            '{"ok":true}' if status == "succeeded" else None,
            ERROR if status == "failed" else None,
            "{}",
            1 if status != "queued" else 0,
            3,
            rnd.choice((0, 0, 0, 5)),
            worker,
            now_ms + 30_000 if status == "running" else None,
            created,
            f"corr_{i // 10}" if rnd.random() < 0.1 else None,
            created,
            completed or created,
            completed,
        )


def fill_sqlite(path: str, count: int, now_ms: int, *, analyze: bool = True) -> None:
    """Append ``count`` rows to the migrated SQLite file at ``path``, then
    refresh the planner statistics (``analyze=False``: leave them, as a bulk
    load past the store would, for the store's own upkeep to find)."""
    conn = sqlite3.connect(path)
    try:
        marks = ", ".join("?" for _ in COLUMNS)
        with conn:
            conn.executemany(
                f"insert into cairnq_tasks ({', '.join(COLUMNS)}) values ({marks})",
                rows(count, now_ms),
            )
        if analyze:
            conn.execute("analyze")
    finally:
        conn.close()


def fill_postgres(dsn: str, count: int, now_ms: int) -> None:
    """The same rows into a migrated PostgreSQL database, by COPY, then analyze."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        with conn.cursor().copy(
            f"copy cairnq_tasks ({', '.join(COLUMNS)}) from stdin"
        ) as copy:
            for row in rows(count, now_ms):
                copy.write_row(row)
        conn.execute("vacuum analyze cairnq_tasks")
