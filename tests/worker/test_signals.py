"""``first_of``: the claim loop's wait for news, a stop or a finished call."""

from __future__ import annotations

import asyncio

import pytest

from cairnq.worker.signals import Signal, first_of


async def test_a_signal_set_later_ends_the_wait_and_cancels_the_pending_future() -> None:
    stop, other = Signal(), Signal()
    future = asyncio.ensure_future(asyncio.sleep(60))
    waiting = asyncio.ensure_future(first_of(stop, other, future=future))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    other.set()
    await asyncio.wait_for(waiting, 5)
    assert future.cancelled()
    assert not stop.is_set() and other.is_set()


async def test_the_future_finishing_ends_the_wait_and_keeps_its_result() -> None:
    stop = Signal()
    future = asyncio.ensure_future(asyncio.sleep(0.01, result="news"))
    await asyncio.wait_for(first_of(stop, future=future), 5)
    assert future.result() == "news"
    # The signal holds no waiter once the wait is over.
    assert not stop._waiters


async def test_a_signal_already_set_returns_at_once() -> None:
    stop = Signal()
    stop.set()
    future = asyncio.ensure_future(asyncio.sleep(60))
    await asyncio.wait_for(first_of(stop, future=future), 5)
    assert future.cancelled()
    await asyncio.wait_for(stop.wait(), 5)


async def test_a_cleared_signal_waits_again() -> None:
    done = Signal()
    done.set()
    done.clear()
    waiting = asyncio.ensure_future(done.wait())
    await asyncio.sleep(0.01)
    assert not waiting.done()
    done.set()
    await asyncio.wait_for(waiting, 5)


async def test_cancelling_the_waiter_cancels_the_future_and_leaves_no_waiter() -> None:
    stop = Signal()
    future = asyncio.ensure_future(asyncio.sleep(60))
    waiting = asyncio.ensure_future(first_of(stop, future=future))
    await asyncio.sleep(0.01)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert future.cancelled()
    assert not stop._waiters


async def test_a_failed_future_ends_the_wait_and_its_error_stays_for_the_owner() -> None:
    async def fails() -> None:
        raise RuntimeError("store went away")

    future = asyncio.ensure_future(fails())
    await asyncio.wait_for(first_of(Signal(), future=future), 5)
    assert isinstance(future.exception(), RuntimeError)
