"""PostgreSQL: the schema option and the installations guard."""

from __future__ import annotations

import asyncio
import time

import pytest
from backends import DIALECTS, dsn_for
from pg_kit import LEDGER, TABLES, fetch, ledger, listening, meta, pg, run_sql, tables_in, until  # noqa: F401 (fixtures)

import cairnq
from cairnq import (
    CairnQ,
    PostgresStore,
    SchemaMismatch,
    create_pool_executor,
)

if "postgres" not in DIALECTS:
    pytest.skip("PostgreSQL is not available", allow_module_level=True)


# ---------------------------------------------------------------------------
# 2. the schema option and the installations guard


@pytest.mark.parametrize(
    "bad", ["", "1abc", "my-schema", "my schema", 'a"b', "public;drop", "ä", "a.b", "$x"]
)
async def test_invalid_schema_names_rejected_at_construction(bad):
    dsn = dsn_for("does_not_exist_never_contacted")
    with pytest.raises(ValueError):
        PostgresStore(dsn, schema=bad)
    with pytest.raises(ValueError):
        CairnQ.postgres(dsn, schema=bad)
    with pytest.raises(ValueError):
        cairnq.Worker.postgres(dsn, schema=bad)
    with pytest.raises(ValueError):
        await create_pool_executor(dsn, schema=bad)


async def test_valid_schema_names_accepted():
    for good in ("s", "_x", "MySchema", "a$b_9", "A1"):
        PostgresStore(dsn_for("never_contacted"), schema=good)  # no error, no connection


async def test_schema_option_installs_into_case_preserved_schema(pg):
    dsn = pg.target
    store = pg.store(schema="MySchema")
    await store.connect()
    task = await store.submit(name="in.schema", payload={"x": 1}, queue="sq")

    schemas = {r[0] for r in fetch(dsn, "select nspname from pg_namespace")}
    assert "MySchema" in schemas and "myschema" not in schemas
    assert tables_in(dsn, "MySchema") == TABLES
    assert tables_in(dsn, "public") == set()
    assert [n for n, _ in ledger(dsn, "MySchema")] == LEDGER
    assert meta(dsn, "MySchema") == {"protocol_version": "1", "schema_version": "10"}
    assert fetch(dsn, 'select id from "MySchema".cairnq_tasks') == [(task.id,)]
    defs = dict(
        fetch(dsn, "select indexname, indexdef from pg_indexes where schemaname = 'MySchema'")  # type: ignore[arg-type]
    )
    assert defs["cairnq_tasks_claim_idx"] == (
        'CREATE INDEX cairnq_tasks_claim_idx ON "MySchema".cairnq_tasks USING btree'
        " (queue, status, priority DESC, run_at_ms, id)"
    )
    assert fetch(
        dsn,
        "select n.nspname from pg_proc p join pg_namespace n on n.oid = p.pronamespace"
        " where p.proname = 'cairnq_notify'",
    ) == [("MySchema",)]

    # LISTEN works from the schema'd installation too (channels are database-wide)
    other = pg.store(schema="MySchema")
    await listening(store)
    waiter = asyncio.ensure_future(store.claim_wake(["sq"], 5000))
    await asyncio.sleep(0.05)
    start = time.monotonic()
    await other.submit(name="in.schema", queue="sq")
    await waiter
    assert time.monotonic() - start < 0.5


async def test_second_installation_and_odd_search_path(pg):
    dsn = pg.target
    public = pg.store()
    await public.connect()
    in_public = await public.submit(name="p", payload={"where": "public"})

    # schema="MySchema" on a database that already has public: a second installation
    mine = pg.store(schema="MySchema")
    await mine.connect()
    in_mine = await mine.submit(name="m", payload={"where": "MySchema"})
    assert tables_in(dsn, "MySchema") == TABLES and tables_in(dsn, "public") == TABLES
    assert await mine.get(in_public.id) is None
    assert await public.get(in_mine.id) is None
    assert (
        [n for n, _ in ledger(dsn, "public")] == [n for n, _ in ledger(dsn, "MySchema")] == LEDGER
    )

    # a connection whose search_path names a third, existing schema: refused
    run_sql(dsn, "create schema other")
    odd_dsn = f"{dsn}?options=-csearch_path%3Dother&application_name=cq_odd_path"
    odd = PostgresStore(odd_dsn)
    with pytest.raises(SchemaMismatch) as info:
        await odd.connect()
    message = str(info.value)
    assert "'MySchema'" in message and "'public'" in message
    assert message.index("'MySchema'") < message.index("'public'")
    assert tables_in(dsn, "other") == set()  # guard ran before the ledger was created
    # the pool the store built for the failed connect was closed
    await until(
        lambda: (
            fetch(
                dsn, "select count(*) from pg_stat_activity where application_name = 'cq_odd_path'"
            )[0][0]
            == 0
        ),
        3.0,
        "the failed store's pool to close",
    )
    # and it fails the same way on the next attempt (nothing half-published)
    with pytest.raises(SchemaMismatch):
        await odd.submit(name="never")
    assert tables_in(dsn, "other") == set()
    await odd.close()


async def test_installation_only_elsewhere_is_refused_without_schema(pg):
    dsn = pg.target
    mine = pg.store(schema="MySchema")
    await mine.connect()
    plain = PostgresStore(dsn)  # resolves to public, which holds nothing
    with pytest.raises(SchemaMismatch) as info:
        await plain.connect()
    assert "'MySchema'" in str(info.value)
    assert tables_in(dsn, "public") == set()
    await plain.close()


async def test_supplied_executor_schema_mismatch_and_never_closed(pg):
    dsn = pg.target
    executor = await create_pool_executor(dsn, schema="s1")
    try:
        wrong = PostgresStore(executor, schema="s2")
        with pytest.raises(SchemaMismatch) as info:
            await wrong.connect()
        assert "s1" in str(info.value) and "s2" in str(info.value)
        await wrong.close()
        # the executor path creates nothing: no s2, no tables anywhere
        schemas = {r[0] for r in fetch(dsn, "select nspname from pg_namespace")}
        assert "s2" not in schemas and "s1" in schemas
        assert tables_in(dsn, "s1") == set() and tables_in(dsn, "public") == set()
        assert await executor.query("select 1 as one", []) == [{"one": 1}]  # still open

        right = PostgresStore(executor, schema="s1")
        task = await right.submit(name="exec.s1", payload={"k": "v"})
        assert tables_in(dsn, "s1") == TABLES
        await right.close()
        assert await executor.query("select 2 as two", []) == [{"two": 2}]  # close() left it alone
        rows = await executor.query("select id from cairnq_tasks", [])
        assert [r["id"] for r in rows] == [task.id]

        again = PostgresStore(executor)  # no option: resolves to s1 where the installation is
        assert (await again.get(task.id)).payload == {"k": "v"}
        await again.close()
        assert await executor.query("select 3 as three", []) == [{"three": 3}]
    finally:
        await executor.close()
