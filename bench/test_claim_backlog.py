"""The per-name draw against a deep backlog of another name (20k by default).

A worker draws once per registered name per poll, inside its claim
transaction, so a name with nothing queued must cost a seek, not a walk over
everyone else's backlog. Shapes measured (the draw's statement, for a name
with nothing queued):

  equality   name = :name, reading cairnq_tasks_claim_name_idx   (what we run)
  json_each  name in (select value from json_each(:names))        (SQLite only)
  any_array  name = any(:names)                                   (Postgres only)
  residual   the name as a residual filter on cairnq_tasks_claim_idx
  sdk        store.claim(queues=["default"], names=["idle"]) end to end
             (probe included: it finds nothing, so no transaction is opened)

The seeds measured 8.8 us / 1446 us / 1116 us for the first three on SQLite.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from typing import Any, Iterator

import pytest

from cairnq import CairnQ
from cairnq._sql import load_statements
from conftest import BACKLOG

SDK_BATCH = 100

# Alternative forms, for comparison only (the protocol files hold what runs).
SQLITE_SHAPES = {
    "json_each": """
        update cairnq_tasks set status = 'running', worker_id = :worker_id,
            lease_until_ms = :lease_until_ms, attempt = attempt + 1, updated_at_ms = :now_ms
        where id in (select id from cairnq_tasks
                     where queue = :queue and status = 'queued'
                       and name in (select value from json_each(:names)) and run_at_ms <= :now_ms
                     order by priority desc, run_at_ms, id limit :limit)
        returning *""",
    "residual": """
        update cairnq_tasks set status = 'running', worker_id = :worker_id,
            lease_until_ms = :lease_until_ms, attempt = attempt + 1, updated_at_ms = :now_ms
        where id in (select id from cairnq_tasks indexed by cairnq_tasks_claim_idx
                     where queue = :queue and status = 'queued'
                       and name = :name and run_at_ms <= :now_ms
                     order by priority desc, run_at_ms, id limit :limit)
        returning *""",
}
PG_SHAPES = {
    "any_array": """
        update cairnq_tasks t set status = 'running', worker_id = %(worker_id)s,
            lease_until_ms = (extract(epoch from clock_timestamp()) * 1000)::bigint + %(lease_ms)s,
            attempt = t.attempt + 1, updated_at_ms = (extract(epoch from clock_timestamp()) * 1000)::bigint
        from (select id from cairnq_tasks where queue = %(queue)s and status = 'queued'
                and name = any(%(names)s::text[])
                and run_at_ms <= (extract(epoch from clock_timestamp()) * 1000)::bigint
              order by priority desc, run_at_ms, id limit %(limit)s for update skip locked) p
        where t.id = p.id returning t.*""",
    "residual": """
        update cairnq_tasks t set status = 'running', worker_id = %(worker_id)s,
            lease_until_ms = (extract(epoch from clock_timestamp()) * 1000)::bigint + %(lease_ms)s,
            attempt = t.attempt + 1, updated_at_ms = (extract(epoch from clock_timestamp()) * 1000)::bigint
        from (select id from cairnq_tasks where queue = %(queue)s and status = 'queued'
                and name || '' = %(name)s
                and run_at_ms <= (extract(epoch from clock_timestamp()) * 1000)::bigint
              order by priority desc, run_at_ms, id limit %(limit)s for update skip locked) p
        where t.id = p.id returning t.*""",
}


@pytest.fixture(scope="module")
def backlog(loop: asyncio.AbstractEventLoop, target: tuple[str, str]) -> Iterator[tuple[str, str, CairnQ]]:
    dialect, where = target
    q = CairnQ.sqlite(where) if dialect == "sqlite" else CairnQ.postgres(where)

    async def fill() -> None:
        for start in range(0, BACKLOG, 1000):
            await asyncio.gather(*(q.submit("busy", {"i": i}) for i in range(start, min(start + 1000, BACKLOG))))
        await q.close()
        await q.connect()  # reopening refreshes planner statistics (SQLite)

    loop.run_until_complete(fill())
    if dialect == "postgres":
        import psycopg

        with psycopg.connect(where, autocommit=True) as conn:
            conn.execute("analyze cairnq_tasks")
    yield dialect, where, q
    loop.run_until_complete(q.close())


def _params() -> dict[str, Any]:
    now = int(time.time() * 1000)
    return {
        "queue": "default", "queues": '["default"]', "name": "idle", "names": '["idle"]',
        "worker_id": "bench", "now_ms": now, "lease_until_ms": now + 30_000, "lease_ms": 30_000, "limit": 1,
    }  # fmt: skip


@pytest.mark.parametrize("shape", ["equality", "json_each", "any_array", "residual"])
def test_draw_for_idle_name(benchmark, backlog: tuple[str, str, CairnQ], shape: str) -> None:
    dialect, where, _ = backlog
    benchmark.group = f"idle-name draw, {BACKLOG} backlog, {dialect}"
    if dialect == "sqlite":
        if shape == "any_array":
            pytest.skip("Postgres shape")
        sql = load_statements("sqlite")["claim_one_queue_one_name"].text if shape == "equality" else SQLITE_SHAPES[shape]
        conn = sqlite3.connect(where, isolation_level=None)
        params = _params()
        assert conn.execute(sql, params).fetchall() == []
        benchmark(lambda: conn.execute(sql, params).fetchall())
        conn.close()
        return
    if shape == "json_each":
        pytest.skip("SQLite shape")
    import psycopg

    from cairnq.store.postgres.params import positional_statement

    params = _params()
    params["names"] = ["idle"]
    with psycopg.connect(where, autocommit=True) as conn:
        if shape == "equality":
            text, names = positional_statement(load_statements("postgres")["claim_one_queue_one_name"].text)
            values = [params[n] for n in names]
            cur = psycopg.RawCursor(conn)
            run = lambda: cur.execute(text, values, prepare=True).fetchall()  # noqa: E731
        else:
            cur = conn.cursor()
            run = lambda: cur.execute(PG_SHAPES[shape], params, prepare=True).fetchall()  # noqa: E731
        assert run() == []
        benchmark(run)


def test_sdk_claim_for_idle_name(benchmark, loop: asyncio.AbstractEventLoop, backlog: tuple[str, str, CairnQ]) -> None:
    dialect, _, q = backlog
    benchmark.group = f"idle-name draw, {BACKLOG} backlog, {dialect}"
    store = q.store

    async def batch() -> None:
        for _ in range(SDK_BATCH):
            assert await store.claim(queues=["default"], worker_id="bench", names=["idle"]) == []

    benchmark.extra_info["claims_per_round"] = SDK_BATCH
    benchmark.pedantic(lambda: loop.run_until_complete(batch()), rounds=20, iterations=1, warmup_rounds=2)
    if benchmark.stats is not None:  # (None under --benchmark-disable: the body ran once, untimed)
        benchmark.extra_info["median_us_per_claim"] = round(benchmark.stats.stats.median / SDK_BATCH * 1e6, 1)
