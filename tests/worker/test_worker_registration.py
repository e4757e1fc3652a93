"""The worker: registration."""

from __future__ import annotations

import pytest
from worker_kit import finish, make

from cairnq import (
    TaskDef,
    Worker,
)

# -- 1. registration -------------------------------------------------------------


async def test_registration_forms_return_the_function_and_all_run(backend) -> None:
    q = backend.client()
    w = make(backend, resources={"gpu": 1}, concurrency=4)

    async def bare(ctx):
        return "bare"

    async def dotted(ctx):
        return "dotted"

    async def by_def(ctx):
        return "by_def"

    async def empty_parens(ctx):
        return "empty_parens"

    async def batched(contexts):
        assert isinstance(contexts, list)
        return {c.task_id: "batched" for c in contexts}

    async def gpu_job(ctx):
        return "gpu"

    assert w.task(bare) is bare
    assert w.task("my.dotted.name")(dotted) is dotted
    assert w.task(TaskDef("x"))(by_def) is by_def
    assert w.task()(empty_parens) is empty_parens
    assert w.task(batch=4)(batched) is batched
    assert w.task("n", resource="gpu")(gpu_job) is gpu_job
    lam = lambda ctx: "lam"  # noqa: E731
    assert w.task("lam")(lam) is lam  # a lambda with an explicit name is fine

    ids = {}
    for name in ("bare", "my.dotted.name", "x", "empty_parens", "batched", "n", "lam"):
        ids[name] = (await q.submit(name)).id
    async with w.background():
        done = {name: await finish(q, tid) for name, tid in ids.items()}
    assert {n: (t.status, t.result) for n, t in done.items()} == {
        "bare": ("succeeded", "bare"),
        "my.dotted.name": ("succeeded", "dotted"),
        "x": ("succeeded", "by_def"),
        "empty_parens": ("succeeded", "empty_parens"),
        "batched": ("succeeded", "batched"),
        "n": ("succeeded", "gpu"),
        "lam": ("succeeded", "lam"),
    }


async def test_registration_validation(backend) -> None:
    w = make(backend)
    with pytest.raises(ValueError):
        w.task(lambda ctx: 1)
    with pytest.raises(ValueError):
        w.task()(lambda ctx: 1)

    async def h(ctx):
        return 1

    with pytest.raises(ValueError):
        w.register("b0", h, batch=0)
    with pytest.raises(ValueError):
        w.task(batch=0)(h)

    with pytest.raises(ValueError) as err:
        w.register("r", h, resource="gpu")
    assert "none" in str(err.value)

    w2 = make(backend, resources={"gpu": 1, "disk": 2})
    with pytest.raises(ValueError) as err:
        w2.register("r", h, resource="tpu")
    assert "gpu" in str(err.value) and "disk" in str(err.value)
    with pytest.raises(ValueError):
        w2.task("r", resource="tpu")(h)

    store = backend.store()
    with pytest.raises(ValueError):
        Worker(store, ["default"], max_run_ms=0)
    with pytest.raises(ValueError):
        Worker(store, ["default"], max_run_ms=-5)
    with pytest.raises(ValueError):
        Worker(store, ["default"], resources={"gpu": 0})
    # max_run_ms is validated first
    with pytest.raises(ValueError) as err:
        Worker(store, ["default"], max_run_ms=0, resources={"gpu": 0})
    assert "max_run_ms" in str(err.value)


async def test_reregistering_replaces_the_handler(backend) -> None:
    q = backend.client()
    w = make(backend)

    async def first(ctx):
        return "first"

    async def second(ctx):
        return "second"

    w.register("r", first)
    w.register("r", second)
    task = await q.submit("r")
    async with w.background():
        done = await finish(q, task.id)
    assert (done.status, done.result) == ("succeeded", "second")


async def test_register_while_running(backend) -> None:
    q = backend.client()
    w = make(backend)

    @w.task
    async def early(ctx):
        return "early"

    late_task = await q.submit("late")
    async with w.background():
        done_early = await finish(q, (await q.submit("early")).id)
        assert done_early.status == "succeeded"

        async def late(ctx):
            return "late"

        w.register("late", late)
        done = await finish(q, late_task.id)
    assert (done.status, done.result) == ("succeeded", "late")
