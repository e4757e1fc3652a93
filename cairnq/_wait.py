"""Waiting for a task to finish: a read-only poll with a growing interval.

The probe reads only ``(id, status)``; the full row is read once the task is
terminal (or the time is up), and at once, without a probe, when the store
says it finished. Each sleep goes through the store's ``task_done_wake``,
which drivers with a push channel end early (and which tells of a finish that
landed just before it began). A task just submitted is not probed before the
first wait.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from cairnq.errors import TaskTimeout
from cairnq.models import Task, TaskRef

if TYPE_CHECKING:
    from cairnq.store.base import TaskStore

__all__ = [
    "DEFAULT_WAIT_TIMEOUT_MS",
    "DEFAULT_POLL_MS",
    "MAX_POLL_MS",
    "next_poll_ms",
    "poll_wait",
    "poll_wait_submitted",
    "poll_wait_by_key",
]

DEFAULT_WAIT_TIMEOUT_MS = 30_000
DEFAULT_POLL_MS = 100
MAX_POLL_MS = 500


def next_poll_ms(current: float, max_ms: float) -> float:
    """100, 150, 225, 337, 500, 500, ... (x1.5, at least +1, capped)."""
    return min(max_ms, max(current + 1, int(current * 1.5)))


def _check(timeout_ms: float, poll_ms: float, max_poll_ms: float) -> float:
    """The timeout to use. Any real number goes (``seconds * 1000`` is a
    float); a negative timeout, as a deadline computed too late gives, is no
    time left: one look, then TaskTimeout, as in 0.15.1; ``inf`` waits on."""
    for what, value in (
        ("timeout_ms", timeout_ms),
        ("poll_ms", poll_ms),
        ("max_poll_ms", max_poll_ms),
    ):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{what} must be a number, got {type(value).__name__}")
        if value != value:
            raise ValueError(f"{what} must not be NaN")
    if poll_ms < 0 or max_poll_ms < 0:
        raise ValueError("poll_ms and max_poll_ms must be >= 0")
    return min(max(0.0, timeout_ms), 2.0**53)  # inf: as good as forever


async def poll_wait(
    store: TaskStore,
    task_id: str,
    *,
    timeout_ms: int,
    poll_ms: int = DEFAULT_POLL_MS,
    max_poll_ms: int = MAX_POLL_MS,
) -> Task:
    """The terminal task (any terminal status), or TaskTimeout."""
    return await _poll_wait(store, task_id, None, timeout_ms, poll_ms, max_poll_ms)


async def poll_wait_submitted(
    store: TaskStore,
    task: Task,
    *,
    timeout_ms: int,
    poll_ms: int = DEFAULT_POLL_MS,
    max_poll_ms: int = MAX_POLL_MS,
) -> Task:
    """``poll_wait`` for a task its submit just returned (``call``): not
    finished then, it is not read again before the first wait, since a
    finish that lands meanwhile is what that wait is told of."""
    known = task if isinstance(task, Task) and not task.is_terminal else None
    return await _poll_wait(store, task.id, known, timeout_ms, poll_ms, max_poll_ms)


async def _poll_wait(
    store: TaskStore,
    task_id: str,
    known: Task | None,
    timeout_ms: int,
    poll_ms: int,
    max_poll_ms: int,
) -> Task:
    deadline = time.monotonic() + _check(timeout_ms, poll_ms, max_poll_ms) / 1000
    interval: float = max(1, poll_ms)  # 0 (0.15.1 takes it): as often as a wait allows
    max_poll_ms = max(1, max_poll_ms)
    snapshot: Task | None = None
    told = False  # the store said this task finished: read it whole at once
    while True:
        if told:
            found = await store.get(task_id)
            if found is not None and found.is_terminal:
                return found
            snapshot = found or snapshot
        ref: TaskRef | Task | None
        if known is not None:
            ref, known = known, None
        else:
            ref = await store.get_status(task_id)
        remaining = int((deadline - time.monotonic()) * 1000)
        if ref is not None and (ref.is_terminal or remaining <= 0):
            snapshot = await store.get(task_id) or snapshot
            if snapshot is not None and snapshot.is_terminal:
                return snapshot
        if remaining <= 0:
            raise TaskTimeout(
                ref.id if ref is not None else task_id, timeout_ms=timeout_ms, task=snapshot
            )
        # A store with a push channel returns True when told this very task
        # finished (PostgreSQL's cairnq_done); others return None after sleeping.
        told = await store.task_done_wake(task_id, int(min(interval, remaining))) is True
        interval = next_poll_ms(interval, max_poll_ms)


async def poll_wait_by_key(
    store: TaskStore,
    key: str,
    *,
    timeout_ms: int,
    poll_ms: int = DEFAULT_POLL_MS,
    max_poll_ms: int = MAX_POLL_MS,
) -> Task:
    """Wait for whatever task ``key`` points at, re-resolving it on every beat (a
    ``replace`` mid-wait moves the wait onto the new task; a key with no task
    yet is waited for, not rejected)."""
    deadline = time.monotonic() + _check(timeout_ms, poll_ms, max_poll_ms) / 1000
    interval: float = max(1, poll_ms)  # 0 (0.15.1 takes it): as often as a wait allows
    max_poll_ms = max(1, max_poll_ms)
    snapshot: Task | None = None
    while True:
        ref = await store.get_status_by_key(key)
        remaining = int((deadline - time.monotonic()) * 1000)
        if ref is not None and (ref.is_terminal or remaining <= 0):
            task = await store.get_by_key(key)
            snapshot = task or snapshot
            if task is not None and task.is_terminal:
                return task
        if remaining <= 0:
            raise TaskTimeout(
                ref.id if ref is not None else key, timeout_ms=timeout_ms, task=snapshot, key=key
            )
        sleep_ms = min(interval, remaining)
        if ref is not None:
            await store.task_done_wake(ref.id, int(sleep_ms))
        else:
            await asyncio.sleep(sleep_ms / 1000)
        interval = next_poll_ms(interval, max_poll_ms)
