"""The worker: retries and backoff."""

from __future__ import annotations

import time

from worker_kit import finish, make, spy_fail

from cairnq import (
    TaskError,
)

# -- 6. retries and backoff -------------------------------------------------------------


async def test_retry_backoff_windows(backend) -> None:
    q = backend.client()
    w = make(backend, retry_backoff_ms=200, retry_backoff_max_ms=1_000)
    fails = spy_fail(w.store)
    starts: list[float] = []

    @w.task
    async def flaky(ctx):
        starts.append(time.monotonic())
        raise RuntimeError("again")

    task = await q.submit("flaky", max_attempts=3)
    async with w.background():
        done = await finish(q, task.id)
    assert done.status == "failed" and done.attempt == 3
    assert [(kw["retryable"], row.status, row.attempt) for kw, row in fails] == [
        (True, "queued", 1),
        (True, "queued", 2),
        (True, "failed", 3),
    ]
    (kw1, row1), (kw2, row2), _ = fails
    assert 100 <= row1.run_at_ms - row1.updated_at_ms < 200
    assert 200 <= row2.run_at_ms - row2.updated_at_ms < 400
    assert row1.run_at_ms - row1.updated_at_ms == kw1["delay_ms"]
    assert row2.run_at_ms - row2.updated_at_ms == kw2["delay_ms"]
    # redelivery honoured the delay
    assert starts[1] - starts[0] >= 0.09
    assert starts[2] - starts[1] >= 0.19


async def test_retry_backoff_is_capped(backend) -> None:
    q = backend.client()
    w = make(backend, retry_backoff_ms=100, retry_backoff_max_ms=150)
    fails = spy_fail(w.store)

    @w.task
    async def flaky(ctx):
        raise RuntimeError("again")

    task = await q.submit("flaky", max_attempts=3)
    async with w.background():
        await finish(q, task.id)
    delays = [kw["delay_ms"] for kw, _ in fails]
    assert [row.status for _, row in fails] == ["queued", "queued", "failed"]
    assert 50 <= delays[0] < 100  # window 100
    assert 75 <= delays[1] < 150  # window min(150, 200) = 150
    assert 75 <= delays[2] < 150  # window min(150, 400) = 150


async def test_zero_backoff_is_immediate_and_max_attempts_respected(backend) -> None:
    q = backend.client()
    w = make(backend, retry_backoff_ms=0)
    fails = spy_fail(w.store)
    calls: list[int] = []

    @w.task
    async def flaky(ctx):
        calls.append(ctx.attempt)
        raise RuntimeError("again")

    task = await q.submit("flaky", max_attempts=4)
    async with w.background():
        done = await finish(q, task.id)
    assert calls == [1, 2, 3, 4]
    assert done.status == "failed" and done.attempt == 4
    assert [kw["delay_ms"] for kw, _ in fails] == [0, 0, 0, 0]
    for _, row in fails[:3]:
        assert row.status == "queued" and row.run_at_ms == row.updated_at_ms


async def test_permanent_failures_use_no_delay(backend) -> None:
    q = backend.client()
    w = make(backend, retry_backoff_ms=5_000)
    fails = spy_fail(w.store)

    @w.task
    async def perm(ctx):
        raise TaskError("no")

    task = await q.submit("perm", max_attempts=3)
    async with w.background():
        done = await finish(q, task.id)
    assert done.status == "failed"
    assert [(kw["delay_ms"], kw["retryable"]) for kw, _ in fails] == [(0, False)]
