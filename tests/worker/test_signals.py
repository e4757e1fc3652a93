"""``first_of`` and ``unless``: the claim loop's wait for news, a stop or a finished call."""

from __future__ import annotations

import asyncio
import sys
import warnings
from typing import Any

import pytest

from cairnq.worker.signals import Signal, first_of, unless


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


# -- unless: the wait runs in the waiting task ---------------------------------


class Wait:
    """A coroutine to wait in, that tells how it ended."""

    def __init__(self, seconds: float = 60, result: Any = "news") -> None:
        self.seconds, self.result = seconds, result
        self.ended: str | None = None
        self.task: asyncio.Task[Any] | None = None

    async def run(self) -> Any:
        self.task = asyncio.current_task()
        try:
            await asyncio.sleep(self.seconds)
        except asyncio.CancelledError:
            self.ended = "cancelled"
            raise
        self.ended = "returned"
        return self.result


def _cancel_count(task: "asyncio.Task[Any] | None") -> int:
    assert task is not None
    return task.cancelling() if sys.version_info >= (3, 11) else 0


async def test_unless_returns_what_the_wait_returned_in_the_same_task() -> None:
    stop, wait = Signal(), Wait(0.01)
    assert await asyncio.wait_for(unless(wait.run(), stop), 5) == (True, "news")
    assert wait.ended == "returned"
    assert not stop._interrupts


async def test_a_signal_set_later_cancels_the_wait_and_the_waiter_goes_on_uncancelled() -> None:
    stop, other, wait = Signal(), Signal(), Wait()

    async def rest() -> tuple[Any, int, str]:
        answer = await unless(wait.run(), stop, other)
        count = _cancel_count(asyncio.current_task())
        await asyncio.sleep(0.001)  # the task is not left with a cancellation pending
        return answer, count, "went on"

    resting = asyncio.ensure_future(rest())
    await asyncio.sleep(0.01)
    assert not resting.done() and wait.ended is None
    other.set()
    assert await asyncio.wait_for(resting, 5) == ((False, None), 0, "went on")
    assert wait.ended == "cancelled"
    assert not stop._interrupts and not other._interrupts


async def test_a_signal_already_set_does_not_start_the_wait() -> None:
    stop, wait = Signal(), Wait()
    stop.set()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (no "coroutine ... was never awaited")
        assert await asyncio.wait_for(unless(wait.run(), stop), 5) == (False, None)
    assert wait.ended is None


async def test_cancelling_the_waiter_cancels_the_wait_and_is_not_swallowed() -> None:
    stop, wait = Signal(), Wait()
    resting = asyncio.ensure_future(unless(wait.run(), stop))
    await asyncio.sleep(0.01)
    resting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await resting
    assert wait.ended == "cancelled"
    assert not stop._interrupts


@pytest.mark.skipif(sys.version_info < (3, 11), reason="3.10 does not count cancellations")
async def test_a_cancel_beside_the_signal_still_reaches_the_waiter() -> None:
    stop, wait = Signal(), Wait()
    resting = asyncio.ensure_future(unless(wait.run(), stop))
    await asyncio.sleep(0.01)
    stop.set()
    resting.cancel()  # before the task ran again: two requests, one of them ours
    with pytest.raises(asyncio.CancelledError):
        await resting


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.timeout is 3.11+")
async def test_an_interrupted_wait_is_not_taken_for_a_timeout_around_it() -> None:
    stop, wait = Signal(), Wait()

    async def rest() -> str:
        async with asyncio.timeout(30):
            await unless(wait.run(), stop)
            await asyncio.sleep(0.001)
        return "in time"

    resting = asyncio.ensure_future(rest())
    await asyncio.sleep(0.01)
    stop.set()
    assert await asyncio.wait_for(resting, 5) == "in time"


async def test_a_signal_set_from_within_the_wait_interrupts_it_once_it_rests() -> None:
    stop = Signal()
    reached: list[str] = []

    async def wait() -> str:
        stop.set()  # (a wrapped claim_wake that stops its worker, say)
        reached.append("set")
        await asyncio.sleep(0)  # its first rest: interrupted here
        reached.append("after its rest")
        return "slept"

    answer = await asyncio.wait_for(unless(wait(), stop), 5)
    assert answer == (False, None) and reached == ["set"]


async def test_a_signal_set_from_within_a_wait_that_never_rests_leaves_the_task_alone() -> None:
    stop = Signal()

    async def wait() -> str:
        stop.set()
        return "at once"

    async def rest() -> tuple[Any, str]:
        answer = await unless(wait(), stop)
        await asyncio.sleep(0.001)  # no cancellation lands here, after the wait
        return answer, "went on"

    assert await asyncio.wait_for(rest(), 5) == ((True, "at once"), "went on")


async def test_a_wait_that_raises_ends_with_nothing() -> None:
    async def fails() -> None:
        raise RuntimeError("store went away")

    assert await asyncio.wait_for(unless(fails(), Signal()), 5) == (False, None)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="3.10 does not count cancellations")
async def test_a_wait_that_turns_the_interruption_into_an_error_leaves_no_cancellation_behind() -> None:
    stop = Signal()

    async def wait() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            raise RuntimeError("a store wrapper that reports what ended its wait") from None

    async def rest() -> tuple[Any, int, str]:
        async with asyncio.timeout(30):
            answer = await unless(wait(), stop)
            count = _cancel_count(asyncio.current_task())
            await asyncio.sleep(0.001)
        return answer, count, "in time"

    resting = asyncio.ensure_future(rest())
    await asyncio.sleep(0.01)
    stop.set()
    assert await asyncio.wait_for(resting, 5) == ((False, None), 0, "in time")
