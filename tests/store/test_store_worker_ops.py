"""TaskStore worker-side writes (OPERATIONS.md §4.1, §4.3-§4.8, §1.2).

heartbeat, heartbeat_batch, progress, succeed, complete, fail: ownership checks
and the exact column effects of every branch.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import sqlite3
from typing import Any, Awaitable, Callable

import pytest
from db_clock import latest_ms, now_ms

from cairnq import LostLease, SerializationError, Task

TERMINAL = ("succeeded", "failed", "canceled")


# -- helpers -----------------------------------------------------------------


def need_sqlite(backend: Any) -> None:
    if backend.dialect != "sqlite":
        pytest.skip("reads/rewrites columns with sqlite3")


def sql(backend: Any, statement: str, params: tuple = ()) -> None:
    need_sqlite(backend)
    conn = sqlite3.connect(backend.target, isolation_level=None, timeout=5)
    try:
        conn.execute(statement, params)
    finally:
        conn.close()


def raw(backend: Any, task_id: str) -> dict[str, Any] | None:
    """The stored row as SQLite holds it (JSON columns as text)."""
    need_sqlite(backend)
    conn = sqlite3.connect(backend.target, timeout=5)
    conn.row_factory = sqlite3.Row
    try:
        row = conn.execute("select * from cairnq_tasks where id = ?", (task_id,)).fetchone()
        return dict(row) if row is not None else None
    finally:
        conn.close()


def raw_typeof(backend: Any, task_id: str, column: str) -> str:
    need_sqlite(backend)
    conn = sqlite3.connect(backend.target, timeout=5)
    try:
        return conn.execute(
            f"select typeof({column}) from cairnq_tasks where id = ?", (task_id,)
        ).fetchone()[0]
    finally:
        conn.close()


def as_dict(task: Task) -> dict[str, Any]:
    return dict(vars(task))


async def snapshot(backend: Any, store: Any, task_id: str) -> Any:
    """Raw row on SQLite (exact stored text), else the decoded Task."""
    if backend.dialect == "sqlite":
        return raw(backend, task_id)
    return as_dict(await store.get(task_id))


_QUEUES = itertools.count()


async def claimed(store: Any, worker: str = "w1", lease_ms: int = 30_000, **submit: Any) -> Task:
    """A task claimed by ``worker``, in a queue of its own (no stray claims)."""
    queue = submit.setdefault("queue", f"q{next(_QUEUES)}")
    submit.setdefault("name", "job")
    t = await store.submit(**submit)
    got = await store.claim(queues=[queue], worker_id=worker, lease_ms=lease_ms, names=[submit["name"]])
    assert [x.id for x in got] == [t.id]
    return got[0]


def expected(before: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    row = dict(before)
    row.update(overrides)
    return row


ENV = {"type": "Boom", "code": "boom", "message": "it broke é", "retryable": True, "details": {"k": [1, 2]}}
ENV_TEXT = '{"type":"Boom","code":"boom","message":"it broke \\u00e9","retryable":true,"details":{"k":[1,2]}}'


# -- ownership checks ---------------------------------------------------------------

Op = Callable[[Any, str, str], Awaitable[Any]]

OPS: dict[str, Op] = {
    "heartbeat": lambda s, t, w: s.heartbeat(task_id=t, worker_id=w, lease_ms=10_000),
    "progress": lambda s, t, w: s.progress(task_id=t, worker_id=w, progress=0.5, message="m"),
    "succeed": lambda s, t, w: s.succeed(task_id=t, worker_id=w, result={"r": 1}),
    "complete": lambda s, t, w: s.complete(task_id=t, worker_id=w, result={"r": 1}),
    "fail": lambda s, t, w: s.fail(task_id=t, worker_id=w, error=dict(ENV), retryable=True),
    "fail_final": lambda s, t, w: s.fail(task_id=t, worker_id=w, error=dict(ENV), retryable=False),
}


async def test_ownership_wrong_worker(backend: Any) -> None:
    store = backend.store()
    for op in OPS:
        t = await claimed(store, worker="owner")
        before = await snapshot(backend, store, t.id)
        with pytest.raises(LostLease) as info:
            await OPS[op](store, t.id, "intruder")
        assert info.value.task_id == t.id, op
        assert await snapshot(backend, store, t.id) == before, op
        # the owner still can
        await OPS[op](store, t.id, "owner")


async def test_ownership_not_running(backend: Any) -> None:
    store = backend.store()
    for op in OPS:
        queued = await store.submit(name="job", queue="never_claimed")
        before = await snapshot(backend, store, queued.id)
        with pytest.raises(LostLease) as info:
            await OPS[op](store, queued.id, "w1")
        assert info.value.task_id == queued.id, op
        assert await snapshot(backend, store, queued.id) == before, op

        for finish in ("succeed", "fail_final"):
            done = await claimed(store, worker="w1")
            await OPS[finish](store, done.id, "w1")
            before = await snapshot(backend, store, done.id)
            with pytest.raises(LostLease) as info:
                await OPS[op](store, done.id, "w1")
            assert info.value.task_id == done.id, (op, finish)
            assert await snapshot(backend, store, done.id) == before, (op, finish)

        # requeued by a retryable fail: queued again, worker_id cleared
        back = await claimed(store, worker="w1")
        await OPS["fail"](store, back.id, "w1")
        before = await snapshot(backend, store, back.id)
        with pytest.raises(LostLease):
            await OPS[op](store, back.id, "w1")
        assert await snapshot(backend, store, back.id) == before, op

        with pytest.raises(LostLease) as info:
            await OPS[op](store, "task_doesnotexist", "w1")
        assert info.value.task_id == "task_doesnotexist", op


async def test_ownership_lease_expired(backend: Any) -> None:
    store = backend.store()
    tasks = {op: await claimed(store, worker="w1", lease_ms=400) for op in OPS}
    await asyncio.sleep(0.5)  # no claim from here on: nothing recovers them
    for op, t in tasks.items():
        before = await snapshot(backend, store, t.id)
        assert before["status"] == "running" and before["worker_id"] == "w1"
        with pytest.raises(LostLease) as info:
            await OPS[op](store, t.id, "w1")
        assert info.value.task_id == t.id, op
        assert await snapshot(backend, store, t.id) == before, op


async def test_a_zero_lease_is_expired_at_once(backend: Any) -> None:
    """lease_ms=0 (0.15.1 takes it): the claim holds the task with a lease that
    is already over, so the next claim recovers it."""
    store = backend.store()
    t = await claimed(store, worker="w1", lease_ms=0)
    with pytest.raises(LostLease):
        await store.heartbeat(task_id=t.id, worker_id="w1", lease_ms=0)
    assert await store.heartbeat_batch(task_ids=[], worker_id="w1", lease_ms=0) == {}
    await asyncio.sleep(0.002)
    [again] = await store.claim(queues=[t.queue], worker_id="w2")
    assert (again.id, again.attempt, again.worker_id) == (t.id, 2, "w2")
    for bad in (-1, 2**63):
        with pytest.raises(ValueError):
            await store.claim(queues=[t.queue], worker_id="w2", lease_ms=bad)


async def test_ownership_lease_equal_to_now_is_lost(
    sqlite_backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """lease_until_ms <= now means lost: at equality every write is refused."""
    backend = sqlite_backend
    import cairnq.store.sqlite.store as sqlite_store

    if not hasattr(sqlite_store, "now_ms"):
        pytest.skip("SQLite store clock is not patchable here")
    store = backend.store()
    tasks = {op: await claimed(store, worker="w1") for op in OPS}
    frozen = now_ms() + 10_000
    monkeypatch.setattr(sqlite_store, "now_ms", lambda: frozen)
    for op, t in tasks.items():
        sql(backend, "update cairnq_tasks set lease_until_ms = ? where id = ?", (frozen, t.id))
        before = raw(backend, t.id)
        with pytest.raises(LostLease):
            await OPS[op](store, t.id, "w1")
        assert raw(backend, t.id) == before, op
        sql(backend, "update cairnq_tasks set lease_until_ms = ? where id = ?", (frozen + 1, t.id))
        row = await OPS[op](store, t.id, "w1")
        assert row.updated_at_ms == frozen, op


# -- heartbeat ------------------------------------------------------------------------


async def test_heartbeat_extends_lease_and_returns_row(backend: Any) -> None:
    store = backend.store()
    t = await claimed(store, worker="w1", lease_ms=1_000, payload={"p": 1})
    await store.progress(task_id=t.id, worker_id="w1", progress=0.3, message="m")
    before = as_dict(await store.get(t.id))
    t0 = now_ms()
    beat = await store.heartbeat(task_id=t.id, worker_id="w1", lease_ms=60_000)
    t1 = latest_ms()
    got = as_dict(beat)
    assert got == as_dict(await store.get(t.id))
    assert t0 + 60_000 <= got["lease_until_ms"] <= t1 + 60_000
    assert t0 <= got["updated_at_ms"] <= t1
    assert got == expected(
        before, lease_until_ms=got["lease_until_ms"], updated_at_ms=got["updated_at_ms"]
    )
    assert got["status"] == "running" and got["cancel_requested_at_ms"] is None
    assert beat.cancel_requested is False

    # cancel flag visible on the beat; status stays running
    canceled = await store.cancel(t.id)
    assert canceled.status == "running"
    beat = await store.heartbeat(task_id=t.id, worker_id="w1", lease_ms=5_000)
    assert beat.cancel_requested is True
    assert beat.cancel_requested_at_ms == canceled.cancel_requested_at_ms
    assert beat.status == "running"

    # beats keep a task owned well past its original lease
    k = await claimed(store, worker="w1", lease_ms=600)
    for _ in range(4):
        await asyncio.sleep(0.2)
        await store.heartbeat(task_id=k.id, worker_id="w1", lease_ms=600)
    # 800 ms after a 600 ms lease: still owned, and a claim recovers nothing
    assert await store.claim(queues=[k.queue], worker_id="w2") == []
    done = await store.complete(task_id=k.id, worker_id="w1", result="ok")
    assert done.status == "succeeded" and done.result == "ok"


# -- heartbeat_batch --------------------------------------------------------------------


async def test_heartbeat_batch(backend: Any) -> None:
    store = backend.store()
    assert await store.heartbeat_batch(task_ids=[], worker_id="w1") == {}
    assert await store.heartbeat_batch(task_ids=[], worker_id="w1", lease_ms=5) == {}

    live = await claimed(store, worker="w1", name="live")
    flagged = await claimed(store, worker="w1", name="flagged")
    foreign = await claimed(store, worker="w2", name="foreign")
    done = await claimed(store, worker="w1", name="done")
    queued = await store.submit(name="queued")
    lost = await claimed(store, worker="w1", name="lost", lease_ms=100)  # last claim of the test
    await store.cancel(flagged.id)
    await store.succeed(task_id=done.id, worker_id="w1", result=None)
    await asyncio.sleep(0.15)

    others = [lost.id, foreign.id, done.id, queued.id]
    before = {i: await snapshot(backend, store, i) for i in others}
    ids = [live.id, lost.id, flagged.id, foreign.id, done.id, queued.id, "task_nope", live.id]
    t0 = now_ms()
    beats = await store.heartbeat_batch(task_ids=ids, worker_id="w1", lease_ms=45_000)
    t1 = latest_ms()
    assert beats == {live.id: False, flagged.id: True}
    assert list(beats) == [live.id, flagged.id]  # in the order asked, as 0.15.1
    assert all(type(v) is bool for v in beats.values())
    for i in (live.id, flagged.id):
        row = await store.get(i)
        assert row.status == "running" and row.worker_id == "w1"
        assert t0 + 45_000 <= row.lease_until_ms <= t1 + 45_000
        assert t0 <= row.updated_at_ms <= t1
    for i in others:
        assert await snapshot(backend, store, i) == before[i]

    assert list(await store.heartbeat_batch(task_ids=[flagged.id, live.id], worker_id="w1")) == [flagged.id, live.id]

    # another worker renews nothing of ours
    assert await store.heartbeat_batch(task_ids=[live.id, flagged.id], worker_id="w2") == {}
    assert await store.heartbeat_batch(task_ids=[foreign.id], worker_id="w2") == {foreign.id: False}
    assert await store.heartbeat_batch(task_ids=("task_a", "task_b"), worker_id="w1") == {}


# -- progress ---------------------------------------------------------------------------


async def test_progress_fields_independent(backend: Any) -> None:
    store = backend.store()
    t = await claimed(store, worker="w1")
    start = as_dict(await store.get(t.id))

    t0 = now_ms()
    r = await store.progress(task_id=t.id, worker_id="w1", progress=0.25, message=None)
    t1 = latest_ms()
    assert t0 <= r.updated_at_ms <= t1
    assert as_dict(r) == expected(start, progress=0.25, updated_at_ms=r.updated_at_ms)

    r = await store.progress(task_id=t.id, worker_id="w1", progress=None, message="hello")
    assert (r.progress, r.message) == (0.25, "hello")

    r = await store.progress(task_id=t.id, worker_id="w1", progress=None, message=None)
    assert (r.progress, r.message) == (0.25, "hello")
    assert as_dict(r) == expected(start, progress=0.25, message="hello", updated_at_ms=r.updated_at_ms)

    r = await store.progress(task_id=t.id, worker_id="w1", progress=0.75, message="later")
    assert (r.progress, r.message) == (0.75, "later")

    r = await store.progress(task_id=t.id, worker_id="w1", progress=0, message="")
    assert (r.progress, r.message) == (0.0, "")  # 0 and "" are values, not "unchanged"
    assert (await store.get(t.id)).progress == 0.0

    r = await store.progress(task_id=t.id, worker_id="w1", progress=1, message=None)
    assert r.progress == 1.0 and r.message == ""
    assert r.status == "running"
    assert r.lease_until_ms == start["lease_until_ms"]
    assert as_dict(r) == as_dict(await store.get(t.id))


# -- succeed -------------------------------------------------------------------------------


async def test_succeed_ignores_cancel(backend: Any) -> None:
    store = backend.store()
    t = await claimed(store, worker="w1")
    await store.progress(task_id=t.id, worker_id="w1", progress=0.3, message="msg")
    await store.cancel(t.id)
    before = as_dict(await store.get(t.id))
    assert before["cancel_requested_at_ms"] is not None
    t0 = now_ms()
    r = await store.succeed(task_id=t.id, worker_id="w1", result={"a": 1})
    t1 = latest_ms()
    assert t0 <= r.completed_at_ms <= t1
    assert as_dict(r) == expected(
        before,
        status="succeeded",
        result={"a": 1},
        progress=1.0,
        lease_until_ms=None,
        completed_at_ms=r.completed_at_ms,
        updated_at_ms=r.completed_at_ms,
    )
    assert r.worker_id == "w1" and r.message == "msg"
    assert as_dict(r) == as_dict(await store.get(t.id))
    if backend.dialect == "sqlite":
        assert raw(backend, t.id)["result"] == '{"a":1}'


# -- complete -------------------------------------------------------------------------------


async def test_complete_branches(backend: Any) -> None:
    store = backend.store()
    t = await claimed(store, worker="w1")
    await store.progress(task_id=t.id, worker_id="w1", progress=0.3, message="msg")
    before = as_dict(await store.get(t.id))
    t0 = now_ms()
    r = await store.complete(task_id=t.id, worker_id="w1", result=[1, "two", {"3": None}])
    t1 = latest_ms()
    assert t0 <= r.completed_at_ms <= t1
    assert as_dict(r) == expected(
        before,
        status="succeeded",
        result=[1, "two", {"3": None}],
        progress=1.0,
        lease_until_ms=None,
        completed_at_ms=r.completed_at_ms,
        updated_at_ms=r.completed_at_ms,
    )
    assert r.worker_id == "w1" and r.message == "msg"
    assert as_dict(r) == as_dict(await store.get(t.id))

    # cancel requested: canceled, result discarded, progress unchanged
    t = await claimed(store, worker="w1")
    await store.progress(task_id=t.id, worker_id="w1", progress=0.3, message="msg")
    await store.cancel(t.id)
    before = as_dict(await store.get(t.id))
    t0 = now_ms()
    r = await store.complete(task_id=t.id, worker_id="w1", result={"x": 1})
    t1 = latest_ms()
    assert t0 <= r.completed_at_ms <= t1
    assert as_dict(r) == expected(
        before,
        status="canceled",
        lease_until_ms=None,
        completed_at_ms=r.completed_at_ms,
        updated_at_ms=r.completed_at_ms,
    )
    assert r.result is None and r.progress == 0.3 and r.message == "msg" and r.worker_id == "w1"
    assert as_dict(r) == as_dict(await store.get(t.id))
    if backend.dialect == "sqlite":
        assert raw_typeof(backend, t.id, "result") == "null"


async def test_complete_each_settles_each_with_its_own_result(backend: Any) -> None:
    """The worker's coalesced completion with distinct results: per row exactly
    complete (ownership, lease, cancel wins), the stored JSON byte for byte."""
    store = backend.store()
    values = [{"a": 1}, [1, "two", {"3": None}], None, "é \"quoted\"\n", 0, {"k": "x" * 300}]
    mine = [await claimed(store, worker="w1") for _ in values]
    canceled = await claimed(store, worker="w1")
    await store.cancel(canceled.id)
    other = await claimed(store, worker="w2")
    expired = await claimed(store, worker="w1", lease_ms=1)
    await asyncio.sleep(0.01)
    ids = [t.id for t in mine] + [canceled.id, other.id, expired.id, "task_00000000000000000000000000"]
    results = [None if v is None else store._encode(v) for v in values] + ['{"x":1}'] * 4
    t0 = now_ms()
    settled = await store._complete_each_json(ids, "w1", results, deferred=False)
    t1 = latest_ms()
    assert settled == {**{t.id: "succeeded" for t in mine}, canceled.id: "canceled"}
    for t, value in zip(mine, values):
        got = await store.get(t.id)
        assert (got.status, got.result, got.progress, got.lease_until_ms) == ("succeeded", value, 1.0, None)
        assert t0 <= got.completed_at_ms <= t1 and got.updated_at_ms == got.completed_at_ms
        if backend.dialect == "sqlite":
            assert raw(backend, t.id)["result"] == (None if value is None else store._encode(value))
    got = await store.get(canceled.id)
    assert (got.status, got.result) == ("canceled", None)
    assert (await store.get(other.id)).status == "running"  # not this worker's
    assert (await store.get(expired.id)).status == "running"  # lease ran out: not settled
    assert await store._complete_each_json([], "w1", [], deferred=False) == {}


async def test_complete_with_cancel_keeps_older_result(sqlite_backend: Any) -> None:
    """'result unchanged' means the column is not written, not cleared."""
    backend = sqlite_backend
    store = backend.store()
    t = await claimed(store, worker="w1")
    sql(backend, "update cairnq_tasks set result = ? where id = ?", ('{"old":true}', t.id))
    await store.cancel(t.id)
    done = await store.complete(task_id=t.id, worker_id="w1", result={"new": True})
    assert done.status == "canceled"
    assert done.result == {"old": True}
    assert raw(backend, t.id)["result"] == '{"old":true}'
    assert done.progress is None


async def test_result_values(backend: Any) -> None:
    """None is SQL NULL; falsy values are JSON, not NULL; encoding per §1.2."""
    store = backend.store()
    cases = [
        (None, None, "null"),
        (0, "0", "text"),
        (False, "false", "text"),
        ({}, "{}", "text"),
        ([], "[]", "text"),
        ("", '""', "text"),
        ("é", '"\\u00e9"', "text"),
        ({"t": (1, 2), 3: "k", "f": 1.5}, '{"t":[1,2],"3":"k","f":1.5}', "text"),
    ]
    for how in ("succeed", "complete"):
        for value, text, kind in cases:
            t = await claimed(store, worker="w1")
            r = await getattr(store, how)(task_id=t.id, worker_id="w1", result=value)
            decoded = None if text is None else json.loads(text)
            assert r.status == "succeeded", (how, value)
            assert r.result == decoded and type(r.result) is type(decoded), (how, value)
            assert (await store.get(t.id)).result == decoded, (how, value)
            if backend.dialect == "sqlite":
                assert raw(backend, t.id)["result"] == text, (how, value)
                assert raw_typeof(backend, t.id, "result") == kind, (how, value)


async def test_unencodable_result_writes_nothing(backend: Any) -> None:
    store = backend.store()
    bads = [{1, 2}, {"s": {1}}, float("nan"), {"x": float("inf")}, b"bytes", object()]
    for how in ("succeed", "complete"):
        for bad in bads:
            t = await claimed(store, worker="w1")
            await store.progress(task_id=t.id, worker_id="w1", progress=0.5, message="m")
            before = await snapshot(backend, store, t.id)
            with pytest.raises(SerializationError):
                await getattr(store, how)(task_id=t.id, worker_id="w1", result=bad)
            assert await snapshot(backend, store, t.id) == before, (how, bad)
        # still owned and finishable
        r = await getattr(store, how)(task_id=t.id, worker_id="w1", result="fine")
        assert r.status == "succeeded" and r.result == "fine"


# -- fail ---------------------------------------------------------------------------------


async def test_fail_branch_a_cancel_requested(backend: Any) -> None:
    store = backend.store()
    for retryable in (True, False):
        t = await claimed(store, worker="w1", max_attempts=3)
        await store.progress(task_id=t.id, worker_id="w1", progress=0.4, message="m")
        await store.cancel(t.id)
        before = as_dict(await store.get(t.id))
        t0 = now_ms()
        r = await store.fail(
            task_id=t.id, worker_id="w1", error=dict(ENV), retryable=retryable, delay_ms=5_000
        )
        t1 = latest_ms()
        assert t0 <= r.completed_at_ms <= t1
        assert as_dict(r) == expected(
            before,
            status="canceled",
            error=ENV,
            lease_until_ms=None,
            completed_at_ms=r.completed_at_ms,
            updated_at_ms=r.completed_at_ms,
        ), retryable
        assert r.worker_id == "w1" and r.progress == 0.4 and r.message == "m"
        assert r.run_at_ms == before["run_at_ms"] and r.attempt == 1
        assert as_dict(r) == as_dict(await store.get(t.id))
        if backend.dialect == "sqlite":
            assert raw(backend, t.id)["error"] == ENV_TEXT


async def test_fail_branch_b_requeue(backend: Any) -> None:
    store = backend.store()
    for delay_ms in (0, 7_000):
        t = await claimed(store, worker="w1", max_attempts=3)
        await store.progress(task_id=t.id, worker_id="w1", progress=0.4, message="m")
        before = as_dict(await store.get(t.id))
        t0 = now_ms()
        r = await store.fail(
            task_id=t.id, worker_id="w1", error=dict(ENV), retryable=True, delay_ms=delay_ms
        )
        t1 = latest_ms()
        assert t0 + delay_ms <= r.run_at_ms <= t1 + delay_ms
        assert t0 <= r.updated_at_ms <= t1
        assert as_dict(r) == expected(
            before,
            status="queued",
            error=ENV,
            worker_id=None,
            lease_until_ms=None,
            run_at_ms=r.run_at_ms,
            completed_at_ms=None,
            progress=None,
            message=None,
            updated_at_ms=r.updated_at_ms,
        ), delay_ms
        assert r.attempt == 1
        assert as_dict(r) == as_dict(await store.get(t.id))
        if backend.dialect == "sqlite":
            assert r.run_at_ms - r.updated_at_ms == delay_ms
            assert raw(backend, t.id)["error"] == ENV_TEXT
        got = await store.claim(queues=[t.queue], worker_id="w2")
        if delay_ms:
            assert got == []
        else:
            assert [x.id for x in got] == [t.id] and got[0].attempt == 2 and got[0].error == ENV

    # a negative delay is refused before anything is written
    t = await claimed(store, worker="w1")
    before = await snapshot(backend, store, t.id)
    with pytest.raises(ValueError):
        await store.fail(task_id=t.id, worker_id="w1", error=dict(ENV), delay_ms=-1)
    assert await snapshot(backend, store, t.id) == before


async def test_fail_branch_c_failed(backend: Any) -> None:
    store = backend.store()
    cases = [
        (3, 1, False),  # attempts left but not retryable
        (1, 1, True),  # retryable but no attempt left
        (2, 2, True),  # second and last attempt
        (2, 2, False),
    ]
    for max_attempts, attempts, retryable in cases:
        t = await claimed(store, worker="w1", max_attempts=max_attempts)
        for _ in range(attempts - 1):
            await store.fail(task_id=t.id, worker_id="w1", error={"type": "Earlier"}, retryable=True)
            [t] = await store.claim(queues=[t.queue], worker_id="w1")
        assert t.attempt == attempts
        await store.progress(task_id=t.id, worker_id="w1", progress=0.6, message="m")
        before = as_dict(await store.get(t.id))
        t0 = now_ms()
        r = await store.fail(
            task_id=t.id, worker_id="w1", error=dict(ENV), retryable=retryable, delay_ms=9_000
        )
        t1 = latest_ms()
        case = (max_attempts, attempts, retryable)
        assert t0 <= r.completed_at_ms <= t1, case
        assert as_dict(r) == expected(
            before,
            status="failed",
            error=ENV,
            lease_until_ms=None,
            completed_at_ms=r.completed_at_ms,
            updated_at_ms=r.completed_at_ms,
        ), case
        assert r.worker_id == "w1" and r.progress == 0.6 and r.message == "m"
        assert r.run_at_ms == before["run_at_ms"] and r.cancel_requested_at_ms is None
        assert as_dict(r) == as_dict(await store.get(t.id))
        assert await store.claim(queues=[t.queue], worker_id="w1") == []


async def test_fail_unencodable_error_fallback(backend: Any) -> None:
    """An envelope that cannot be encoded is replaced by the 5-key fallback (§1.2)."""
    store = backend.store()
    for retryable in (True, False):
        flag = "true" if retryable else "false"
        t = await claimed(store, worker="w1", max_attempts=3)
        bad = {
            "type": "Boom",
            "code": 42,
            "message": "bad thing",
            "retryable": not retryable,
            "details": {"s": {1, 2}},
        }
        r = await store.fail(task_id=t.id, worker_id="w1", error=bad, retryable=retryable)
        fallback = {
            "type": "Boom", "code": "42", "message": "bad thing", "retryable": retryable, "details": {},
        }  # fmt: skip
        assert r.error == fallback and (await store.get(t.id)).error == fallback
        assert r.status == ("queued" if retryable else "failed")
        if backend.dialect == "sqlite":
            assert raw(backend, t.id)["error"] == (
                '{"type":"Boom","code":"42","message":"bad thing","retryable":' + flag + ',"details":{}}'
            )

        # missing keys take their defaults; other unencodable values (NaN, bytes) too
        for odd in ({"extra": float("nan")}, {"type": b"x", "message": "m", "details": b"y"}):
            t = await claimed(store, worker="w1", max_attempts=1)
            r = await store.fail(task_id=t.id, worker_id="w1", error=odd, retryable=retryable)
            want = {
                "type": str(odd.get("type", "TaskError")),
                "code": "task_error",
                "message": str(odd.get("message", "")),
                "retryable": retryable,
                "details": {},
            }
            assert r.error == want and r.status == "failed", odd
            if backend.dialect == "sqlite":
                assert raw(backend, t.id)["error"] == json.dumps(want, separators=(",", ":"))


async def test_fail_error_stored_as_given(backend: Any) -> None:
    """A dict envelope is stored as-is (not validated)."""
    store = backend.store()
    t = await claimed(store, worker="w1")
    odd = {"whatever": [1, 2.5], "n": None}
    r = await store.fail(task_id=t.id, worker_id="w1", error=odd, retryable=False)
    assert r.error == odd and (await store.get(t.id)).error == odd
    if backend.dialect == "sqlite":
        assert raw(backend, t.id)["error"] == '{"whatever":[1,2.5],"n":null}'


# -- invariants over a random sequence -------------------------------------------------------


def check_invariants(rows: list[Task]) -> None:
    for t in rows:
        assert (t.lease_until_ms is not None) == (t.status == "running"), as_dict(t)
        assert (t.completed_at_ms is not None) == (t.status in TERMINAL), as_dict(t)
        if t.status == "queued":  # every path back to queued clears the owner
            assert t.worker_id is None, as_dict(t)


async def test_invariants_random_sequence(backend: Any) -> None:
    store = backend.store()
    rng = random.Random(20240611)
    workers = ["wa", "wb"]
    ids: list[str] = []
    counts: dict[str, int] = {}
    for step in range(220):
        op = rng.choice(
            ["submit", "claim", "claim", "heartbeat", "batch", "progress", "succeed",
             "complete", "fail", "cancel", "retry"]
        )  # fmt: skip
        tid = rng.choice(ids) if ids else None
        w = rng.choice(workers)
        try:
            if op == "submit" or tid is None:
                op = "submit"
                t = await store.submit(
                    name=rng.choice(["x", "y"]),
                    max_attempts=rng.randint(1, 3),
                    priority=rng.randint(-1, 1),
                )
                ids.append(t.id)
            elif op == "claim":
                await store.claim(
                    queues=["default"], worker_id=w, limit=rng.randint(1, 3),
                    lease_ms=rng.choice([30_000, 30_000, 1]),
                )  # fmt: skip
            elif op == "heartbeat":
                await store.heartbeat(task_id=tid, worker_id=w, lease_ms=rng.choice([30_000, 1]))
            elif op == "batch":
                await store.heartbeat_batch(task_ids=rng.sample(ids, min(3, len(ids))), worker_id=w)
            elif op == "progress":
                await store.progress(
                    task_id=tid, worker_id=w, progress=rng.choice([None, rng.random()]),
                    message=rng.choice([None, "m"]),
                )  # fmt: skip
            elif op == "succeed":
                await store.succeed(task_id=tid, worker_id=w, result=rng.choice([None, {"ok": 1}]))
            elif op == "complete":
                await store.complete(task_id=tid, worker_id=w, result=rng.choice([None, 3]))
            elif op == "fail":
                await store.fail(
                    task_id=tid, worker_id=w, error={"type": "E"},
                    retryable=rng.random() < 0.7, delay_ms=rng.choice([0, 0, 50]),
                )  # fmt: skip
            elif op == "cancel":
                await store.cancel(tid)
            elif op == "retry":
                await store.retry(tid, reset_attempt=rng.random() < 0.3)
            counts[op] = counts.get(op, 0) + 1
        except LostLease as exc:
            assert exc.task_id == tid
            counts["lost"] = counts.get("lost", 0) + 1
        rows = await store.list(limit=1000)
        assert len(rows) == len(ids)
        check_invariants(rows)
        if step % 40 == 39:
            await asyncio.sleep(0.005)  # let 1 ms leases run out for recovery to kick in

    # the sequence really exercised the interesting paths
    statuses = {t.status for t in await store.list(limit=1000)}
    assert len(statuses) >= 3, statuses
    for op in ("claim", "succeed", "complete", "fail", "cancel", "retry", "progress"):
        assert counts.get(op, 0) > 0, counts
