"""Interoperability with the reference SDK (``cairnq==0.15.1``) on one SQLite file.

The reference runs in its own virtualenv (tests/refsdk.py); every exchange goes
through the database file. Values that must be identical on both sides (payloads,
results) are passed as Python literals and rebuilt with ``ast.literal_eval`` in
each process, so tuples, non-str keys, big ints and odd floats survive the trip.
Tasks are compared as ``dataclasses.asdict`` round-tripped through JSON, floats
tagged (``strict``) so 1 vs 1.0 and 2**64 vs 1.8446744073709552e+19 differ.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sqlite3
import textwrap
from typing import Any

import pytest

import refsdk

import cairnq
from cairnq import AlreadyExists, ProtocolVersionMismatch

pytestmark = pytest.mark.interop

# ---------------------------------------------------------------------------
# expected catalog (docs: SCHEMA.md §1.1, §3, §5)

TABLES = ("cairnq_tasks", "cairnq_task_keys", "cairnq_meta", "cairnq_migrations")

LEDGER_NAMES = [
    "0001_init.sql",
    "0002_purge_index.sql",
    "0004_lease_index.sql",
    "0005_clear_terminal_lease.sql",
    "0006_claim_name_index.sql",
    "0007_purge_status_index.sql",
    "0008_claim_due_index.sql",
    "0009_purge_queue_index.sql",
    "0010_drop_status_index.sql",
]

NAMED_INDEXES = {
    "cairnq_tasks_claim_idx",
    "cairnq_tasks_claim_name_idx",
    "cairnq_tasks_name_idx",
    "cairnq_tasks_root_idx",
    "cairnq_tasks_correlation_idx",
    "cairnq_tasks_completed_idx",
    "cairnq_tasks_lease_idx",
    "cairnq_tasks_status_completed_idx",
    "cairnq_tasks_queue_completed_idx",
}
AUTO_INDEXES = {f"sqlite_autoindex_{t}_1" for t in TABLES}

# (name, declared type (case-insensitive), notnull, default, pk)
TASK_COLUMNS = [
    ("id", "text", 0, None, 1),
    ("name", "text", 1, None, 0),
    ("queue", "text", 1, "'default'", 0),
    ("status", "text", 1, None, 0),
    ("payload", "text", 1, None, 0),
    ("result", "text", 0, None, 0),
    ("error", "text", 0, None, 0),
    ("metadata", "text", 1, "'{}'", 0),
    ("progress", "real", 0, None, 0),
    ("message", "text", 0, None, 0),
    ("attempt", "integer", 1, "0", 0),
    ("max_attempts", "integer", 1, "3", 0),
    ("priority", "integer", 1, "0", 0),
    ("worker_id", "text", 0, None, 0),
    ("lease_until_ms", "integer", 0, None, 0),
    ("run_at_ms", "integer", 1, None, 0),
    ("cancel_requested_at_ms", "integer", 0, None, 0),
    ("parent_id", "text", 0, None, 0),
    ("root_id", "text", 0, None, 0),
    ("correlation_id", "text", 0, None, 0),
    ("created_at_ms", "integer", 1, None, 0),
    ("updated_at_ms", "integer", 1, None, 0),
    ("completed_at_ms", "integer", 0, None, 0),
]

TASK_CHECKS = {
    "status in('queued','running','succeeded','failed','canceled')",
    "json_valid(payload)",
    "result is null or json_valid(result)",
    "error is null or json_valid(error)",
    "json_valid(metadata)",
}

PARTIAL_WHERE = {
    "cairnq_tasks_lease_idx": "status = 'running' and lease_until_ms is not null",
    "cairnq_tasks_queue_completed_idx": "status in('succeeded','failed','canceled')",
}

# ---------------------------------------------------------------------------
# values shared by both SDKs (Python literals)

RICH_PAYLOAD = {
    "order": {"id": 12345, "lines": [{"sku": "A-1", "qty": 2, "price": 19.99}, {"sku": "B", "qty": 0}]},
    "text": "héllo wörld — ✓ 日本語 Ωμέγα \x7f \u2028 tab\tquote\" back\\slash /",
    "floats": [1.5, -0.0, 0.1, 1e-07, 2.5e-05, 1e16, 1.7976931348623157e308, 5e-324, 3.141592653589793],
    # within 64 bits here; beyond that see BYTES_CASES["big_ints"]
    "ints": [0, -1, 2**31, 2**53 + 1, 2**63 - 1, -(2**63), 2**64 - 1],
    "lists": [[], {}, "", None, True, False, [[["deep"]]]],
    "tuple": (1, "two", (3.0,)),
}
RICH_METADATA = {"trace_id": "abc-123", "tenant": "ünïcödé", "tags": ["x", "y"], "n": 2.25}

SETTLE_RESULT = {"ok": True, "summary": "fertig ✓", "scores": [0.5, 1e-06, 12345678901234567890, 2.0]}
FAIL_ENVELOPE = {
    "type": "ValueError",
    "code": "handler_error",
    "message": "kaputt: ü",
    "retryable": False,
    "details": {"line": 3, "why": ["a", 1.25]},
}

BYTES_CASES = {
    "rich": (RICH_PAYLOAD, RICH_METADATA),
    "none": (None, None),
    "empty_metadata": ({"a": 1}, {}),
    "list": ([1, 2.5, "x", None], {"m": "é"}),
    "string": ("just a string ü", None),
    "number": (42, None),
    "float": (0.30000000000000004, None),
    "tuples": ((1, 2, (3, (4,))), None),
    "non_str_keys": ({1: "a", 2.5: "b", False: "c", None: "d"}, {7: "seven"}),
    "floats": ([1e16, 1e22, 1e-05, 1e-4, 123456.789, -0.0, 5e-324, 1.7976931348623157e308], None),
    "big_ints": ([2**64 - 1, 2**64, 2**100, -(2**63) - 1, 10**30 + 7], {"id": 2**64 + 1}),
    "control_chars": ("\x00\x01\x1f\x7f\x80\u2028\u2029\ufeff", None),
    "astral": ({"emoji": "😀 🎉", "math": "𝔘𝔫𝔦"}, {"flag": "🇩🇪"}),
    "deep": ({"a": {"b": {"c": {"d": {"e": [[[[[1]]]]]}}}}}, None),
}

# ---------------------------------------------------------------------------
# helpers

_REF_HELPERS = """
import ast, dataclasses
def T(task):
    return None if task is None else dataclasses.asdict(task)
def lit(text):
    return ast.literal_eval(text)
async def read_all(q, task_id, key):
    return {
        "get": T(await q.get(task_id)),
        "get_by_key": T(await q.get_by_key(key)),
        "list_queue": [T(t) for t in await q.list(queue="q-rich")],
        "list_all": [T(t) for t in await q.list()],
        "list_queued": [T(t) for t in await q.list(status="queued", limit=2, offset=1)],
        "stats_queue": await q.stats("q-rich"),
        "stats": await q.stats(),
        "status": list(dataclasses.astuple(await q.get_status(task_id))),
        "status_by_key": list(dataclasses.astuple(await q.get_status_by_key(key))),
    }
"""

_REF_RUNNER = """
async def _run():
    q = cairnq.CairnQ.sqlite(ARGS["path"])
    try:
        return await main(q)
    finally:
        await q.close()
emit(asyncio.run(_run()))
"""


def ref(path: str, body: str, **args: Any) -> Any:
    """Run ``body`` as ``async def main(q)`` with the reference SDK on ``path``.

    ``q`` is a reference ``CairnQ`` on the file (closed afterwards); the body
    ``return``s a JSON-serializable value. ``T(task)`` and ``lit(text)`` help.
    """
    script = (
        _REF_HELPERS
        + "\nasync def main(q):\n"
        + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ")
        + "\n"
        + _REF_RUNNER
    )
    return strict(refsdk.run(script, {"path": path, **args}))


def ref_connect(path: str) -> None:
    ref(path, "await q.connect()\nreturn True")


def strict(value: Any) -> Any:
    """Floats tagged with their repr, so ``==`` tells 2**64 from 1.8446744073709552e+19
    and -0.0 from 0.0 (plain ``==`` says int and float are equal when exact)."""
    if isinstance(value, float):
        return F(value)
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(v) for v in value]
    return value


def F(value: float) -> str:
    return f"float:{value!r}"


def js(value: Any) -> Any:
    """What a value looks like after the JSON trip the reference results take
    (then made strict)."""
    return strict(json.loads(json.dumps(value)))


def T(task: Any) -> Any:
    return None if task is None else js(dataclasses.asdict(task))


def stored_json(value: Any) -> str:
    """The exact text the reference writes for a JSON column (OPERATIONS.md §1.2)."""
    return json.dumps(value, allow_nan=False, separators=(",", ":"))


def db(path: str) -> sqlite3.Connection:
    return sqlite3.connect(path)


def ledger(path: str) -> list[tuple[str, Any]]:
    with db(path) as con:
        return con.execute("select name, applied_at_ms from cairnq_migrations order by rowid").fetchall()


def meta(path: str) -> dict[str, str]:
    with db(path) as con:
        return dict(con.execute("select key, value from cairnq_meta"))


def objects(path: str) -> list[tuple[Any, ...]]:
    """Schema objects, planner statistics aside (ANALYZE may add sqlite_stat1)."""
    with db(path) as con:
        return sorted(
            con.execute(
                "select type, name, tbl_name, sql from sqlite_master where name not like 'sqlite_stat%'"
            )
        )


def row(path: str, task_id: str) -> dict[str, Any]:
    con = db(path)
    con.row_factory = sqlite3.Row
    try:
        r = con.execute("select * from cairnq_tasks where id = ?", (task_id,)).fetchone()
        return dict(r)
    finally:
        con.close()


def norm_sql(text: str) -> str:
    text = re.sub(r"\s+", " ", text.strip().lower())
    return re.sub(r"\s*([(),])\s*", r"\1", text)


def _balanced(sql: str, open_at: int) -> str:
    """The text inside the parenthesis opening at ``open_at`` (quotes respected)."""
    depth, i, quote = 0, open_at, None
    while i < len(sql):
        ch = sql[i]
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return sql[open_at + 1 : i]
        i += 1
    raise AssertionError(f"unbalanced parentheses in {sql!r}")


def check_constraints(sql: str) -> set[str]:
    return {norm_sql(_balanced(sql, m.end() - 1)) for m in re.finditer(r"\bcheck\s*\(", sql, re.I)}


def partial_where(sql: str) -> str | None:
    matches = list(re.finditer(r"\bwhere\b", sql, re.I))
    return norm_sql(sql[matches[-1].end() :]) if matches else None


def catalog(path: str) -> dict[str, Any]:
    con = db(path)
    try:
        out: dict[str, Any] = {}
        for table in TABLES:
            (table_sql,) = con.execute(
                "select sql from sqlite_master where type = 'table' and name = ?", (table,)
            ).fetchone()
            indexes = {}
            for _seq, name, unique, origin, partial in con.execute(f"pragma index_list({table})"):
                sql = con.execute(
                    "select sql from sqlite_master where type = 'index' and name = ?", (name,)
                ).fetchone()
                indexes[name] = {
                    "unique": unique,
                    "origin": origin,
                    "partial": partial,
                    # seqno, cid, column name, desc, collation, key
                    "xinfo": [tuple(r) for r in con.execute(f"pragma index_xinfo({name})")],
                    "where": partial_where(sql[0]) if sql and sql[0] else None,
                }
            out[table] = {
                # cid dropped: (name, declared type, notnull, default, pk)
                "columns": [tuple(r[1:]) for r in con.execute(f"pragma table_info({table})")],
                # id, seq, table, from, to, on_update, on_delete, match
                "foreign_keys": [tuple(r) for r in con.execute(f"pragma foreign_key_list({table})")],
                "checks": check_constraints(table_sql),
                "indexes": indexes,
            }
        out["index_names"] = {
            r[0] for r in con.execute("select name from sqlite_master where type = 'index'")
        }
        out["other_objects"] = sorted(
            con.execute(
                "select type, name from sqlite_master where type in ('trigger', 'view')"
                " or (type = 'table' and name not like 'sqlite_%')"
            )
        )
        out["ledger"] = con.execute(
            "select name, applied_at_ms from cairnq_migrations order by rowid"
        ).fetchall()
        out["meta"] = sorted(con.execute("select key, value from cairnq_meta"))
        (out["journal_mode"],) = con.execute("pragma journal_mode").fetchone()
        return out
    finally:
        con.close()


async def ours_connect(path: str) -> None:
    client = cairnq.CairnQ.sqlite(path)
    try:
        await client.connect()
    finally:
        await client.close()


# ---------------------------------------------------------------------------
# 1. catalog equality


async def test_catalog_equals_reference(tmp_path):
    ours_path, ref_path = str(tmp_path / "ours.db"), str(tmp_path / "ref.db")
    await ours_connect(ours_path)
    ref_connect(ref_path)
    ours, theirs = catalog(ours_path), catalog(ref_path)

    for table in TABLES:
        o, r = ours[table], theirs[table]
        assert o["columns"] == r["columns"], table
        assert o["foreign_keys"] == r["foreign_keys"], table
        assert o["checks"] == r["checks"], table
        assert set(o["indexes"]) == set(r["indexes"]), table
        for name in r["indexes"]:
            assert o["indexes"][name] == r["indexes"][name], (table, name)

    # the reference agrees with the spec, and so (by the above) do we
    cols = [(n, t.lower(), nn, d, pk) for n, t, nn, d, pk in theirs["cairnq_tasks"]["columns"]]
    assert cols == TASK_COLUMNS
    assert theirs["cairnq_tasks"]["checks"] == TASK_CHECKS
    assert [(n, t.lower(), nn, d, pk) for n, t, nn, d, pk in theirs["cairnq_task_keys"]["columns"]] == [
        ("key", "text", 0, None, 1),
        ("task_id", "text", 1, None, 0),
        ("created_at_ms", "integer", 1, None, 0),
        ("updated_at_ms", "integer", 1, None, 0),
    ]
    (fk,) = ours["cairnq_task_keys"]["foreign_keys"]
    assert fk[2:7] == ("cairnq_tasks", "task_id", "id", "NO ACTION", "CASCADE")
    for table in ("cairnq_tasks", "cairnq_meta", "cairnq_migrations"):
        assert ours[table]["foreign_keys"] == []
    wheres = {
        name: spec["where"]
        for name, spec in ours["cairnq_tasks"]["indexes"].items()
        if spec["partial"]
    }
    assert wheres == PARTIAL_WHERE
    claim = ours["cairnq_tasks"]["indexes"]["cairnq_tasks_claim_idx"]["xinfo"]
    assert [(c[2], c[3]) for c in claim if c[5]] == [
        ("queue", 0), ("status", 0), ("priority", 1), ("run_at_ms", 0), ("id", 0)
    ]  # fmt: skip
    claim_name = ours["cairnq_tasks"]["indexes"]["cairnq_tasks_claim_name_idx"]["xinfo"]
    assert [(c[2], c[3]) for c in claim_name if c[5]] == [
        ("queue", 0), ("status", 0), ("name", 0), ("priority", 1), ("run_at_ms", 0), ("id", 0)
    ]  # fmt: skip

    assert ours["index_names"] == theirs["index_names"] == NAMED_INDEXES | AUTO_INDEXES
    assert ours["other_objects"] == theirs["other_objects"] == [
        ("table", t) for t in sorted(TABLES)
    ]

    assert [n for n, _ in ours["ledger"]] == [n for n, _ in theirs["ledger"]] == LEDGER_NAMES
    for _, applied in ours["ledger"] + theirs["ledger"]:
        assert type(applied) is int and applied > 1_600_000_000_000

    assert ours["meta"] == theirs["meta"] == [("protocol_version", "1"), ("schema_version", "10")]
    assert ours["journal_mode"] == theirs["journal_mode"] == "wal"


# ---------------------------------------------------------------------------
# 2. each opens the other's file without migrating


async def test_reference_opens_our_database_without_migrating(sqlite_backend):
    path = sqlite_backend.target
    await ours_connect(path)
    before_ledger, before_objects, before_meta = ledger(path), objects(path), meta(path)

    out = ref(path, """
        await q.connect()
        t = await q.submit("interop.ref_on_ours", {"x": 1})
        return T(await q.get(t.id))
    """)
    assert out["status"] == "queued"
    assert ledger(path) == before_ledger
    assert objects(path) == before_objects
    assert meta(path) == before_meta

    # and we still read what it wrote, still without migrating
    client = sqlite_backend.client()
    await client.connect()
    assert T(await client.get(out["id"])) == out
    assert ledger(path) == before_ledger
    assert objects(path) == before_objects


async def test_ours_opens_reference_database_without_migrating(sqlite_backend):
    path = sqlite_backend.target
    ref_connect(path)
    before_ledger, before_objects, before_meta = ledger(path), objects(path), meta(path)

    client = sqlite_backend.client()
    await client.connect()
    task = await client.submit("interop.ours_on_ref", {"x": 1})
    await client.close()
    assert ledger(path) == before_ledger
    assert objects(path) == before_objects
    assert meta(path) == before_meta

    out = ref(path, "return T(await q.get(ARGS['id']))", id=task.id)
    assert out == T(task)
    assert ledger(path) == before_ledger
    assert objects(path) == before_objects


# ---------------------------------------------------------------------------
# 3. field-for-field reads, both ways



async def _ours_read_all(client: cairnq.CairnQ, task_id: str, key: str) -> dict[str, Any]:
    status = await client.get_status(task_id)
    status_by_key = await client.get_status_by_key(key)
    return js({
        "get": T(await client.get(task_id)),
        "get_by_key": T(await client.get_by_key(key)),
        "list_queue": [T(t) for t in await client.list(queue="q-rich")],
        "list_all": [T(t) for t in await client.list()],
        "list_queued": [T(t) for t in await client.list(status="queued", limit=2, offset=1)],
        "stats_queue": await client.stats("q-rich"),
        "stats": await client.stats(),
        "status": [status.id, status.status],
        "status_by_key": [status_by_key.id, status_by_key.status],
    })  # fmt: skip


def _check_rich(task: dict[str, Any]) -> None:
    assert task["payload"] == js(RICH_PAYLOAD)
    assert task["metadata"] == js(RICH_METADATA)
    assert task["name"] == "interop.rich"
    assert task["queue"] == "q-rich"
    assert task["status"] == "queued"
    assert (task["priority"], task["max_attempts"], task["attempt"]) == (7, 5, 0)
    assert task["run_at_ms"] - task["created_at_ms"] == 60_000
    assert task["created_at_ms"] == task["updated_at_ms"]
    assert task["root_id"] == task["id"]
    for field in ("result", "error", "progress", "message", "worker_id", "lease_until_ms",
                  "cancel_requested_at_ms", "parent_id", "correlation_id", "completed_at_ms"):  # fmt: skip
        assert task[field] is None, field


async def test_reference_reads_task_submitted_by_ours(sqlite_backend):
    path = sqlite_backend.target
    client = sqlite_backend.client()
    await client.connect()
    submitted = await client.submit(
        "interop.rich", RICH_PAYLOAD, key="k-rich", queue="q-rich", priority=7,
        delay_ms=60_000, metadata=RICH_METADATA, max_attempts=5,
    )  # fmt: skip
    await client.submit("interop.other", [1, 2], queue="q-rich")
    await client.submit("interop.elsewhere", None, queue="q-other", priority=-3)
    await client.submit("interop.elsewhere", "x", queue="q-other", metadata={"a": None})
    _check_rich(T(submitted))

    theirs = ref(path, "return await read_all(q, ARGS['id'], ARGS['key'])", id=submitted.id, key="k-rich")
    ours = await _ours_read_all(client, submitted.id, "k-rich")
    assert theirs["get"] == T(submitted)
    for field in ours:
        assert theirs[field] == ours[field], field
    assert theirs["get_by_key"]["id"] == submitted.id
    assert theirs["stats_queue"] == {
        "q-rich": {"queued": 2, "running": 0, "succeeded": 0, "failed": 0, "canceled": 0}
    }
    assert list(theirs["stats_queue"]["q-rich"]) == list(ours["stats_queue"]["q-rich"])
    assert list(theirs["stats"]) == list(ours["stats"]) == ["q-other", "q-rich"]
    assert len(theirs["list_all"]) == 4


async def test_ours_reads_task_submitted_by_reference(sqlite_backend):
    path = sqlite_backend.target
    theirs = ref(path, """
        t = await q.submit("interop.rich", lit(ARGS["payload"]), key="k-rich", queue="q-rich",
                           priority=7, delay_ms=60_000, metadata=lit(ARGS["metadata"]), max_attempts=5)
        await q.submit("interop.other", [1, 2], queue="q-rich")
        await q.submit("interop.elsewhere", None, queue="q-other", priority=-3)
        await q.submit("interop.elsewhere", "x", queue="q-other", metadata={"a": None})
        return {"submitted": T(t), **await read_all(q, t.id, "k-rich")}
    """,
        payload=repr(RICH_PAYLOAD), metadata=repr(RICH_METADATA),
    )  # fmt: skip
    submitted = theirs["submitted"]
    _check_rich(submitted)

    client = sqlite_backend.client()
    await client.connect()
    ours = await _ours_read_all(client, submitted["id"], "k-rich")
    assert ours["get"] == submitted
    for field in ours:
        assert ours[field] == theirs[field], field


@pytest.mark.parametrize("case", list(BYTES_CASES))
async def test_stored_json_text_identical(sqlite_backend, case):
    """Same value submitted by either SDK: same stored payload/metadata TEXT, and
    each SDK decodes the other's row to exactly the submitted value."""
    path = sqlite_backend.target
    payload, metadata = BYTES_CASES[case]
    want_payload = js({} if payload is None else payload)
    want_metadata = js(metadata or {})
    client = sqlite_backend.client()
    await client.connect()
    try:
        task_id: str | None = (await client.submit("interop.bytes", payload, metadata=metadata)).id
        ours_error = None
    except Exception as exc:  # reported below, after the reference's side is checked
        task_id, ours_error = None, exc

    theirs = ref(path, """
        t = await q.submit("interop.bytes", lit(ARGS["payload"]), metadata=lit(ARGS["metadata"]))
        return {"ref": T(t), "ours": T(await q.get(ARGS["id"])) if ARGS["id"] else None}
    """, payload=repr(payload), metadata=repr(metadata), id=task_id)  # fmt: skip
    ref_task = theirs["ref"]
    ref_row = row(path, ref_task["id"])
    assert ref_row["payload"] == ("{}" if payload is None else stored_json(payload))
    assert ref_row["metadata"] == stored_json(metadata or {})
    assert (ref_task["payload"], ref_task["metadata"]) == (want_payload, want_metadata)

    # ours reads the reference's row
    mine = T(await client.get(ref_task["id"]))
    assert (mine["payload"], mine["metadata"]) == (want_payload, want_metadata)

    # ours wrote the same bytes, and the reference read them back as the same value
    if ours_error is not None:
        raise AssertionError(f"ours failed to submit {payload!r}: {ours_error!r}") from ours_error
    ours_row = row(path, task_id)
    assert (ours_row["payload"], ours_row["metadata"]) == (ref_row["payload"], ref_row["metadata"])
    assert (theirs["ours"]["payload"], theirs["ours"]["metadata"]) == (want_payload, want_metadata)


# ---------------------------------------------------------------------------
# 4. state transitions across SDKs on one file


async def test_reference_settles_tasks_submitted_by_ours(sqlite_backend):
    path = sqlite_backend.target
    client = sqlite_backend.client()
    await client.connect()
    ok = await client.submit("x.ok", {"n": 1}, queue="q-x")
    bad = await client.submit("x.fail", {"n": 2}, queue="q-x")
    again = await client.submit("x.retry", {"n": 3}, queue="q-x")

    theirs = ref(path, """
        s, w, out = q.store, "worker_ref", {}
        [c] = await s.claim(queues=["q-x"], worker_id=w, names=["x.ok"])
        out["claimed"] = T(c)
        out["ok"] = T(await s.complete(task_id=c.id, worker_id=w, result=lit(ARGS["result"])))
        [c] = await s.claim(queues=["q-x"], worker_id=w, names=["x.fail"])
        out["fail"] = T(await s.fail(task_id=c.id, worker_id=w, error=lit(ARGS["error"]), retryable=False))
        [c] = await s.claim(queues=["q-x"], worker_id=w, names=["x.retry"])
        out["retry"] = T(await s.fail(task_id=c.id, worker_id=w, error=lit(ARGS["error"]),
                                      retryable=True, delay_ms=5_000))
        out["get"] = {k: T(await q.get(out[k]["id"])) for k in ("ok", "fail", "retry")}
        return out
    """, result=repr(SETTLE_RESULT), error=repr(FAIL_ENVELOPE))  # fmt: skip

    claimed = theirs["claimed"]
    assert claimed["id"] == ok.id and claimed["status"] == "running" and claimed["attempt"] == 1
    assert claimed["lease_until_ms"] is not None and claimed["worker_id"] == "worker_ref"

    got_ok, got_bad, got_again = [T(await client.get(t.id)) for t in (ok, bad, again)]
    assert got_ok == theirs["get"]["ok"]
    assert got_bad == theirs["get"]["fail"]
    assert got_again == theirs["get"]["retry"]
    # what the settling call returned is that same row (progress aside: SQLite's
    # RETURNING hands the REAL 1.0 back as the integer 1, to either SDK)
    assert {**theirs["ok"], "progress": None} == {**got_ok, "progress": None}
    assert theirs["fail"] == got_bad
    assert theirs["retry"] == got_again

    assert got_ok["status"] == "succeeded" and got_ok["result"] == js(SETTLE_RESULT)
    assert got_ok["progress"] == F(1.0) and got_ok["lease_until_ms"] is None
    assert got_ok["worker_id"] == "worker_ref" and got_ok["completed_at_ms"] is not None
    assert row(path, ok.id)["result"] == stored_json(SETTLE_RESULT)

    assert got_bad["status"] == "failed" and got_bad["error"] == js(FAIL_ENVELOPE)
    assert got_bad["worker_id"] == "worker_ref" and got_bad["completed_at_ms"] is not None
    assert got_bad["lease_until_ms"] is None and got_bad["attempt"] == 1
    assert row(path, bad.id)["error"] == stored_json(FAIL_ENVELOPE)

    assert got_again["status"] == "queued" and got_again["error"] == js(FAIL_ENVELOPE)
    assert got_again["worker_id"] is None and got_again["completed_at_ms"] is None
    assert got_again["attempt"] == 1 and got_again["lease_until_ms"] is None
    assert got_again["run_at_ms"] == got_again["updated_at_ms"] + 5_000

    assert await client.stats("q-x") == {
        "q-x": {"queued": 1, "running": 0, "succeeded": 1, "failed": 1, "canceled": 0}
    }


async def test_ours_settles_tasks_submitted_by_reference(sqlite_backend):
    path = sqlite_backend.target
    ids = ref(path, """
        names = ["y.ok", "y.fail", "y.retry", "y.last"]
        return {n: (await q.submit(n, {"n": n}, queue="q-y", max_attempts=1 if n == "y.last" else 3)).id
                for n in names}
    """)  # fmt: skip
    store = sqlite_backend.store()
    await store.connect()
    w, mine = "worker_ours", {}
    [c] = await store.claim(queues=["q-y"], worker_id=w, names=["y.ok"])
    mine["claimed"] = T(c)
    mine["y.ok"] = T(await store.complete(task_id=c.id, worker_id=w, result=SETTLE_RESULT))
    [c] = await store.claim(queues=["q-y"], worker_id=w, names=["y.fail"])
    mine["y.fail"] = T(await store.fail(task_id=c.id, worker_id=w, error=FAIL_ENVELOPE, retryable=False))
    [c] = await store.claim(queues=["q-y"], worker_id=w, names=["y.retry"])
    mine["y.retry"] = T(
        await store.fail(task_id=c.id, worker_id=w, error=FAIL_ENVELOPE, retryable=True, delay_ms=2_000)
    )
    [c] = await store.claim(queues=["q-y"], worker_id=w, names=["y.last"])
    mine["y.last"] = T(await store.fail(task_id=c.id, worker_id=w, error=FAIL_ENVELOPE, retryable=True))
    # SQLite's RETURNING hands the REAL 1.0 back as the integer 1; the reference
    # passes that on, ours decodes REAL columns as floats. A fresh read (float in
    # both) is what gets compared below.
    assert mine["y.ok"]["progress"] == "float:1.0"
    mine["y.ok"] = T(await store.get(ids["y.ok"]))

    theirs = ref(path, """
        return {
            "tasks": {n: T(await q.get(i)) for n, i in ARGS["ids"].items()},
            "stats": await q.stats("q-y"),
        }
    """, ids=ids)  # fmt: skip
    for name in ("y.ok", "y.fail", "y.retry", "y.last"):
        assert theirs["tasks"][name] == mine[name], name

    assert mine["claimed"]["id"] == ids["y.ok"] and mine["claimed"]["attempt"] == 1
    t = theirs["tasks"]
    assert t["y.ok"]["status"] == "succeeded" and t["y.ok"]["result"] == js(SETTLE_RESULT)
    assert t["y.ok"]["progress"] == F(1.0) and t["y.ok"]["worker_id"] == w
    assert t["y.fail"]["status"] == "failed" and t["y.fail"]["error"] == js(FAIL_ENVELOPE)
    assert t["y.retry"]["status"] == "queued" and t["y.retry"]["worker_id"] is None
    assert t["y.retry"]["run_at_ms"] == t["y.retry"]["updated_at_ms"] + 2_000
    assert t["y.last"]["status"] == "failed"  # retryable, but attempts exhausted
    assert t["y.last"]["completed_at_ms"] is not None and t["y.last"]["attempt"] == 1
    assert row(path, ids["y.ok"])["result"] == stored_json(SETTLE_RESULT)
    assert row(path, ids["y.fail"])["error"] == stored_json(FAIL_ENVELOPE)
    assert theirs["stats"] == {
        "q-y": {"queued": 1, "running": 0, "succeeded": 1, "failed": 2, "canceled": 0}
    }


async def test_keyed_conflicts_reference_first(sqlite_backend):
    path = sqlite_backend.target
    first = ref(path, """
        s = q.store
        live = await q.submit("k.task", {"v": 1}, key="k-live")
        done = await q.submit("k.task", {"v": 2}, key="k-done", queue="q-done")
        [c] = await s.claim(queues=["q-done"], worker_id="worker_ref")
        await s.complete(task_id=c.id, worker_id="worker_ref", result=None)
        return {"live": live.id, "done": done.id}
    """)  # fmt: skip
    client = sqlite_backend.client()
    await client.connect()

    assert (await client.submit("k.task", {"v": 9}, key="k-live", conflict="reuse")).id == first["live"]
    reused = await client.submit("k.task", {"v": 9}, key="k-live", conflict="reuse-succeeded")
    assert reused.id == first["live"] and reused.payload == {"v": 1}
    with pytest.raises(AlreadyExists):
        await client.submit("k.task", {"v": 9}, key="k-live", conflict="reject")
    replaced = await client.submit("k.task", {"v": 10}, key="k-live", conflict="replace")
    assert replaced.id != first["live"]

    assert (await client.submit("k.task", key="k-done", conflict="reuse-succeeded")).id == first["done"]
    renewed = await client.submit("k.task", {"v": 11}, key="k-done", conflict="reuse")
    assert renewed.id != first["done"]

    theirs = ref(path, """
        return {
            "old_live": T(await q.get(ARGS["live"])),
            "key_live": T(await q.get_by_key("k-live")),
            "old_done": T(await q.get(ARGS["done"])),
            "key_done": T(await q.get_by_key("k-done")),
        }
    """, **first)  # fmt: skip
    assert theirs["old_live"]["status"] == "canceled"
    assert theirs["old_live"]["completed_at_ms"] is not None
    assert theirs["key_live"] == T(replaced)
    assert theirs["old_done"]["status"] == "succeeded"  # terminal: never rewritten
    assert theirs["key_done"] == T(renewed)
    with db(path) as con:
        assert con.execute("select count(*) from cairnq_tasks").fetchone() == (4,)
        assert con.execute("select count(*) from cairnq_task_keys").fetchone() == (2,)


async def test_keyed_conflicts_ours_first(sqlite_backend):
    path = sqlite_backend.target
    client = sqlite_backend.client()
    await client.connect()
    live = await client.submit("k.task", {"v": 1}, key="k-live")
    running = await client.submit("k.task", {"v": 2}, key="k-run", queue="q-run")
    [claimed] = await client.store.claim(queues=["q-run"], worker_id="worker_ours")
    assert claimed.id == running.id

    theirs = ref(path, """
        out = {}
        out["reuse"] = (await q.submit("k.task", {"v": 9}, key="k-live", conflict="reuse")).id
        out["reuse_succeeded"] = (await q.submit("k.task", {"v": 9}, key="k-live",
                                                 conflict="reuse-succeeded")).id
        try:
            await q.submit("k.task", {"v": 9}, key="k-live", conflict="reject")
            out["reject"] = None
        except cairnq.AlreadyExists as exc:
            out["reject"] = type(exc).__name__
        out["replace"] = T(await q.submit("k.task", {"v": 10}, key="k-live", conflict="replace"))
        out["run_reuse"] = (await q.submit("k.task", key="k-run", queue="q-run")).id
        out["run_replace"] = T(await q.submit("k.task", {"v": 11}, key="k-run", queue="q-run",
                                              conflict="replace"))
        return out
    """)  # fmt: skip
    assert theirs["reuse"] == theirs["reuse_succeeded"] == live.id
    assert theirs["reject"] == "AlreadyExists"
    assert theirs["replace"]["id"] != live.id
    assert theirs["run_reuse"] == running.id

    old = await client.get(live.id)
    assert old.status == "canceled" and old.completed_at_ms is not None
    assert T(await client.get_by_key("k-live")) == theirs["replace"]
    # a running task is only flagged; it finalizes when its worker settles it
    flagged = await client.get(running.id)
    assert flagged.status == "running" and flagged.cancel_requested_at_ms is not None
    assert T(await client.get_by_key("k-run")) == theirs["run_replace"]
    settled = await client.store.complete(task_id=running.id, worker_id="worker_ours", result={"r": 1})
    assert settled.status == "canceled" and settled.result is None  # cancel wins
    assert ref(path, "return T(await q.get(ARGS['id']))", id=running.id) == T(settled)


# ---------------------------------------------------------------------------
# 5. protocol guard


@pytest.mark.parametrize("creator", ["ours", "reference"])
@pytest.mark.parametrize("version", ["2", None])
async def test_unsupported_protocol_version_refused_by_both(tmp_path, creator, version):
    path = str(tmp_path / "guard.db")
    if creator == "ours":
        await ours_connect(path)
    else:
        ref_connect(path)
    with db(path) as con:
        if version is None:
            con.execute("delete from cairnq_meta where key = 'protocol_version'")
        else:
            con.execute("update cairnq_meta set value = ? where key = 'protocol_version'", (version,))
    expected = f"storage protocol_version={version or 0}, SDK supports 1"
    before = ledger(path)

    client = cairnq.CairnQ.sqlite(path)
    try:
        with pytest.raises(ProtocolVersionMismatch) as err:
            await client.connect()
    finally:
        await client.close()
    assert str(err.value) == expected

    theirs = ref(path, """
        try:
            await q.connect()
        except Exception as exc:
            return [type(exc).__name__, str(exc)]
        return None
    """)  # fmt: skip
    assert theirs == ["ProtocolVersionMismatch", expected]
    assert ledger(path) == before  # nothing re-applied by either


@pytest.mark.parametrize("creator", ["ours", "reference"])
async def test_newer_schema_version_and_unknown_ledger_rows_accepted(tmp_path, creator):
    path = str(tmp_path / "future.db")
    if creator == "ours":
        await ours_connect(path)
    else:
        ref_connect(path)
    with db(path) as con:
        con.execute("update cairnq_meta set value = '11' where key = 'schema_version'")
        con.execute(
            "insert into cairnq_migrations (name, applied_at_ms) values ('0011_future.sql', 4102444800000)"
        )
    before_ledger, before_objects = ledger(path), objects(path)
    assert len(before_ledger) == 10

    client = cairnq.CairnQ.sqlite(path)
    try:
        await client.connect()
        task = await client.submit("future.task", {"x": 1})
        assert (await client.get(task.id)).status == "queued"
    finally:
        await client.close()
    assert ledger(path) == before_ledger
    assert objects(path) == before_objects
    assert meta(path) == {"protocol_version": "1", "schema_version": "11"}

    # the reference accepts it too (the fixture is a valid "newer" database)
    out = ref(path, "await q.connect()\nreturn T(await q.get(ARGS['id']))", id=task.id)
    assert out == T(task)
    assert ledger(path) == before_ledger
    assert meta(path) == {"protocol_version": "1", "schema_version": "11"}
