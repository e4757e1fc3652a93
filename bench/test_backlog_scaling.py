"""Claim, submit and heartbeat cost against backlogs of 1k, 100k and 1M rows.

The indexes are read in claim order, so the cost of taking the next task must
not grow with the backlog behind it. Sizes come from CAIRNQ_BENCH_SCALES
(default "1000,100000,1000000"); the backlog is loaded with one bulk INSERT
per size, outside the timings.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from typing import Iterator

import pytest

from cairnq import CairnQ

SCALES = [int(x) for x in os.environ.get("CAIRNQ_BENCH_SCALES", "1000,100000,1000000").split(",")]
BATCH = 50


def _bulk_sqlite(path: str, n: int) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    now = int(time.time() * 1000)
    conn.execute("begin")
    conn.execute(
        "with recursive g(i) as (select 1 union all select i + 1 from g where i < ?)"
        " insert into cairnq_tasks (id, name, queue, status, payload, metadata, run_at_ms,"
        " root_id, created_at_ms, updated_at_ms)"
        " select printf('task_bulk%021d', i), 'bulk', 'default', 'queued', '{\"i\":' || i || '}', '{}',"
        " ? + i, printf('task_bulk%021d', i), ?, ? from g",
        (n, now - 10 * n, now, now),
    )
    conn.execute("commit")
    conn.execute("analyze cairnq_tasks")
    conn.close()


def _bulk_postgres(dsn: str, n: int) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "insert into cairnq_tasks (id, name, queue, status, payload, metadata, run_at_ms,"
            " root_id, created_at_ms, updated_at_ms)"
            " select 'task_bulk' || lpad(g::text, 21, '0'), 'bulk', 'default', 'queued',"
            " jsonb_build_object('i', g), '{}'::jsonb, 1000 + g, 'task_bulk' || lpad(g::text, 21, '0'), 1, 1"
            " from generate_series(1, %s) as g",
            [n],
        )
        conn.execute("vacuum analyze cairnq_tasks")


@pytest.fixture(scope="module", params=SCALES, ids=lambda n: f"{n}rows")
def loaded(request: pytest.FixtureRequest, loop: asyncio.AbstractEventLoop, target: tuple[str, str]) -> Iterator[tuple[str, int, CairnQ]]:
    dialect, where = target
    n = request.param
    q = CairnQ.sqlite(where) if dialect == "sqlite" else CairnQ.postgres(where)
    loop.run_until_complete(q.connect())
    loop.run_until_complete(q.close())
    if dialect == "sqlite":
        _bulk_sqlite(where, n)
    else:
        _bulk_postgres(where, n)
    yield dialect, n, q
    loop.run_until_complete(q.close())
    if dialect == "sqlite":
        with sqlite3.connect(where) as conn:
            conn.execute("delete from cairnq_tasks")
    else:
        import psycopg

        with psycopg.connect(where, autocommit=True) as conn:
            conn.execute("truncate cairnq_task_keys, cairnq_tasks")


def test_claim_next(benchmark, loop: asyncio.AbstractEventLoop, loaded: tuple[str, int, CairnQ]) -> None:
    dialect, n, q = loaded
    benchmark.group = f"claim 1 task x{BATCH}, {dialect}"
    store = q.store

    async def batch() -> None:
        for _ in range(BATCH):
            assert len(await store.claim(queues=["default"], worker_id="bench", names=["bulk"])) == 1

    benchmark.pedantic(lambda: loop.run_until_complete(batch()), rounds=5, iterations=1, warmup_rounds=1)


def test_submit(benchmark, loop: asyncio.AbstractEventLoop, loaded: tuple[str, int, CairnQ]) -> None:
    dialect, n, q = loaded
    benchmark.group = f"submit x{BATCH}, {dialect}"

    async def batch() -> None:
        for i in range(BATCH):
            await q.submit("bench.submit", {"i": i})

    benchmark.pedantic(lambda: loop.run_until_complete(batch()), rounds=5, iterations=1, warmup_rounds=1)


def test_heartbeat_batch_64(benchmark, loop: asyncio.AbstractEventLoop, loaded: tuple[str, int, CairnQ]) -> None:
    dialect, n, q = loaded
    benchmark.group = f"heartbeat_batch of 64 leases x{BATCH}, {dialect}"
    store = q.store
    claimed = loop.run_until_complete(
        store.claim(queues=["default"], worker_id="beater", names=["bulk"], limit=64)
    )
    ids = [t.id for t in claimed]

    async def batch() -> None:
        for _ in range(BATCH):
            assert len(await store.heartbeat_batch(task_ids=ids, worker_id="beater")) == len(ids)

    benchmark.pedantic(lambda: loop.run_until_complete(batch()), rounds=5, iterations=1, warmup_rounds=1)
