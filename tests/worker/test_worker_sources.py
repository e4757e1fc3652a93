"""The worker: sources and resources."""

from __future__ import annotations

import asyncio

from worker_kit import Gauge, envelope, finish, make, spy_draws

# -- 9. sources and resources -------------------------------------------------------------


async def test_resource_capacity_one_serialises_calls(backend) -> None:
    q = backend.client()
    w = make(backend, concurrency=8, resources={"gpu": 1})
    gpu = Gauge()
    cpu = Gauge()

    @w.task("g", resource="gpu")
    async def g(ctx):
        with gpu:
            await asyncio.sleep(0.03)

    @w.task
    async def c(ctx):
        with cpu:
            await asyncio.sleep(0.08)

    tasks = [await q.submit("g") for _ in range(6)] + [await q.submit("c") for _ in range(6)]
    async with w.background():
        done = [await finish(q, t.id) for t in tasks]
    assert all(t.status == "succeeded" for t in done)
    assert gpu.max == 1
    assert cpu.max >= 2


async def test_resource_capacity_two_with_batches(backend) -> None:
    q = backend.client()
    w = make(backend, concurrency=8, resources={"pool": 2})
    gauge = Gauge()
    sizes: list[int] = []

    @w.task("b", batch=3, resource="pool")
    async def b(contexts):
        with gauge:
            sizes.append(len(contexts))
            await asyncio.sleep(0.05)

    tasks = [await q.submit("b", {"i": i}) for i in range(12)]
    async with w.background():
        done = [await finish(q, t.id) for t in tasks]
    assert all(t.status == "succeeded" for t in done)
    assert gauge.max == 2
    assert sum(sizes) == 12 and all(1 <= s <= 3 for s in sizes)


async def test_sources_unbatched_names_share_one_draw(backend) -> None:
    q = backend.client()
    w = make(backend, concurrency=4, resources={"gpu": 1})
    draws = spy_draws(w.store)

    async def h(ctx):
        return ctx.name

    async def hb(contexts):
        return {c.task_id: c.name for c in contexts}

    w.register("a", h)
    w.register("b", h)
    w.register("c", hb, batch=2)
    w.register("g", h, resource="gpu")
    tasks = [await q.submit(n) for n in ("a", "b", "c", "c", "c", "g", "g", "a", "b")]
    async with w.background():
        done = [await finish(q, t.id) for t in tasks]
    assert [(t.status, t.result) for t in done] == [("succeeded", t.name) for t in tasks]
    names_seen = {names for names, _ in draws}
    assert names_seen <= {("a", "b"), ("c",), ("g",)}
    assert ("a", "b") in names_seen
    for names, limit in draws:
        if names == ("c",):
            assert limit % 2 == 0 and 2 <= limit <= 8
        if names == ("g",):
            assert limit == 1
        if names == ("a", "b"):
            assert 1 <= limit <= 4


async def test_two_workers_with_different_handlers_share_a_queue(backend) -> None:
    q = backend.client()
    wa = make(backend, concurrency=4)
    wb = make(backend, concurrency=4)

    @wa.task
    async def a(ctx):
        return {"by": "A"}

    @wb.task
    async def b(ctx):
        return {"by": "B"}

    tasks = []
    for _ in range(50):
        tasks.append(await q.submit("a"))
        tasks.append(await q.submit("b"))
    async with wa.background(), wb.background():
        done = [await finish(q, t.id, timeout_ms=20_000) for t in tasks]
    for t in done:
        expected = {"a": ("A", wa.worker_id), "b": ("B", wb.worker_id)}[t.name]
        assert (t.status, t.attempt, t.result, t.worker_id) == (
            "succeeded",
            1,
            {"by": expected[0]},
            expected[1],
        )


async def test_claimed_name_without_handler_fails_with_no_handler(backend) -> None:
    q = backend.client()
    w = make(backend)
    ran: list[str] = []

    @w.task
    async def gone(ctx):
        ran.append("gone")

    @w.task
    async def kept(ctx):
        return "kept"

    # Simulate an unregistration mid-run: the name is still drawn, its handler is gone.
    del w._registry.by_name["gone"]
    task = await q.submit("gone", max_attempts=3)
    other = await q.submit("kept")
    async with w.background():
        done = await finish(q, task.id)
        done_other = await finish(q, other.id)
    assert ran == []
    assert (done.status, done.attempt) == ("failed", 1)
    assert done.error == envelope(
        "NoHandler", "no_handler", "no handler registered for 'gone'", False
    )
    assert (done_other.status, done_other.result) == ("succeeded", "kept")


async def test_worker_only_claims_its_queues_and_names(backend) -> None:
    q = backend.client()
    w = make(backend, queues=("q1",))

    @w.task
    async def job(ctx):
        return ctx.queue

    mine = await q.submit("job", queue="q1")
    elsewhere = await q.submit("job", queue="q2")
    unknown = await q.submit("unknown", queue="q1")
    async with w.background():
        done = await finish(q, mine.id)
        await asyncio.sleep(0.15)
    assert (done.status, done.result) == ("succeeded", "q1")
    assert (await q.get(elsewhere.id)).status == "queued"
    assert (await q.get(unknown.id)).status == "queued"
