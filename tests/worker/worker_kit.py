"""Helpers of the worker tests (``tests/worker/test_worker_*.py``): the worker
runtime's registration, calling convention, outcomes, batches, context writes,
retries, max_run_ms, on_error, sources/resources, lifecycle and the additive
knobs (API.md §5, §6, §14; OPERATIONS.md §5, §6, §1.5).

Conventions: short leases and poll intervals, events/counters for
synchronisation, ``q.wait`` for terminal outcomes. Spies wrap store methods on
the *instance* the worker uses (the worker calls them through that instance).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any, Callable

from cairnq import (
    CairnQ,
    Worker,
)

FAST = {"poll_interval_ms": 20, "retry_backoff_ms": 0}


# -- helpers -------------------------------------------------------------------


def make(backend, **kwargs: Any) -> Worker:
    opts = dict(FAST)
    opts.update(kwargs)
    queues = opts.pop("queues", ("default",))
    return backend.worker(queues=queues, **opts)


async def finish(q: CairnQ, task_id: str, timeout_ms: int = 8_000):
    return await q.wait(task_id, timeout_ms=timeout_ms, poll_ms=10, max_poll_ms=50)


async def eventually(pred: Callable[[], Any], timeout: float = 5.0, interval: float = 0.01) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(interval)


class Gauge:
    """Counts what is inside right now, and the most that ever was."""

    def __init__(self) -> None:
        self.now = 0
        self.max = 0

    def __enter__(self) -> "Gauge":
        self.now += 1
        self.max = max(self.max, self.now)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.now -= 1


def spy_fail(store) -> list[tuple[dict[str, Any], Any]]:
    """Record every ``fail`` write: (its keywords, the returned row)."""
    seen: list[tuple[dict[str, Any], Any]] = []
    orig = store.fail

    async def fail(**kwargs: Any):
        row = await orig(**kwargs)
        seen.append((kwargs, row))
        return row

    store.fail = fail
    return seen


def spy_draws(store) -> list[tuple[Any, int]]:
    """Record every draw of every claim session: (names, limit)."""
    draws: list[tuple[Any, int]] = []
    orig = store.claim_session

    async def claim_session(**kwargs: Any):
        plan = kwargs["plan"]

        async def wrapped(draw):
            async def recording(names, limit):
                draws.append((None if names is None else tuple(names), limit))
                return await draw(names, limit)

            return await plan(recording)

        kwargs["plan"] = wrapped
        return await orig(**kwargs)

    store.claim_session = claim_session
    return draws


def envelope(type_: str, code: str, message: str, retryable: bool, details: Any = None) -> dict:
    return {
        "type": type_,
        "code": code,
        "message": message,
        "retryable": retryable,
        "details": {} if details is None else details,
    }
