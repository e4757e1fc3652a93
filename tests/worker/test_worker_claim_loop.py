"""The worker: the claim loop after a short claim."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time

import pytest

from worker_kit import eventually, make

# -- the claim loop after a short claim ------------------------------------------------------------


async def test_an_empty_source_does_not_slow_a_busy_one(backend) -> None:
    """A second source (here a batch handler) with nothing queued comes back
    short on every claim; the loop must keep claiming for the source that has
    work rather than sleep until the poll interval."""
    q = backend.client()
    for i in range(60):
        await q.submit("a", {"i": i})
    w = make(backend, concurrency=4, poll_interval_ms=2_000)
    done = 0

    @w.task("a")
    async def a(ctx, payload):
        nonlocal done
        await asyncio.sleep(0.002)
        done += 1

    @w.task("b", batch=10)
    async def b(ctxs):
        return None

    started = time.monotonic()
    async with w.background():
        await eventually(lambda: done == 60, timeout=10)
    assert time.monotonic() - started < 1.5  # one poll interval per claim would take minutes


async def test_claim_batch_ramps_up_at_once_beside_an_empty_source(backend) -> None:
    q = backend.client()
    for i in range(8):
        await q.submit("a", {"i": i})
    w = make(backend, concurrency=8, poll_interval_ms=2_000, claim_batch=1)
    started: list[float] = []
    release = asyncio.Event()
    t0 = time.monotonic()

    @w.task("a")
    async def a(ctx, payload):
        started.append(time.monotonic() - t0)
        await release.wait()

    @w.task("b", batch=10)
    async def b(ctxs):
        return None

    async with w.background():
        await eventually(lambda: len(started) == 8, timeout=10)
        release.set()
    assert started[-1] < 1.0  # one claim per poll interval would take 14 s


async def test_a_follow_up_submitted_by_a_handler_is_claimed_at_once(backend) -> None:
    """A handler submits the next task of a chain and returns: the claim loop,
    asleep since its claim came back short, must wake for that submit (its
    own store's commit) rather than wait out its poll interval."""
    q = backend.client()
    w = make(backend, concurrency=4, poll_interval_ms=5_000)
    links = 30
    done = asyncio.Event()

    @w.task("link")
    async def link(ctx, payload):
        if payload["i"] + 1 < links:
            await ctx.submit("link", {"i": payload["i"] + 1})
        else:
            done.set()

    await q.submit("link", {"i": 0})
    started = time.monotonic()
    async with w.background():
        await asyncio.wait_for(done.wait(), 30)
    # One poll interval missed would take 5 s; a chain told in time, milliseconds a link.
    assert time.monotonic() - started < 2.5


async def test_what_a_short_claim_returns_at_once_is_written_before_its_loop_sleeps(
    sqlite_backend,
) -> None:
    """SQLite holds a worker's completions back for its next claim to carry.
    After a claim that came back short no claim is coming: the completion of
    a call that returned at once is written first, then the loop goes to
    sleep (whose first step, run first, would hold that write back)."""
    q = sqlite_backend.client()
    task = await q.submit("quick")
    store = sqlite_backend.store()
    seen_at_sleep: list[str] = []
    own_wait = store._wait_for_change  # the claim loop's sleep (claim_wake stays its own)

    async def wait_for_change(timeout_s, kind=None):
        # The task's row as another connection sees it when the loop sleeps.
        with contextlib.closing(sqlite3.connect(sqlite_backend.target)) as conn:
            row = conn.execute("select status from cairnq_tasks where id = ?", (task.id,)).fetchone()
        (status,) = row
        seen_at_sleep.append(status)
        return await own_wait(timeout_s, kind)

    store._wait_for_change = wait_for_change
    # Concurrency 4 for one task: the claim comes back short.
    w = make(sqlite_backend, store=store, poll_interval_ms=2_000, concurrency=4)

    @w.task
    async def quick(ctx):
        return "ok"

    async with w.background():
        await eventually(lambda: seen_at_sleep, timeout=5)
    assert seen_at_sleep[0] == "succeeded"
    assert (await q.get(task.id)).result == "ok"


class _Statements:
    """A sqlite3 connection that calls ``seen(sql)`` before each statement."""

    def __init__(self, conn, seen) -> None:
        self._conn, self._seen = conn, seen

    def execute(self, sql, *args):
        self._seen(sql)
        return self._conn.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self._conn, name)


async def test_a_short_claims_completion_is_written_in_the_next_loop_turn(sqlite_backend) -> None:
    """A call that returns at once, from a claim that came back short: its
    completion goes in the loop turn after its handler returned, as a write
    of its own, not held for a claim transaction that is not coming and
    flushed turns later. (On Python 3.12+ the handler runs within the
    dispatch, before the loop rests; the rest must begin first.)"""
    loop = asyncio.get_running_loop()
    selector = getattr(loop, "_selector", None)
    if selector is None:
        pytest.skip("counts the loop's polls through its selector")
    polls = 0
    own_select = selector.select

    def select(timeout=None):
        nonlocal polls
        polls += 1
        return own_select(timeout)

    q = sqlite_backend.client()
    w = make(sqlite_backend, poll_interval_ms=5_000, concurrency=4)  # one task: a short claim
    returned_at: list[int] = []
    turns: list[int] = []

    @w.task
    async def quick(ctx):
        returned_at.append(polls)

    def seen(sql: str) -> None:
        if returned_at and sql.lstrip().lower().startswith("update") and "'succeeded'" in sql:
            turns.append(polls - returned_at.pop())

    selector.select = select
    try:
        async with w.background():
            await eventually(lambda: w.store._engine is not None)
            engine = w.store._engine
            engine.conn = _Statements(engine.conn, seen)
            for _ in range(16):
                await q.submit("quick")
                # (nothing of this test's own is due on the loop meanwhile)
                await asyncio.sleep(0.05)
            await eventually(lambda: len(turns) == 16, timeout=5, interval=0.05)
    finally:
        selector.select = own_select
    assert sorted(turns)[len(turns) // 2] <= 1, turns
