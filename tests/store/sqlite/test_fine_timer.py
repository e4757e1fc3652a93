"""The sub-millisecond timer SQLite waiters use after a file notification:
every future it is given is settled, none before its deadline, in deadline
order, on whichever loop uses it; closing it wakes whoever still sleeps."""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time

import pytest

from cairnq.store.sqlite.fine_timer import FineTimer

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timerfd is Linux's")


def _timer() -> FineTimer:
    timer = FineTimer.open()
    assert timer is not None, "Linux has timerfd: the timer must open"
    return timer


async def test_futures_settle_in_deadline_order_and_never_early() -> None:
    timer = _timer()
    loop = asyncio.get_running_loop()
    try:
        rng = random.Random(7)
        delays = [rng.uniform(0.00005, 0.003) for _ in range(40)]
        assert len(set(delays)) == 40  # distinct deadlines, or the order check below says nothing
        order: list[int] = []
        settled_at: dict[int, float] = {}
        # Each deadline is the clock read inside settle_after plus its delay:
        # between the reads taken just before and just after the call. On a
        # busy host registering 40 futures can take longer than the gaps
        # between their delays, so the order is judged by these, not by the
        # delays alone.
        earliest: list[float] = []
        latest: list[float] = []
        futures = []
        for i, delay in enumerate(delays):
            future: asyncio.Future[None] = loop.create_future()
            future.add_done_callback(lambda _, i=i: (order.append(i), settled_at.setdefault(i, time.monotonic())))
            earliest.append(time.monotonic() + delay)
            assert timer.settle_after(future, delay)
            latest.append(time.monotonic() + delay)
            futures.append(future)
        await asyncio.wait_for(asyncio.gather(*futures), 5)
        assert sorted(order) == list(range(40))
        # each one no earlier than its deadline (less the documented slack)
        for i in range(40):
            assert settled_at[i] >= earliest[i] - 0.00003, (i, earliest[i], settled_at[i])
        # in deadline order, wherever one deadline is surely before another by
        # more than the slack
        for a in range(40):
            for b in range(40):
                if earliest[b] - latest[a] > 0.0001:
                    assert order.index(a) < order.index(b), (a, b)
    finally:
        timer.close()


async def test_a_future_done_otherwise_leaves_the_others_on_time() -> None:
    timer = _timer()
    loop = asyncio.get_running_loop()
    try:
        first: asyncio.Future[None] = loop.create_future()
        second: asyncio.Future[None] = loop.create_future()
        timer.settle_after(first, 0.0005)
        timer.settle_after(second, 0.001)
        first.cancel()  # the waiter woke for another reason and left
        await asyncio.wait_for(second, 5)
        assert first.cancelled() and second.done() and second.result() is None
        third: asyncio.Future[None] = loop.create_future()
        assert timer.settle_after(third, 0.0002)  # re-armed after the heap emptied
        await asyncio.wait_for(third, 5)
    finally:
        timer.close()


async def test_close_wakes_sleepers_and_releases_the_descriptor() -> None:
    timer = _timer()
    loop = asyncio.get_running_loop()
    fd = timer._fd
    sleeper: asyncio.Future[None] = loop.create_future()
    assert timer.settle_after(sleeper, 60)
    timer.close()
    assert sleeper.done() and timer.closed
    with pytest.raises(OSError):
        os.fstat(fd)
    late: asyncio.Future[None] = loop.create_future()
    assert not timer.settle_after(late, 0.001)  # the caller falls back to call_later
    timer.close()  # twice is harmless


def test_one_timer_serves_one_loop_after_another() -> None:
    """A store can outlive its loop (asyncio.run twice): the timer follows."""
    timer = _timer()

    async def once() -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        assert timer.settle_after(future, 0.0003)
        await asyncio.wait_for(future, 5)

    try:
        asyncio.run(once())
        asyncio.run(once())
    finally:
        timer.close()


async def test_wait_commit_with_the_timer_returns_after_its_timeout(tmp_path) -> None:
    """The engine's wait, given the timer, still returns at its timeout when
    nothing commits (and not before it)."""
    import sqlite3

    from cairnq.store.sqlite.engine import SqliteEngine

    conn = sqlite3.connect(str(tmp_path / "t.db"), isolation_level=None, check_same_thread=False)
    engine = SqliteEngine(conn, 1000, turns=False)
    timer = _timer()
    try:
        started = time.monotonic()
        await asyncio.wait_for(engine.wait_commit(0.0004, None, timer), 5)
        assert time.monotonic() - started >= 0.0004 - 0.00003
    finally:
        timer.close()
        await engine.drain_and_close()


def test_a_timer_dropped_unclosed_releases_its_descriptor() -> None:
    import gc

    timer = _timer()
    fd = timer._fd
    del timer
    gc.collect()
    with pytest.raises(OSError):
        os.fstat(fd)


def test_the_file_watch_owns_its_timer(tmp_path) -> None:
    """Made with the watch (where there is a timerfd), closed with it."""
    from cairnq.store.sqlite.file_watch import watch_database

    watch = watch_database(str(tmp_path / "t.db"))
    assert watch is not None and watch.fine is not None
    fine = watch.fine
    watch.close()
    assert fine.closed and watch.fine is None
