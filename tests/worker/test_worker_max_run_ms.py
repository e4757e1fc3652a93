"""The worker: max_run_ms."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from worker_kit import envelope, eventually, finish, make, spy_fail

from cairnq import (
    LostLease,
)

# -- 7. max_run_ms -------------------------------------------------------------


async def test_max_run_ms_abandons_async_handler(backend) -> None:
    q = backend.client()
    w = make(backend, max_run_ms=100)
    fails = spy_fail(w.store)
    seen: list[Any] = []

    @w.task
    async def slow(ctx):
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            seen.append((ctx.attempt, ctx.lost_lease, ctx.lease_lost.is_set()))
            try:
                await ctx.progress(0.9)
                seen.append("written")
            except LostLease:
                seen.append("LostLease")
            raise
        return "never"

    task = await q.submit("slow", max_attempts=2)
    started = time.monotonic()
    async with w.background():
        done = await finish(q, task.id)
        await eventually(lambda: len(seen) == 4, timeout=2)
    elapsed = time.monotonic() - started
    expected = envelope(
        "HandlerTimeout",
        "handler_timeout",
        "handler for 'slow' exceeded max_run_ms=100ms; the attempt was abandoned",
        True,
    )
    assert [(kw["retryable"], row.status, row.attempt) for kw, row in fails] == [
        (True, "queued", 1),
        (True, "failed", 2),
    ]
    assert fails[0][1].error == expected
    assert fails[0][0]["error"] == expected
    assert (done.status, done.attempt, done.result) == ("failed", 2, None)
    assert done.error == expected
    assert seen == [(1, True, True), "LostLease", (2, True, True), "LostLease"]
    assert elapsed < 3


async def test_max_run_ms_abandons_sync_handler(backend) -> None:
    q = backend.client()
    w = make(backend, max_run_ms=100)
    finished: list[str] = []

    @w.task
    def sleepy(ctx):
        time.sleep(0.4)
        finished.append("thread done")
        return "late"

    task = await q.submit("sleepy", max_attempts=1)
    async with w.background():
        done = await finish(q, task.id)
        assert finished == []  # failed while the thread was still sleeping
        await eventually(lambda: finished, timeout=3)
        await asyncio.sleep(0.05)
    assert done.status == "failed"
    assert done.error == envelope(
        "HandlerTimeout",
        "handler_timeout",
        "handler for 'sleepy' exceeded max_run_ms=100ms; the attempt was abandoned",
        True,
    )
    row = await q.get(task.id)
    assert (row.status, row.result) == ("failed", None)


async def test_max_run_ms_bounds_a_whole_batch(backend) -> None:
    q = backend.client()
    w = make(backend, max_run_ms=100)

    @w.task(batch=4)
    async def slow_batch(contexts):
        await contexts[0].succeed("first")
        await asyncio.sleep(5)

    tasks = [await q.submit("slow_batch", {"i": i}, max_attempts=1) for i in range(3)]
    async with w.background():
        done = [await finish(q, t.id) for t in tasks]
    statuses = sorted(t.status for t in done)
    assert statuses == ["failed", "failed", "succeeded"]
    for t in done:
        if t.status == "failed":
            assert t.error["code"] == "handler_timeout" and t.error["retryable"] is True
        else:
            assert t.result == "first"
