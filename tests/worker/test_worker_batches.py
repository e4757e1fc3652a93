"""The worker: batches."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from typing import Any

from worker_kit import Gauge, envelope, eventually, finish, make, spy_fail

from cairnq import (
    TaskContext,
    TaskError,
)

# -- 4. batches -------------------------------------------------------------


async def test_batch_sizes_and_result_dict(backend) -> None:
    q = backend.client()
    w = make(backend, concurrency=1)
    sizes: list[int] = []

    @w.task(batch=4)
    async def items(contexts):
        assert isinstance(contexts, list)
        assert all(isinstance(c, TaskContext) for c in contexts)
        assert len({c.task_id for c in contexts}) == len(contexts)
        sizes.append(len(contexts))
        out = {c.task_id: {"i": c.payload["i"]} for c in contexts if c.payload["i"] % 2 == 0}
        out["not-a-task"] = "ignored"
        return out

    tasks = [await q.submit("items", {"i": i}) for i in range(10)]
    async with w.background():
        done = [await finish(q, t.id) for t in tasks]
    assert sorted(sizes) == [2, 4, 4]
    assert all(1 <= s <= 4 for s in sizes)
    for i, t in enumerate(done):
        assert t.status == "succeeded"
        assert t.result == ({"i": i} if i % 2 == 0 else None)
        assert t.progress == 1.0


async def test_batch_single_task_is_not_padded(backend) -> None:
    q = backend.client()
    w = make(backend)
    sizes: list[int] = []

    @w.task(batch=8)
    async def lone(contexts):
        sizes.append(len(contexts))

    task = await q.submit("lone")
    async with w.background():
        done = await finish(q, task.id)
    assert sizes == [1]
    assert done.status == "succeeded" and done.result is None


async def test_batch_returning_neither_a_dict_nor_none_fails_its_tasks(backend) -> None:
    """A list (say) is a handler bug: 0.15.1 succeeded every task with result
    None, silently. The unsettled tasks fail, not retried; settled ones stand."""
    q = backend.client()
    w = make(backend)
    calls: list[int] = []

    @w.task(batch=4)
    async def items(contexts):
        calls.append(len(contexts))
        await contexts[0].succeed("kept")
        return [c.task_id for c in contexts]

    @w.task(batch=4)
    async def nothing(contexts):
        return None

    tasks = [await q.submit("items", {"i": i}, max_attempts=3) for i in range(3)]
    quiet = [await q.submit("nothing", {"i": i}) for i in range(2)]
    async with w.background():
        done = [await finish(q, t.id) for t in tasks]
        fine = [await finish(q, t.id) for t in quiet]
    assert calls == [3]
    assert (done[0].status, done[0].result) == ("succeeded", "kept")
    expected = envelope(
        "TypeError",
        "handler_error",
        "batch handler for 'items' returned list; expected a dict of task id -> result, or None",
        False,
    )
    assert [(t.status, t.result, t.error, t.attempt) for t in done[1:]] == [
        ("failed", None, expected, 1)
    ] * 2
    assert [(t.status, t.result) for t in fine] == [("succeeded", None)] * 2


async def test_batch_raise_fails_each_with_its_own_attempts(backend) -> None:
    q = backend.client()
    w = make(backend, concurrency=1)
    sizes: list[int] = []

    @w.task(batch=4)
    async def items(contexts):
        sizes.append(len(contexts))
        raise RuntimeError("boom")

    a = await q.submit("items", {"n": "a"}, max_attempts=1)
    b = await q.submit("items", {"n": "b"}, max_attempts=2)
    c = await q.submit("items", {"n": "c"}, max_attempts=3)
    async with w.background():
        done = [await finish(q, t.id) for t in (a, b, c)]
    # first call: all three; later calls: whatever was requeued by then
    assert sizes[0] == 3 and sum(sizes) == 6
    assert [(t.status, t.attempt) for t in done] == [("failed", 1), ("failed", 2), ("failed", 3)]
    for t in done:
        assert t.error == envelope("RuntimeError", "handler_error", "boom", True)


async def test_batch_raise_applies_each_tasks_own_backoff(backend) -> None:
    q = backend.client()
    other = backend.store()
    w = make(backend, retry_backoff_ms=200, retry_backoff_max_ms=1000)
    fails = spy_fail(w.store)
    seen: list[dict[str, int]] = []

    @w.task(batch=4)
    async def items(contexts):
        seen.append({c.payload["n"]: c.attempt for c in contexts})
        if len(seen) == 1:
            raise RuntimeError("boom")

    # b has already used one attempt (failed by someone else), a is fresh.
    b = await q.submit("items", {"n": "b"}, max_attempts=5)
    claimed = await other.claim(queues=["default"], worker_id="pre", limit=1)
    assert [t.id for t in claimed] == [b.id]
    await other.fail(
        task_id=b.id,
        worker_id="pre",
        error=envelope("X", "x", "x", True),
        retryable=True,
        delay_ms=0,
    )
    a = await q.submit("items", {"n": "a"}, max_attempts=5)

    async with w.background():
        done = [await finish(q, t.id) for t in (a, b)]
    assert seen[0] == {"a": 1, "b": 2}
    assert [t.status for t in done] == ["succeeded", "succeeded"]
    first_fails = {row.id: (kw, row) for kw, row in fails[:2]}
    assert set(first_fails) == {a.id, b.id}
    kw_a, row_a = first_fails[a.id]
    kw_b, row_b = first_fails[b.id]
    assert row_a.status == row_b.status == "queued"
    assert 100 <= kw_a["delay_ms"] < 200
    assert 200 <= kw_b["delay_ms"] < 400
    assert row_a.run_at_ms - row_a.updated_at_ms == kw_a["delay_ms"]
    assert row_b.run_at_ms - row_b.updated_at_ms == kw_b["delay_ms"]


async def test_batch_task_error_not_retryable_is_permanent_for_all(backend) -> None:
    q = backend.client()
    w = make(backend)
    calls: list[int] = []

    @w.task(batch=4)
    async def items(contexts):
        calls.append(len(contexts))
        raise TaskError("all bad", code="bad_batch")

    tasks = [await q.submit("items", {"i": i}, max_attempts=3) for i in range(3)]
    async with w.background():
        done = [await finish(q, t.id) for t in tasks]
    assert calls == [3]
    for t in done:
        assert (t.status, t.attempt) == ("failed", 1)
        assert t.error == envelope("TaskError", "bad_batch", "all bad", False)


async def test_batch_items_settled_early_keep_their_outcome(backend) -> None:
    q = backend.client()
    w = make(backend)
    checks: dict[str, Any] = {}

    @w.task(batch=4)
    async def items(contexts):
        by = {c.payload["n"]: c for c in contexts}
        first = await by["s"].succeed({"early": True})
        checks["first_status"] = first.status
        checks["again"] = await by["s"].succeed({"twice": True})
        checks["fail_after_succeed"] = await by["s"].fail("late")
        failed = await by["f"].fail("bad", retryable=False)
        checks["failed_status"] = failed.status
        checks["fail_twice"] = await by["f"].fail("worse")
        checks["settled"] = {n: c.settled for n, c in by.items()}
        return {c.task_id: "from-return" for c in contexts}

    s = await q.submit("items", {"n": "s"})
    f = await q.submit("items", {"n": "f"}, max_attempts=3)
    r = await q.submit("items", {"n": "r"})
    async with w.background():
        ds, df, dr = [await finish(q, t.id) for t in (s, f, r)]
    assert checks == {
        "first_status": "succeeded",
        "again": None,
        "fail_after_succeed": None,
        "failed_status": "failed",
        "fail_twice": None,
        "settled": {"s": True, "f": True, "r": False},
    }
    assert (ds.status, ds.result) == ("succeeded", {"early": True})
    assert (df.status, df.attempt) == ("failed", 1)
    assert df.error == envelope("TaskError", "task_error", "bad", False)
    assert (dr.status, dr.result) == ("succeeded", "from-return")


async def test_batch_raise_after_early_settlement(backend) -> None:
    q = backend.client()
    w = make(backend)

    @w.task(batch=4)
    async def items(contexts):
        for c in contexts:
            if c.payload["n"] == "s":
                await c.succeed(1)
        raise RuntimeError("rest failed")

    s = await q.submit("items", {"n": "s"}, max_attempts=1)
    o = await q.submit("items", {"n": "o"}, max_attempts=1)
    async with w.background():
        ds, do = [await finish(q, t.id) for t in (s, o)]
    assert (ds.status, ds.result, ds.error) == ("succeeded", 1, None)
    assert do.status == "failed"
    assert do.error == envelope("RuntimeError", "handler_error", "rest failed", True)


async def test_concurrency_counts_calls_not_tasks(backend) -> None:
    q = backend.client()
    w = make(backend, concurrency=1)
    gauge = Gauge()
    sizes: list[int] = []

    @w.task(batch=8)
    async def items(contexts):
        with gauge:
            sizes.append(len(contexts))
            await asyncio.sleep(0.03)

    tasks = [await q.submit("items", {"i": i}) for i in range(24)]
    async with w.background():
        done = [await finish(q, t.id) for t in tasks]
    assert all(t.status == "succeeded" for t in done)
    assert sizes == [8, 8, 8]
    assert gauge.max == 1


# -- what a batch's return settles, task by task -------------------------------


async def test_batch_result_that_cannot_be_stored_fails_only_its_own_task(backend) -> None:
    q = backend.client()
    w = make(backend)

    @w.task(batch=4)
    async def items(contexts):
        by = {c.payload["n"]: c.task_id for c in contexts}
        return {by["kept"]: {"ok": 1}, by["bad"]: {1, 2}}  # "none" is not in it: result None

    tasks = {n: await q.submit("items", {"n": n}, max_attempts=3) for n in ("kept", "bad", "none")}
    async with w.background():
        done = {n: await finish(q, t.id) for n, t in tasks.items()}
    assert (done["kept"].status, done["kept"].result) == ("succeeded", {"ok": 1})
    assert (done["none"].status, done["none"].result) == ("succeeded", None)
    bad = done["bad"]
    assert (bad.status, bad.attempt, bad.result) == ("failed", 1, None)
    assert (bad.error["code"], bad.error["retryable"]) == ("unserializable_result", False)


async def test_batch_return_leaves_a_task_whose_cancel_came_in_canceled(backend) -> None:
    q = backend.client()
    w = make(backend)

    @w.task(batch=4)
    async def items(contexts):
        for c in contexts:
            if c.payload["n"] == "stop":
                await q.cancel(c.task_id)  # requested while it runs: the completion honours it
        return {c.task_id: "done" for c in contexts}

    tasks = {n: await q.submit("items", {"n": n}) for n in ("stop", "go", "also")}
    async with w.background():
        done = {n: await finish(q, t.id) for n, t in tasks.items()}
    assert {n: (t.status, t.result) for n, t in done.items()} == {
        "stop": ("canceled", None),
        "go": ("succeeded", "done"),
        "also": ("succeeded", "done"),
    }


def _hand_over(backend, task_id: str) -> None:
    """Another worker holds ``task_id`` now (its row changed behind this one's back)."""
    sql = "update cairnq_tasks set worker_id = 'someone-else' where id = {}"
    if backend.dialect == "sqlite":
        with contextlib.closing(sqlite3.connect(backend.target, timeout=5)) as conn:
            conn.execute(sql.format("?"), (task_id,))
            conn.commit()
    else:
        import psycopg

        with psycopg.connect(backend.target, autocommit=True) as conn:
            conn.execute(sql.format("%s"), (task_id,))


async def test_batch_return_writes_nothing_for_a_task_another_worker_holds(backend) -> None:
    q = backend.client()
    errors: list[BaseException] = []
    w = make(backend, on_error=lambda exc, info: errors.append(exc))
    contexts_seen: dict[str, TaskContext] = {}

    @w.task(batch=4)
    async def items(contexts):
        for c in contexts:
            contexts_seen[c.payload["n"]] = c
            if c.payload["n"] == "taken":
                await asyncio.to_thread(_hand_over, backend, c.task_id)
        return {c.task_id: "mine" for c in contexts}

    tasks = {n: await q.submit("items", {"n": n}) for n in ("taken", "kept", "too")}
    async with w.background():
        kept = await finish(q, tasks["kept"].id)
        too = await finish(q, tasks["too"].id)
        await eventually(lambda: contexts_seen["taken"].lost_lease)
    taken = await q.get(tasks["taken"].id)
    assert (taken.status, taken.worker_id, taken.result) == ("running", "someone-else", None)
    assert [(t.status, t.result) for t in (kept, too)] == [("succeeded", "mine")] * 2
    assert not contexts_seen["kept"].lost_lease and contexts_seen["kept"].settled
    assert errors == []  # a lease found gone is no error
