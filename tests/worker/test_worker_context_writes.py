"""The worker: context writes."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from db_clock import latest_ms, now_ms
from worker_kit import envelope, eventually, finish, make

from cairnq import (
    LostLease,
    TaskDef,
    TaskError,
)

# -- 5. context writes -------------------------------------------------------------


async def test_progress_and_message_are_recorded(backend) -> None:
    q = backend.client()
    w = make(backend)
    stage = asyncio.Event()
    go_on = asyncio.Event()
    stage2 = asyncio.Event()
    go_on2 = asyncio.Event()
    returned: dict[str, Any] = {}

    @w.task
    async def work(ctx):
        row = await ctx.progress(0.5, "half")
        returned["first"] = (row.progress, row.message, row.status)
        stage.set()
        await go_on.wait()
        await ctx.progress(None, "still going")
        stage2.set()
        await go_on2.wait()
        return "done"

    task = await q.submit("work")
    async with w.background():
        await asyncio.wait_for(stage.wait(), 5)
        row = await q.get(task.id)
        assert (row.progress, row.message) == (0.5, "half")
        go_on.set()
        await asyncio.wait_for(stage2.wait(), 5)
        row = await q.get(task.id)
        assert (row.progress, row.message) == (0.5, "still going")
        go_on2.set()
        done = await finish(q, task.id)
    assert returned["first"] == (0.5, "half", "running")
    assert (done.status, done.progress, done.message, done.result) == (
        "succeeded",
        1.0,
        "still going",
        "done",
    )


async def test_ctx_heartbeat_extends_the_lease(backend) -> None:
    q = backend.client()
    w = make(backend, lease_ms=1_000, heartbeat_interval_ms=60_000)
    out: dict[str, Any] = {}

    @w.task
    async def beat(ctx):
        out["before"] = (await q.get(ctx.task_id)).lease_until_ms
        await asyncio.sleep(0.05)
        t0 = now_ms()
        row = await ctx.heartbeat()
        t1 = latest_ms()
        out.update(after=row.lease_until_ms, t0=t0, t1=t1, status=row.status, worker=row.worker_id)
        out["stored"] = (await q.get(ctx.task_id)).lease_until_ms

    task = await q.submit("beat")
    async with w.background():
        done = await finish(q, task.id)
    assert done.status == "succeeded"
    slack = 0 if backend.dialect == "sqlite" else 50
    assert out["status"] == "running" and out["worker"] == w.worker_id
    assert out["after"] > out["before"]
    assert out["t0"] + 1_000 - slack <= out["after"] <= out["t1"] + 1_000 + slack
    assert out["stored"] == out["after"]


async def test_canceled_read_without_heartbeat(backend) -> None:
    q = backend.client()
    w = make(backend, lease_ms=30_000, heartbeat_interval_ms=60_000)
    started = asyncio.Event()
    canceled = asyncio.Event()
    seen: list[bool] = []

    @w.task
    async def job(ctx):
        seen.append(await ctx.canceled())
        started.set()
        await canceled.wait()
        seen.append(ctx._cancel_seen)  # nothing observed it yet: no beat, no write
        seen.append(await ctx.canceled())  # reads the row
        seen.append(await ctx.canceled())  # cached
        return "ignored"

    task = await q.submit("job")
    async with w.background():
        await asyncio.wait_for(started.wait(), 5)
        await q.cancel(task.id)
        canceled.set()
        done = await finish(q, task.id)
    assert seen == [False, False, True, True]
    assert (done.status, done.result) == ("canceled", None)


@pytest.mark.parametrize("outcome", ["return", "raise", "task_error", "succeed", "fail"])
async def test_cancel_is_seen_by_the_heartbeat_and_wins(backend, outcome: str) -> None:
    q = backend.client()
    w = make(backend, lease_ms=2_000, heartbeat_interval_ms=50)
    started = asyncio.Event()
    seen: dict[str, Any] = {}

    @w.task
    async def job(ctx):
        started.set()
        deadline = time.monotonic() + 5
        while not ctx._cancel_seen and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        seen["by_heartbeat"] = ctx._cancel_seen
        seen["canceled"] = await ctx.canceled()
        if outcome == "raise":
            raise ValueError("after cancel")
        if outcome == "task_error":
            raise TaskError("after cancel")
        if outcome == "succeed":
            row = await ctx.succeed({"x": 1})
            seen["row"] = row.status
        if outcome == "fail":
            row = await ctx.fail("after cancel", retryable=False)
            seen["row"] = row.status
        return {"result": "dropped"}

    task = await q.submit("job", max_attempts=3)
    async with w.background():
        await asyncio.wait_for(started.wait(), 5)
        await q.cancel(task.id)
        done = await finish(q, task.id)
    assert seen["by_heartbeat"] is True
    assert seen["canceled"] is True
    if outcome in ("succeed", "fail"):
        assert seen["row"] == "canceled"
    assert done.status == "canceled"
    assert done.result is None
    assert done.attempt == 1


async def test_lease_loss_gates_writes_and_discards_the_result(backend) -> None:
    q = backend.client()
    other = backend.store()
    # The beat comes long after the lease expired: somebody else takes over.
    w = make(backend, lease_ms=200, heartbeat_interval_ms=1_000, concurrency=1)
    started = asyncio.Event()
    finished = asyncio.Event()
    seen: dict[str, Any] = {}

    @w.task
    async def job(ctx):
        started.set()
        try:
            try:
                await asyncio.wait_for(ctx.lease_lost.wait(), 5)
            except asyncio.TimeoutError:
                seen["timeout"] = True
                return {"mine": True}
            seen["lost_lease"] = ctx.lost_lease
            ops = {
                "progress": lambda: ctx.progress(0.5, "m"),
                "heartbeat": ctx.heartbeat,
                "succeed": lambda: ctx.succeed("x"),
                "fail": lambda: ctx.fail("x"),
                "submit": lambda: ctx.submit("child"),
            }
            for name, op in ops.items():
                try:
                    await op()
                    seen[name] = "written"
                except LostLease as exc:
                    seen[name] = ("LostLease", exc.task_id)
            return {"mine": True}
        finally:
            finished.set()

    task = await q.submit("job", max_attempts=3)
    async with w.background():
        await asyncio.wait_for(started.wait(), 5)

        async def take_over():
            got = await other.claim(queues=["default"], worker_id="other", lease_ms=30_000)
            return got

        got = await eventually(take_over, timeout=3, interval=0.02)
        assert [t.id for t in got] == [task.id]
        assert got[0].attempt == 2
        await asyncio.wait_for(finished.wait(), 5)
        await asyncio.sleep(0.05)
        row = await q.get(task.id)
    assert "timeout" not in seen
    assert seen["lost_lease"] is True
    for name in ("progress", "heartbeat", "succeed", "fail", "submit"):
        assert seen[name] == ("LostLease", task.id), name
    assert (row.status, row.worker_id, row.attempt) == ("running", "other", 2)
    assert row.result is None and row.progress is None and row.message is None
    assert await q.list(name="child") == []
    await other.complete(task_id=task.id, worker_id="other", result={"other": True})
    final = await q.get(task.id)
    assert (final.status, final.result) == ("succeeded", {"other": True})


async def test_ctx_submit_wires_ids_and_wait_waits(backend) -> None:
    q = backend.client()
    store = backend.store()
    # two parents wait for their children at once: room for both and a child
    w = make(backend, queues=("work", "default"), concurrency=4)
    children: dict[str, Any] = {}

    @w.task
    async def parent(ctx):
        child = await ctx.submit("child", {"x": 2})
        other = await ctx.submit(TaskDef("child"), {"x": 3}, queue="work", priority=5)
        children[ctx.task_id] = {"child": child, "other": other}
        done = await ctx.wait(child.id, timeout_ms=5_000, poll_ms=20)
        return {"child": done.result, "status": done.status}

    @w.task
    async def child(ctx, payload):
        return payload["x"] * 10

    root = await store.submit(name="parent", queue="work", correlation_id="corr-1")
    nested = await store.submit(name="parent", queue="work", root_id="root-x")
    async with w.background():
        done = await finish(q, root.id)
        done_nested = await finish(q, nested.id)
    assert (done.status, done.result) == ("succeeded", {"child": 20, "status": "succeeded"})
    child_task = children[root.id]["child"]
    assert child_task.parent_id == root.id
    assert child_task.root_id == root.id
    assert child_task.correlation_id == "corr-1"
    assert child_task.queue == "default"
    assert child_task.name == "child"
    other = children[root.id]["other"]
    assert (other.queue, other.priority, other.parent_id, other.name) == (
        "work",
        5,
        root.id,
        "child",
    )
    assert done_nested.status == "succeeded"
    assert done_nested.result == {"child": 20, "status": "succeeded"}
    nested_child = children[nested.id]["child"]
    assert nested_child.root_id == "root-x"
    assert nested_child.parent_id == nested.id
    assert nested_child.correlation_id is None


async def test_ctx_after_settling(backend) -> None:
    q = backend.client()
    w = make(backend)
    seen: dict[str, Any] = {}

    @w.task
    async def job(ctx):
        row = await ctx.succeed({"ok": 1})
        seen["row"] = row.status
        seen["settled"] = ctx.settled
        seen["succeed_again"] = await ctx.succeed(2)
        seen["fail_after"] = await ctx.fail("nope")
        for name, op in (("progress", lambda: ctx.progress(0.3)), ("heartbeat", ctx.heartbeat)):
            try:
                await op()
                seen[name] = "written"
            except LostLease:
                seen[name] = "LostLease"
        kid = await ctx.submit("kid", {"n": 1})
        seen["kid"] = (kid.parent_id, kid.status)
        return "ignored"

    task = await q.submit("job")
    async with w.background():
        done = await finish(q, task.id)
    assert seen == {
        "row": "succeeded",
        "settled": True,
        "succeed_again": None,
        "fail_after": None,
        "progress": "LostLease",
        "heartbeat": "LostLease",
        "kid": (task.id, "queued"),
    }
    assert (done.status, done.result) == ("succeeded", {"ok": 1})


async def test_ctx_fail_forms(backend) -> None:
    q = backend.client()
    w = make(backend, concurrency=4)

    @w.task
    async def as_string(ctx):
        await ctx.fail("reason", retryable=False)

    @w.task
    async def as_exception(ctx):
        await ctx.fail(KeyError("k"), retryable=False)

    @w.task
    async def as_task_error(ctx):
        await ctx.fail(TaskError("te", code="tc", details={"d": 1}))

    @w.task
    async def as_dict(ctx):
        await ctx.fail(
            {"type": "Custom", "code": "custom", "message": "m", "retryable": False, "details": {}},
            retryable=False,
        )

    ids = {
        n: (await q.submit(n, max_attempts=1)).id
        for n in ("as_string", "as_exception", "as_task_error", "as_dict")
    }
    async with w.background():
        done = {n: await finish(q, i) for n, i in ids.items()}
    assert all(t.status == "failed" for t in done.values())
    assert done["as_string"].error == envelope("TaskError", "task_error", "reason", False)
    assert done["as_exception"].error == envelope("KeyError", "handler_error", "'k'", False)
    assert done["as_task_error"].error == envelope("TaskError", "tc", "te", False, {"d": 1})
    assert done["as_dict"].error == envelope("Custom", "custom", "m", False)
