"""Backpressure (max_queue_depth) and retention (the client-side sweeper)."""

from __future__ import annotations

import asyncio
import time

import pytest

from cairnq import CairnQ, QueueFull, Retention, RetentionRule
from cairnq.backpressure import MAX_GRANT, QueueDepthGate
from cairnq.retention import RetentionSweeper


async def test_submits_block_at_the_limit_then_fail_with_queue_full(backend) -> None:
    q = backend.client(max_queue_depth=3, max_queue_wait_ms=400)
    for i in range(3):
        await q.submit("n", {"i": i})
    started = time.monotonic()
    with pytest.raises(QueueFull) as err:
        await q.submit("n", {"i": 3})
    waited = time.monotonic() - started
    assert 0.35 < waited < 2.0
    assert (err.value.queue, err.value.max_depth) == ("default", 3)
    assert err.value.waited_ms >= 400
    assert "'default'" in str(err.value)
    assert (await q.stats())["default"]["queued"] == 3  # nothing enqueued


async def test_a_blocked_submit_proceeds_when_room_appears(backend) -> None:
    q = backend.client(max_queue_depth={"default": 2}, max_queue_wait_ms=10_000)
    a = await q.submit("n")
    await q.submit("n")
    blocked = asyncio.ensure_future(q.submit("n"))
    await asyncio.sleep(0.1)
    assert not blocked.done()
    await q.cancel(a.id)  # queued -> canceled frees one slot
    task = await asyncio.wait_for(blocked, 5)
    assert task.status == "queued"


async def test_only_listed_queues_are_gated(backend) -> None:
    q = backend.client(max_queue_depth={"small": 1}, max_queue_wait_ms=100)
    await q.submit("n", queue="small")
    for _ in range(5):
        await q.submit("n", queue="other")
    with pytest.raises(QueueFull):
        await q.submit("n", queue="small")


async def test_running_tasks_do_not_count_but_delayed_ones_do(backend) -> None:
    q = backend.client(max_queue_depth=2, max_queue_wait_ms=100)
    await q.submit("n", delay_ms=60_000)
    await q.submit("n")
    store = q.store
    assert len(await store.claim(queues=["default"], worker_id="w")) == 1
    await q.submit("n")  # the claimed one left the queue
    with pytest.raises(QueueFull):
        await q.submit("n")


def test_limits_are_validated(tmp_path) -> None:
    for bad in (0, -1, True, 1.5, {"q": 0}, {"q": "3"}):
        with pytest.raises(ValueError):
            CairnQ.sqlite(str(tmp_path / "x.db"), max_queue_depth=bad)


async def test_concurrent_submits_share_one_probe(sqlite_backend) -> None:
    q = sqlite_backend.client()
    gate = QueueDepthGate(q.store, 1_000)
    probes = 0
    original = q.store.queue_depth

    async def counting(queue: str, max_depth: int) -> int:
        nonlocal probes
        probes += 1
        return await original(queue, max_depth)

    q.store.queue_depth = counting  # type: ignore[method-assign]
    await asyncio.gather(*(gate.acquire("default") for _ in range(MAX_GRANT)))
    assert probes == 1  # one probe granted MAX_GRANT units to everyone waiting on it


async def test_ctx_submit_goes_through_the_gate(backend) -> None:
    store = backend.store()
    q = CairnQ(store, max_queue_depth=1, max_queue_wait_ms=100)
    parent = await q.submit("parent", queue="work")
    await q.submit("child")  # fills "default"
    [claimed] = await store.claim(queues=["work"], worker_id="w")
    from cairnq import TaskContext

    ctx = TaskContext(store, claimed, "w", 30_000)
    with pytest.raises(QueueFull):
        await ctx.submit("child")
    assert claimed.id == parent.id


# -- retention -------------------------------------------------------------------


def test_retention_rules() -> None:
    assert Retention(1000).rules() == [RetentionRule(1000)]
    assert Retention({"succeeded": 10, "failed": 20}).rules() == [
        RetentionRule(10, status="succeeded"),
        RetentionRule(20, status="failed"),
    ]
    rules = [RetentionRule(5, queue="q"), RetentionRule(6, name="n")]
    assert Retention(rules).rules() == rules
    for bad in (
        dict(older_than_ms=-1),
        dict(older_than_ms={}),
        dict(older_than_ms=[]),
        dict(older_than_ms=1, interval_ms=0),
        dict(older_than_ms=1, limit=0),
        dict(older_than_ms={"queued": 5}),
        dict(older_than_ms=[RetentionRule(1, status="running")]),
    ):
        with pytest.raises(ValueError):
            Retention(**bad)  # type: ignore[arg-type]


async def _finished_tasks(q: CairnQ, n: int, **submit) -> list[str]:
    ids = []
    for _ in range(n):
        task = await q.submit("n", **submit)
        await q.cancel(task.id)
        ids.append(task.id)
    await _next_millisecond()
    return ids


async def _next_millisecond() -> None:
    """Purge's cutoff is strict (completed_at_ms < now - older_than_ms): a task
    finished in this very millisecond is not yet older than 0 ms."""
    await asyncio.sleep(0.002)


async def test_sweep_purges_in_batches_until_short(backend) -> None:
    q = backend.client()
    await _finished_tasks(q, 7)
    keep = await q.submit("n")  # queued: never swept
    calls = []
    original = q.store.purge

    async def counting(**kw):
        ids = await original(**kw)
        calls.append(len(ids))
        return ids

    q.store.purge = counting  # type: ignore[method-assign]
    sweeper = RetentionSweeper(q.store, Retention(0, limit=3))
    assert await sweeper.sweep() == 7
    assert calls == [3, 3, 1]
    assert [t.id for t in await q.list()] == [keep.id]


async def test_per_status_retention_keeps_unlisted_statuses(backend) -> None:
    q = backend.client()
    await _finished_tasks(q, 2)  # canceled
    store = q.store
    t = await q.submit("n")
    [c] = await store.claim(queues=["default"], worker_id="w")
    await store.complete(task_id=c.id, worker_id="w", result=None)
    await _next_millisecond()
    sweeper = RetentionSweeper(store, Retention({"succeeded": 0}))
    assert await sweeper.sweep() == 1
    assert {x.status for x in await q.list()} == {"canceled"}
    assert await q.get(t.id) is None


async def test_sweeper_runs_after_an_interval_and_stops_with_the_client(backend) -> None:
    errors: list[BaseException] = []
    q = backend.client(retention=Retention(0, interval_ms=100, on_error=errors.append))
    await _finished_tasks(q, 3)
    await asyncio.sleep(0.05)
    assert len(await q.list()) == 3  # first sweep only after one interval
    await asyncio.sleep(0.3)
    assert await q.list() == []
    await q.close()
    await _finished_tasks(q, 2)  # reconnects; the sweeper restarts with the store
    await asyncio.sleep(0.35)
    assert await q.list() == []
    assert errors == []
    await q.close()


async def test_sweep_errors_go_to_on_error_and_the_schedule_continues(backend) -> None:
    errors: list[BaseException] = []
    q = backend.client(retention=Retention(0, interval_ms=50, on_error=errors.append))
    await q.connect()
    original = q.store.purge
    failures = 2

    async def flaky(**kw):
        nonlocal failures
        if failures:
            failures -= 1
            raise RuntimeError("disk on fire")
        return await original(**kw)

    q.store.purge = flaky  # type: ignore[method-assign]
    await _finished_tasks(q, 1)
    for _ in range(100):
        if not await q.list():
            break
        await asyncio.sleep(0.02)
    assert await q.list() == []
    assert [str(e) for e in errors] == ["disk on fire", "disk on fire"]


async def test_int_retention_and_bad_retention_types(tmp_path) -> None:
    q = CairnQ.sqlite(str(tmp_path / "r.db"), retention=86_400_000)
    assert q._sweeper is not None and q._sweeper.retention == Retention(86_400_000)
    with pytest.raises(TypeError):
        CairnQ.sqlite(str(tmp_path / "r.db"), retention="1d")  # type: ignore[arg-type]
