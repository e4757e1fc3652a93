"""The scheduler on a real database (both dialects): exactly one task per
fire instant, catch-up modes, a changed schedule, errors reported and
survived. The clock is handed in as a value where the test is about which
instants count, so nothing here waits on wall time except the worker runs."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from cairnq import Worker
from cairnq.errors import QueueFull
from cairnq.periodic import Scheduler, declare, fire_key, instant_text, parse_instant
from cairnq.periodic.declaration import CATCH_UP_MAX_FIRES
from cairnq.periodic.scheduler import LATE_GRACE_MS

T0 = parse_instant("2026-01-01T00:00:00.000Z")
MINUTE = 60_000
HOUR = 3_600_000


def noted(errors: list[tuple[BaseException, dict[str, Any]]]) -> Any:
    return lambda exc, info: errors.append((exc, info))


async def fire_times(store: Any, name: str) -> list[str]:
    tasks = await store.list(name=name, limit=10_000)
    return sorted(t.metadata["cairnq.periodic"]["fire_at"] for t in tasks)


async def test_new_schedule_fires_no_past_instant(backend: Any) -> None:
    store = backend.store()
    await store.connect()
    scheduler = Scheduler(store, noted([]))
    p = declare("* * * * *", "job", catch_up="all")
    now = T0 + 30 * MINUTE + 30_000
    cursor = await scheduler.start_cursor(p, now)
    assert cursor == now  # nothing recorded: start fresh
    assert await scheduler.fire_due(p, cursor, now) == []
    assert await fire_times(store, "job") == []


@pytest.mark.parametrize("mode, expected", [("none", 0), ("latest", 1), ("all", 60)])
async def test_catch_up_modes(backend: Any, mode: str, expected: int) -> None:
    """Down for an hour after a recorded fire at T0 (per-minute schedule),
    back 30 s after a minute: the 60 fires since are missed, not late."""
    store = backend.store()
    await store.connect()
    scheduler = Scheduler(store, noted([]))
    p = declare("* * * * *", "job", catch_up=mode)
    assert await scheduler.submit(p, T0)
    now = T0 + HOUR + 30_000
    cursor = await scheduler.start_cursor(p, now)
    assert cursor == T0  # the newest recorded fire
    enqueued = await scheduler.fire_due(p, cursor, now)
    assert len(enqueued) == expected
    times = await fire_times(store, "job")
    assert len(times) == 1 + expected
    if mode == "latest":
        assert times[-1] == instant_text(T0 + HOUR)  # the most recent missed fire
    if mode == "all":
        assert times == [instant_text(T0 + i * MINUTE) for i in range(61)]


async def test_late_fires_are_enqueued_in_every_mode(backend: Any) -> None:
    """Fires at most LATE_GRACE_MS old are late, not missed: even catch_up
    'none' enqueues them (a worker that restarts right after a fire)."""
    store = backend.store()
    await store.connect()
    scheduler = Scheduler(store, noted([]))
    p = declare(timedelta(seconds=1), "tick", catch_up="none")
    assert await scheduler.submit(p, T0)
    now = T0 + 5_500
    enqueued = await scheduler.fire_due(p, await scheduler.start_cursor(p, now), now)
    assert enqueued == [T0 + 1000 * i for i in range(1, 6)]
    assert LATE_GRACE_MS >= 5_500


async def test_catch_up_all_is_bounded(backend: Any) -> None:
    """'all' after a long pause: at most CATCH_UP_MAX_FIRES, the newest."""
    store = backend.store()
    await store.connect()
    scheduler = Scheduler(store, noted([]))
    p = declare(timedelta(seconds=1), "tick", catch_up="all")
    now = T0 + 50 * CATCH_UP_MAX_FIRES * 1000 + 500
    enqueued = await scheduler.fire_due(p, T0, now)
    assert len(enqueued) == CATCH_UP_MAX_FIRES
    assert enqueued[-1] == now - 500
    # A day-long window: nothing older than 24 h, whatever the cursor.
    daily = declare("0 0 * * *", "daily", catch_up="all")
    assert await scheduler.fire_due(daily, T0 - 30 * 24 * HOUR, T0 + HOUR) == [T0]


async def test_a_changed_schedule_does_not_fire_an_instant_twice(backend: Any) -> None:
    """The key names the schedule and the instant, not the definition: a new
    cron, payload or catch-up for the same schedule id adds no task at an
    instant already fired."""
    store = backend.store()
    await store.connect()
    old = declare("*/5 * * * *", "report", {"v": 1}, id="report-5min")
    assert await Scheduler(store, noted([])).submit(old, T0 + 5 * MINUTE)
    new = declare(timedelta(minutes=1), "report", {"v": 2}, id="report-5min", catch_up="all")
    scheduler = Scheduler(store, noted([]))
    now = T0 + 6 * MINUTE + 1
    cursor = await scheduler.start_cursor(new, now)
    assert cursor == T0 + 5 * MINUTE
    assert await scheduler.fire_due(new, T0, now) == [T0 + m * MINUTE for m in (1, 2, 3, 4, 6)]
    tasks = await store.list(name="report", limit=100)
    per_instant = Counter(t.metadata["cairnq.periodic"]["fire_at"] for t in tasks)
    assert set(per_instant.values()) == {1} and len(per_instant) == 6
    at_five = await store.get_by_key(fire_key("report-5min", T0 + 5 * MINUTE))
    assert at_five is not None and at_five.payload == {"v": 1}


async def test_concurrent_schedulers_enqueue_each_instant_once(backend: Any) -> None:
    """Many schedulers (one store each, as separate workers would have) fire
    the same instants at once, and again after the tasks finished: one task
    per instant. With conflict='reuse' the finished ones would be replaced."""
    stores = [backend.store() for _ in range(4)]
    for store in stores:
        await store.connect()
    schedulers = [Scheduler(store, noted([])) for store in stores]
    p = declare(timedelta(seconds=1), "tick")
    instants = [T0 + 1000 * i for i in range(1, 11)]
    results = await asyncio.gather(*(s.submit(p, f) for f in instants for s in schedulers))
    assert sum(results) == len(instants)
    # Finish every task (a fast handler), then fire the same instants again.
    claimed = await stores[0].claim(queues=["default"], worker_id="w", limit=100, names=["tick"])
    assert len(claimed) == len(instants)
    for task in claimed:
        await stores[0].complete(task_id=task.id, worker_id="w", result=None)
    again = await asyncio.gather(*(s.submit(p, f) for f in instants for s in schedulers))
    assert sum(again) == 0
    assert Counter(await fire_times(stores[0], "tick")) == Counter(
        instant_text(f) for f in instants
    )


async def test_a_worker_runs_its_schedules(backend: Any) -> None:
    """Worker.run() runs the schedules beside the claim loop: an interval
    and a decorator schedule each enqueue, the handlers run, and stop()
    stops them."""
    errors: list[tuple[BaseException, dict[str, Any]]] = []
    worker = backend.worker(on_error=noted(errors), poll_interval_ms=50)
    ran: list[Any] = []

    @worker.task("beat", periodic=timedelta(milliseconds=200))
    async def beat(ctx: Any, payload: Any) -> None:
        ran.append(("beat", ctx.metadata["cairnq.periodic"]["fire_at"]))

    @worker.task("other")
    async def other(ctx: Any, payload: Any) -> None:
        ran.append(("other", payload))

    worker.periodic(timedelta(milliseconds=300), "other", {"n": 1}, id="other-300")
    async with worker.background():
        for _ in range(200):
            if {"beat", "other"} <= {r[0] for r in ran} and len(ran) >= 4:
                break
            await asyncio.sleep(0.02)
    assert not errors, errors
    assert ("other", {"n": 1}) in ran
    beats = [r[1] for r in ran if r[0] == "beat"]
    assert beats and all(parse_instant(b) % 200 == 0 for b in beats)


async def test_scheduler_errors_are_reported_and_survived(backend: Any) -> None:
    """A schedule whose submits fail (its queue is full) is reported through
    on_error with phase 'periodic'; the worker and its other schedules go on."""
    client = backend.client()
    await client.connect()
    await client.submit("blocker", queue="full")
    errors: list[tuple[BaseException, dict[str, Any]]] = []
    worker = backend.worker(
        on_error=noted(errors),
        max_queue_depth={"full": 1},
        max_queue_wait_ms=1,
        poll_interval_ms=50,
    )
    ran: list[str] = []

    @worker.task("ok", periodic=timedelta(milliseconds=200))
    async def ok(ctx: Any, payload: Any) -> None:
        ran.append(ctx.task_id)

    worker.periodic(timedelta(milliseconds=200), "never", queue="full")
    async with worker.background():
        for _ in range(300):
            if len(ran) >= 3 and errors:
                break
            await asyncio.sleep(0.02)
    assert len(ran) >= 3
    assert errors and all(isinstance(e, QueueFull) for e, _ in errors)
    assert all(info == {"phase": "periodic", "schedule": "never"} for _, info in errors)
    assert await client.stats("full") == {
        "full": {
            **dict.fromkeys(("queued", "running", "succeeded", "failed", "canceled"), 0),
            "queued": 1,
        }
    }


def test_declaring_on_a_worker_checks_at_once(tmp_path: Any) -> None:
    worker = Worker.sqlite(str(tmp_path / "q.db"))
    worker.periodic("0 3 * * *", "report.nightly")
    with pytest.raises(ValueError, match="already declared"):
        worker.periodic("0 4 * * *", "report.nightly")
    worker.periodic("0 4 * * *", "report.nightly", id="report.nightly@4")
    with pytest.raises(ValueError, match="bad cron"):
        worker.periodic("0 25 * * *", "x")

    async def handler(ctx: Any, payload: Any) -> None: ...

    # A bad schedule in the decorator registers nothing.
    with pytest.raises(ValueError, match="unknown time zone|bad cron"):
        worker.task("y", periodic="nope")(handler)
    assert "y" not in worker._registry.names
    worker.task("z", periodic="@hourly")(handler)
    assert "z" in worker._registry.names
    assert [p.id for p in worker._scheduler.periodics] == [  # type: ignore[union-attr]
        "report.nightly", "report.nightly@4", "z",
    ]  # fmt: skip


@pytest.mark.parametrize("mode, expected", [("latest", [T0 + HOUR]), ("none", []), ("all", None)])
async def test_waking_after_a_pause_catches_up(backend: Any, mode: str, expected: Any) -> None:
    """The running loop, not just its parts: a per-minute schedule sleeps,
    the wall clock jumps an hour (a suspended laptop: the loop's timer knew
    nothing of it), and on waking the missed fires follow catch_up."""
    store = backend.store()
    await store.connect()
    now = [T0 + 10_000]
    errors: list[Any] = []
    scheduler = Scheduler(store, noted(errors), clock=lambda: now[0], max_sleep_s=0.02)
    p = declare("* * * * *", "job", catch_up=mode)
    assert await scheduler.submit(p, T0)  # fired before the pause
    scheduler.add(p)
    scheduler.start()
    try:
        await asyncio.sleep(0.1)  # started: T0 recorded, nothing due yet
        assert await fire_times(store, "job") == [instant_text(T0)]
        now[0] = T0 + HOUR + 30_000
        want = [T0 + MINUTE * i for i in range(1, 61)] if expected is None else expected
        for _ in range(200):
            if len(await fire_times(store, "job")) == 1 + len(want):
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)  # and nothing more comes
    finally:
        await scheduler.stop()
    assert not errors, errors
    assert await fire_times(store, "job") == [instant_text(f) for f in [T0, *want]]
