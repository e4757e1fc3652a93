"""The worker: additions."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from worker_kit import Gauge, eventually, finish, make, spy_draws

from cairnq import (
    TaskContext,
)

# -- 11. additions -------------------------------------------------------------


async def test_max_in_flight_bytes_stops_claiming(backend) -> None:
    q = backend.client()
    w = make(backend, concurrency=8, max_in_flight_bytes=1_500)
    gauge = Gauge()
    started = {i: asyncio.Event() for i in range(3)}
    release = asyncio.Event()

    @w.task
    async def big(ctx, payload):
        with gauge:
            started[payload["i"]].set()
            await release.wait()

    blob = "x" * 990
    async with w.background():
        t0 = await q.submit("big", {"i": 0, "data": blob})
        await asyncio.wait_for(started[0].wait(), 5)
        t1 = await q.submit("big", {"i": 1, "data": blob})
        await asyncio.wait_for(started[1].wait(), 5)  # 1000 bytes < 1500: still claiming
        t2 = await q.submit("big", {"i": 2, "data": blob})
        await asyncio.sleep(0.3)  # 2000 bytes >= 1500: not claiming
        assert not started[2].is_set()
        assert (await q.get(t2.id)).status == "queued"
        release.set()
        done = [await finish(q, t.id, timeout_ms=3_000) for t in (t0, t1, t2)]
    assert all(t.status == "succeeded" for t in done)
    assert gauge.max == 2


async def test_max_in_flight_bytes_with_presubmitted_tasks(backend) -> None:
    q = backend.client()
    w = make(backend, concurrency=8, max_in_flight_bytes=1_500, claim_batch=1)
    gauge = Gauge()

    @w.task
    async def big(ctx, payload):
        with gauge:
            await asyncio.sleep(0.15)

    blob = "x" * 990
    tasks = [await q.submit("big", {"i": i, "data": blob}) for i in range(3)]
    async with w.background():
        done = [await finish(q, t.id, timeout_ms=3_000) for t in tasks]
    assert all(t.status == "succeeded" for t in done)
    assert gauge.max == 2


async def test_claim_batch_caps_calls_per_draw(backend) -> None:
    q = backend.client()
    w = make(backend, concurrency=8, claim_batch=2)
    draws = spy_draws(w.store)

    @w.task
    async def u(ctx):
        await asyncio.sleep(0.02)

    @w.task(batch=4)
    async def b4(contexts):
        await asyncio.sleep(0.02)

    tasks = [await q.submit("u") for _ in range(6)] + [await q.submit("b4") for _ in range(8)]
    async with w.background():
        done = [await finish(q, t.id) for t in tasks]
    assert all(t.status == "succeeded" for t in done)
    u_limits = [limit for names, limit in draws if names == ("u",)]
    b_limits = [limit for names, limit in draws if names == ("b4",)]
    assert u_limits and max(u_limits) == 2 and all(1 <= x <= 2 for x in u_limits)
    # max(1, claim_batch // batch) = 1 call of 4 per poll
    assert b_limits and all(x == 4 for x in b_limits)


async def test_claim_batch_larger_than_batch(backend) -> None:
    q = backend.client()
    w = make(backend, concurrency=8, claim_batch=10)
    draws = spy_draws(w.store)

    @w.task(batch=4)
    async def b4(contexts):
        return None

    tasks = [await q.submit("b4") for _ in range(8)]
    async with w.background():
        done = [await finish(q, t.id) for t in tasks]
    assert all(t.status == "succeeded" for t in done)
    assert draws[0] == (("b4",), 8)  # max(1, 10 // 4) = 2 calls of 4
    assert all(limit <= 8 for _, limit in draws)


async def test_per_name_concurrency_cap(backend) -> None:
    q = backend.client()
    w = make(backend, concurrency=8)
    capped = Gauge()
    free = Gauge()

    @w.task("capped", concurrency=2)
    async def capped_h(ctx):
        with capped:
            await asyncio.sleep(0.05)

    @w.task
    async def free_h(ctx):
        with free:
            await asyncio.sleep(0.08)

    with pytest.raises(ValueError):
        w.register("bad", capped_h, concurrency=0)

    tasks = [await q.submit("capped") for _ in range(8)] + [
        await q.submit("free_h") for _ in range(4)
    ]
    async with w.background():
        done = [await finish(q, t.id) for t in tasks]
    assert all(t.status == "succeeded" for t in done)
    assert capped.max == 2
    assert free.max >= 2


async def test_heartbeat_interval_keeps_short_lease_alive(backend) -> None:
    q = backend.client()
    w = make(backend, lease_ms=200, heartbeat_interval_ms=50, concurrency=2)
    attempts: list[int] = []

    @w.task(batch=2)
    async def long(contexts):
        attempts.extend(c.attempt for c in contexts)
        await asyncio.sleep(0.6)  # three leases long; the worker's beats renew all
        return {c.task_id: "kept" for c in contexts}

    tasks = [await q.submit("long") for _ in range(2)]
    async with w.background():
        done = [await finish(q, t.id) for t in tasks]
    assert attempts == [1, 1]
    assert [(t.status, t.result, t.attempt) for t in done] == [("succeeded", "kept", 1)] * 2


async def test_heartbeat_reply_about_an_ended_attempt_spares_the_next_one(backend) -> None:
    """A beat sent while attempt 1 was live, answered after it failed and the
    same worker claimed attempt 2: the missing id is attempt 1's news, not a
    lost lease for attempt 2 (whose outcome would otherwise be discarded)."""
    from cairnq.context import TaskContext
    from cairnq.worker.heartbeat import Heartbeats
    from cairnq.worker.store_port import StorePort

    store = backend.store()
    worker_id = "worker_01HEARTBEATRACE00000000000"
    await store.submit(name="race", queue="hb")
    (first,) = await store.claim(queues=["hb"], worker_id=worker_id)
    ctx1 = TaskContext(store, first, worker_id, 30_000)
    errors: list[BaseException] = []
    beats = Heartbeats(
        StorePort(store, worker_id, 30_000), 10_000, lambda exc, info: errors.append(exc)
    )
    beats.hold([ctx1])
    # Attempt 1 fails (retryably, due at once); its release has not run yet.
    await store.fail(task_id=first.id, worker_id=worker_id, error={"message": "boom"}, delay_ms=0)
    contexts: list[TaskContext] = []
    original = store._heartbeat_batch

    async def beat_then_reclaim(*args: Any, **kwargs: Any) -> dict[str, bool]:
        reply = await original(*args, **kwargs)  # sent while attempt 1 was held: it is missing
        (second,) = await store.claim(queues=["hb"], worker_id=worker_id)
        contexts.append(TaskContext(store, second, worker_id, 30_000))
        beats.hold(contexts)  # attempt 2, held before the reply is read
        beats.release(ctx1)  # attempt 1's late release must not drop attempt 2
        return reply

    store._heartbeat_batch = beat_then_reclaim
    await beats.renew_now()
    store._heartbeat_batch = original
    (ctx2,) = contexts
    assert ctx2.attempt == 2 and not ctx2.lost_lease and not errors
    assert len(beats) == 1  # attempt 2 is still held and beaten
    await beats.renew_now()
    assert not ctx2.lost_lease
    done = await store.complete(task_id=ctx2.task_id, worker_id=worker_id, result={"ok": True})
    assert done.status == "succeeded" and done.attempt == 2
    await beats.stop()


async def test_distinct_results_of_one_poll_settle_in_one_statement(backend) -> None:
    """Handlers finishing together with different results: one complete_each,
    each task with its own result; all-equal results: one complete_many."""
    q = backend.client()
    tasks = [await q.submit("square", {"n": n}) for n in range(16)]
    tasks += [await q.submit("nothing", {"n": n}) for n in range(16)]
    w = make(backend, concurrency=32)
    calls: dict[str, list[int]] = {"_complete_each_json": [], "_complete_many_json": []}
    for name, seen in calls.items():
        original = getattr(w.store, name)

        def counting(ids, *args, _original=original, _seen=seen, **kwargs):
            _seen.append(len(ids))
            return _original(ids, *args, **kwargs)

        setattr(w.store, name, counting)
    release = asyncio.Event()

    @w.task
    async def square(ctx, payload):
        await release.wait()  # all 16 return in the same turn of the loop
        return {"square": payload["n"] ** 2}

    @w.task
    async def nothing(ctx, payload):
        await release.wait()
        return None

    async with w.background():
        await eventually(lambda: w.load().calls_in_flight == 32)
        release.set()
        done = [await finish(q, t.id) for t in tasks]
    assert [t.result for t in done[:16]] == [{"square": n * n} for n in range(16)]
    assert all(t.status == "succeeded" and t.result is None for t in done[16:])
    assert sum(calls["_complete_each_json"]) + sum(calls["_complete_many_json"]) == 32
    assert len(calls["_complete_each_json"]) + len(calls["_complete_many_json"]) <= 2


def test_the_workers_contexts_are_built_as_the_constructor_builds_them() -> None:
    """``new_contexts`` is the worker's way round TaskContext's keyword call;
    it must leave every context exactly as the constructor does."""
    from cairnq.context import TaskContext, new_contexts
    from cairnq.models import Task

    tasks = [
        Task(id="task_a", name="n", queue="q", status="running", payload={"i": 1}, metadata={}),
        Task(id="task_b", name="n", queue="q", status="running", payload=None, metadata={},
             cancel_requested_at_ms=5),
    ]  # fmt: skip
    store = object()
    made = new_contexts(store, tasks, "worker_x", 30_000, 250, 9_000)  # type: ignore[arg-type]
    built = [
        TaskContext(store, t, "worker_x", 30_000, retry_backoff_ms=250, retry_backoff_max_ms=9_000)  # type: ignore[arg-type]
        for t in tasks
    ]
    assert [type(c) for c in made] == [TaskContext, TaskContext]
    assert [vars(c) for c in made] == [vars(c) for c in built]
