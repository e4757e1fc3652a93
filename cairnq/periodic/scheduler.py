"""The loop that enqueues periodic tasks, one asyncio task per schedule.

No leader and no table of its own: every worker that declares a schedule
runs it, and each fire is a keyed submit with ``conflict="reject"`` whose key
names the schedule and the UTC instant. The first worker's submit creates
the task; every other one gets ``AlreadyExists`` and moves on. ``reject``
rather than the default ``reuse``: ``reuse`` lets a new task replace a key
whose task is already finished, so a fast handler would let a slower worker
fire the same instant again.

Each schedule sleeps on a local timer until its next instant (at most
``MAX_SLEEP_S`` at a time, so a suspended machine notices the jump of the
wall clock when it wakes), then submits. Exactly once per instant holds
while the fire's task (and so its key) is kept: retention that purges
finished tasks sooner than ``LATE_GRACE_MS`` could let a late worker fire
an instant again.

Catch-up, on start and on every wake: the fires due since the last one
handled (on start: since the newest fire recorded in the database among the
last ``CATCH_UP_MAX_FIRES`` within ``CATCH_UP_WINDOW_MS``; none recorded is
a new schedule, which starts from now and fires no past instant). A due fire
at most ``LATE_GRACE_MS`` old is late, not missed, and is always enqueued;
older ones are missed: ``"latest"`` enqueues the newest of them (when no
fire is late), ``"none"`` none, ``"all"`` every one.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Optional

from cairnq.errors import AlreadyExists
from cairnq.periodic.declaration import (
    CATCH_UP_MAX_FIRES,
    CATCH_UP_WINDOW_MS,
    Periodic,
    fire_key,
)

__all__ = ["Scheduler", "LATE_GRACE_MS", "MAX_SLEEP_S", "ERROR_BACKOFF_S", "wall_ms"]

LATE_GRACE_MS = 10_000
MAX_SLEEP_S = 30.0
ERROR_BACKOFF_S = 1.0

Report = Callable[[BaseException, dict[str, Any]], None]


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class Scheduler:
    """Runs the declared schedules against ``store`` (a ``TaskStore``)."""

    def __init__(
        self,
        store: Any,
        report: Report,
        clock: Callable[[], int] = wall_ms,
        max_sleep_s: float = MAX_SLEEP_S,
    ) -> None:
        self._store = store
        self._report = report
        self._clock = clock
        self._max_sleep_s = max_sleep_s
        self._periodics: dict[str, Periodic] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._running = False

    @property
    def periodics(self) -> list[Periodic]:
        return list(self._periodics.values())

    def add(self, periodic: Periodic) -> None:
        """Declare a schedule; a second one with the same id is refused.
        Declared while running, it starts at once."""
        self.ensure_new(periodic.id)
        self._periodics[periodic.id] = periodic
        if self._running:
            self._start(periodic)

    def ensure_new(self, schedule_id: str) -> None:
        if schedule_id in self._periodics:
            raise ValueError(
                f"periodic: a schedule {schedule_id!r} is already declared; give the "
                "second schedule of one task name its own id=..."
            )

    def start(self) -> None:
        """Start every schedule's loop (in the running event loop)."""
        self._running = True
        for periodic in self._periodics.values():
            self._start(periodic)

    async def stop(self) -> None:
        """Stop every loop; a submit in flight is abandoned (its transaction
        rolls back or commits whole: either way the key decides)."""
        self._running = False
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _start(self, periodic: Periodic) -> None:
        self._tasks[periodic.id] = asyncio.ensure_future(self._run_one(periodic))

    async def _run_one(self, periodic: Periodic) -> None:
        cursor: Optional[int] = None
        while True:
            try:
                now = self._clock()
                if cursor is None:
                    cursor = await self.start_cursor(periodic, now)
                await self.fire_due(periodic, cursor, now)
                cursor = now
                await self._sleep_until(periodic.schedule.next_after(cursor))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._report(exc, {"phase": "periodic", "schedule": periodic.id})
                await asyncio.sleep(ERROR_BACKOFF_S)

    async def _sleep_until(self, target_ms: int) -> None:
        while True:
            delay_s = (target_ms - self._clock()) / 1000
            if delay_s <= 0:
                return
            await asyncio.sleep(min(delay_s, self._max_sleep_s))

    async def start_cursor(self, periodic: Periodic, now_ms: int) -> int:
        """Where a starting scheduler takes up ``periodic``: its newest fire
        recorded in the database (within the catch-up window), else now."""
        candidates = periodic.schedule.fires_between(
            now_ms - CATCH_UP_WINDOW_MS, now_ms, CATCH_UP_MAX_FIRES
        )
        if not candidates:
            return now_ms
        keys = {fire_key(periodic.id, fire): fire for fire in candidates}
        recorded = await self._store.existing_keys(list(keys))
        fires = [keys[key] for key in recorded]
        return max(fires) if fires else now_ms

    def chosen(self, periodic: Periodic, cursor_ms: int, now_ms: int) -> list[int]:
        """The fires in ``(cursor_ms, now_ms]`` that ``periodic``'s catch-up
        mode enqueues, oldest first."""
        floor = max(cursor_ms, now_ms - CATCH_UP_WINDOW_MS)
        due = periodic.schedule.fires_between(floor, now_ms, CATCH_UP_MAX_FIRES)
        late = [fire for fire in due if now_ms - fire <= LATE_GRACE_MS]
        missed = due[: len(due) - len(late)]
        if periodic.catch_up == "all":
            return due
        if periodic.catch_up == "latest" and not late:
            return missed[-1:]
        return late

    async def fire_due(self, periodic: Periodic, cursor_ms: int, now_ms: int) -> list[int]:
        """Submit the chosen fires; returns those this call enqueued (the
        others were enqueued already, by this worker or another)."""
        enqueued = []
        for fire in self.chosen(periodic, cursor_ms, now_ms):
            if await self.submit(periodic, fire):
                enqueued.append(fire)
        return enqueued

    async def submit(self, periodic: Periodic, fire_ms: int) -> bool:
        """Enqueue one fire; False when its key already names a task."""
        try:
            await self._store.submit(
                name=periodic.name,
                payload=periodic.payload,
                queue=periodic.queue,
                key=fire_key(periodic.id, fire_ms),
                conflict="reject",
                max_attempts=periodic.max_attempts,
                priority=periodic.priority,
                metadata=periodic.metadata_for(fire_ms),
            )
        except AlreadyExists:
            return False
        return True
