"""Management: cancel / cancel_by_key, retry / retry_by_key, purge.

Spec: OPERATIONS.md §3.6-§3.8; API.md §4.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import time
from typing import Any

import pytest
from db_clock import assert_within, now_ms

from cairnq import CairnQ, Task

ENVELOPE = {
    "type": "Boom",
    "code": "boom",
    "message": "it broke",
    "retryable": False,
    "details": {"why": "test"},
}
TERMINAL = ("succeeded", "failed", "canceled")


def raw_exec(backend: Any, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """Run SQL directly on the SQLite file (SQLite dialect only)."""
    assert backend.dialect == "sqlite"
    con = sqlite3.connect(backend.target, isolation_level=None)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def need_sqlite(backend: Any) -> None:
    if backend.dialect != "sqlite":
        pytest.skip("needs direct access to the SQLite file")


async def claim_one(store: Any, task: Task, worker: str = "w1") -> Task:
    claimed = await store.claim(
        queues=[task.queue], worker_id=worker, lease_ms=30000, limit=1, names=None
    )
    assert [c.id for c in claimed] == [task.id]
    return claimed[0]


async def drive(store: Any, task: Task, status: str, worker: str = "w1") -> Task:
    """Move a freshly submitted task (the only queued one in its queue) to ``status``."""
    if status == "queued":
        return task
    if status == "canceled":
        done = await store.cancel(task.id)
        assert done is not None and done.status == "canceled"
        return done
    claimed = await claim_one(store, task, worker)
    if status == "running":
        return claimed
    if status == "succeeded":
        done = await store.complete(task_id=task.id, worker_id=worker, result={"ok": 1})
    else:
        done = await store.fail(
            task_id=task.id, worker_id=worker, error=ENVELOPE, retryable=False, delay_ms=0
        )
    assert done.status == status
    return done


# -- cancel ------------------------------------------------------------------------


async def test_cancel_queued(backend: Any) -> None:
    q = backend.client()
    t = await q.submit("c", {"a": 1}, queue="cq", delay_ms=50_000)
    await asyncio.sleep(0.003)
    before = now_ms()
    got = await q.cancel(t.id)
    after = now_ms()
    assert got is not None
    assert got.status == "canceled"
    assert_within(got.completed_at_ms, before, after, backend)
    assert_within(got.updated_at_ms, before, after, backend)
    if backend.dialect == "sqlite":
        assert got.completed_at_ms == got.updated_at_ms
    assert got.cancel_requested_at_ms is None
    assert got == dataclasses.replace(
        t, status="canceled", completed_at_ms=got.completed_at_ms, updated_at_ms=got.updated_at_ms
    )
    assert await q.get(t.id) == got


async def test_cancel_running_only_flags(backend: Any) -> None:
    store = backend.store()
    q = CairnQ(store)
    t = await q.submit("c", {"a": 1}, queue="rq")
    await claim_one(store, t)
    running = await store.progress(task_id=t.id, worker_id="w1", progress=0.5, message="half")
    await asyncio.sleep(0.003)
    before = now_ms()
    got = await q.cancel(t.id)
    after = now_ms()
    assert got is not None
    assert got.status == "running"
    assert_within(got.cancel_requested_at_ms, before, after, backend)
    assert_within(got.updated_at_ms, before, after, backend)
    assert got.completed_at_ms is None
    assert got.cancel_requested is True
    assert got == dataclasses.replace(
        running,
        cancel_requested_at_ms=got.cancel_requested_at_ms,
        updated_at_ms=got.updated_at_ms,
    )
    # worker_id, lease, progress, message untouched
    assert got.worker_id == "w1"
    assert got.lease_until_ms == running.lease_until_ms
    assert got.progress == 0.5 and got.message == "half"
    assert await q.get(t.id) == got


async def test_repeated_cancel_overwrites_flag(backend: Any) -> None:
    store = backend.store()
    q = CairnQ(store)
    t = await q.submit("c", queue="rq")
    await claim_one(store, t)
    first = await q.cancel(t.id)
    await asyncio.sleep(0.005)
    second = await q.cancel(t.id)
    assert first is not None and second is not None
    assert second.status == "running"
    assert second.cancel_requested_at_ms > first.cancel_requested_at_ms
    assert second.updated_at_ms > first.updated_at_ms
    assert second.completed_at_ms is None
    assert await q.get(t.id) == second


async def test_running_cancel_wins_on_settle(backend: Any) -> None:
    store = backend.store()
    q = CairnQ(store)
    t = await q.submit("c", queue="rq")
    await claim_one(store, t)
    flagged = await q.cancel(t.id)
    done = await store.complete(task_id=t.id, worker_id="w1", result={"x": 1})
    assert done.status == "canceled"
    assert done.result is None
    assert done.cancel_requested_at_ms == flagged.cancel_requested_at_ms
    assert done.completed_at_ms is not None


@pytest.mark.parametrize("status", TERMINAL)
async def test_cancel_terminal_returns_none(backend: Any, status: str) -> None:
    store = backend.store()
    q = CairnQ(store)
    t = await drive(store, await q.submit("c", queue="tq", key="tk"), status)
    snapshot = await q.get(t.id)
    await asyncio.sleep(0.003)
    assert await q.cancel(t.id) is None
    assert await q.cancel_by_key("tk") is None
    assert await q.get(t.id) == snapshot


async def test_cancel_unknown(backend: Any) -> None:
    q = backend.client()
    await q.submit("c")
    assert await q.cancel("task_00000000000000000000000000") is None
    assert await q.cancel_by_key("missing") is None
    assert await q.retry("task_00000000000000000000000000") is None
    assert await q.retry_by_key("missing") is None
    assert await q.retry_by_key("missing", reset_attempt=True) is None


async def test_cancel_by_key(backend: Any) -> None:
    store = backend.store()
    q = CairnQ(store)
    t = await q.submit("c", {"a": 1}, key="ck", queue="kq")
    before = now_ms()
    got = await q.cancel_by_key("ck")
    after = now_ms()
    assert got is not None and got.id == t.id
    assert got.status == "canceled"
    assert_within(got.completed_at_ms, before, after, backend)
    assert await q.get(t.id) == got
    assert await q.get_by_key("ck") == got

    r = await q.submit("c", key="rk", queue="kq2")
    await claim_one(store, r)
    flagged = await q.cancel_by_key("rk")
    assert flagged is not None and flagged.id == r.id
    assert flagged.status == "running"
    assert flagged.cancel_requested_at_ms is not None
    assert flagged.completed_at_ms is None


async def test_cancel_by_key_targets_current_task(backend: Any) -> None:
    q = backend.client()
    old = await q.submit("c", key="k")
    await q.cancel(old.id)
    new = await q.submit("c", key="k")  # reuse: old one is canceled → new task
    assert new.id != old.id
    got = await q.cancel_by_key("k")
    assert got is not None and got.id == new.id and got.status == "canceled"


# -- retry -------------------------------------------------------------------------


async def test_retry_failed_clears_run_state(backend: Any) -> None:
    store = backend.store()
    q = CairnQ(store)
    t = await q.submit("r", {"a": 1}, queue="fq", max_attempts=3, delay_ms=0)
    await claim_one(store, t)
    await store.progress(task_id=t.id, worker_id="w1", progress=0.25, message="quarter")
    failed = await store.fail(
        task_id=t.id, worker_id="w1", error=ENVELOPE, retryable=False, delay_ms=0
    )
    assert failed.status == "failed"
    assert failed.error == ENVELOPE
    assert failed.progress == 0.25 and failed.message == "quarter"
    assert failed.worker_id == "w1"
    assert failed.completed_at_ms is not None
    assert failed.attempt == 1
    await asyncio.sleep(0.003)

    before = now_ms()
    got = await q.retry(t.id)
    after = now_ms()
    assert got is not None
    assert got.status == "queued"
    assert got.error is None
    assert got.worker_id is None
    assert got.lease_until_ms is None
    assert got.cancel_requested_at_ms is None
    assert got.completed_at_ms is None
    assert got.progress is None
    assert got.message is None
    assert got.attempt == 1  # kept without reset_attempt
    assert_within(got.run_at_ms, before, after, backend)
    assert_within(got.updated_at_ms, before, after, backend)
    if backend.dialect == "sqlite":
        assert got.run_at_ms == got.updated_at_ms
    assert got == dataclasses.replace(
        failed,
        status="queued",
        error=None,
        worker_id=None,
        lease_until_ms=None,
        cancel_requested_at_ms=None,
        completed_at_ms=None,
        progress=None,
        message=None,
        run_at_ms=got.run_at_ms,
        updated_at_ms=got.updated_at_ms,
    )
    assert await q.get(t.id) == got
    # claimable again right away
    again = await claim_one(store, got)
    assert again.attempt == 2


async def test_retry_canceled_running_clears_cancel_flag(backend: Any) -> None:
    store = backend.store()
    q = CairnQ(store)
    t = await q.submit("r", queue="cq")
    await claim_one(store, t)
    await store.progress(task_id=t.id, worker_id="w1", progress=0.75, message="m")
    await q.cancel(t.id)
    canceled = await store.fail(
        task_id=t.id, worker_id="w1", error=ENVELOPE, retryable=True, delay_ms=0
    )
    assert canceled.status == "canceled"  # cancel wins
    assert canceled.cancel_requested_at_ms is not None
    assert canceled.worker_id == "w1"
    assert canceled.error == ENVELOPE
    got = await q.retry(t.id)
    assert got is not None
    assert got.status == "queued"
    assert got.cancel_requested_at_ms is None
    assert got.cancel_requested is False
    assert got.worker_id is None
    assert got.error is None
    assert got.completed_at_ms is None
    assert got.progress is None
    assert got.message is None
    assert got.attempt == 1


async def test_retry_canceled_queued(backend: Any) -> None:
    q = backend.client()
    t = await q.submit("r", delay_ms=3_600_000)
    await q.cancel(t.id)
    before = now_ms()
    got = await q.retry(t.id)
    after = now_ms()
    assert got.status == "queued"
    assert got.attempt == 0
    assert got.completed_at_ms is None
    # run_at is now (the original delay is gone)
    assert_within(got.run_at_ms, before, after, backend)


@pytest.mark.parametrize("status", ["queued", "running", "succeeded"])
async def test_retry_other_statuses_returns_none(backend: Any, status: str) -> None:
    store = backend.store()
    q = CairnQ(store)
    t = await drive(store, await q.submit("r", queue="oq", key="ok"), status)
    snapshot = await q.get(t.id)
    await asyncio.sleep(0.003)
    assert await q.retry(t.id) is None
    assert await q.retry(t.id, reset_attempt=True) is None
    assert await q.retry_by_key("ok") is None
    assert await q.get(t.id) == snapshot


async def test_retry_reset_attempt(backend: Any) -> None:
    store = backend.store()
    q = CairnQ(store)
    t = await q.submit("r", queue="zq", max_attempts=2)
    await claim_one(store, t)
    t2 = await store.fail(task_id=t.id, worker_id="w1", error=ENVELOPE, retryable=True)
    assert t2.status == "queued" and t2.attempt == 1
    await claim_one(store, t)
    t3 = await store.fail(task_id=t.id, worker_id="w1", error=ENVELOPE, retryable=True)
    assert t3.status == "failed" and t3.attempt == 2
    got = await q.retry(t.id, reset_attempt=True)
    assert got.status == "queued"
    assert got.attempt == 0
    assert await q.get(t.id) == got
    # a full budget again: the first retryable failure requeues
    c = await claim_one(store, t)
    assert c.attempt == 1
    t4 = await store.fail(task_id=t.id, worker_id="w1", error=ENVELOPE, retryable=True)
    assert t4.status == "queued"


async def test_retry_by_key(backend: Any) -> None:
    store = backend.store()
    q = CairnQ(store)
    t = await drive(store, await q.submit("r", queue="bq", key="bk"), "failed")
    assert t.attempt == 1
    got = await q.retry_by_key("bk")
    assert got is not None and got.id == t.id
    assert got.status == "queued"
    assert got.attempt == 1
    assert got.error is None
    assert await q.get_by_key("bk") == got

    u = await drive(store, await q.submit("r", queue="bq2", key="bk2"), "failed")
    got2 = await q.retry_by_key("bk2", reset_attempt=True)
    assert got2 is not None and got2.id == u.id
    assert got2.attempt == 0
    assert got2.status == "queued"


async def test_retry_keeps_result(backend: Any) -> None:
    need_sqlite(backend)
    store = backend.store()
    q = CairnQ(store)
    t = await drive(store, await q.submit("r", queue="rq"), "failed")
    # A result left on a failed row (no ordinary path writes one) survives retry.
    raw_exec(backend, "update cairnq_tasks set result = ? where id = ?", '{"kept":[1,2]}', t.id)
    assert (await q.get(t.id)).result == {"kept": [1, 2]}
    got = await q.retry(t.id)
    assert got.status == "queued"
    assert got.result == {"kept": [1, 2]}
    assert (await q.get(t.id)).result == {"kept": [1, 2]}
    got2 = await q.cancel(t.id)
    assert got2.status == "canceled"
    got3 = await q.retry(t.id, reset_attempt=True)
    assert got3.result == {"kept": [1, 2]}


async def test_exhausted_task_gets_exactly_one_more_attempt(backend: Any) -> None:
    store = backend.store()
    q = CairnQ(store)
    t = await q.submit("x", queue="eq", max_attempts=2)
    await claim_one(store, t)
    assert (await store.fail(task_id=t.id, worker_id="w1", error=ENVELOPE)).status == "queued"
    await claim_one(store, t)
    exhausted = await store.fail(task_id=t.id, worker_id="w1", error=ENVELOPE)
    assert exhausted.status == "failed"
    assert exhausted.attempt == 2 == exhausted.max_attempts

    retried = await q.retry(t.id)
    assert retried.status == "queued"
    assert retried.attempt == 2  # not reset
    # claim does not check attempts
    c = await claim_one(store, t)
    assert c.status == "running"
    assert c.attempt == 3
    # the next retryable failure finds attempt < max_attempts false -> failed
    final = await store.fail(task_id=t.id, worker_id="w1", error=ENVELOPE, retryable=True)
    assert final.status == "failed"
    assert final.attempt == 3
    assert final.completed_at_ms is not None
    assert final.error == ENVELOPE
    assert await store.claim(queues=["eq"], worker_id="w1", limit=1, names=None) == []


async def test_exhausted_single_attempt_task(backend: Any) -> None:
    store = backend.store()
    q = CairnQ(store)
    t = await q.submit("x", queue="sq", max_attempts=1)
    await claim_one(store, t)
    first = await store.fail(task_id=t.id, worker_id="w1", error=ENVELOPE, retryable=True)
    assert first.status == "failed" and first.attempt == 1
    await q.retry(t.id)
    c = await claim_one(store, t)
    assert c.attempt == 2
    second = await store.fail(task_id=t.id, worker_id="w1", error=ENVELOPE, retryable=True)
    assert second.status == "failed" and second.attempt == 2


# -- purge ---------------------------------------------------------------------------


async def test_purge_only_terminal(backend: Any) -> None:
    store = backend.store()
    q = CairnQ(store)
    ids = {}
    for status in ("running", "succeeded", "failed", "canceled"):
        ids[status] = (await drive(store, await q.submit("p", queue=f"q-{status}"), status)).id
    ids["queued"] = (await q.submit("p", queue="q-queued")).id
    flagged = await q.submit("p", queue="q-flag")
    await claim_one(store, flagged)
    await q.cancel(flagged.id)
    await asyncio.sleep(0.005)
    got = await q.purge()
    assert isinstance(got, list)
    assert all(type(i) is str for i in got)
    assert sorted(got) == sorted([ids["succeeded"], ids["failed"], ids["canceled"]])
    remaining = sorted(t.id for t in await q.list())
    assert remaining == sorted([ids["running"], ids["queued"], flagged.id])
    for s in TERMINAL:
        assert await q.get(ids[s]) is None
        assert await q.get_status(ids[s]) is None
    assert await q.purge() == []


async def test_purge_never_deletes_non_terminal_even_with_completed_at(backend: Any) -> None:
    need_sqlite(backend)
    store = backend.store()
    q = CairnQ(store)
    queued = await q.submit("p", queue="a")
    running = await drive(store, await q.submit("p", queue="b"), "running")
    raw_exec(backend, "update cairnq_tasks set completed_at_ms = 1")
    assert await q.purge() == []
    assert {t.id for t in await q.list()} == {queued.id, running.id}


async def test_purge_cutoff(backend: Any) -> None:
    store = backend.store()
    q = CairnQ(store)
    t = await drive(store, await q.submit("p", queue="cq"), "succeeded")
    # completed just now: not older than a minute
    assert await q.purge(older_than_ms=60_000) == []
    assert await q.get(t.id) is not None
    await asyncio.sleep(0.005)
    assert await q.purge(older_than_ms=0) == [t.id]
    assert await q.get(t.id) is None


async def test_purge_strict_cutoff_sqlite(backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    need_sqlite(backend)
    store = backend.store()
    q = CairnQ(store)
    a = await drive(store, await q.submit("p", queue="a"), "succeeded")
    b = await drive(store, await q.submit("p", queue="b"), "failed")
    c = await drive(store, await q.submit("p", queue="c"), "canceled")
    raw_exec(backend, "update cairnq_tasks set completed_at_ms = 5000 where id = ?", a.id)
    raw_exec(backend, "update cairnq_tasks set completed_at_ms = 5001 where id = ?", b.id)
    raw_exec(backend, "update cairnq_tasks set completed_at_ms = 5002 where id = ?", c.id)
    await q.get(a.id)  # connection warm before the clock is frozen
    frozen_ms = 10_000
    with monkeypatch.context() as m:
        m.setattr(time, "time", lambda: (frozen_ms + 0.5) / 1000)
        # cutoff = 10000 - 5000 = 5000: completed_at 5000 is not < 5000
        assert await q.purge(older_than_ms=5000) == []
        # cutoff 5001: only a
        assert await q.purge(older_than_ms=4999) == [a.id]
        # cutoff 5002: only b
        assert await q.purge(older_than_ms=4998) == [b.id]
        # cutoff 5003: c
        assert await q.purge(older_than_ms=4997) == [c.id]
    assert await q.list() == []


async def test_purge_limit_oldest_first(backend: Any) -> None:
    store = backend.store()
    q = CairnQ(store)
    done = []
    for i in range(4):
        status = TERMINAL[i % 3]
        done.append(await drive(store, await q.submit("p", queue=f"o{i}"), status))
        await asyncio.sleep(0.003)
    completed = [(await q.get(t.id)).completed_at_ms for t in done]
    assert completed == sorted(completed) and len(set(completed)) == 4
    first = await q.purge(limit=2)
    assert sorted(first) == sorted([done[0].id, done[1].id])
    second = await q.purge(limit=1)
    assert second == [done[2].id]
    assert await q.purge(limit=5) == [done[3].id]
    assert await q.purge(limit=5) == []


async def test_purge_limit_oldest_first_not_by_creation(backend: Any) -> None:
    """Order is completed_at_ms, not creation or id."""
    store = backend.store()
    q = CairnQ(store)
    early = await q.submit("p", queue="e")
    late = await q.submit("p", queue="l")
    await asyncio.sleep(0.003)
    await drive(store, late, "succeeded")
    await asyncio.sleep(0.003)
    await claim_one(store, early)
    await store.complete(task_id=early.id, worker_id="w1", result=None)
    await asyncio.sleep(0.003)
    assert await q.purge(limit=1) == [late.id]
    assert await q.purge(limit=1) == [early.id]


async def test_purge_filters(backend: Any) -> None:
    store = backend.store()
    q = CairnQ(store)
    made: dict[tuple[str, str, str], str] = {}
    n = 0
    for queue in ("a", "b"):
        for name in ("x", "y"):
            for status in TERMINAL:
                n += 1
                t = await q.submit(name, queue=f"{queue}", priority=n)
                made[(queue, name, status)] = (await drive(store, t, status)).id
    live = await q.submit("x", queue="a")  # queued: never purged
    await asyncio.sleep(0.005)

    def ids(pred: Any) -> list[str]:
        return sorted(v for k, v in made.items() if pred(*k))

    got = await q.purge(queue="a", status="failed")
    assert sorted(got) == ids(lambda qu, na, st: qu == "a" and st == "failed")
    got = await q.purge(name="y", queue="b")
    assert sorted(got) == ids(lambda qu, na, st: qu == "b" and na == "y")
    got = await q.purge(status="canceled")
    assert sorted(got) == ids(
        lambda qu, na, st: st == "canceled" and not (qu == "b" and na == "y")
    )
    got = await q.purge(name="x", queue="b", status="succeeded")
    assert sorted(got) == ids(lambda qu, na, st: (qu, na, st) == ("b", "x", "succeeded"))
    got = await q.purge(queue="nope")
    assert got == []
    got = await q.purge(name="x")
    assert sorted(got) == ids(
        lambda qu, na, st: na == "x"
        and st in ("succeeded", "failed")
        and not (qu == "a" and st == "failed")
        and not (qu == "b" and st == "succeeded")
    )
    got = await q.purge()
    assert sorted(got) == ids(lambda qu, na, st: (qu, na, st) == ("a", "y", "succeeded"))
    assert [t.id for t in await q.list()] == [live.id]


async def test_purge_cascades_key_rows(backend: Any) -> None:
    store = backend.store()
    q = CairnQ(store)
    t = await drive(store, await q.submit("p", queue="kq", key="pk"), "failed")
    other = await q.submit("p", queue="kq2", key="live")
    await asyncio.sleep(0.005)
    assert await q.purge() == [t.id]
    assert await q.get_by_key("pk") is None
    assert await q.get_status_by_key("pk") is None
    assert await q.cancel_by_key("pk") is None
    assert await q.retry_by_key("pk") is None
    assert await q.get_by_key("live") == other
    if backend.dialect == "sqlite":
        assert raw_exec(backend, "select key, task_id from cairnq_task_keys") == [
            ("live", other.id)
        ]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"older_than_ms": -1},
        {"limit": 0},
        {"limit": -1},
        {"status": "queued"},
        {"status": "running"},
        {"status": "bogus"},
        {"status": "SUCCEEDED"},
    ],
    ids=repr,
)
async def test_purge_validation(backend: Any, kwargs: dict[str, Any]) -> None:
    store = backend.store()
    q = CairnQ(store)
    t = await drive(store, await q.submit("p", queue="vq"), "succeeded")
    await asyncio.sleep(0.003)
    with pytest.raises(ValueError):
        await q.purge(**kwargs)
    with pytest.raises(ValueError):
        await store.purge(**kwargs)
    assert [x.id for x in await q.list()] == [t.id]
