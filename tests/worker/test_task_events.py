"""The worker's events (``cairnq.events``): a task's claim, start, settlement
and lost lease, a batch call's end, heartbeat rounds; their fields, the
kind that follows from what the store answered, a failing handler, and no
work at all while nobody listens.

Conventions as in tests/worker/worker_kit.py: short leases and poll intervals, events
for synchronisation, ``q.wait`` for terminal outcomes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Iterator

import pytest

from cairnq import CairnQ, LostLease, TaskError, events
from cairnq.events import BatchEvent, HeartbeatEvent, TaskEvent

FAST = {"poll_interval_ms": 20, "retry_backoff_ms": 0}


def make(backend, **kwargs: Any):
    opts = dict(FAST)
    opts.update(kwargs)
    return backend.worker(queues=opts.pop("queues", ("default",)), **opts)


async def finish(q: CairnQ, task_id: str):
    return await q.wait(task_id, timeout_ms=8_000, poll_ms=10, max_poll_ms=50)


async def eventually(pred: Callable[[], Any], timeout: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := pred()):
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)
    return value


@pytest.fixture
def seen() -> Iterator[list[Any]]:
    """Every event of every kind but ``statement``, in order."""
    got: list[Any] = []
    stop = events.subscribe(got.append, kinds=[k for k in events.KINDS if k != "statement"])
    yield got
    stop()


def of_task(got: list[Any], task_id: str) -> list[TaskEvent]:
    return [e for e in got if isinstance(e, TaskEvent) and e.task_id == task_id]


def kinds(got: list[TaskEvent]) -> list[str]:
    return [e.kind for e in got]


# -- one task, each outcome ----------------------------------------------------


async def test_a_success_is_claimed_started_succeeded(backend, seen: list[Any]) -> None:
    q = backend.client()
    w = make(backend, queues=("mail",))

    @w.task
    async def send(ctx):
        return "sent"

    task = await q.submit("send", queue="mail")
    async with w.background():
        await finish(q, task.id)
    mine = of_task(seen, task.id)
    assert kinds(mine) == ["task.claimed", "task.started", "task.succeeded"]
    for event in mine:
        assert (event.queue, event.name, event.attempt, event.worker_id) == (
            "mail",
            "send",
            1,
            w.worker_id,
        )
        assert event.error is None
    claimed, started, succeeded = mine
    assert claimed.wait_s is not None and claimed.wait_s >= 0 and claimed.run_s is None
    assert started.wait_s is None and started.run_s is None
    assert succeeded.wait_s is None and succeeded.run_s is not None and succeeded.run_s >= 0


async def test_wait_is_counted_from_the_due_time(backend, seen: list[Any]) -> None:
    """A task due in the past waited since it was due; one claimed before its
    due time (impossible) would still report 0, never a negative wait."""
    q = backend.client()
    w = make(backend)

    @w.task
    async def job(ctx):
        return None

    task = await q.submit("job")
    await asyncio.sleep(0.2)  # due at submission: the claim comes at least this late
    async with w.background():
        await finish(q, task.id)
    (claimed,) = [e for e in of_task(seen, task.id) if e.kind == "task.claimed"]
    assert claimed.wait_s >= 0.2


async def test_a_retry_then_a_final_failure(backend, seen: list[Any]) -> None:
    q = backend.client()
    w = make(backend)

    @w.task
    async def flaky(ctx):
        raise ValueError(f"boom {ctx.attempt}")

    task = await q.submit("flaky", max_attempts=2)
    async with w.background():
        done = await finish(q, task.id)
    assert done.status == "failed"
    mine = of_task(seen, task.id)
    assert kinds(mine) == [
        "task.claimed", "task.started", "task.retried",
        "task.claimed", "task.started", "task.failed",
    ]  # fmt: skip
    retried, failed = mine[2], mine[5]
    assert (retried.attempt, failed.attempt) == (1, 2)
    assert retried.error["code"] == "handler_error" and retried.error["message"] == "boom 1"
    assert failed.error == done.error
    assert retried.run_s >= 0 and failed.run_s >= 0


async def test_a_task_error_not_retryable_fails_at_once(backend, seen: list[Any]) -> None:
    q = backend.client()
    w = make(backend)

    @w.task
    async def strict(ctx):
        raise TaskError("bad input", code="invalid", retryable=False)

    task = await q.submit("strict", max_attempts=5)
    async with w.background():
        await finish(q, task.id)
    mine = of_task(seen, task.id)
    assert kinds(mine)[-1] == "task.failed"
    assert mine[-1].error["code"] == "invalid"


async def test_settlements_by_the_handler_are_reported_once(backend, seen: list[Any]) -> None:
    q = backend.client()
    w = make(backend)

    @w.task
    async def early(ctx):
        if ctx.payload == "ok":
            await ctx.succeed({"early": True})
        else:
            await ctx.fail("no", retryable=False)
        return "ignored"

    ok = await q.submit("early", "ok")
    no = await q.submit("early", "no")
    async with w.background():
        await finish(q, ok.id)
        await finish(q, no.id)
    assert kinds(of_task(seen, ok.id)) == ["task.claimed", "task.started", "task.succeeded"]
    assert kinds(of_task(seen, no.id)) == ["task.claimed", "task.started", "task.failed"]
    assert of_task(seen, no.id)[-1].error["message"] == "no"


@pytest.mark.parametrize("outcome", ["return", "raise"])
async def test_a_cancel_that_wins_is_reported_canceled(
    backend, seen: list[Any], outcome: str
) -> None:
    """Whatever the handler did, the store answered canceled: so is the event."""
    q = backend.client()
    w = make(backend, lease_ms=2_000, heartbeat_interval_ms=50)
    started = asyncio.Event()

    @w.task
    async def job(ctx):
        started.set()
        deadline = time.monotonic() + 5
        while not await ctx.canceled() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        if outcome == "raise":
            raise ValueError("after cancel")
        return "dropped"

    task = await q.submit("job", max_attempts=3)
    async with w.background():
        await asyncio.wait_for(started.wait(), 5)
        await q.cancel(task.id)
        done = await finish(q, task.id)
    assert done.status == "canceled"
    mine = of_task(seen, task.id)
    assert kinds(mine) == ["task.claimed", "task.started", "task.canceled"]
    assert mine[-1].error is None and mine[-1].run_s >= 0


async def test_a_lost_lease_is_reported_once_and_nothing_after(backend, seen: list[Any]) -> None:
    q = backend.client()
    other = backend.store()
    # The beat comes long after the lease expired: somebody else takes over.
    w = make(backend, lease_ms=200, heartbeat_interval_ms=1_000)
    finished = asyncio.Event()

    @w.task
    async def job(ctx):
        try:
            await asyncio.wait_for(ctx.lease_lost.wait(), 5)
            with pytest.raises(LostLease):
                await ctx.progress(0.5)
            return "dropped"
        finally:
            finished.set()

    task = await q.submit("job", max_attempts=3)
    async with w.background():

        async def take_over():
            return await other.claim(queues=["default"], worker_id="other", lease_ms=30_000)

        await eventually(lambda: of_task(seen, task.id), timeout=3)
        got = await _until(take_over)
        assert [t.id for t in got] == [task.id]
        await asyncio.wait_for(finished.wait(), 5)
        await asyncio.sleep(0.05)
    mine = of_task(seen, task.id)
    assert kinds(mine) == ["task.claimed", "task.started", "task.lease_lost"]
    assert mine[-1].run_s >= 0.2 and mine[-1].attempt == 1
    rounds = [e for e in seen if isinstance(e, HeartbeatEvent)]
    assert any(r.lost == 1 and r.leases >= 1 for r in rounds)


async def _until(attempt: Callable[[], Any], timeout: float = 3.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := await attempt()):
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)
    return value


async def test_a_handler_raising_lost_lease_is_reported_lost(backend, seen: list[Any]) -> None:
    q = backend.client()
    w = make(backend, lease_ms=300)
    attempts: list[int] = []

    @w.task
    async def gives_up(ctx):
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise LostLease(ctx.task_id)
        return "second"

    task = await q.submit("gives_up", max_attempts=3)
    async with w.background():
        await finish(q, task.id)
    assert kinds(of_task(seen, task.id)) == [
        "task.claimed", "task.started", "task.lease_lost",
        "task.claimed", "task.started", "task.succeeded",
    ]  # fmt: skip


async def test_a_handler_past_max_run_ms_is_retried_not_lost(backend, seen: list[Any]) -> None:
    q = backend.client()
    w = make(backend, max_run_ms=100)

    @w.task
    async def slow(ctx):
        await asyncio.sleep(5)

    task = await q.submit("slow", max_attempts=1)
    async with w.background():
        await finish(q, task.id)
    mine = of_task(seen, task.id)
    assert kinds(mine) == ["task.claimed", "task.started", "task.failed"]
    assert mine[-1].error["code"] == "handler_timeout"
    assert mine[-1].run_s >= 0.1


# -- batches and heartbeats -------------------------------------------------------


async def test_a_batch_call_reports_its_tasks_and_itself(backend, seen: list[Any]) -> None:
    q = backend.client()
    w = make(backend, concurrency=1)

    @w.task(batch=4)
    async def items(contexts):
        return {c.task_id: c.payload for c in contexts}

    tasks = [await q.submit("items", i, queue="default") for i in range(4)]
    async with w.background():
        for t in tasks:
            await finish(q, t.id)
    batches = [e for e in seen if isinstance(e, BatchEvent)]
    assert sum(b.size for b in batches) == 4
    for b in batches:
        assert (b.kind, b.name, b.queue, b.worker_id, b.error) == (
            "batch.settled",
            "items",
            "default",
            w.worker_id,
            None,
        )
        assert b.run_s >= 0
    for t in tasks:
        assert kinds(of_task(seen, t.id)) == ["task.claimed", "task.started", "task.succeeded"]


async def test_a_batch_that_raises_reports_the_error(backend, seen: list[Any]) -> None:
    q = backend.client()
    w = make(backend)

    @w.task(batch=2)
    async def items(contexts):
        raise RuntimeError("all of them")

    task = await q.submit("items", max_attempts=1)
    async with w.background():
        await finish(q, task.id)
    (batch,) = [e for e in seen if isinstance(e, BatchEvent)]
    assert isinstance(batch.error, RuntimeError) and batch.size == 1
    assert kinds(of_task(seen, task.id))[-1] == "task.failed"


async def test_heartbeat_rounds(backend, seen: list[Any]) -> None:
    q = backend.client()
    w = make(backend, concurrency=2, lease_ms=2_000, heartbeat_interval_ms=30)
    release = asyncio.Event()

    @w.task
    async def hold(ctx):
        await release.wait()

    tasks = [await q.submit("hold") for _ in range(2)]
    async with w.background():
        await eventually(
            lambda: sum(isinstance(e, HeartbeatEvent) and e.leases == 2 for e in seen) >= 2
        )
        await q.cancel(tasks[0].id)
        await eventually(
            lambda: any(isinstance(e, HeartbeatEvent) and e.cancel_requested == 1 for e in seen)
        )
        release.set()
        await finish(q, tasks[1].id)
    rounds = [e for e in seen if isinstance(e, HeartbeatEvent)]
    for r in rounds:
        assert (r.kind, r.worker_id, r.lost, r.error) == ("heartbeat", w.worker_id, 0, None)
        assert 1 <= r.leases <= 2 and r.duration_s >= 0


async def test_a_failed_heartbeat_round_reports_its_error(backend, seen: list[Any]) -> None:
    q = backend.client()
    w = make(backend, lease_ms=2_000, heartbeat_interval_ms=30)
    release = asyncio.Event()

    @w.task
    async def hold(ctx):
        await release.wait()

    async def broken(**kwargs: Any) -> Any:
        raise ConnectionError("store down")

    w.store.heartbeat_batch = broken  # the worker goes through the public method
    task = await q.submit("hold")
    async with w.background():
        await eventually(lambda: any(isinstance(e, HeartbeatEvent) for e in seen))
        release.set()
        await finish(q, task.id)
    failed = [e for e in seen if isinstance(e, HeartbeatEvent)][0]
    assert isinstance(failed.error, ConnectionError) and failed.leases == 1 and failed.lost == 0


# -- the surface's rules, as the worker keeps them ---------------------------------------


async def test_a_raising_handler_is_logged_and_the_worker_goes_on(backend, caplog) -> None:
    q = backend.client()
    w = make(backend)
    got: list[Any] = []

    def broken(event: Any) -> None:
        raise RuntimeError("handler bug")

    @w.task
    async def job(ctx):
        return ctx.payload

    stops = [
        events.subscribe(broken, kinds=events.TASK_KINDS),
        events.subscribe(got.append, kinds=events.TASK_KINDS),
    ]
    try:
        with caplog.at_level(logging.ERROR, logger="cairnq.events"):
            tasks = [await q.submit("job", i) for i in range(3)]
            async with w.background():
                done = [await finish(q, t.id) for t in tasks]
    finally:
        for stop in stops:
            stop()
    assert [t.status for t in done] == ["succeeded"] * 3
    assert len([e for e in got if e.kind == "task.succeeded"]) == 3  # the next handler still ran
    assert any(
        "event handler" in r.getMessage() and "handler bug" in (r.exc_text or "")
        for r in caplog.records
    )


async def test_unsubscribe_stops_delivery(backend) -> None:
    q = backend.client()
    w = make(backend)
    got: list[Any] = []

    @w.task
    async def job(ctx):
        return None

    stop = events.subscribe(got.append, kinds=events.TASK_KINDS)
    first = await q.submit("job")
    async with w.background():
        await finish(q, first.id)
        # The worker reports task.succeeded once its write returns, which may
        # be a moment after another connection already reads the task as done.
        await eventually(lambda: len(got) == 3)
        stop()
        count = len(got)
        second = await q.submit("job")
        await finish(q, second.id)
    assert count == 3 and len(got) == 3
    assert of_task(got, second.id) == []


class _Counting:
    """Counts calls, then does what the wrapped function does."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.calls = 0

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        return self.fn(*args)


async def _run_every_kind(backend) -> None:
    """Claims, starts, each settlement, a batch, heartbeats, a lost lease."""
    q = backend.client()
    w = make(backend, concurrency=8, lease_ms=2_000, heartbeat_interval_ms=20, max_run_ms=2_000)
    gave_up = asyncio.Event()

    @w.task
    async def job(ctx):
        await asyncio.sleep(0.08)  # a few heartbeat rounds
        if ctx.payload == "raise":
            raise ValueError("x")
        if ctx.payload == "lost":
            gave_up.set()
            raise LostLease(ctx.task_id)

    @w.task(batch=2)
    async def items(contexts):
        return None

    tasks = [await q.submit("job", p, max_attempts=1) for p in ("ok", "raise")]
    tasks += [await q.submit("items", i) for i in range(2)]
    lost = await q.submit("job", "lost", max_attempts=1)
    async with w.background():
        for t in tasks:
            await finish(q, t.id)
        await asyncio.wait_for(gave_up.wait(), 5)
    await q.cancel(lost.id)


async def test_no_subscriber_builds_and_times_nothing(backend, monkeypatch) -> None:
    """The emitters (``events.emit_task`` and the modules below) build events
    with ``tuple.__new__`` and read the clock through their module's
    ``_clock``: count both, with nobody listening and then with one listener
    (so the count can be seen to move)."""
    import cairnq.context
    import cairnq.worker.execution
    import cairnq.worker.heartbeat
    import cairnq.worker.worker

    assert not any(events.channel(kind).on for kind in events.KINDS)
    built = _Counting(tuple.__new__)
    clocks = _Counting(time.perf_counter)
    monkeypatch.setattr(events, "_new_tuple", built)  # events.emit_task builds the task events
    emitters = (cairnq.context, cairnq.worker.execution, cairnq.worker.heartbeat, cairnq.worker.worker)
    for module in emitters:
        monkeypatch.setattr(module, "_clock", clocks)
    for module in emitters[1:]:
        monkeypatch.setattr(module, "_new_tuple", built)

    await _run_every_kind(backend)
    assert (built.calls, clocks.calls) == (0, 0)

    got: list[Any] = []
    stop = events.subscribe(got.append, kinds=[k for k in events.KINDS if k != "statement"])
    try:
        await _run_every_kind(backend)
    finally:
        stop()
    assert built.calls == len(got) > 0
    assert clocks.calls > 0
    assert {e.kind for e in got} >= {
        "task.claimed", "task.started", "task.succeeded", "task.failed",
        "task.lease_lost", "batch.settled", "heartbeat", "claim",
    }  # fmt: skip
    assert not any(events.channel(kind).on for kind in events.KINDS)


def test_a_group_is_on_while_any_of_its_kinds_has_a_handler() -> None:
    grouped = events.group("task.succeeded", "heartbeat")
    assert not grouped.on

    def handler(event: Any) -> None:
        pass

    stop_one = events.subscribe(handler, kinds=["heartbeat"])
    stop_other = events.subscribe(handler, kinds=["task.claimed"])
    assert grouped.on
    stop_one()
    assert not grouped.on  # task.claimed is not one of its kinds
    stop_other()
    assert not grouped.on
