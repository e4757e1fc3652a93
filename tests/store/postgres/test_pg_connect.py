"""PostgreSQL: connect sequence: ledger, meta, trigger, idempotence, concurrent cold start."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest
from backends import DIALECTS

if "postgres" not in DIALECTS:
    pytest.skip("PostgreSQL is not available", allow_module_level=True)

import psycopg  # noqa: E402
from pg_kit import (  # noqa: F401 (fixtures)
    DB_NOW_MS,
    LEDGER,
    TABLES,
    connect,
    fetch,
    ledger,
    meta,
    object_oids,
    pg,
    run_sql,
    tables_in,
)

# ---------------------------------------------------------------------------
# 1. connect sequence: ledger, meta, trigger, idempotence, concurrent cold start


async def test_connect_migrates_fresh_database(pg):
    dsn = pg.target
    (before,) = fetch(dsn, DB_NOW_MS)[0]
    store = pg.store()
    await store.connect()
    (after,) = fetch(dsn, DB_NOW_MS)[0]

    rows = ledger(dsn)
    assert [n for n, _ in rows] == LEDGER  # 10 rows, with .sql, 0003 included
    for _, applied in rows:
        assert type(applied) is int
        assert before - 5 <= applied <= after + 5  # epoch ms from the DB clock
    by_name = dict(rows)
    assert [by_name[n] for n in LEDGER] == sorted(by_name[n] for n in LEDGER)  # applied in order
    ((dtype, nullable),) = fetch(
        dsn,
        "select data_type, is_nullable from information_schema.columns"
        " where table_name = 'cairnq_migrations' and column_name = 'applied_at_ms'",
    )
    assert (dtype, nullable) == ("bigint", "NO")

    assert meta(dsn) == {"protocol_version": "1", "schema_version": "10"}
    assert tables_in(dsn, "public") == TABLES

    trig = fetch(
        dsn,
        "select pg_get_triggerdef(t.oid) from pg_trigger t"
        " where t.tgrelid = 'public.cairnq_tasks'::regclass and not t.tgisinternal",
    )
    assert [r[0] for r in trig] == [
        "CREATE TRIGGER cairnq_tasks_notify AFTER INSERT OR UPDATE OF status ON public.cairnq_tasks"
        " FOR EACH ROW WHEN ((new.status IS DISTINCT FROM 'running'::text))"
        " EXECUTE FUNCTION cairnq_notify()"
    ]
    fn = fetch(
        dsn,
        "select p.prorettype::regtype::text, l.lanname, p.provolatile, p.pronargs"
        " from pg_proc p join pg_language l on l.oid = p.prolang where p.proname = 'cairnq_notify'",
    )
    assert fn == [("trigger", "plpgsql", "v", 0)]
    assert await store.protocol_version() == 1


async def test_reconnect_applies_nothing(pg):
    dsn = pg.target
    first = pg.store()
    await first.connect()
    task = await first.submit(name="keep.me", payload={"a": 1})
    await first.close()
    rows, oids = ledger(dsn), object_oids(dsn)
    assert len(rows) == 10 and "trigger:cairnq_tasks_notify" in oids

    await asyncio.sleep(0.01)  # a re-recorded ledger row would carry a later time
    for _ in range(2):
        again = pg.store()
        await again.connect()
        assert (await again.get(task.id)).payload == {"a": 1}
        await again.close()
    # also after a close/reopen of the same store
    await first.connect()
    await first.close()
    assert ledger(dsn) == rows
    assert object_oids(dsn) == oids  # nothing dropped and recreated
    assert meta(dsn) == {"protocol_version": "1", "schema_version": "10"}


COLD_START = r"""
import asyncio, sys, time
from cairnq import CairnQ

dsn, start_at, i = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])

async def main():
    q = CairnQ.postgres(dsn)
    delay = start_at - time.time()
    if delay > 0:
        await asyncio.sleep(delay)
    await q.connect()
    task = await q.submit("cold.start", {"i": i})
    await q.close()
    print(task.id)

asyncio.run(main())
"""


def _start_together(dsn: str, cwd: Path, count: int) -> list[str]:
    """``count`` processes each connect (at the same instant) and submit one task."""
    start_at = time.time() + 1.5
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", COLD_START, dsn, repr(start_at), str(i)],
            cwd=str(cwd),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(count)
    ]
    outs, failures = [], []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        if proc.returncode != 0:
            failures.append(err.strip().splitlines()[-2:])
        outs.append(out.strip())
    assert not failures, f"{len(failures)} of {count} processes failed to start: {failures}"
    return outs


def _check_migrated_once(dsn: str, count: int) -> None:
    rows = ledger(dsn)
    assert [
        n for n, _ in rows
    ] == LEDGER  # primary key: a second application would have failed a connect
    assert meta(dsn) == {"protocol_version": "1", "schema_version": "10"}
    assert fetch(dsn, "select count(*) from pg_trigger where tgname = 'cairnq_tasks_notify'") == [
        (1,)
    ]
    payloads = sorted(r[0]["i"] for r in fetch(dsn, "select payload from cairnq_tasks"))
    assert payloads == list(range(count))
    indexes = fetch(dsn, "select count(*) from pg_indexes where tablename = 'cairnq_tasks'")
    assert indexes == [(10,)]  # 9 named + pkey


async def test_concurrent_cold_start_applies_each_migration_once(pg, tmp_path):
    outs = _start_together(pg.target, tmp_path, 4)
    assert len(set(outs)) == 4 and all(o.startswith("task_") for o in outs)
    _check_migrated_once(pg.target, 4)


async def test_concurrent_start_on_an_empty_ledger_serializes_the_migrations(pg, tmp_path):
    """The ledger exists (SCHEMA.md §2.1) but nothing is applied: the exclusive
    table lock makes every process but one find each migration already done."""
    run_sql(
        pg.target,
        "create table cairnq_migrations (name text primary key, applied_at_ms bigint not null)",
    )
    outs = _start_together(pg.target, tmp_path, 4)
    assert len(set(outs)) == 4
    _check_migrated_once(pg.target, 4)


async def test_ledger_created_concurrently_by_another_process(pg):
    """Another process creates the ledger at the same moment (its transaction
    commits while our `create table if not exists` is in flight): our connect
    must still succeed, as in a concurrent cold start (SCHEMA.md §2.2 step 4)."""
    dsn = pg.target
    other = psycopg.connect(dsn)  # a transaction of its own, left open
    try:
        other.execute(
            "create table cairnq_migrations (name text primary key, applied_at_ms bigint not null)"
        )
        store = pg.store()
        connecting = asyncio.ensure_future(store.connect())
        await asyncio.sleep(0.5)  # our ledger creation now waits on the other transaction
        other.commit()
        await asyncio.wait_for(connecting, 10)
    finally:
        other.close()
    assert [n for n, _ in ledger(dsn)] == LEDGER
    assert (await store.submit(name="after.race")).status == "queued"
