"""PostgreSQL: a waiter told by ``cairnq_done`` that its task finished, against
a real worker process that relies on notifications (its poll interval is
long), with the waiters' own poll intervals long too: a missed notification
shows up as a wait of a whole interval."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from backends import DIALECTS
from pg_kit import listening, pg  # noqa: F401 (fixtures)
from processes import Procs, procs  # noqa: F401 (procs: a fixture)

from cairnq import CairnQ

if "postgres" not in DIALECTS:
    pytest.skip("PostgreSQL is not available", allow_module_level=True)

POLL_MS = 5_000  # the waiters' and the worker's: a wait that misses its notification sleeps this
BOUND_S = POLL_MS / 1000 / 2  # generous: a call told in time takes milliseconds

WORKER = """
from cairnq import Worker
worker = Worker.postgres(ARGS["dsn"], concurrency=4, poll_interval_ms=ARGS["poll_ms"])

@worker.task("echo")
async def echo(ctx, payload):
    return payload

worker.serve()
"""


async def _client_with_worker(pg: Any, procs: Procs) -> CairnQ:
    client = pg.client()
    await listening(client.store)
    procs.start("worker", WORKER, {"dsn": pg.target, "poll_ms": POLL_MS})
    # Up, and listening: until then its idle claim loop sleeps a whole poll
    # interval, which would be taken for a slow wait here.
    deadline = time.monotonic() + 60
    while True:
        started = time.monotonic()
        await client.call("echo", 0, timeout_ms=60_000, poll_ms=50)
        if time.monotonic() - started < 0.5:
            return client
        assert time.monotonic() < deadline, (
            "the worker never answered promptly:\n" + procs.outputs()
        )


class Finished:
    """Until another connection sees a task finished, then a moment more for
    its notification to reach the waiter's listener; ``at``: when that was."""

    def __init__(self, observer: Any) -> None:
        self.observer = observer
        self.at = 0.0

    async def wait(self, task_id: str) -> None:
        deadline = time.monotonic() + 30
        while not (await self.observer.get_status(task_id)).is_terminal:
            assert time.monotonic() < deadline, "the worker never finished the task"
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.1)
        self.at = time.monotonic()


async def test_a_task_finishing_between_the_status_read_and_the_wait_is_not_slept_through(
    pg: Any, procs: Procs
) -> None:
    """The waiter reads the task's status (queued), and before it starts
    waiting the worker finishes the task: the ``cairnq_done`` lands while
    nobody waits for it yet. The wait that follows must know at once."""
    client = await _client_with_worker(pg, procs)
    store, finished = client.store, Finished(pg.store())
    read_status = store.get_status

    async def status_then_the_task_finishes(task_id: str) -> Any:
        ref = await read_status(task_id)
        if not ref.is_terminal:
            await finished.wait(task_id)
        return ref

    store.get_status = status_then_the_task_finishes  # an instance attribute: wait() calls it
    for i in range(5):
        task = await client.submit("echo", {"i": i})
        done = await client.wait(task.id, timeout_ms=60_000, poll_ms=POLL_MS, max_poll_ms=POLL_MS)
        waited = time.monotonic() - finished.at
        assert done.result == {"i": i}
        assert waited < BOUND_S, f"wait {i} slept through its notification: {waited:.2f} s"


async def test_a_call_whose_task_finishes_before_its_wait_begins_returns_at_once(
    pg: Any, procs: Procs
) -> None:
    """``call`` starts waiting right after its submit: a worker that finishes
    the task before that wait begins must not cost it a poll interval."""
    client = await _client_with_worker(pg, procs)
    store, finished = client.store, Finished(pg.store())
    submit = store.submit

    async def submit_then_the_task_finishes(**kwargs: Any) -> Any:
        task = await submit(**kwargs)
        await finished.wait(task.id)
        return task

    store.submit = submit_then_the_task_finishes
    for i in range(5):
        result = await client.call(
            "echo", {"i": i}, timeout_ms=60_000, poll_ms=POLL_MS, max_poll_ms=POLL_MS
        )
        took = time.monotonic() - finished.at
        assert result == {"i": i}
        assert took < BOUND_S, f"call {i} slept through its notification: {took:.2f} s"


async def test_many_sequential_calls_each_return_when_told(pg: Any, procs: Procs) -> None:
    """Calls back to back against a worker process: none waits for its poll
    interval (the task finishing at any moment of the caller's steps)."""
    client = await _client_with_worker(pg, procs)
    slowest = 0.0
    for i in range(300):
        started = time.monotonic()
        result = await client.call(
            "echo", {"i": i}, timeout_ms=60_000, poll_ms=POLL_MS, max_poll_ms=POLL_MS
        )
        slowest = max(slowest, time.monotonic() - started)
        assert result == {"i": i}
        assert slowest < BOUND_S, f"call {i} took {slowest:.2f} s"
