"""submit: the inserted row, ids, keys and conflict strategies, the JSON boundary.

Spec: OPERATIONS.md §1.2, §1.4, §3.1; API.md §4, §7, §9.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import decimal
import json
import re
import sqlite3
import time
import uuid
from typing import Any

import pytest
from db_clock import assert_within, now_ms

import cairnq
from cairnq import AlreadyExists, CairnQ, SerializationError, Task, TaskDef

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
ID_RE = re.compile(r"^task_[0-7][0-9A-HJKMNP-TV-Z]{25}$")
ENVELOPE = {
    "type": "Boom",
    "code": "boom",
    "message": "it broke",
    "retryable": False,
    "details": {},
}


# -- helpers ----------------------------------------------------------------------


def ref_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(",", ":"))


def raw_rows(backend: Any, sql: str, *args: Any) -> list[dict[str, Any]]:
    """Read the SQLite file directly (SQLite dialect only)."""
    assert backend.dialect == "sqlite"
    con = sqlite3.connect(backend.target)
    try:
        con.row_factory = sqlite3.Row
        return [dict(r) for r in con.execute(sql, args).fetchall()]
    finally:
        con.close()


def raw_task(backend: Any, task_id: str) -> dict[str, Any]:
    rows = raw_rows(backend, "select * from cairnq_tasks where id = ?", task_id)
    assert len(rows) == 1
    return rows[0]


def decode_ulid_ms(task_id: str) -> int:
    value = 0
    for ch in task_id[len("task_") :]:
        value = value * 32 + CROCKFORD.index(ch)
    return value >> 80


async def assert_nothing_written(q: CairnQ) -> None:
    assert await q.list() == []
    assert await q.stats() == {}


async def drive(store: Any, task: Task, status: str, worker: str = "w1") -> Task:
    """Move a freshly submitted task (alone in its queue) to ``status``."""
    if status == "queued":
        return task
    if status == "canceled":
        done = await store.cancel(task.id)
        assert done is not None and done.status == "canceled"
        return done
    claimed = await store.claim(
        queues=[task.queue], worker_id=worker, lease_ms=30000, limit=1, names=None
    )
    assert [c.id for c in claimed] == [task.id]
    if status == "running":
        return claimed[0]
    if status == "succeeded":
        done = await store.complete(task_id=task.id, worker_id=worker, result={"ok": 1})
    else:
        done = await store.fail(
            task_id=task.id, worker_id=worker, error=ENVELOPE, retryable=False, delay_ms=0
        )
    assert done.status == status
    return done


# -- the inserted row ------------------------------------------------------------


async def test_inserted_row_every_field(backend: Any) -> None:
    q = backend.client()
    before = now_ms()
    t = await q.submit(
        "email.send",
        {"to": "a@example.com", "n": 3},
        queue="mail",
        max_attempts=5,
        priority=7,
        metadata={"tenant": "acme"},
    )
    after = now_ms()

    assert ID_RE.match(t.id), t.id
    assert len(t.id) == 31
    assert t.name == "email.send"
    assert t.queue == "mail"
    assert t.status == "queued"
    assert t.payload == {"to": "a@example.com", "n": 3}
    assert t.metadata == {"tenant": "acme"}
    assert t.result is None
    assert t.error is None
    assert t.progress is None
    assert t.message is None
    assert t.attempt == 0
    assert t.max_attempts == 5
    assert t.priority == 7
    assert t.worker_id is None
    assert t.lease_until_ms is None
    assert t.cancel_requested_at_ms is None
    assert t.parent_id is None
    assert t.root_id == t.id
    assert t.correlation_id is None
    assert t.completed_at_ms is None
    assert_within(t.created_at_ms, before, after, backend)
    assert_within(t.updated_at_ms, before, after, backend)
    assert_within(t.run_at_ms, before, after, backend)
    if backend.dialect == "sqlite":
        assert t.created_at_ms == t.updated_at_ms == t.run_at_ms

    # The returned Task is the stored row.
    assert await q.get(t.id) == t
    assert await q.list() == [t]


async def test_inserted_row_defaults(backend: Any) -> None:
    q = backend.client()
    t = await q.submit("noop")
    assert t.queue == "default"
    assert t.payload == {}
    assert t.metadata == {}
    assert t.max_attempts == 3
    assert t.priority == 0
    assert t.attempt == 0
    assert t.status == "queued"
    assert await q.get(t.id) == t


async def test_inserted_row_raw_columns_sqlite(backend: Any) -> None:
    if backend.dialect != "sqlite":
        pytest.skip("raw column check reads the SQLite file")
    q = backend.client()
    before = now_ms()
    t = await q.submit("x", None, queue="qq", max_attempts=2, priority=-4, metadata=None, delay_ms=1500)
    after = now_ms()
    row = raw_task(backend, t.id)
    assert list(row) == [
        "id", "name", "queue", "status", "payload", "result", "error", "metadata",
        "progress", "message", "attempt", "max_attempts", "priority", "worker_id",
        "lease_until_ms", "run_at_ms", "cancel_requested_at_ms", "parent_id", "root_id",
        "correlation_id", "created_at_ms", "updated_at_ms", "completed_at_ms",
    ]  # fmt: skip
    now = row["created_at_ms"]
    assert before <= now <= after
    assert row == {
        "id": t.id,
        "name": "x",
        "queue": "qq",
        "status": "queued",
        "payload": "{}",
        "result": None,
        "error": None,
        "metadata": "{}",
        "progress": None,
        "message": None,
        "attempt": 0,
        "max_attempts": 2,
        "priority": -4,
        "worker_id": None,
        "lease_until_ms": None,
        "run_at_ms": now + 1500,
        "cancel_requested_at_ms": None,
        "parent_id": None,
        "root_id": t.id,
        "correlation_id": None,
        "created_at_ms": now,
        "updated_at_ms": now,
        "completed_at_ms": None,
    }
    assert raw_rows(backend, "select count(*) as n from cairnq_task_keys") == [{"n": 0}]


async def test_delay_ms_sets_run_at(backend: Any) -> None:
    q = backend.client()
    before = now_ms()
    t = await q.submit("later", delay_ms=60_000)
    after = now_ms()
    assert_within(t.run_at_ms, before + 60_000, after + 60_000, backend)
    assert_within(t.created_at_ms, before, after, backend)
    if backend.dialect == "sqlite":
        assert t.run_at_ms == t.created_at_ms + 60_000
    else:
        assert abs(t.run_at_ms - (t.created_at_ms + 60_000)) <= 1
    assert (await q.get(t.id)).run_at_ms == t.run_at_ms


@pytest.mark.parametrize("metadata", [None, {}])
async def test_falsy_metadata_stored_as_empty_object(backend: Any, metadata: Any) -> None:
    q = backend.client()
    t = await q.submit("m", {"a": 1}, metadata=metadata)
    assert t.metadata == {}
    assert (await q.get(t.id)).metadata == {}
    if backend.dialect == "sqlite":
        assert raw_task(backend, t.id)["metadata"] == "{}"


async def test_none_payload_stored_as_empty_object(backend: Any) -> None:
    q = backend.client()
    t = await q.submit("p", None)
    assert t.payload == {}
    assert (await q.get(t.id)).payload == {}
    if backend.dialect == "sqlite":
        assert raw_task(backend, t.id)["payload"] == "{}"


@pytest.mark.parametrize(
    "payload",
    [[1, "two", 3.5], "hello", 42, 2.5, True, False, 0, "", [], {"nested": {"deep": [None]}}],
    ids=repr,
)
async def test_payload_may_be_any_json_value(backend: Any, payload: Any) -> None:
    q = backend.client()
    t = await q.submit("any", payload)
    got = await q.get(t.id)
    assert t.payload == payload and type(t.payload) is type(payload)
    assert got.payload == payload and type(got.payload) is type(payload)
    if backend.dialect == "sqlite":
        assert raw_task(backend, t.id)["payload"] == ref_json(payload)


async def test_store_submit_accepts_chain_ids(backend: Any) -> None:
    store = backend.store()
    t = await store.submit(
        name="child",
        payload={"k": 1},
        parent_id="task_parent",
        root_id="task_root",
        correlation_id="corr-1",
    )
    assert t.parent_id == "task_parent"
    assert t.root_id == "task_root"
    assert t.correlation_id == "corr-1"
    assert await store.get(t.id) == t

    # parent without root: root defaults to the new id
    u = await store.submit(name="child", parent_id="task_parent")
    assert u.parent_id == "task_parent"
    assert u.root_id == u.id
    assert u.correlation_id is None
    assert await store.get(u.id) == u


@pytest.mark.parametrize(
    "kwargs",
    [{"parent_id": "task_p"}, {"root_id": "task_r"}, {"correlation_id": "c"}],
    ids=lambda k: next(iter(k)),
)
async def test_client_submit_rejects_chain_ids(backend: Any, kwargs: dict[str, Any]) -> None:
    q = backend.client()
    with pytest.raises(TypeError):
        await q.submit("x", {}, **kwargs)
    await assert_nothing_written(q)


async def test_taskdef_name_accepted(backend: Any) -> None:
    q = backend.client()
    t = await q.submit(TaskDef("x"), {"a": 1})
    assert t.name == "x"
    typed = await q.submit(TaskDef[dict, dict]("summarize"))
    assert typed.name == "summarize"
    assert (await q.get(t.id)).name == "x"
    assert (await q.get(typed.id)).name == "summarize"


# -- ids ---------------------------------------------------------------------------


async def test_id_format_and_timestamp(backend: Any) -> None:
    q = backend.client()
    ids = []
    for _ in range(40):
        before = now_ms()
        t = await q.submit("id")
        after = now_ms()
        assert ID_RE.match(t.id), t.id
        assert t.id.startswith("task_")
        assert len(t.id) == 31
        assert all(c in CROCKFORD for c in t.id[5:])
        assert t.id[5] in "01234567"
        # the first 10 chars are the SDK clock at generation time
        assert before <= decode_ulid_ms(t.id) <= after
        ids.append(t.id)
    assert len(set(ids)) == 40


# -- keys and conflict strategies --------------------------------------------------

# (strategy, existing status) -> "existing" | "new" | "reject"   (OPERATIONS §3.1)
CONFLICT_TABLE = {
    ("reuse", "queued"): "existing",
    ("reuse", "running"): "existing",
    ("reuse", "succeeded"): "new",
    ("reuse", "failed"): "new",
    ("reuse", "canceled"): "new",
    ("reuse-succeeded", "queued"): "existing",
    ("reuse-succeeded", "running"): "existing",
    ("reuse-succeeded", "succeeded"): "existing",
    ("reuse-succeeded", "failed"): "new",
    ("reuse-succeeded", "canceled"): "new",
    ("reject", "queued"): "reject",
    ("reject", "running"): "reject",
    ("reject", "succeeded"): "reject",
    ("reject", "failed"): "reject",
    ("reject", "canceled"): "reject",
    ("replace", "queued"): "new",
    ("replace", "running"): "new",
    ("replace", "succeeded"): "new",
    ("replace", "failed"): "new",
    ("replace", "canceled"): "new",
}


@pytest.mark.parametrize(
    "strategy,status,outcome",
    [(s, st, o) for (s, st), o in CONFLICT_TABLE.items()],
    ids=[f"{s}-{st}" for (s, st) in CONFLICT_TABLE],
)
async def test_conflict_strategy(backend: Any, strategy: str, status: str, outcome: str) -> None:
    store = backend.store()
    q = CairnQ(store)
    key = f"order-{strategy}-{status}"
    first = await q.submit("charge", {"v": 1}, key=key, queue="orders")
    existing = await drive(store, first, status)
    snapshot = await q.get(existing.id)
    assert snapshot is not None and snapshot.status == status
    key_before = (
        raw_rows(backend, "select * from cairnq_task_keys where key = ?", key)
        if backend.dialect == "sqlite"
        else None
    )
    await asyncio.sleep(0.003)  # any rewrite would get a later updated_at_ms

    before = now_ms()
    if outcome == "reject":
        with pytest.raises(AlreadyExists) as info:
            await q.submit("charge", {"v": 2}, key=key, queue="orders", conflict=strategy)
        assert info.value.key == key
        assert str(info.value) == f"task with key {key!r} already exists"
        assert isinstance(info.value, cairnq.CairnQError)
        assert await q.get(existing.id) == snapshot
        assert await q.get_by_key(key) == snapshot
        assert await q.list() == [snapshot]
        if key_before is not None:
            assert raw_rows(backend, "select * from cairnq_task_keys where key = ?", key) == key_before
        return

    got = await q.submit(
        "charge",
        {"v": 2},
        key=key,
        queue="orders",
        conflict=strategy,
        max_attempts=9,
        priority=5,
        metadata={"m": 1},
        delay_ms=10,
    )
    after = now_ms()

    if outcome == "existing":
        # Returned as is: other arguments ignored, nothing written.
        assert got == snapshot
        assert await q.get(existing.id) == snapshot
        assert await q.get_by_key(key) == snapshot
        assert await q.list() == [snapshot]
        if key_before is not None:
            assert raw_rows(backend, "select * from cairnq_task_keys where key = ?", key) == key_before
        return

    # A new task under the key.
    assert got.id != existing.id
    assert ID_RE.match(got.id)
    assert got.status == "queued"
    assert got.payload == {"v": 2}
    assert got.max_attempts == 9
    assert got.priority == 5
    assert got.metadata == {"m": 1}
    assert got.attempt == 0
    assert got.root_id == got.id
    assert_within(got.created_at_ms, before, after, backend)
    assert await q.get(got.id) == got
    assert await q.get_by_key(key) == got
    assert await q.get_status_by_key(key) == cairnq.TaskRef(got.id, "queued")
    assert {t.id for t in await q.list()} == {existing.id, got.id}

    old = await q.get(existing.id)
    if status == "queued":  # replace cancels it outright
        assert old.status == "canceled"
        assert_within(old.completed_at_ms, before, after, backend)
        assert_within(old.updated_at_ms, before, after, backend)
        assert old.cancel_requested_at_ms is None
        assert old == dataclasses.replace(
            snapshot,
            status="canceled",
            completed_at_ms=old.completed_at_ms,
            updated_at_ms=old.updated_at_ms,
        )
    elif status == "running":  # replace only flags it
        assert old.status == "running"
        assert_within(old.cancel_requested_at_ms, before, after, backend)
        assert old.completed_at_ms is None
        assert old.worker_id == "w1"
        assert old.lease_until_ms == snapshot.lease_until_ms
        assert old == dataclasses.replace(
            snapshot,
            cancel_requested_at_ms=old.cancel_requested_at_ms,
            updated_at_ms=old.updated_at_ms,
        )
    else:  # a terminal task is never rewritten
        assert old == snapshot

    if key_before is not None:
        key_after = raw_rows(backend, "select * from cairnq_task_keys where key = ?", key)
        assert len(key_after) == 1
        assert key_after[0]["task_id"] == got.id
        assert key_after[0]["created_at_ms"] == key_before[0]["created_at_ms"]
        assert before <= key_after[0]["updated_at_ms"] <= after


async def test_keyed_submit_free_key(backend: Any) -> None:
    q = backend.client()
    before = now_ms()
    t = await q.submit("k", {"a": 1}, key="k1", conflict="reject")
    after = now_ms()
    assert t.status == "queued"
    assert await q.get(t.id) == t
    assert await q.get_by_key("k1") == t
    assert await q.get_status_by_key("k1") == cairnq.TaskRef(t.id, "queued")
    assert await q.get_by_key("k2") is None
    if backend.dialect == "sqlite":
        rows = raw_rows(backend, "select * from cairnq_task_keys")
        assert len(rows) == 1
        assert rows[0]["key"] == "k1"
        assert rows[0]["task_id"] == t.id
        assert before <= rows[0]["created_at_ms"] <= after
        assert rows[0]["updated_at_ms"] == rows[0]["created_at_ms"]


async def test_the_empty_string_is_a_key_like_any_other(backend: Any) -> None:
    q = backend.client()
    t = await q.submit("k", key="")
    assert (await q.submit("k", key="")).id == t.id  # reuse
    with pytest.raises(cairnq.AlreadyExists) as err:
        await q.submit("k", key="", conflict="reject")
    assert err.value.key == ""
    assert (await q.get_by_key("")).id == t.id
    assert (await q.cancel_by_key("")).status == "canceled"
    assert (await q.retry_by_key("")).status == "queued"


@pytest.mark.parametrize("strategy", ["reuse", "reuse-succeeded", "reject", "replace"])
async def test_every_strategy_inserts_when_key_free(backend: Any, strategy: str) -> None:
    q = backend.client()
    t = await q.submit("k", {"s": strategy}, key="free", conflict=strategy)
    assert await q.get_by_key("free") == t
    assert await q.list() == [t]


async def test_key_repointing_keeps_key_created_at(backend: Any) -> None:
    store = backend.store()
    q = CairnQ(store)
    t1 = await q.submit("r", {"n": 1}, key="rk")
    await asyncio.sleep(0.005)
    t2 = await q.submit("r", {"n": 2}, key="rk", conflict="replace")
    await asyncio.sleep(0.005)
    t3 = await q.submit("r", {"n": 3}, key="rk", conflict="replace")
    assert len({t1.id, t2.id, t3.id}) == 3
    assert await q.get_by_key("rk") == t3
    assert (await q.get(t1.id)).status == "canceled"
    assert (await q.get(t2.id)).status == "canceled"
    if backend.dialect == "sqlite":
        rows = raw_rows(backend, "select * from cairnq_task_keys")
        assert len(rows) == 1
        row = rows[0]
        assert row["task_id"] == t3.id
        assert t1.created_at_ms <= row["created_at_ms"] < t2.created_at_ms
        assert row["updated_at_ms"] >= t3.created_at_ms
        assert row["updated_at_ms"] > row["created_at_ms"]


async def test_purged_task_frees_its_key(backend: Any) -> None:
    store = backend.store()
    q = CairnQ(store)
    t = await q.submit("p", {"n": 1}, key="pk", queue="pq")
    await drive(store, t, "succeeded")
    await asyncio.sleep(0.005)
    assert await q.purge(older_than_ms=0) == [t.id]
    assert await q.get(t.id) is None
    assert await q.get_by_key("pk") is None
    assert await q.get_status_by_key("pk") is None
    if backend.dialect == "sqlite":
        assert raw_rows(backend, "select * from cairnq_task_keys") == []
    # The key is free again: even "reject" inserts.
    u = await q.submit("p", {"n": 2}, key="pk", conflict="reject")
    assert u.id != t.id
    assert await q.get_by_key("pk") == u
    assert await q.list() == [u]


# -- validation ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"conflict": "bogus"},
        {"conflict": "bogus", "key": "k"},
        {"conflict": "REUSE", "key": "k"},
        {"max_attempts": 0},
        {"max_attempts": -1},
        {"delay_ms": -1},
    ],
    ids=repr,
)
async def test_submit_value_errors(backend: Any, kwargs: dict[str, Any]) -> None:
    q = backend.client()
    with pytest.raises(ValueError):
        await q.submit("v", {"a": 1}, **kwargs)
    await assert_nothing_written(q)
    with pytest.raises(ValueError):
        await q.store.submit(name="v", payload={"a": 1}, **kwargs)
    await assert_nothing_written(q)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"priority": "x"},
        {"priority": 1.5},
        {"max_attempts": "3"},
        {"delay_ms": "10"},
        {"delay_ms": 1.5},
        {"name": ""},
        {"name": None},
        {"name": 123},
        {"queue": ""},
        {"queue": None},
        {"queue": 5},
    ],
    ids=repr,
)
async def test_submit_type_errors(backend: Any, kwargs: dict[str, Any]) -> None:
    store = backend.store()
    q = CairnQ(store)
    args = {"name": "v", "payload": {"a": 1}, **kwargs}
    with pytest.raises((TypeError, ValueError)):
        await store.submit(**args)
    await assert_nothing_written(q)
    with pytest.raises((TypeError, ValueError)):
        await store.submit(key="kk", **args)
    await assert_nothing_written(q)
    assert await q.get_by_key("kk") is None


async def test_invalid_conflict_leaves_existing_keyed_task_alone(backend: Any) -> None:
    q = backend.client()
    t = await q.submit("c", {"a": 1}, key="ck")
    with pytest.raises(ValueError):
        await q.submit("c", {"a": 2}, key="ck", conflict="overwrite")
    assert await q.list() == [t]
    assert await q.get_by_key("ck") == t


# -- the JSON boundary -----------------------------------------------------------------


class Opaque:
    pass


BAD_VALUES = [
    float("nan"),
    float("inf"),
    float("-inf"),
    {1, 2},
    frozenset({1}),
    b"bytes",
    bytearray(b"x"),
    datetime.datetime(2024, 1, 2, 3, 4, 5),
    datetime.date(2024, 1, 2),
    decimal.Decimal("1.5"),
    uuid.UUID("12345678-1234-5678-1234-567812345678"),
    Opaque(),
    object(),
    1 + 2j,
]


@pytest.mark.parametrize("bad", BAD_VALUES, ids=lambda v: type(v).__name__ + ":" + repr(v)[:20])
async def test_unserializable_rejected_and_nothing_written(backend: Any, bad: Any) -> None:
    q = backend.client()
    places: list[tuple[Any, Any]] = [
        (bad, None),  # payload itself
        ({"a": [1, {"b": bad}]}, None),  # nested in payload
        ([bad], None),  # inside a list payload
        ({"ok": 1}, {"m": bad}),  # metadata
        ({"ok": 1}, {"m": {"n": [bad]}}),  # nested in metadata
    ]
    for payload, metadata in places:
        with pytest.raises(SerializationError):
            await q.submit("bad", payload, metadata=metadata)
        await assert_nothing_written(q)
        with pytest.raises(SerializationError):
            await q.submit("bad", payload, metadata=metadata, key="bk")
        await assert_nothing_written(q)
        assert await q.get_by_key("bk") is None
        with pytest.raises(SerializationError):
            await q.store.submit(name="bad", payload=payload, metadata=metadata, key="bk2")
        await assert_nothing_written(q)


async def test_serialization_error_is_cairnq_error(backend: Any) -> None:
    q = backend.client()
    with pytest.raises(cairnq.CairnQError):
        await q.submit("bad", {"x": float("nan")})
    await assert_nothing_written(q)


async def test_unserializable_with_existing_key_leaves_it(backend: Any) -> None:
    q = backend.client()
    t = await q.submit("k", {"a": 1}, key="jk")
    with pytest.raises(SerializationError):
        await q.submit("k", {"a": {1, 2}}, key="jk", conflict="replace")
    assert await q.list() == [t]
    assert await q.get(t.id) == t
    assert await q.get_by_key("jk") == t


async def test_narrowing_tuples_and_keys(backend: Any) -> None:
    q = backend.client()
    cases = [
        ((1, 2, (3, 4)), [1, 2, [3, 4]]),
        ({"t": (1, "a"), "n": [(None,)]}, {"t": [1, "a"], "n": [[None]]}),
        ({1: "int", "s": "str"}, {"1": "int", "s": "str"}),
        ({True: "t", False: "f"}, {"true": "t", "false": "f"}),
        ({None: "n"}, {"null": "n"}),
        ({1.5: "x"}, {"1.5": "x"}),
        ({"outer": {2: {3: (4,)}}}, {"outer": {"2": {"3": [4]}}}),
    ]
    for value, expected in cases:
        t = await q.submit("narrow", value)
        assert t.payload == expected
        assert (await q.get(t.id)).payload == expected
        if backend.dialect == "sqlite":
            assert raw_task(backend, t.id)["payload"] == ref_json(value)
    m = await q.submit("narrow", {}, metadata={1: (2, 3), False: "no"})
    assert m.metadata == {"1": [2, 3], "false": "no"}
    assert (await q.get(m.id)).metadata == {"1": [2, 3], "false": "no"}


async def test_spec_encoding_example_sqlite(backend: Any) -> None:
    if backend.dialect != "sqlite":
        pytest.skip("stored JSON text is SQLite's")
    q = backend.client()
    t = await q.submit("ex", {"x": "é", "f": 1.5, "t": (1, 2), 3: "k"})
    assert raw_task(backend, t.id)["payload"] == '{"x":"\\u00e9","f":1.5,"t":[1,2],"3":"k"}'
    assert (await q.get(t.id)).payload == {"x": "é", "f": 1.5, "t": [1, 2], "3": "k"}


# Grouped so that one database serves many values; each test reports every
# mismatching value of its group at once.
ENCODING_GROUPS: dict[str, list[Any]] = {
    "ascii-and-bmp-strings": [
        "plain",
        "é",
        "日本語",
        "\x00\x01\x1f",
        "\x7f",
        "a\x7fb",
        "\x80\xff",
        "\u2028\u2029",
        "\ufeff",
        "\uffff",
        '"\\/\b\f\n\r\t',
        "",
        {"ké": "v", "k\x7f": "\x7f"},
    ],
    "astral-strings": [
        "😀",
        "a😀b",
        "\U0010ffff",
        "\U00010000",
        {"emoji": "\U0001f600", "k": "v"},
        ["é", "😀", "\x7f"],
    ],
    "floats": [
        1e-05,
        1e-07,
        1e-4,
        0.1,
        1e16,
        1e15,
        1e22,
        -1e16,
        1.5e300,
        1.7976931348623157e308,
        5e-324,
        -0.0,
        123456789.123,
        1.0,
        [1e-05, 0.5, 2.5e-8],
    ],
    "ints-within-64-bits": [0, 1, -1, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, -(2**63)],
    "ints-beyond-64-bits": [2**64, 2**64 + 1, 2**100, -(2**63) - 1, -(2**100), 10**30],
    "structures": [
        [1, 2.5, None, True, False, "s"],
        {"a": {"b": [{}, [], ""]}},
        {"z": 1, "a": 2, "m": [3]},  # key order kept
        True,
        False,
    ],
}


async def _encoding_mismatches(q: CairnQ, backend: Any, values: list[Any], where: str) -> list[str]:
    problems: list[str] = []
    for value in values:
        want = ref_json(value)
        try:
            if where == "payload":
                t = await q.submit("enc", value)
            else:
                t = await q.submit("enc", {}, metadata=value)
        except Exception as exc:  # noqa: BLE001 - collected and reported below
            problems.append(f"{ascii(value)}: submit raised {type(exc).__name__}: {exc}")
            continue
        stored = raw_task(backend, t.id)[where]
        if stored != want:
            problems.append(f"{ascii(value)}: stored {stored!r}, want {want!r}")
        for label, task in (("returned", t), ("read back", await q.get(t.id))):
            got = getattr(task, where)
            # type-exact: e.g. a big integer must come back as an int, not a float
            if ref_json(got) != want:
                problems.append(f"{ascii(value)}: {label} {got!r}, want {want}")
    return problems


@pytest.mark.parametrize("group", list(ENCODING_GROUPS))
async def test_stored_payload_text_is_reference_encoding_sqlite(backend: Any, group: str) -> None:
    """Stored text is byte-identical to the stdlib encoder (ensure_ascii, compact,
    allow_nan=False), and it reads back type-exactly."""
    if backend.dialect != "sqlite":
        pytest.skip("stored JSON text is SQLite's")
    q = backend.client()
    problems = await _encoding_mismatches(q, backend, ENCODING_GROUPS[group], "payload")
    assert problems == []


@pytest.mark.parametrize("group", list(ENCODING_GROUPS))
async def test_stored_metadata_text_is_reference_encoding_sqlite(backend: Any, group: str) -> None:
    if backend.dialect != "sqlite":
        pytest.skip("stored JSON text is SQLite's")
    q = backend.client()
    values = [{"v": v} for v in ENCODING_GROUPS[group]]
    problems = await _encoding_mismatches(q, backend, values, "metadata")
    assert problems == []


ROUND_TRIP_GROUPS: dict[str, list[Any]] = {
    "strings": ["é", "\x7f", "\x01\x1f", "日本語"],
    "astral-strings": ["😀", "\U0010ffff"],
    "numbers": [1e-05, 1e16, 0.1, 2**63 - 1, -(2**63)],
    "big-ints": [2**64, 2**64 + 1, 2**100, -(2**70), 10**30],
}


@pytest.mark.parametrize("group", list(ROUND_TRIP_GROUPS))
async def test_payload_round_trips(backend: Any, group: str) -> None:
    """Dialect-neutral: whatever the storage form, the value reads back equal
    (type-exact: an integer stays an int of the same value)."""
    q = backend.client()
    problems = []
    for value in ROUND_TRIP_GROUPS[group]:
        doc = {"v": value, "l": [value]}
        try:
            t = await q.submit("rt", doc)
        except Exception as exc:  # noqa: BLE001
            problems.append(f"{ascii(value)}: submit raised {type(exc).__name__}: {exc}")
            continue
        got = await q.get(t.id)
        expected = _jsonb_normal(doc) if backend.dialect == "postgres" else doc
        for label, task in (("returned", t), ("read back", got)):
            seen = _jsonb_normal(task.payload) if backend.dialect == "postgres" else task.payload
            if seen != expected or ref_json(seen) != ref_json(expected):
                problems.append(f"{ascii(value)}: {label} {task.payload!r}")
    assert problems == []


def _jsonb_normal(value: Any) -> Any:
    """What jsonb keeps of a value: object keys in its own order (compared
    sorted here) and numbers as numeric, so an integral float reads back as
    an int (1e16 -> 10000000000000000). Same for every SDK on PostgreSQL."""
    if isinstance(value, dict):
        return {k: _jsonb_normal(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_jsonb_normal(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
