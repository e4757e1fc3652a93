"""wait / wait_by_key / call: the SDK-side polling contract (OPERATIONS §3.10)."""

from __future__ import annotations

import asyncio
import time

import pytest

from cairnq import TaskCanceled, TaskFailed, TaskTimeout
from cairnq._wait import next_poll_ms


def test_poll_schedule() -> None:
    seen = [100]
    while seen[-1] < 500:
        seen.append(next_poll_ms(seen[-1], 500))
    assert seen == [100, 150, 225, 337, 500]
    assert next_poll_ms(1, 500) == 2  # always at least +1
    assert next_poll_ms(500, 500) == 500


async def _finish_later(backend, task_id: str, outcome: str, delay: float = 0.15) -> None:
    store = backend.store()
    await asyncio.sleep(delay)
    claimed = await store.claim(queues=["default"], worker_id="w", limit=10)
    assert [t.id for t in claimed] == [task_id]
    if outcome == "succeed":
        await store.complete(task_id=task_id, worker_id="w", result={"answer": 42})
    elif outcome == "fail":
        await store.fail(
            task_id=task_id,
            worker_id="w",
            error={"type": "Boom", "code": "boom", "message": "it broke", "retryable": False, "details": {"x": 1}},
            retryable=False,
        )


async def test_wait_returns_the_terminal_task(backend) -> None:
    q = backend.client()
    task = await q.submit("job")
    finisher = asyncio.ensure_future(_finish_later(backend, task.id, "succeed"))
    done = await q.wait(task.id, timeout_ms=5_000, poll_ms=20)
    await finisher
    assert done.id == task.id and done.status == "succeeded" and done.result == {"answer": 42}


async def test_wait_returns_failed_and_canceled_tasks_too(backend) -> None:
    q = backend.client()
    task = await q.submit("job")
    await q.cancel(task.id)
    assert (await q.wait(task.id, timeout_ms=1_000)).status == "canceled"


async def test_wait_timeout_leaves_the_task_alone(backend) -> None:
    q = backend.client()
    task = await q.submit("job", queue="nobody-listens")
    started = time.monotonic()
    with pytest.raises(TaskTimeout) as err:
        await q.wait(task.id, timeout_ms=300, poll_ms=50)
    assert 0.25 < time.monotonic() - started < 2.0
    assert err.value.task_id == task.id
    assert err.value.task is not None and err.value.task.status == "queued"
    assert err.value.key is None
    assert "300ms" in str(err.value)
    assert (await q.get(task.id)).status == "queued"
    # ...and the wait can be picked up again later.
    await q.cancel(task.id)
    assert (await q.wait(err.value.task_id, timeout_ms=500)).status == "canceled"


async def test_wait_for_an_unknown_task_times_out_with_no_snapshot(backend) -> None:
    q = backend.client()
    with pytest.raises(TaskTimeout) as err:
        await q.wait("task_nope", timeout_ms=100)
    assert err.value.task_id == "task_nope" and err.value.task is None


async def test_wait_by_key_follows_the_key(backend) -> None:
    q = backend.client()
    first = await q.submit("job", key="order-7")
    waiting = asyncio.ensure_future(q.wait_by_key("order-7", timeout_ms=5_000, poll_ms=20))
    await asyncio.sleep(0.1)
    second = await q.submit("job", key="order-7", conflict="replace")  # repoints the key
    assert (await q.get(first.id)).status == "canceled"
    await q.cancel(second.id)
    done = await waiting
    assert done.id == second.id and done.status == "canceled"


async def test_wait_by_key_waits_for_a_key_that_does_not_exist_yet(backend) -> None:
    q = backend.client()
    waiting = asyncio.ensure_future(q.wait_by_key("later", timeout_ms=5_000, poll_ms=20))
    await asyncio.sleep(0.1)
    task = await q.submit("job", key="later")
    await q.cancel(task.id)
    assert (await waiting).id == task.id


async def test_wait_by_key_timeout_names_the_key(backend) -> None:
    q = backend.client()
    with pytest.raises(TaskTimeout) as err:
        await q.wait_by_key("ghost", timeout_ms=100)
    assert err.value.task_id == "ghost" and err.value.key == "ghost" and err.value.task is None
    assert str(err.value).startswith("key ghost did not finish within 100ms")
    task = await q.submit("job", key="real", queue="idle")
    with pytest.raises(TaskTimeout) as err:
        await q.wait_by_key("real", timeout_ms=100)
    assert err.value.task_id == task.id and err.value.key == "real"
    assert err.value.task is not None and err.value.task.id == task.id


async def test_call_returns_the_result(backend) -> None:
    q = backend.client()

    async def finish() -> None:
        store = backend.store()
        for _ in range(200):
            claimed = await store.claim(queues=["default"], worker_id="w")
            if claimed:
                await store.complete(task_id=claimed[0].id, worker_id="w", result=[1, "two"])
                return
            await asyncio.sleep(0.01)

    finisher = asyncio.ensure_future(finish())
    assert await q.call("job", {"x": 1}, timeout_ms=5_000, poll_ms=10) == [1, "two"]
    await finisher


async def _submitted(q, name: str):
    """The one task named ``name``, once the call under test has submitted it."""
    for _ in range(500):
        tasks = await q.list(name=name)
        if tasks:
            [task] = tasks
            return task
        await asyncio.sleep(0.01)
    raise AssertionError(f"{name} was never submitted")


async def test_call_raises_task_failed_with_the_envelope(backend) -> None:
    q = backend.client()

    async def submit_and_fail() -> None:
        task = await _submitted(q, "job")
        await _finish_later(backend, task.id, "fail", delay=0)

    finisher = asyncio.ensure_future(submit_and_fail())
    with pytest.raises(TaskFailed) as err:
        await q.call("job", timeout_ms=5_000, poll_ms=10)
    await finisher
    assert (err.value.type, err.value.code, err.value.message) == ("Boom", "boom", "it broke")
    assert err.value.retryable is False and err.value.details == {"x": 1}
    assert str(err.value) == "it broke"


async def test_call_raises_task_canceled(backend) -> None:
    q = backend.client()

    async def cancel_it() -> None:
        task = await _submitted(q, "job")
        await q.cancel(task.id)

    canceller = asyncio.ensure_future(cancel_it())
    with pytest.raises(TaskCanceled) as err:
        await q.call("job", timeout_ms=5_000, poll_ms=10)
    await canceller
    assert err.value.task_id.startswith("task_")


async def test_call_forwards_submit_keywords_and_times_out(backend) -> None:
    q = backend.client()
    with pytest.raises(TaskTimeout) as err:
        await q.call("job", {"a": 1}, timeout_ms=150, queue="q2", priority=5, key="kk", metadata={"m": 1})
    task = await q.get_by_key("kk")
    assert task is not None and task.id == err.value.task_id
    assert (task.queue, task.priority, task.metadata, task.payload) == ("q2", 5, {"m": 1}, {"a": 1})
    with pytest.raises(TypeError):
        await q.call("job", wait_timeout_ms=10)  # the HEAD spelling is not accepted


async def test_wait_argument_validation(backend) -> None:
    q = backend.client()
    with pytest.raises(ValueError, match="poll_ms and max_poll_ms must be >= 0"):
        await q.wait("task_x", timeout_ms=10, poll_ms=-1)
    with pytest.raises(TypeError):
        await q.wait("task_x", timeout_ms="10")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        await q.wait("task_x", timeout_ms=float("nan"))


async def test_wait_takes_zero_poll_intervals_as_0_15_1_does(backend) -> None:
    """poll_ms=0 (and max_poll_ms=0) mean "as often as you can" to 0.15.1;
    ours waits at least a millisecond between looks, and never spins."""
    q = backend.client()
    task = await q.submit("zero.poll")
    with pytest.raises(TaskTimeout):
        await q.wait(task.id, timeout_ms=50, poll_ms=0, max_poll_ms=0)
    await q.cancel(task.id)
    assert (await q.wait(task.id, timeout_ms=1_000, poll_ms=0)).status == "canceled"


async def test_wait_takes_float_and_negative_timeouts(backend) -> None:
    """A deadline computed in seconds gives floats, and may already be past:
    both mean what they say (0.15.1 accepts them too)."""
    q = backend.client()
    task = await q.submit("nobody.runs.this")
    started = time.monotonic()
    with pytest.raises(TaskTimeout) as err:
        await q.wait(task.id, timeout_ms=-250)
    assert time.monotonic() - started < 0.5 and err.value.task_id == task.id
    with pytest.raises(TaskTimeout):
        await q.wait(task.id, timeout_ms=0.05 * 1000, poll_ms=10.0)
    with pytest.raises(TaskTimeout):
        await q.wait_by_key("no-such-key", timeout_ms=-1)
    await q.cancel(task.id)
    assert (await q.wait(task.id, timeout_ms=float("inf"))).status == "canceled"
