"""Interoperability with the reference SDK (``cairnq==0.15.1``, asyncpg) on PostgreSQL.

The reference runs in its own virtualenv (tests/refsdk.py); every exchange goes
through the database. Each test uses brand-new databases. Spec: SCHEMA.md §2.5,
§4, §5.1; OPERATIONS.md §3.1 (advisory lock).

Tasks are compared as ``dataclasses.asdict`` round-tripped through JSON, floats
tagged (``strict``) so 1 vs 1.0 differ. jsonb normalizes object key order, so
payloads are compared as dicts, never as text.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

import pytest

import refsdk
from backends import DIALECTS, create_database, drop_database, dsn_for, make_backend

import cairnq

pytestmark = pytest.mark.interop

if "postgres" not in DIALECTS:
    pytest.skip("PostgreSQL is not available", allow_module_level=True)

import psycopg  # noqa: E402

TABLES = ("cairnq_tasks", "cairnq_task_keys", "cairnq_meta", "cairnq_migrations")
LEDGER = [
    "0001_init.sql", "0002_purge_index.sql", "0003_notify.sql", "0004_lease_index.sql",
    "0005_clear_terminal_lease.sql", "0006_claim_name_index.sql", "0007_purge_status_index.sql",
    "0008_claim_due_index.sql", "0009_purge_queue_index.sql", "0010_drop_status_index.sql",
]  # fmt: skip

# SCHEMA.md §5.1, verbatim
CANONICAL_INDEXES = {
    "cairnq_tasks_claim_idx": "CREATE INDEX cairnq_tasks_claim_idx ON public.cairnq_tasks USING btree (queue, status, priority DESC, run_at_ms, id)",
    "cairnq_tasks_claim_name_idx": "CREATE INDEX cairnq_tasks_claim_name_idx ON public.cairnq_tasks USING btree (queue, status, name, priority DESC, run_at_ms, id)",
    "cairnq_tasks_completed_idx": "CREATE INDEX cairnq_tasks_completed_idx ON public.cairnq_tasks USING btree (completed_at_ms)",
    "cairnq_tasks_correlation_idx": "CREATE INDEX cairnq_tasks_correlation_idx ON public.cairnq_tasks USING btree (correlation_id)",
    "cairnq_tasks_lease_idx": "CREATE INDEX cairnq_tasks_lease_idx ON public.cairnq_tasks USING btree (lease_until_ms) WHERE ((status = 'running'::text) AND (lease_until_ms IS NOT NULL))",
    "cairnq_tasks_name_idx": "CREATE INDEX cairnq_tasks_name_idx ON public.cairnq_tasks USING btree (name)",
    "cairnq_tasks_pkey": "CREATE UNIQUE INDEX cairnq_tasks_pkey ON public.cairnq_tasks USING btree (id)",
    "cairnq_tasks_queue_completed_idx": "CREATE INDEX cairnq_tasks_queue_completed_idx ON public.cairnq_tasks USING btree (queue, completed_at_ms) WHERE (status = ANY (ARRAY['succeeded'::text, 'failed'::text, 'canceled'::text]))",
    "cairnq_tasks_root_idx": "CREATE INDEX cairnq_tasks_root_idx ON public.cairnq_tasks USING btree (root_id)",
    "cairnq_tasks_status_completed_idx": "CREATE INDEX cairnq_tasks_status_completed_idx ON public.cairnq_tasks USING btree (status, completed_at_ms)",
    "cairnq_task_keys_pkey": "CREATE UNIQUE INDEX cairnq_task_keys_pkey ON public.cairnq_task_keys USING btree (key)",
    "cairnq_meta_pkey": "CREATE UNIQUE INDEX cairnq_meta_pkey ON public.cairnq_meta USING btree (key)",
    "cairnq_migrations_pkey": "CREATE UNIQUE INDEX cairnq_migrations_pkey ON public.cairnq_migrations USING btree (name)",
}  # fmt: skip
CANONICAL_TRIGGER = (
    "CREATE TRIGGER cairnq_tasks_notify AFTER INSERT OR UPDATE OF status ON public.cairnq_tasks"
    " FOR EACH ROW WHEN ((new.status IS DISTINCT FROM 'running'::text))"
    " EXECUTE FUNCTION cairnq_notify()"
)

RICH_PAYLOAD = {
    "order": {"id": 12345, "lines": [{"sku": "A-1", "qty": 2, "price": 19.99}, {"sku": "B", "qty": 0}]},
    "text": "héllo wörld — ✓ 日本語 \u2028 tab\tquote\" back\\slash / 😀",
    "floats": [1.5, -0.0, 0.1, 1e-07, 2.5e-05, 1e16, 3.141592653589793],
    "ints": [0, -1, 2**31, 2**53 + 1, 2**63 - 1, -(2**63)],
    "lists": [[], {}, "", None, True, False, [[["deep"]]]],
    "zkeys": {"b": 1, "a": 2, "aa": 3, "": 4},  # jsonb reorders keys
}
RICH_METADATA = {"trace_id": "abc-123", "tenant": "ünïcödé", "tags": ["x", "y"], "n": 2.25}


# ---------------------------------------------------------------------------
# helpers


@pytest.fixture
def pg(tmp_path: Path) -> Iterator[Any]:
    with make_backend("postgres", tmp_path) as backend:
        yield backend


@pytest.fixture
def two_databases() -> Iterator[tuple[str, str]]:
    a, b = create_database(), create_database()
    try:
        yield dsn_for(a), dsn_for(b)
    finally:
        drop_database(a)
        drop_database(b)


def fetch(dsn: str, query: str, params: Optional[Sequence[Any]] = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(query, params).fetchall()  # type: ignore[arg-type]


_REF_HELPERS = """
import dataclasses, time
def T(task):
    return None if task is None else dataclasses.asdict(task)
"""

_REF_RUNNER = """
async def _run():
    q = cairnq.CairnQ.postgres(ARGS["dsn"], **ARGS.get("opts", {}))
    try:
        return await main(q)
    finally:
        await q.close()
emit(asyncio.run(_run()))
"""


def ref(dsn: str, body: str, **args: Any) -> Any:
    """Run ``body`` as ``async def main(q)`` with the reference SDK on ``dsn``
    (``q`` = a reference ``CairnQ.postgres``); returns what the body returns."""
    script = (
        _REF_HELPERS
        + "\nasync def main(q):\n"
        + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ")
        + "\n"
        + _REF_RUNNER
    )
    return refsdk.run(script, {"dsn": dsn, **args})


def strict(value: Any) -> Any:
    if isinstance(value, float):
        return f"float:{value!r}"
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(v) for v in value]
    return value


def js(value: Any) -> Any:
    return strict(json.loads(json.dumps(value)))


def T(task: Any) -> Any:
    return None if task is None else js(dataclasses.asdict(task))


async def ours_connect(dsn: str) -> None:
    client = cairnq.CairnQ.postgres(dsn)
    try:
        await client.connect()
    finally:
        await client.close()


def catalog(dsn: str) -> dict[str, Any]:
    """Everything the migrations define, as PostgreSQL prints it."""
    out: dict[str, Any] = {}
    out["relations"] = sorted(
        fetch(dsn, "select relname, relkind::text from pg_class where relnamespace = 'public'::regnamespace")
    )
    out["indexes"] = sorted(
        fetch(dsn, "select tablename, indexname, indexdef from pg_indexes where schemaname = 'public'")
    )
    out["constraints"] = sorted(
        fetch(
            dsn,
            "select conrelid::regclass::text, conname, contype::text, pg_get_constraintdef(oid)"
            " from pg_constraint where connamespace = 'public'::regnamespace",
        )
    )
    out["triggers"] = sorted(
        fetch(
            dsn,
            "select tgrelid::regclass::text, tgname, pg_get_triggerdef(oid) from pg_trigger"
            " where not tgisinternal",
        )
    )
    out["functions"] = sorted(
        fetch(
            dsn,
            "select p.proname, p.prorettype::regtype::text, l.lanname, p.provolatile::text,"
            " p.pronargs, p.proretset, p.prosecdef, p.proisstrict"
            " from pg_proc p join pg_language l on l.oid = p.prolang"
            " where p.pronamespace = 'public'::regnamespace",
        )
    )
    out["columns"] = fetch(
        dsn,
        "select table_name::text, column_name::text, data_type::text, is_nullable::text,"
        " column_default::text, ordinal_position::int from information_schema.columns"
        " where table_schema = 'public' order by table_name, ordinal_position",
    )
    out["meta"] = sorted(fetch(dsn, "select key, value from cairnq_meta"))
    out["ledger"] = [r[0] for r in fetch(dsn, "select name from cairnq_migrations order by name")]
    return out


def snapshot(dsn: str) -> dict[str, Any]:
    """Ledger rows with their times, meta, and the OIDs of every object: a
    migration that ran again (0003 recreates the trigger, 0008 two indexes)
    or a new ledger row would change it."""
    return {
        "ledger": fetch(dsn, "select name, applied_at_ms from cairnq_migrations order by name"),
        "meta": sorted(fetch(dsn, "select key, value from cairnq_meta")),
        "oids": sorted(
            fetch(
                dsn,
                "select relname, oid::bigint from pg_class where relnamespace = 'public'::regnamespace"
                " union all select tgname, oid::bigint from pg_trigger where not tgisinternal"
                " union all select proname, oid::bigint from pg_proc where pronamespace = 'public'::regnamespace",
            )
        ),
    }


# ---------------------------------------------------------------------------
# (a) catalog equality


async def test_catalog_equals_reference(two_databases):
    ours_dsn, ref_dsn = two_databases
    await ours_connect(ours_dsn)
    ref(ref_dsn, "await q.connect()\nreturn True")
    ours, theirs = catalog(ours_dsn), catalog(ref_dsn)

    for part in ("relations", "indexes", "constraints", "triggers", "functions", "columns", "meta", "ledger"):
        assert ours[part] == theirs[part], part

    # and the reference agrees with the spec, so the comparison means something
    assert {name: d for _, name, d in theirs["indexes"]} == CANONICAL_INDEXES
    assert [(t, n, d) for t, n, d in theirs["triggers"]] == [
        ("cairnq_tasks", "cairnq_tasks_notify", CANONICAL_TRIGGER)
    ]
    assert theirs["functions"] == [("cairnq_notify", "trigger", "plpgsql", "v", 0, False, False, False)]
    constraints = {(t, n): (k, d) for t, n, k, d in theirs["constraints"]}
    assert constraints[("cairnq_tasks", "cairnq_tasks_status_check")] == (
        "c",
        "CHECK ((status = ANY (ARRAY['queued'::text, 'running'::text, 'succeeded'::text, 'failed'::text, 'canceled'::text])))",
    )
    assert constraints[("cairnq_task_keys", "cairnq_task_keys_task_id_fkey")] == (
        "f",
        "FOREIGN KEY (task_id) REFERENCES cairnq_tasks(id) ON DELETE CASCADE",
    )
    assert {t for t, _ in constraints} == set(TABLES)
    assert [c[:3] for c in theirs["columns"] if c[0] == "cairnq_tasks"][:4] == [
        ("cairnq_tasks", "id", "text"),
        ("cairnq_tasks", "name", "text"),
        ("cairnq_tasks", "queue", "text"),
        ("cairnq_tasks", "status", "text"),
    ]
    assert len([c for c in theirs["columns"] if c[0] == "cairnq_tasks"]) == 23
    assert theirs["meta"] == [("protocol_version", "1"), ("schema_version", "10")]
    assert theirs["ledger"] == LEDGER


# ---------------------------------------------------------------------------
# (b) each opens the other's database without migrating anything


async def test_reference_opens_our_database_without_migrating(pg):
    dsn = pg.target
    await ours_connect(dsn)
    before = snapshot(dsn)
    out = ref(dsn, """
        t = await q.submit("interop.ref_on_ours", {"x": 1})
        return T(await q.get(t.id))
    """)
    assert out["status"] == "queued"
    assert snapshot(dsn) == before

    client = pg.client()
    assert T(await client.get(out["id"])) == js(out)
    await client.close()
    assert snapshot(dsn) == before


async def test_ours_opens_reference_database_without_migrating(pg):
    dsn = pg.target
    ref(dsn, "await q.connect()\nreturn True")
    before = snapshot(dsn)
    client = pg.client()
    task = await client.submit("interop.ours_on_ref", {"x": 1})
    await client.close()
    assert snapshot(dsn) == before

    out = ref(dsn, "return T(await q.get(ARGS['id']))", id=task.id)
    assert js(out) == T(task)
    assert snapshot(dsn) == before


# ---------------------------------------------------------------------------
# (c) field-for-field reads, both ways

_REF_READ_ALL = """
s = await q.get_status(ARGS["id"])
sk = await q.get_status_by_key(ARGS["key"])
return {
    "get": T(await q.get(ARGS["id"])),
    "get_by_key": T(await q.get_by_key(ARGS["key"])),
    "list_queue": [T(t) for t in await q.list(queue="q-rich")],
    "list_queued": [T(t) for t in await q.list(status="queued", limit=2, offset=1)],
    "stats_queue": await q.stats("q-rich"),
    "stats": await q.stats(),
    "status": [s.id, s.status],
    "status_by_key": [sk.id, sk.status],
}
"""


async def _ours_read_all(client: cairnq.CairnQ, task_id: str, key: str) -> dict[str, Any]:
    s = await client.get_status(task_id)
    sk = await client.get_status_by_key(key)
    return js({
        "get": dataclasses.asdict(await client.get(task_id)),
        "get_by_key": dataclasses.asdict(await client.get_by_key(key)),
        "list_queue": [dataclasses.asdict(t) for t in await client.list(queue="q-rich")],
        "list_queued": [dataclasses.asdict(t) for t in await client.list(status="queued", limit=2, offset=1)],
        "stats_queue": await client.stats("q-rich"),
        "stats": await client.stats(),
        "status": [s.id, s.status],
        "status_by_key": [sk.id, sk.status],
    })  # fmt: skip


def as_jsonb(dsn: str, value: Any) -> Any:
    """``value`` as jsonb gives it back (numbers normalized: 1e16 -> 10000000000000000,
    -0.0 -> 0.0), decoded and made strict."""
    ((text,),) = fetch(dsn, "select (%s::jsonb)::text", [json.dumps(value)])
    return strict(json.loads(text))


def _check_rich(dsn: str, task: dict[str, Any]) -> None:
    assert task["payload"] == as_jsonb(dsn, RICH_PAYLOAD)  # dict equality: key order is jsonb's
    assert task["metadata"] == as_jsonb(dsn, RICH_METADATA)
    assert (task["name"], task["queue"], task["status"]) == ("interop.rich", "q-rich", "queued")
    assert (task["priority"], task["max_attempts"], task["attempt"]) == (7, 5, 0)
    assert 59_990 <= task["run_at_ms"] - task["created_at_ms"] <= 60_010
    assert task["root_id"] == task["id"]
    for field in ("result", "error", "progress", "message", "worker_id", "lease_until_ms",
                  "cancel_requested_at_ms", "parent_id", "correlation_id", "completed_at_ms"):  # fmt: skip
        assert task[field] is None, field


async def test_reference_reads_task_submitted_by_ours(pg):
    dsn = pg.target
    client = pg.client()
    submitted = await client.submit(
        "interop.rich", RICH_PAYLOAD, key="k-rich", queue="q-rich", priority=7,
        delay_ms=60_000, metadata=RICH_METADATA, max_attempts=5,
    )  # fmt: skip
    await client.submit("interop.other", [1, 2], queue="q-rich")
    await client.submit("interop.other", "x", queue="q-rich", priority=-3)
    await client.submit("interop.elsewhere", None, queue="q-other", metadata={"a": None})
    _check_rich(dsn, T(submitted))

    theirs = js(ref(dsn, _REF_READ_ALL, id=submitted.id, key="k-rich"))
    ours = await _ours_read_all(client, submitted.id, "k-rich")
    assert theirs["get"] == T(submitted)
    for field in ours:
        assert theirs[field] == ours[field], field
    assert len(theirs["list_queue"]) == 3
    assert theirs["stats_queue"] == {
        "q-rich": {"queued": 3, "running": 0, "succeeded": 0, "failed": 0, "canceled": 0}
    }
    assert sorted(theirs["stats"]) == ["q-other", "q-rich"]


async def test_ours_reads_task_submitted_by_reference(pg):
    dsn = pg.target
    body = """
        t = await q.submit("interop.rich", ARGS["payload"], key="k-rich", queue="q-rich", priority=7,
                           delay_ms=60_000, metadata=ARGS["metadata"], max_attempts=5)
        await q.submit("interop.other", [1, 2], queue="q-rich")
        await q.submit("interop.other", "x", queue="q-rich", priority=-3)
        await q.submit("interop.elsewhere", None, queue="q-other", metadata={"a": None})
        return {"submitted": T(t), "id": t.id}
    """
    out = ref(dsn, body, payload=RICH_PAYLOAD, metadata=RICH_METADATA)
    task_id = out["id"]
    submitted = js(out["submitted"])
    _check_rich(dsn, submitted)

    theirs = js(ref(dsn, _REF_READ_ALL, id=task_id, key="k-rich"))
    client = pg.client()
    ours = await _ours_read_all(client, task_id, "k-rich")
    assert ours["get"] == submitted
    for field in ours:
        assert ours[field] == theirs[field], field


# ---------------------------------------------------------------------------
# (d) one SDK's client, the other's worker


async def test_reference_client_our_worker(pg):
    dsn = pg.target
    ids = ref(dsn, """
        ids = [(await q.submit("interop.double", {"n": i}, queue="iq")).id for i in range(10)]
        ids.append((await q.submit("interop.boom", {"n": -1}, queue="iq", max_attempts=1)).id)
        return ids
    """)
    worker = pg.worker(("iq",), concurrency=4, poll_interval_ms=50)

    @worker.task("interop.double")
    async def double(ctx, payload):
        return {"x": payload["n"] * 2, "by": "ours"}

    @worker.task("interop.boom")
    async def boom(ctx, payload):
        raise ValueError("nope from ours")

    async with worker.background():
        client = pg.client()
        for task_id in ids:
            await client.wait(task_id, timeout_ms=10_000)

    out = ref(dsn, """
        return {i: T(await q.wait(i, timeout_ms=5000)) for i in ARGS["ids"]}
    """, ids=ids)  # fmt: skip
    for n, task_id in enumerate(ids[:-1]):
        t = out[task_id]
        assert t["status"] == "succeeded" and t["result"] == {"x": n * 2, "by": "ours"}
        assert t["worker_id"] == worker.worker_id and t["attempt"] == 1
        assert t["progress"] == 1.0 and t["lease_until_ms"] is None
    failed = out[ids[-1]]
    assert failed["status"] == "failed" and failed["attempt"] == 1
    assert failed["error"]["type"] == "ValueError" and failed["error"]["code"] == "handler_error"
    assert failed["error"]["message"] == "nope from ours" and failed["error"]["retryable"] is True


REF_WORKER = """
w = cairnq.Worker.postgres(ARGS["dsn"], queues=["rq"], concurrency=4, poll_interval_ms=50)

@w.task("interop.triple")
async def triple(ctx, payload):
    return {"x": payload["n"] * 3, "by": "ref"}

@w.task("interop.boom")
async def boom(ctx, payload):
    raise ValueError("nope from ref")

print("worker_id", w.worker_id, flush=True)
w.serve()
"""


async def test_our_client_reference_worker(pg):
    dsn = pg.target
    client = pg.client()
    tasks = [await client.submit("interop.triple", {"n": i}, queue="rq") for i in range(10)]
    bad = await client.submit("interop.boom", {"n": -1}, queue="rq", max_attempts=1)
    proc = refsdk.spawn(REF_WORKER, {"dsn": dsn}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        done = [await client.wait(t.id, timeout_ms=30_000) for t in tasks]
        failed = await client.wait(bad.id, timeout_ms=10_000)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    assert proc.returncode == 0, err
    ref_worker_id = out.split()[1]
    assert ref_worker_id.startswith("worker_")
    for n, t in enumerate(done):
        assert t.status == "succeeded" and t.result == {"x": n * 3, "by": "ref"}
        assert t.worker_id == ref_worker_id and t.attempt == 1
        assert t.progress == 1.0 and t.lease_until_ms is None and t.completed_at_ms is not None
    assert failed.status == "failed" and failed.worker_id == ref_worker_id
    assert failed.error["type"] == "ValueError" and failed.error["code"] == "handler_error"
    assert failed.error["message"] == "nope from ref"
    assert await client.stats("rq") == {
        "rq": {"queued": 0, "running": 0, "succeeded": 10, "failed": 1, "canceled": 0}
    }


# ---------------------------------------------------------------------------
# (e) a keyed submit race across SDKs: one advisory lock for both

RACE_KEYS = ["race-1", "race-2", "race-3"]
PER_SIDE = 20

REF_RACE = """
async def race():
    q = cairnq.CairnQ.postgres(ARGS["dsn"], min_size=ARGS["n"], max_size=ARGS["n"])
    await q.connect()
    # open every pool connection now, so the race is not a race to connect
    await asyncio.gather(*(q.get("task_none") for _ in range(ARGS["n"])))
    out = {}
    for key, start_at in zip(ARGS["keys"], ARGS["starts"]):
        await asyncio.sleep(max(0, start_at - time.time()))
        tasks = await asyncio.gather(*(
            q.submit("interop.race", {"by": "ref", "i": i}, key=key, conflict="reuse")
            for i in range(ARGS["n"])
        ))
        out[key] = [t.id for t in tasks]
    await q.close()
    return out

import time
emit(asyncio.run(race()))
"""


async def test_keyed_submit_race_between_sdks(pg):
    dsn = pg.target
    store = pg.store(min_size=PER_SIDE, max_size=PER_SIDE)
    await store.connect()
    await asyncio.gather(*(store.get("task_none") for _ in range(PER_SIDE)))
    first = time.time() + 4.0  # time for the reference process to start and connect
    starts = [first + 1.5 * i for i in range(len(RACE_KEYS))]
    theirs_future = asyncio.ensure_future(
        asyncio.to_thread(
            refsdk.run, REF_RACE, {"dsn": dsn, "n": PER_SIDE, "keys": RACE_KEYS, "starts": starts}
        )
    )
    ours: dict[str, list[str]] = {}
    for key, start_at in zip(RACE_KEYS, starts):
        await asyncio.sleep(max(0.0, start_at - time.time()))
        tasks = await asyncio.gather(
            *(
                store.submit(name="interop.race", payload={"by": "ours", "i": i}, key=key, conflict="reuse")
                for i in range(PER_SIDE)
            )
        )
        ours[key] = [t.id for t in tasks]
    theirs = await asyncio.wait_for(theirs_future, 60)

    for key in RACE_KEYS:
        rows = fetch(dsn, "select task_id from cairnq_task_keys where key = %s", [key])
        assert len(rows) == 1
        (winner,) = rows[0]
        assert len(ours[key]) == len(theirs[key]) == PER_SIDE
        assert set(ours[key]) == set(theirs[key]) == {winner}, key
    tasks = fetch(dsn, "select id, status from cairnq_tasks where name = 'interop.race'")
    assert len(tasks) == len(RACE_KEYS)  # exactly one task per key, whoever won
    assert all(status == "queued" for _, status in tasks)
