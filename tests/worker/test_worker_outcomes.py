"""The worker: outcomes (single task)."""

from __future__ import annotations

import asyncio

from worker_kit import envelope, finish, make, spy_fail

from cairnq import (
    LostLease,
    TaskError,
)

# -- 3. outcomes (single task) -------------------------------------------------------------


async def test_return_value_succeeds(backend) -> None:
    q = backend.client()
    w = make(backend)

    @w.task
    async def ok(ctx, payload):
        return {"echo": payload, "list": [1, 2]}

    task = await q.submit("ok", {"a": 1})
    async with w.background():
        done = await finish(q, task.id)
    assert done.status == "succeeded"
    assert done.result == {"echo": {"a": 1}, "list": [1, 2]}
    assert done.progress == 1.0
    assert done.error is None
    assert done.attempt == 1
    assert done.lease_until_ms is None
    assert done.completed_at_ms is not None


async def test_ordinary_exception_retries_then_fails(backend) -> None:
    q = backend.client()
    w = make(backend)
    attempts: list[int] = []

    @w.task
    async def boom(ctx):
        attempts.append(ctx.attempt)
        raise ValueError("x")

    task = await q.submit("boom", max_attempts=3)
    async with w.background():
        done = await finish(q, task.id)
    assert attempts == [1, 2, 3]
    assert done.status == "failed"
    assert done.attempt == 3
    assert done.error == envelope("ValueError", "handler_error", "x", True)
    if backend.dialect == "sqlite":  # stored as the SDK wrote it (jsonb reorders keys)
        assert list(done.error) == ["type", "code", "message", "retryable", "details"]


async def test_ordinary_exception_requeues_with_envelope(backend) -> None:
    q = backend.client()
    w = make(backend)
    fails = spy_fail(w.store)

    @w.task
    async def boom(ctx):
        raise ValueError("x")

    task = await q.submit("boom", max_attempts=2)
    async with w.background():
        done = await finish(q, task.id)
    assert [(kw["retryable"], row.status, row.attempt) for kw, row in fails] == [
        (True, "queued", 1),
        (True, "failed", 2),
    ]
    first = fails[0][1]
    assert first.error == envelope("ValueError", "handler_error", "x", True)
    assert first.worker_id is None and first.lease_until_ms is None
    assert done.status == "failed"


async def test_task_error_fails_immediately(backend) -> None:
    q = backend.client()
    w = make(backend)
    calls: list[int] = []

    @w.task
    async def nope(ctx):
        calls.append(ctx.attempt)
        raise TaskError("nope", code="c", details={"a": 1})

    task = await q.submit("nope", max_attempts=3)
    async with w.background():
        done = await finish(q, task.id)
    assert calls == [1]
    assert done.status == "failed"
    assert done.attempt == 1
    assert done.error == envelope("TaskError", "c", "nope", False, {"a": 1})


async def test_task_error_custom_type_and_retryable(backend) -> None:
    q = backend.client()
    w = make(backend)
    calls: list[int] = []

    @w.task
    async def flaky(ctx):
        calls.append(ctx.attempt)
        raise TaskError("again", code="busy", retryable=True, type="Busy")

    task = await q.submit("flaky", max_attempts=3)
    async with w.background():
        done = await finish(q, task.id)
    assert calls == [1, 2, 3]
    assert done.status == "failed"
    assert done.error == envelope("Busy", "busy", "again", True)


async def test_unserializable_result_fails_permanently(backend) -> None:
    q = backend.client()
    w = make(backend)
    calls: list[int] = []

    @w.task
    async def bad(ctx):
        calls.append(ctx.attempt)
        return {1, 2}

    task = await q.submit("bad", max_attempts=3)
    async with w.background():
        done = await finish(q, task.id)
    assert calls == [1]
    assert done.status == "failed"
    assert done.result is None
    err = dict(done.error)
    message = err.pop("message")
    assert err == {
        "type": "SerializationError",
        "code": "unserializable_result",
        "retryable": False,
        "details": {},
    }
    assert message.startswith("handler result is not JSON-serializable: ")


async def test_nan_result_is_unserializable(backend) -> None:
    q = backend.client()
    w = make(backend)

    @w.task
    async def nan(ctx):
        return {"x": float("nan")}

    task = await q.submit("nan")
    async with w.background():
        done = await finish(q, task.id)
    assert done.status == "failed" and done.error["code"] == "unserializable_result"


async def test_lost_lease_raised_writes_nothing(backend) -> None:
    q = backend.client()
    w = make(backend, lease_ms=300)
    raised = asyncio.Event()
    attempts: list[int] = []

    @w.task
    async def gives_up(ctx):
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raised.set()
            raise LostLease(ctx.task_id)
        return "second"

    task = await q.submit("gives_up", max_attempts=3)
    async with w.background():
        await asyncio.wait_for(raised.wait(), 5)
        await asyncio.sleep(0.05)
        row = await q.get(task.id)
        assert row.status == "running"
        assert row.worker_id == w.worker_id
        assert row.error is None and row.result is None and row.completed_at_ms is None
        done = await finish(q, task.id)
    assert attempts == [1, 2]
    assert (done.status, done.result, done.attempt, done.error) == ("succeeded", "second", 2, None)
