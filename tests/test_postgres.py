"""PostgreSQL-only behaviour of ``PostgresStore`` and its executor seam.

Spec: SCHEMA.md §2 (runner), §4 0003 (trigger), §6 (schema option and the
installations guard); OPERATIONS.md §1.1, §3.1 (advisory lock), §5.5
(succeed_in), §9 (executor, LISTEN/NOTIFY, JSON wire probe); API.md §11.3, §12.

Every test gets a brand-new database (``pg`` fixture); raw catalog reads and
fault injection go through sync psycopg connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

import pytest

from backends import DIALECTS, dsn_for, make_backend

import cairnq
from cairnq import (
    CairnQ,
    ListenUnavailable,
    LostLease,
    PostgresStore,
    SchemaMismatch,
    SQLiteStore,
    TaskContext,
    UnsupportedBackend,
    create_pool_executor,
)
from cairnq.store.postgres import positional_statement, to_positional

if "postgres" not in DIALECTS:
    pytest.skip("PostgreSQL is not available", allow_module_level=True)

import psycopg  # noqa: E402
from psycopg.rows import dict_row  # noqa: E402

LEDGER = [
    "0001_init.sql", "0002_purge_index.sql", "0003_notify.sql", "0004_lease_index.sql",
    "0005_clear_terminal_lease.sql", "0006_claim_name_index.sql", "0007_purge_status_index.sql",
    "0008_claim_due_index.sql", "0009_purge_queue_index.sql", "0010_drop_status_index.sql",
]  # fmt: skip
TABLES = {"cairnq_tasks", "cairnq_task_keys", "cairnq_meta", "cairnq_migrations"}
DB_NOW_MS = "select (extract(epoch from clock_timestamp()) * 1000)::bigint"


# ---------------------------------------------------------------------------
# fixtures and helpers


@pytest.fixture
def pg(tmp_path: Path) -> Iterator[Any]:
    """A brand-new PostgreSQL database (a ``tests.backends.Backend``)."""
    with make_backend("postgres", tmp_path) as backend:
        yield backend


def connect(dsn: str, **kwargs: Any) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True, **kwargs)


def fetch(dsn: str, query: str, params: Optional[Sequence[Any]] = None) -> list[tuple[Any, ...]]:
    with connect(dsn) as conn:
        return conn.execute(query, params).fetchall()  # type: ignore[arg-type]


def run_sql(dsn: str, query: str, params: Optional[Sequence[Any]] = None) -> None:
    with connect(dsn) as conn:
        conn.execute(query, params)  # type: ignore[arg-type]


def ledger(dsn: str, schema: str = "public") -> list[tuple[str, int]]:
    return [
        (name, applied)
        for name, applied in fetch(
            dsn, f'select name, applied_at_ms from "{schema}".cairnq_migrations order by name'
        )
    ]


def meta(dsn: str, schema: str = "public") -> dict[str, str]:
    return dict(fetch(dsn, f'select key, value from "{schema}".cairnq_meta'))  # type: ignore[arg-type]


def tables_in(dsn: str, schema: str) -> set[str]:
    rows = fetch(
        dsn,
        "select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace"
        " where n.nspname = %s and c.relkind = 'r'",
        [schema],
    )
    return {r[0] for r in rows}


def object_oids(dsn: str) -> dict[str, int]:
    """OIDs of everything the migrations create: a migration that re-ran
    (0003 drops/recreates the trigger, 0008 the claim indexes) changes them."""
    rows = fetch(
        dsn,
        "select c.relname, c.oid::bigint from pg_class c join pg_namespace n on n.oid = c.relnamespace"
        " where n.nspname = 'public' and c.relname like 'cairnq%'"
        " union all select 'trigger:' || tgname, oid::bigint from pg_trigger where tgname = 'cairnq_tasks_notify'"
        " union all select 'function:' || proname, oid::bigint from pg_proc where proname = 'cairnq_notify'",
    )
    return dict(rows)  # type: ignore[arg-type]


def backends_of(dsn: str, database: str) -> list[int]:
    """Every other backend connected to ``database`` (our pool, our listener)."""
    rows = fetch(
        dsn,
        "select pid from pg_stat_activity where datname = %s and pid <> pg_backend_pid()",
        [database],
    )
    return [r[0] for r in rows]


def terminate(dsn: str, pids: Sequence[int]) -> None:
    """pg_terminate_backend each pid and wait until they are gone."""
    with connect(dsn) as conn:
        for pid in pids:
            conn.execute("select pg_terminate_backend(%s)", [pid])
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            alive = conn.execute(
                "select count(*) from pg_stat_activity where pid = any(%s)", [list(pids)]
            ).fetchone()
            if not alive or alive[0] == 0:
                return
            time.sleep(0.02)
    raise AssertionError(f"backends {pids} did not exit")


def listener_pids(dsn: str, application_name: str) -> list[int]:
    """The LISTEN connection(s) opened from a DSN carrying ``application_name``."""
    rows = fetch(
        dsn,
        "select pid from pg_stat_activity where application_name = %s and query ilike 'listen%%'",
        [application_name],
    )
    return [r[0] for r in rows]


async def until(predicate: Callable[[], Any], timeout_s: float = 5.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def listening(store: PostgresStore, timeout_s: float = 5.0) -> None:
    """Connect and poll a bit until the store's LISTEN connection is up."""
    await store.connect()
    await until(lambda: store._listener is not None and store._listener.connected, timeout_s, "listener")


async def timed(aw: Any) -> float:
    start = time.monotonic()
    await aw
    return time.monotonic() - start


def status_counts(dsn: str) -> dict[str, int]:
    return dict(fetch(dsn, "select status, count(*) from cairnq_tasks group by status"))  # type: ignore[arg-type]


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
    assert [n for n, _ in rows] == LEDGER  # primary key: a second application would have failed a connect
    assert meta(dsn) == {"protocol_version": "1", "schema_version": "10"}
    assert fetch(dsn, "select count(*) from pg_trigger where tgname = 'cairnq_tasks_notify'") == [(1,)]
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
    run_sql(pg.target, "create table cairnq_migrations (name text primary key, applied_at_ms bigint not null)")
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
        other.execute("create table cairnq_migrations (name text primary key, applied_at_ms bigint not null)")
        store = pg.store()
        connecting = asyncio.ensure_future(store.connect())
        await asyncio.sleep(0.5)  # our ledger creation now waits on the other transaction
        other.commit()
        await asyncio.wait_for(connecting, 10)
    finally:
        other.close()
    assert [n for n, _ in ledger(dsn)] == LEDGER
    assert (await store.submit(name="after.race")).status == "queued"


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
    assert [n for n, _ in ledger(dsn, "public")] == [n for n, _ in ledger(dsn, "MySchema")] == LEDGER

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
        lambda: fetch(
            dsn, "select count(*) from pg_stat_activity where application_name = 'cq_odd_path'"
        )[0][0] == 0,
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


# ---------------------------------------------------------------------------
# 3. the 0003 trigger's notifications, seen from a raw LISTEN connection


class Notes:
    def __init__(self, dsn: str) -> None:
        self.conn = connect(dsn)
        self.conn.execute("listen cairnq_queued")
        self.conn.execute("listen cairnq_done")

    def take(self, expect: int = 0) -> list[tuple[str, str]]:
        """The notifications that arrive now: wait up to 3 s for ``expect`` of
        them, then 0.2 s more for any extra (so "none" means none in 0.2 s)."""
        got = []
        if expect:
            got += [(n.channel, n.payload) for n in self.conn.notifies(timeout=3, stop_after=expect)]
        got += [(n.channel, n.payload) for n in self.conn.notifies(timeout=0.2)]
        return got

    def close(self) -> None:
        self.conn.close()


async def test_trigger_notifications(pg):
    dsn = pg.target
    store = pg.store()
    await store.connect()
    notes = Notes(dsn)
    try:
        w = "worker_n"
        queued = ("cairnq_queued", "nq")
        claim = lambda: store.claim(queues=["nq"], worker_id=w)  # noqa: E731

        t1 = await store.submit(name="n", queue="nq")
        assert notes.take(1) == [queued]
        [c] = await claim()
        assert c.id == t1.id
        assert notes.take() == []  # claim: none
        await store.heartbeat(task_id=t1.id, worker_id=w)
        await store.progress(task_id=t1.id, worker_id=w, progress=0.5, message="half")
        assert notes.take() == []  # non-status updates: none
        await store.complete(task_id=t1.id, worker_id=w, result={"ok": True})
        assert notes.take(1) == [("cairnq_done", t1.id)]

        t2 = await store.submit(name="n", queue="nq")
        assert notes.take(1) == [queued]
        await claim()
        await store.fail(task_id=t2.id, worker_id=w, error={"message": "no"}, retryable=False)
        assert notes.take(1) == [("cairnq_done", t2.id)]

        t3 = await store.submit(name="n", queue="nq", max_attempts=3)
        assert notes.take(1) == [queued]
        await claim()
        back = await store.fail(task_id=t3.id, worker_id=w, error={"message": "again"}, retryable=True)
        assert back.status == "queued"
        assert notes.take(1) == [queued]  # running -> queued
        await store.cancel(t3.id)
        assert notes.take(1) == [("cairnq_done", t3.id)]  # queued -> canceled

        t4 = await store.submit(name="n", queue="nq")
        assert notes.take(1) == [queued]
        await claim()
        flagged = await store.cancel(t4.id)
        assert flagged.status == "running" and flagged.cancel_requested_at_ms is not None
        assert notes.take() == []  # cancel of a running task: none
        ended = await store.complete(task_id=t4.id, worker_id=w, result=None)
        assert ended.status == "canceled"
        assert notes.take(1) == [("cairnq_done", t4.id)]

        # failed -> queued (retry) notifies; terminal -> terminal and purge do not
        assert (await store.retry(t2.id)).status == "queued"
        assert notes.take(1) == [queued]
        await store.cancel(t2.id)
        assert notes.take(1) == [("cairnq_done", t2.id)]
        run_sql(dsn, "update cairnq_tasks set status = 'failed' where id = %s", [t2.id])
        assert notes.take() == []  # canceled -> failed
        await asyncio.sleep(0.002)  # purge's cutoff is strict: finished >= 1 ms ago
        assert sorted(await store.purge(older_than_ms=0)) == sorted([t1.id, t2.id, t3.id, t4.id])
        assert notes.take() == []

        # lease recovery: running -> queued notifies with the queue
        t5 = await store.submit(name="n", queue="nq")
        assert notes.take(1) == [queued]
        await store.claim(queues=["nq"], worker_id=w, lease_ms=1)
        assert notes.take() == []
        await asyncio.sleep(0.02)
        [again] = await store.claim(queues=["nq"], worker_id="worker_m")
        assert again.id == t5.id and again.attempt == 2
        assert notes.take(1) == [queued]  # recovered, then claimed (claim: none)
    finally:
        notes.close()


# ---------------------------------------------------------------------------
# 4. LISTEN wakeups in our store


async def test_claim_wake_woken_by_another_stores_submit(pg):
    waiter_store, submitter = pg.store(), pg.store()
    await submitter.connect()
    await listening(waiter_store)

    # a submit to another queue does not wake it
    wait = asyncio.ensure_future(waiter_store.claim_wake(["q"], 800))
    await asyncio.sleep(0.05)
    start = time.monotonic()
    await submitter.submit(name="w", queue="elsewhere")
    await wait
    assert time.monotonic() - start > 0.6

    # a submit to "q" does, within ~200 ms
    wait = asyncio.ensure_future(waiter_store.claim_wake(["q"], 5000))
    await asyncio.sleep(0.05)
    assert not wait.done()
    start = time.monotonic()
    await submitter.submit(name="w", queue="q")
    await wait
    assert time.monotonic() - start < 0.3

    # a notification between waits is buffered for the next one, then consumed
    await submitter.submit(name="w", queue="q")
    await asyncio.sleep(0.2)
    assert await timed(waiter_store.claim_wake(["q"], 3000)) < 0.1
    assert await timed(waiter_store.claim_wake(["q"], 300)) > 0.25

    # one of several queues
    wait = asyncio.ensure_future(waiter_store.claim_wake(["a", "q2"], 5000))
    await asyncio.sleep(0.05)
    start = time.monotonic()
    await submitter.submit(name="w", queue="q2")
    await wait
    assert time.monotonic() - start < 0.3


async def test_task_done_wake_woken_by_another_store(pg):
    waiter_store, other = pg.store(), pg.store()
    await other.connect()
    await listening(waiter_store)

    done = await other.submit(name="d", queue="dq")
    unrelated = await other.submit(name="d", queue="dq")
    [c] = await other.claim(queues=["dq"], worker_id="w_other")
    assert c.id == done.id

    wait = asyncio.ensure_future(waiter_store.task_done_wake(done.id, 5000))
    await asyncio.sleep(0.05)
    await other.cancel(unrelated.id)  # another task finishing does not wake it
    await asyncio.sleep(0.3)
    assert not wait.done()
    start = time.monotonic()
    await other.complete(task_id=done.id, worker_id="w_other", result=1)
    await wait
    assert time.monotonic() - start < 0.3

    queued = await other.submit(name="d", queue="dq2")
    wait = asyncio.ensure_future(waiter_store.task_done_wake(queued.id, 5000))
    await asyncio.sleep(0.05)
    start = time.monotonic()
    await other.cancel(queued.id)
    await wait
    assert time.monotonic() - start < 0.3


async def test_task_done_wake_says_it_was_told_and_wait_reads_the_row_once(pg):
    """A cairnq_done for the awaited task: task_done_wake returns True, and the
    waiter reads the finished row with one ``get`` (no status probe first)."""
    from cairnq import CairnQ, PostgresStore

    class Metered(PostgresStore):
        seen: list[str] = []

        async def _fetch(self, name, params):
            self.seen.append(name)
            return await super()._fetch(name, params)

    waiter_store, other = Metered(pg.target), pg.store()
    try:
        await listening(waiter_store)
        task = await other.submit(name="d", queue="tq")
        wait = asyncio.ensure_future(CairnQ(waiter_store).wait(task.id, timeout_ms=5_000, poll_ms=2_000))
        await asyncio.sleep(0.1)  # one status probe, then asleep for 2 s
        Metered.seen.clear()
        await other.cancel(task.id)
        done = await asyncio.wait_for(wait, 1)
        assert done.status == "canceled"
        assert Metered.seen == ["get"]

        queued = await other.submit(name="d", queue="tq")
        told = asyncio.ensure_future(waiter_store.task_done_wake(queued.id, 5_000))
        await asyncio.sleep(0.05)
        await other.cancel(queued.id)
        assert await told is True
        assert await waiter_store.task_done_wake(queued.id, 10) is False  # a timeout: not told
    finally:
        await waiter_store.close()


def _metered_store(pg: Any) -> Any:
    """A PostgresStore noting the name of every lone statement (``_fetch``)."""
    from cairnq import PostgresStore

    class Metered(PostgresStore):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.seen: list[str] = []

        async def _fetch(self, name, params):
            self.seen.append(name)
            return await super()._fetch(name, params)

    return Metered(pg.target)


async def test_worker_told_of_work_claims_without_probing_and_idles_after_a_short_claim(pg):
    """Woken by cairnq_queued, the worker claims at once (no probe), in
    autocommit (no transaction), and a claim that found less than it could
    take sends it back to sleep instead of probing again."""
    store, client = _metered_store(pg), pg.client()
    await listening(store)
    await client.connect()
    worker = pg.worker(("nq",), store=store, concurrency=4, poll_interval_ms=5_000)
    transactions = 0
    begin = store._transaction

    def counting_transaction():
        nonlocal transactions
        transactions += 1
        return begin()

    store._transaction = counting_transaction

    @worker.task("n")
    async def handler(ctx, payload):
        return payload

    async with worker.background():
        await asyncio.sleep(0.3)  # its first probe found nothing: asleep for up to 5 s
        store.seen.clear()
        transactions = 0
        for i in range(3):
            assert await client.call("n", {"i": i}, queue="nq", timeout_ms=3_000) == {"i": i}
        await asyncio.sleep(0.1)
        assert not [n for n in store.seen if n.startswith("claimable_probe")], store.seen
        assert transactions == 0


async def test_a_worker_kept_busy_by_notifications_still_recovers_expired_leases(pg):
    """Claims that skip the probe skip lease recovery too; the worker still
    probes (and recovers) at least once per poll interval."""
    store, client = pg.store(), pg.client()
    await listening(store)
    await client.connect()
    lost = await client.submit("n", {"lost": True}, queue="rq")
    [claimed] = await client.store.claim(queues=["rq"], worker_id="w_dead", lease_ms=100)
    assert claimed.id == lost.id
    worker = pg.worker(("rq",), store=store, concurrency=2, poll_interval_ms=300)

    @worker.task("n")
    async def handler(ctx, payload):
        return payload

    async with worker.background():
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            await client.submit("n", {}, queue="rq")  # news of work every 20 ms
            got = await client.get(lost.id)
            if got is not None and got.status == "succeeded":
                break
            await asyncio.sleep(0.02)
    got = await client.get(lost.id)
    assert got is not None and (got.status, got.attempt) == ("succeeded", 2)


async def test_worker_with_long_poll_interval_picks_up_at_once_when_listening(pg):
    store, client = pg.store(), pg.client()
    await listening(store)
    await client.connect()
    ran = asyncio.Event()
    worker = pg.worker(("wq",), store=store, poll_interval_ms=5000)

    @worker.task("wake.me")
    async def handler(ctx, payload):
        ran.set()
        return payload

    runner = asyncio.ensure_future(worker.run())
    try:
        await asyncio.sleep(0.3)  # the worker found nothing and is idle (for up to 5 s)
        start = time.monotonic()
        task = await client.submit("wake.me", {"n": 1}, queue="wq")
        await asyncio.wait_for(ran.wait(), 3)
        assert time.monotonic() - start < 0.5
        done = await client.wait(task.id, timeout_ms=3000)
        assert done.status == "succeeded" and done.result == {"n": 1}
    finally:
        worker.stop()
        await asyncio.wait_for(runner, 10)


class QueryOnly:
    """An executor with only the required protocol members (no ``listen``)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.closed = False

    async def query(self, text: str, values: Sequence[Any]) -> list[Any]:
        return await self._inner.query(text, values)

    async def execute(self, sql: str) -> None:
        await self._inner.execute(sql)

    def transaction(self) -> Any:
        return self._inner.transaction()

    async def close(self) -> None:
        self.closed = True


class RefusesListen(QueryOnly):
    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.listen_calls = 0

    async def listen(self, channels: Any, on_notify: Any, on_close: Any) -> Any:
        self.listen_calls += 1
        raise ListenUnavailable("transaction-mode pooler: LISTEN is not supported")


@pytest.mark.parametrize("kind", [QueryOnly, RefusesListen])
async def test_executor_without_listen_is_a_plain_poller(pg, kind, caplog):
    caplog.set_level(logging.DEBUG, logger="cairnq")
    inner = await create_pool_executor(pg.target)
    try:
        executor, client_executor = kind(inner), kind(inner)  # one listener per store
        store = PostgresStore(executor)
        client = CairnQ(PostgresStore(client_executor))
        await store.connect()
        await asyncio.sleep(0.1)
        assert not store._listener.connected

        # wakes are plain sleeps, without errors, even with work arriving
        wait = asyncio.ensure_future(store.claim_wake(["pq"], 400))
        await client.submit("poll.me", {"i": 0}, queue="pq")
        assert await timed(wait) > 0.3
        assert await timed(store.task_done_wake("task_x", 200)) >= 0.19

        errors: list[Any] = []
        worker = cairnq.Worker(store, ["pq"], poll_interval_ms=100, concurrency=2, on_error=lambda e, i: errors.append((e, i)))

        @worker.task("poll.me")
        async def handler(ctx, payload):
            return payload["i"]

        ids = [(await client.submit("poll.me", {"i": i}, queue="pq")).id for i in range(1, 6)]
        async with worker.background():
            for task_id in ids:
                done = await client.wait(task_id, timeout_ms=5000)
                assert done.status == "succeeded"
        assert errors == []
        assert not store._listener.connected
        if isinstance(executor, RefusesListen):
            # disabled for the connection lifetime: asked once per store, never retried
            assert executor.listen_calls == 1 and client_executor.listen_calls == 1
        await client.close()
        await store.close()
        assert not executor.closed and not client_executor.closed
        assert not [
            r for r in caplog.records if r.name.startswith("cairnq") and r.levelno >= logging.WARNING
        ]
    finally:
        await inner.close()


async def test_killed_listener_releases_waiters_and_is_reestablished(pg):
    dsn = pg.target
    store = PostgresStore(f"{dsn}?application_name=cq_waiter")
    pg._stores.append(store)  # closed with the backend
    submitter = pg.store()
    await submitter.connect()
    await listening(store)
    await asyncio.sleep(0.05)
    [pid] = listener_pids(dsn, "cq_waiter")

    wait = asyncio.ensure_future(store.claim_wake(["kq"], 10_000))
    done_wait = asyncio.ensure_future(store.task_done_wake("task_never", 10_000))
    await asyncio.sleep(0.05)
    start = time.monotonic()
    terminate(dsn, [pid])
    await asyncio.wait_for(asyncio.gather(wait, done_wait), 5)
    assert time.monotonic() - start < 3  # released, not left to sleep 10 s
    await until(lambda: not store._listener.connected, 3, "listener marked down")

    # a wake while it is down is a plain sleep, and kicks off the reconnect
    assert await timed(store.claim_wake(["kq"], 200)) >= 0.19
    await until(lambda: store._listener.connected, 5, "listener re-established")
    await asyncio.sleep(0.05)
    new = listener_pids(dsn, "cq_waiter")
    assert len(new) == 1 and new != [pid]

    wait = asyncio.ensure_future(store.claim_wake(["kq"], 5000))
    await asyncio.sleep(0.05)
    start = time.monotonic()
    await submitter.submit(name="k", queue="kq")
    await wait
    assert time.monotonic() - start < 0.3


# ---------------------------------------------------------------------------
# 5. the executor seam: a protocol-only executor, and parameter numbering


class DictRowExecutor:
    """A PgExecutor written against the protocol only, on psycopg: ``$n``
    placeholders (raw cursor), dict rows, psycopg's default jsonb loader (so
    JSON comes back decoded). One shared autocommit connection for plain
    statements, a new connection per transaction."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.calls: list[tuple[str, str, Any]] = []
        self.closed = False
        self._conn: Optional[psycopg.AsyncConnection[Any]] = None
        self._lock = asyncio.Lock()

    async def _new(self) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(
            self.dsn, autocommit=True, row_factory=dict_row, cursor_factory=psycopg.AsyncRawCursor
        )

    async def _shared(self) -> psycopg.AsyncConnection[Any]:
        async with self._lock:
            if self._conn is None:
                self._conn = await self._new()
            return self._conn

    async def query(self, text: str, values: Sequence[Any]) -> list[dict[str, Any]]:
        self.calls.append(("query", text, list(values)))
        return await _query(await self._shared(), text, values)

    async def execute(self, sql: str) -> None:
        self.calls.append(("execute", sql, None))
        await (await self._shared()).execute(sql, prepare=False)

    @contextlib.asynccontextmanager
    async def transaction(self) -> Any:
        self.calls.append(("transaction", "", None))
        conn = await self._new()
        try:
            async with conn.transaction():
                yield _DictSession(conn, self.calls)
        finally:
            await conn.close()

    async def close(self) -> None:
        self.closed = True
        if self._conn is not None:
            await self._conn.close()


class _DictSession:
    def __init__(self, conn: Any, calls: list[Any]) -> None:
        self._conn = conn
        self._calls = calls

    async def query(self, text: str, values: Sequence[Any]) -> list[dict[str, Any]]:
        self._calls.append(("session.query", text, list(values)))
        return await _query(self._conn, text, values)

    async def execute(self, sql: str) -> None:
        self._calls.append(("session.execute", sql, None))
        await self._conn.execute(sql, prepare=False)


async def _query(conn: Any, text: str, values: Sequence[Any]) -> list[dict[str, Any]]:
    cur = conn.cursor()
    await cur.execute(text, list(values))
    return await cur.fetchall() if cur.description is not None else []


async def test_protocol_only_executor_runs_every_operation(pg):
    executor = DictRowExecutor(pg.target)
    try:
        store = PostgresStore(executor)
        await store.connect()
        assert store._json_is_text is False  # the probe saw decoded jsonb

        # the connect sequence as the executor saw it (API.md §11.3)
        kinds = [(k, t) for k, t, _ in executor.calls]
        assert kinds[0][0] == "query" and "current_schema()" in kinds[0][1]
        assert kinds[1][0] == "execute" and "cairnq_migrations" in kinds[1][1]
        assert sum(1 for k, _ in kinds if k == "transaction") == 10
        scripts = [t for k, t in kinds if k == "session.execute" and "lock table" not in t]
        assert len(scripts) == 10 and any("$$" in s for s in scripts)  # 0003 via execute
        checks = [v for k, _, v in executor.calls if k == "session.query"]
        assert [v for v in checks if v] and all(v == [n] for v, n in zip(checks[::2], LEDGER))
        tail = [t for k, t in kinds if k == "query"][-2:]
        assert "protocol_version" in tail[0]
        assert "'\"cairnq\"'::jsonb" in tail[1]
        for kind, text, values in executor.calls:
            if values:
                assert "$1" in text and isinstance(values, list)

        payload = {"order": {"id": 7, "lines": [1, 2.5, "x", None, True]}, "é": "ü ✓"}
        a = await store.submit(name="seam.a", payload=payload, queue="sq", metadata={"m": [1]}, priority=2)
        b = await store.submit(name="seam.b", payload=[1, 2], queue="sq")
        k1 = await store.submit(name="seam.k", payload={"v": 1}, queue="sq", key="seam-key")
        k2 = await store.submit(name="seam.k", payload={"v": 2}, queue="sq", key="seam-key")
        assert k1.id == k2.id and k2.payload == {"v": 1}
        got = await store.get(a.id)
        assert got.payload == payload and got.metadata == {"m": [1]} and got.status == "queued"
        assert isinstance(got.created_at_ms, int) and got.root_id == a.id
        assert (await store.get_by_key("seam-key")).id == k1.id

        [first] = await store.claim(queues=["sq"], worker_id="w_seam")
        assert first.id == a.id and first.status == "running" and first.attempt == 1
        assert first.payload == payload
        done = await store.complete(task_id=a.id, worker_id="w_seam", result={"r": [1, {"z": None}]})
        assert done.status == "succeeded" and done.result == {"r": [1, {"z": None}]}
        assert done.progress == 1.0

        claimed = await store.claim(queues=["sq"], worker_id="w_seam", limit=5, names=["seam.b"])
        assert [t.id for t in claimed] == [b.id]
        failed = await store.fail(
            task_id=b.id, worker_id="w_seam", error={"code": "x", "message": "m"}, retryable=False
        )
        assert failed.status == "failed" and failed.error == {"code": "x", "message": "m"}
        with pytest.raises(LostLease):
            await store.complete(task_id=b.id, worker_id="w_seam", result=None)

        listed = await store.list(queue="sq")
        assert {t.id for t in listed} == {a.id, b.id, k1.id}
        assert [t.id for t in await store.list(status="failed")] == [b.id]
        assert (await store.list(name="seam.a"))[0].result == {"r": [1, {"z": None}]}
        assert await store.stats("sq") == {
            "sq": {"queued": 1, "running": 0, "succeeded": 1, "failed": 1, "canceled": 0}
        }
        assert (await store.cancel_by_key("seam-key")).status == "canceled"
        await asyncio.sleep(0.002)  # purge's cutoff is strict: finished >= 1 ms ago
        assert sorted(await store.purge(older_than_ms=0, queue="sq")) == sorted([a.id, b.id, k1.id])

        await store.close()
        assert executor.closed is False  # a supplied executor is never closed
        assert await executor.query("select 1 as one", []) == [{"one": 1}]
    finally:
        await executor.close()


def test_positional_statement_numbering():
    text, names = positional_statement("select * from t where b = :b and a = :a and c = :b")
    assert text == "select * from t where b = $1 and a = $2 and c = $1"
    assert names == ("b", "a")

    text, names = positional_statement("select :x::jsonb, 'a'::text, :y :: int, now()::date")
    assert text == "select $1::jsonb, 'a'::text, $2 :: int, now()::date"
    assert names == ("x", "y")

    text, names = positional_statement(
        "select :lease_ms2 -- :ignored in a comment\n  + :lease_ms2, :z_1"
    )
    assert names == ("lease_ms2", "z_1")
    assert ":ignored" not in text and "$1" in text and "$2" in text and "$3" not in text

    assert positional_statement("select 1") == ("select 1", ())


def test_to_positional_values():
    text, values = to_positional(
        "update t set x = :x::jsonb where id = :id and w = :w and id <> :x",
        {"id": "task_1", "w": None, "x": "{}", "unused": 9},
    )
    assert text == "update t set x = $1::jsonb where id = $2 and w = $3 and id <> $1"
    assert values == ["{}", "task_1", None]
    text, values = to_positional("select :q::text[], :b", {"b": True, "q": ["a", "b"]})
    assert text == "select $1::text[], $2" and values == [["a", "b"], True]


# ---------------------------------------------------------------------------
# 6. ctx.succeed_in: the handler's writes and the settlement in one transaction


async def _claimed_context(store: Any, worker_id: str, ctx_worker: Optional[str] = None) -> Any:
    task = await store.submit(name="tx.task", payload={"n": 1}, queue="txq")
    [claimed] = await store.claim(queues=["txq"], worker_id=worker_id)
    assert claimed.id == task.id
    return TaskContext(store, claimed, ctx_worker or worker_id, 30_000)


async def test_succeed_in_commits_write_and_settlement_together(pg):
    dsn = pg.target
    store = pg.store()
    await store.connect()
    run_sql(dsn, "create table side_effects (task_id text primary key, note text not null)")
    ctx = await _claimed_context(store, "w_tx")
    seen: list[Any] = []

    async def write(session: Any) -> Any:
        await session.query("insert into side_effects (task_id, note) values ($1, $2)", [ctx.task_id, "done"])
        await session.execute("insert into side_effects (task_id, note) values ('extra', 'script')")
        # inside the transaction: our write is visible to us, not to others
        seen.append(await session.query("select note from side_effects where task_id = $1", [ctx.task_id]))
        seen.append(fetch(dsn, "select count(*) from side_effects"))
        seen.append(fetch(dsn, "select status from cairnq_tasks where id = %s", [ctx.task_id]))
        return {"wrote": 2}

    task = await ctx.succeed_in(write)
    assert task.status == "succeeded" and task.result == {"wrote": 2}
    assert [dict(r) for r in seen[0]] == [{"note": "done"}]
    assert seen[1] == [(0,)] and seen[2] == [("running",)]  # nothing committed before the end
    assert sorted(fetch(dsn, "select task_id, note from side_effects")) == sorted(
        [(ctx.task_id, "done"), ("extra", "script")]
    )
    assert (await store.get(ctx.task_id)).status == "succeeded"
    assert ctx.settled and not ctx.lost_lease

    calls = []
    assert await ctx.succeed_in(lambda s: calls.append(s)) is None  # settled: a no-op
    assert calls == []


async def test_succeed_in_lost_lease_rolls_back_the_write(pg):
    dsn = pg.target
    store = pg.store()
    await store.connect()
    run_sql(dsn, "create table side_effects (task_id text primary key, note text not null)")
    ctx = await _claimed_context(store, "w_owner", ctx_worker="w_impostor")
    called = []

    async def write(session: Any) -> Any:
        called.append(True)
        await session.query("insert into side_effects (task_id, note) values ($1, $2)", [ctx.task_id, "x"])
        return "result"

    with pytest.raises(LostLease):
        await ctx.succeed_in(write)
    assert called == [True]
    assert fetch(dsn, "select count(*) from side_effects") == [(0,)]
    task = await store.get(ctx.task_id)
    assert task.status == "running" and task.worker_id == "w_owner" and task.result is None
    assert ctx.lost_lease and ctx.lease_lost.is_set()
    with pytest.raises(LostLease):  # known lost: refused locally, write not called
        await ctx.succeed_in(write)
    assert called == [True]


async def test_succeed_in_write_error_rolls_back_and_leaves_task_running(pg):
    dsn = pg.target
    store = pg.store()
    await store.connect()
    run_sql(dsn, "create table side_effects (task_id text primary key, note text not null)")
    ctx = await _claimed_context(store, "w_tx")

    async def write(session: Any) -> Any:
        await session.query("insert into side_effects (task_id, note) values ($1, $2)", [ctx.task_id, "x"])
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await ctx.succeed_in(write)
    assert fetch(dsn, "select count(*) from side_effects") == [(0,)]
    assert (await store.get(ctx.task_id)).status == "running"
    assert not ctx.settled and not ctx.lost_lease
    assert (await ctx.succeed(7)).status == "succeeded"


async def test_succeed_in_unsupported_on_sqlite(tmp_path):
    store = SQLiteStore(str(tmp_path / "tasks.db"))
    try:
        ctx = await _claimed_context(store, "w_sqlite")
        called = []

        async def write(session: Any) -> Any:
            called.append(session)
            return 1

        with pytest.raises(UnsupportedBackend):
            await ctx.succeed_in(write)
        assert called == []
        assert (await store.get(ctx.task_id)).status == "running"
    finally:
        await store.close()


# ---------------------------------------------------------------------------
# 7. keyed submits take the protocol's advisory lock


async def test_keyed_submit_waits_for_the_advisory_lock(pg):
    dsn = pg.target
    store = pg.store()
    await store.connect()
    holder = psycopg.connect(dsn)  # not autocommit: the lock lives until commit
    try:
        holder.execute("select pg_advisory_xact_lock(hashtextextended('k'::text, 0))")
        finished: dict[str, float] = {}

        async def keyed(key: str) -> Any:
            task = await store.submit(name="locked", key=key)
            finished[key] = time.monotonic()
            return task

        blocked = asyncio.ensure_future(keyed("k"))
        free = await asyncio.wait_for(keyed("other"), 3)  # a different key does not wait
        assert free.status == "queued"
        await asyncio.sleep(0.5)
        assert not blocked.done()
        assert fetch(dsn, "select count(*) from cairnq_task_keys where key = 'k'") == [(0,)]

        released = time.monotonic()
        holder.commit()
        task = await asyncio.wait_for(blocked, 5)
        assert finished["k"] >= released
        assert task.status == "queued"
        assert (await store.get_by_key("k")).id == task.id
    finally:
        holder.close()


async def test_keyed_mutations_also_take_the_lock(pg):
    dsn = pg.target
    store = pg.store()
    await store.connect()
    task = await store.submit(name="locked", key="k2")
    holder = psycopg.connect(dsn)
    try:
        holder.execute("select pg_advisory_xact_lock(hashtextextended('k2'::text, 0))")
        cancel = asyncio.ensure_future(store.cancel_by_key("k2"))
        await asyncio.sleep(0.4)
        assert not cancel.done()
        assert (await store.get(task.id)).status == "queued"
        holder.commit()
        assert (await asyncio.wait_for(cancel, 5)).status == "canceled"
    finally:
        holder.close()


# ---------------------------------------------------------------------------
# 8. bad input specific to PostgreSQL


@pytest.mark.parametrize(
    "payload, metadata",
    [
        ({"s": "a\u0000b"}, None),
        (["ok", ["deep \u0000"]], None),
        ("\u0000", None),
        ({"k\u0000ey": 1}, None),
        ({"fine": 1}, {"m": "nul \u0000 here"}),
    ],
)
async def test_nul_character_is_refused_by_the_server(pg, payload, metadata):
    """OPERATIONS.md §1.2: jsonb rejects \u0000 (a server error, not a
    SerializationError; no SDK pre-check). Nothing is written."""
    store = pg.store()
    await store.connect()
    with pytest.raises(psycopg.errors.UntranslatableCharacter):
        await store.submit(name="nul", payload=payload, metadata=metadata)
    with pytest.raises(psycopg.errors.UntranslatableCharacter):
        await store.submit(name="nul", payload=payload, metadata=metadata, key="nul-key")
    assert fetch(pg.target, "select count(*) from cairnq_tasks") == [(0,)]
    assert fetch(pg.target, "select count(*) from cairnq_task_keys") == [(0,)]


async def test_nul_in_result_is_refused_by_the_server(pg):
    store = pg.store()
    await store.connect()
    task = await store.submit(name="nul.result")
    [c] = await store.claim(queues=["default"], worker_id="w_nul")
    with pytest.raises(psycopg.errors.UntranslatableCharacter):
        await store.complete(task_id=c.id, worker_id="w_nul", result={"r": ["\u0000"]})
    with pytest.raises(psycopg.errors.UntranslatableCharacter):
        await store.succeed(task_id=c.id, worker_id="w_nul", result="\u0000")
    got = await store.get(task.id)
    assert got.status == "running" and got.result is None  # nothing written
    done = await store.complete(task_id=c.id, worker_id="w_nul", result={"r": "fine"})
    assert done.status == "succeeded" and done.result == {"r": "fine"}


async def test_literal_backslash_u0000_text_is_not_nul(pg):
    """The six characters ``\\u0000`` (a backslash, then u0000) are ordinary text
    for jsonb; only a real NUL character is refused."""
    store = pg.store()
    await store.connect()
    text = "C:\\u0000dir"
    assert len(text) == 11 and "\x00" not in text
    task = await store.submit(name="bs", payload={"p": text}, metadata={"m": text}, key=text)
    got = await store.get(task.id)
    assert got.payload == {"p": text} and got.metadata == {"m": text}
    [c] = await store.claim(queues=["default"], worker_id="w_bs")
    done = await store.complete(task_id=c.id, worker_id="w_bs", result=[text])
    assert done.result == [text]
    failed_env = {"type": "X", "code": "x", "message": text, "retryable": False, "details": {}}
    t2 = await store.submit(name="bs")
    [c2] = await store.claim(queues=["default"], worker_id="w_bs")
    failed = await store.fail(task_id=c2.id, worker_id="w_bs", error=failed_env, retryable=False)
    assert failed.error == failed_env and c2.id == t2.id


async def test_worker_result_with_nul_is_reported_and_left_to_lease_recovery(pg):
    """A handler result jsonb refuses: the server's error goes to on_error and
    nothing is written, so the task stays running until its lease expires and
    recovery takes it (as 0.15.1: no SDK pre-check, OPERATIONS.md §1.2)."""
    client = pg.client()
    errors: list[tuple[BaseException, dict[str, Any]]] = []
    worker = pg.worker(
        ("default",), poll_interval_ms=50, lease_ms=300, on_error=lambda exc, info: errors.append((exc, info))
    )

    @worker.task("nul.result")
    async def handler(ctx, payload):
        return {"bad": "\u0000"}

    task = await client.submit("nul.result", {}, max_attempts=2)
    async with worker.background():
        await until(lambda: errors, 3, "the refused settlement reported")
        assert (await client.get(task.id)).status == "running"
        done = await client.wait(task.id, timeout_ms=5_000)
    assert isinstance(errors[0][0], psycopg.errors.UntranslatableCharacter)
    assert errors[0][1]["phase"] == "execute" and errors[0][1]["task_id"] == task.id
    assert (done.status, done.attempt, done.error["code"]) == ("failed", 2, "lease_expired")


# ---------------------------------------------------------------------------
# 9. faults: backends terminated under the store


async def _twice(op: Callable[[], Any]) -> Any:
    """The next operation may fail on a dead connection; the one after must not."""
    try:
        return await op()
    except psycopg.OperationalError:
        pass
    try:
        return await op()
    except psycopg.OperationalError as exc:
        pytest.fail(f"the store did not recover: the second operation after the kill failed too: {exc!r}")


async def test_store_recovers_after_its_backends_are_terminated(pg):
    dsn, db = pg.target, pg.database
    store = pg.store(max_size=4)
    await store.connect()
    seed = await store.submit(name="f", payload={"i": 0}, queue="fq")
    # grow the pool to several connections
    await asyncio.gather(*(store.submit(name="f", key=f"grow-{i}", queue="gq") for i in range(8)))
    await asyncio.gather(*(store.get(seed.id) for _ in range(8)))

    ops: list[Callable[[], Any]] = [
        lambda: store.get(seed.id),
        lambda: store.submit(name="f", payload={"i": 1}, queue="fq"),
        lambda: store.list(queue="fq"),
        lambda: store.submit(name="f", key="fault-key", queue="fq"),
        lambda: store.claim(queues=["fq"], worker_id="w_fault"),
        lambda: store.stats(),
    ]
    for op in ops:
        pids = backends_of(dsn, db)
        assert pids
        terminate(dsn, pids)
        assert await _twice(op) is not None
        assert await op() is not None  # and it stays healthy

    assert (await store.get(seed.id)).id == seed.id
    assert (await store.get_by_key("fault-key")) is not None


async def test_worker_keeps_draining_when_its_connections_are_terminated(pg):
    dsn, db = pg.target, pg.database
    client = pg.client()
    errors: list[tuple[BaseException, dict[str, Any]]] = []
    worker = pg.worker(
        ("dq",),
        concurrency=4,
        lease_ms=1000,
        poll_interval_ms=50,
        on_error=lambda exc, info: errors.append((exc, info)),
    )
    handled: list[int] = []

    @worker.task("drain")
    async def handler(ctx, payload):
        await asyncio.sleep(0.02)
        handled.append(payload["i"])
        return payload["i"]

    total = 60
    for i in range(total):
        await client.submit("drain", {"i": i}, queue="dq", max_attempts=20)
    await client.close()

    runner = asyncio.ensure_future(worker.run())
    try:
        await until(lambda: len(handled) >= 12, 20, "a third of the tasks")
        terminate(dsn, backends_of(dsn, db))
        await until(lambda: len(handled) >= 30, 20, "more tasks after the kill")
        terminate(dsn, backends_of(dsn, db))
        deadline = time.monotonic() + 40
        while status_counts(dsn).get("succeeded", 0) < total:
            assert time.monotonic() < deadline, status_counts(dsn)
            await asyncio.sleep(0.1)
    finally:
        worker.stop()
        await asyncio.wait_for(runner, 15)

    assert status_counts(dsn) == {"succeeded": total}  # none lost, none failed
    results = sorted(r[0] for r in fetch(dsn, "select result from cairnq_tasks"))
    assert results == list(range(total))
    assert errors, "the terminated connections were not reported through on_error"
    for exc, info in errors:
        assert info.get("phase") in ("claim", "execute"), info
        assert isinstance(exc, psycopg.Error), repr(exc)


# 10. the connection kept checked out for lone statements


async def test_pool_of_one_never_waits_on_its_kept_connection(pg):
    store = pg.store(min_size=1, max_size=1)
    await store.connect()
    task = await store.submit(name="h", queue="hq")
    # a transaction (claim) and lone statements, interleaved and concurrent
    claimed, got, _ = await asyncio.wait_for(
        asyncio.gather(
            store.claim(queues=["hq"], worker_id="w_hot"),
            store.get(task.id),
            store.submit(name="h", queue="hq"),
        ),
        timeout=10,
    )
    assert [t.id for t in claimed] == [task.id] and got.id == task.id
    assert store._executor._hot is None  # with one connection nothing is kept aside
    await store.close()


async def test_kept_connection_serves_lone_statements_and_goes_back_on_close(pg):
    dsn, db = pg.target, pg.database
    store = pg.store(min_size=1, max_size=4)
    await store.connect()
    task = await store.submit(name="h", queue="hq")
    executor = store._executor
    kept = executor._hot
    assert kept is not None
    for _ in range(20):
        await store.get(task.id)
    assert executor._hot is kept  # one connection for all of them, not a checkout each
    # concurrent lone statements: the kept one serves one, the pool the others
    gets = await asyncio.gather(*(store.get(task.id) for _ in range(8)))
    assert {t.id for t in gets} == {task.id}
    await store.close()
    assert executor._hot is None and kept.closed
    assert backends_of(dsn, db) == []


async def test_kept_connection_terminated_is_replaced(pg):
    dsn = pg.target
    store = pg.store(max_size=4)
    await store.connect()
    task = await store.submit(name="h", queue="hq")
    kept = store._executor._hot
    pid = kept.info.backend_pid
    terminate(dsn, [pid])
    assert (await _twice(lambda: store.get(task.id))).id == task.id
    assert store._executor._hot is not kept and kept.closed
    assert (await store.get(task.id)).id == task.id
    await store.close()


async def test_close_during_a_lone_statement_still_returns_the_kept_connection(pg):
    dsn, db = pg.target, pg.database
    store = pg.store(max_size=4)
    await store.connect()
    await store.submit(name="h", queue="hq")
    executor = store._executor
    slow = asyncio.ensure_future(executor._query_raw("select pg_sleep(0.3)", []))
    await asyncio.sleep(0.1)  # the sleep runs on the kept connection
    kept = executor._hot
    assert kept is not None and executor._hot_busy
    await asyncio.gather(store.close(), slow)
    assert executor._hot is None and kept.closed
    assert backends_of(dsn, db) == []
