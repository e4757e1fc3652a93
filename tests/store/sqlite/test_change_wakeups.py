"""An idle SQLite waiter notices another connection's commit that lands
between its last look and the start of its wait.

A waiter reads (is the task done? is work due?), finds nothing, then sleeps
until the file changes. A commit by another process in between must end the
sleep at once: the wait counts changes from its probe, not from when it began
(else it takes the commit for its starting point and sleeps its whole
timeout: a ``call()`` that waits out the worker's poll interval).

The waits here are long (WAIT_MS) and a wakeup must come in well under half
of one, so the margin is huge; a missed wakeup takes the whole WAIT_MS.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable

import pytest
from processes import Procs

from cairnq import CairnQ, SQLiteStore
from cairnq.store.sqlite.file_watch import ENV

WAIT_MS = 2_000
PROMPT_S = WAIT_MS / 1000 / 2


@pytest.fixture(autouse=True, params=["file watch", "polling"])
def wakeups(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test both ways: waiters told of writes by the kernel (where it
    can), and waiters polling the change counter. (The environment reaches
    the worker processes too.)"""
    monkeypatch.setenv(ENV, "1" if request.param == "file watch" else "0")
    return str(request.param)


@asynccontextmanager
async def _two_stores(tmp_path: Path) -> AsyncIterator[tuple[SQLiteStore, SQLiteStore]]:
    """Two stores (two connections) on one database file, closed after."""
    path = str(tmp_path / "tasks.db")
    first, second = SQLiteStore(path), SQLiteStore(path)
    try:
        yield first, second
    finally:
        await first.close()
        await second.close()


async def _seconds(aw: Awaitable[Any]) -> float:
    started = time.monotonic()
    await aw
    return time.monotonic() - started


async def test_task_done_wake_sees_a_completion_committed_after_the_status_read(
    tmp_path: Path,
) -> None:
    async with _two_stores(tmp_path) as (waiter, worker):
        task = await waiter.submit(name="echo", payload=1)
        claimed = await worker.claim(queues=["default"], worker_id="w")
        assert [t.id for t in claimed] == [task.id]
        ref = await waiter.get_status(task.id)
        assert ref is not None and ref.status == "running"
        await worker.complete(task_id=task.id, worker_id="w", result=2)  # after the read
        assert await _seconds(waiter.task_done_wake(task.id, WAIT_MS)) < PROMPT_S


async def test_claim_wake_sees_a_submit_committed_after_the_probe(tmp_path: Path) -> None:
    async with _two_stores(tmp_path) as (idle_worker, producer):
        await producer.connect()
        assert await idle_worker.claim(queues=["default"], worker_id="w") == []  # probed: nothing
        await producer.submit(name="echo", payload=1)  # after the probe
        assert await _seconds(idle_worker.claim_wake(["default"], WAIT_MS)) < PROMPT_S


async def test_a_probe_that_waits_for_its_connection_reads_the_clock_after_waiting(
    tmp_path: Path,
) -> None:
    """A probe asks whether work is due by a clock (``now_ms``). If it has to
    wait before it runs (here for its own connection, held by another of the
    process's users), a task submitted meanwhile is due by its submitter's
    clock: the probe must not judge it by a clock read before the wait. (It
    did, while the change counter its wait counts from was read after: the
    submit was taken for seen, the task for not yet due, and the worker slept
    a whole poll interval. Under CPU contention a preemption between the two
    reads did the same, about one call in a hundred.)"""
    async with _two_stores(tmp_path) as (idle_worker, producer):
        await idle_worker.connect()
        await producer.connect()
        engine = idle_worker._engine
        assert engine is not None
        async with engine.exclusive():  # the connection is busy with something else
            claiming = asyncio.ensure_future(idle_worker.claim(queues=["default"], worker_id="w"))
            await asyncio.sleep(0.02)  # the claim's probe is waiting for the connection
            task = await producer.submit(name="echo", payload=1)
        claimed = await claiming
        if not claimed:  # missed: the wait that follows must not sleep through it
            assert await _seconds(idle_worker.claim_wake(["default"], WAIT_MS)) < PROMPT_S
            claimed = await idle_worker.claim(queues=["default"], worker_id="w")
        assert [t.id for t in claimed] == [task.id]


async def test_concurrent_callers_on_one_store_each_count_from_their_own_read(
    tmp_path: Path,
) -> None:
    """Fifty ``call()``s in one process share a store. Caller A reads its
    task's status (running), the worker completes it, then caller B reads
    its own task's status: A's wait counts from A's read, not from B's (which
    already saw the completion and would have A sleep through it)."""
    async with _two_stores(tmp_path) as (callers, worker):
        first = await callers.submit(name="echo", payload=1)
        second = await callers.submit(name="echo", payload=2)
        assert len(await worker.claim(queues=["default"], worker_id="w", limit=2)) == 2
        a_read, b_read = asyncio.Event(), asyncio.Event()

        async def caller_a() -> float:
            ref = await callers.get_status(first.id)
            assert ref is not None and ref.status == "running"
            a_read.set()
            await b_read.wait()
            return await _seconds(callers.task_done_wake(first.id, WAIT_MS))

        async def caller_b() -> None:
            await a_read.wait()
            await worker.complete(task_id=first.id, worker_id="w", result=1)  # after A's read
            ref = await callers.get_status(second.id)  # after the commit
            assert ref is not None and ref.status == "running"
            b_read.set()

        a_slept, _ = await asyncio.gather(caller_a(), caller_b())
        assert a_slept < PROMPT_S


async def test_two_claim_loops_on_one_store_each_count_from_their_own_probe(
    tmp_path: Path,
) -> None:
    """Two workers of other queues share a store: loop A probes ``a``
    (nothing), a producer submits to ``a``, loop B probes ``b`` (nothing).
    A's sleep, in a task its loop starts (as the worker's idle wait is),
    counts from A's probe."""
    async with _two_stores(tmp_path) as (shared, producer):
        await producer.connect()
        a_probed, b_probed = asyncio.Event(), asyncio.Event()

        async def loop_a() -> float:
            assert await shared.claim(queues=["a"], worker_id="wa") == []
            a_probed.set()
            await b_probed.wait()
            wait = asyncio.ensure_future(shared.claim_wake(["a"], WAIT_MS))
            return await _seconds(wait)

        async def loop_b() -> None:
            await a_probed.wait()
            await producer.submit(name="echo", payload=1, queue="a")  # after A's probe
            assert await shared.claim(queues=["b"], worker_id="wb") == []
            b_probed.set()

        a_slept, _ = await asyncio.gather(loop_a(), loop_b())
        assert a_slept < PROMPT_S


async def test_a_wait_with_no_change_since_its_probe_still_sleeps(tmp_path: Path) -> None:
    """The other side: counting from the probe does not turn a quiet wait
    into a spin (the wait sleeps until its timeout)."""
    store = SQLiteStore(str(tmp_path / "tasks.db"))
    try:
        task = await store.submit(name="echo", payload=1)
        assert await store.claim(queues=["elsewhere"], worker_id="w") == []
        assert await _seconds(store.claim_wake(["elsewhere"], 300)) >= 0.25
        assert await store.get_status(task.id) is not None
        assert await _seconds(store.task_done_wake(task.id, 300)) >= 0.25
    finally:
        await store.close()


async def test_a_claim_that_took_all_there_was_counts_changes_from_its_own_commit(
    tmp_path: Path,
) -> None:
    """A claim loop whose claim came back short sleeps on that claim, with no
    probe after it (and, told of work, none before it either): a submit by
    another connection right after the claim's COMMIT must end the sleep at
    once, and so must one of its own store's."""
    from cairnq.store.ports import StoreWorkerPort

    async with _two_stores(tmp_path) as (worker, other):
        port = StoreWorkerPort(worker, "w", 30_000)

        async def take_all(draw: Any) -> Any:
            return await draw(None, 4)

        assert port.wake_pushed  # the claim loop sleeps straight after a short claim
        for submitter in (other, worker):
            await other.submit(name="echo", payload=1)
            claimed, _ = await port.claim(["default"], ["echo"], take_all, probe=False, single_draw=True)
            assert len(claimed) == 1  # short: 1 of 4
            await submitter.submit(name="echo", payload=2)  # after the claim's COMMIT
            assert await _seconds(port.wake(["default"], WAIT_MS)) < PROMPT_S
            drained, _ = await port.claim(["default"], ["echo"], take_all, probe=False, single_draw=True)
            assert len(drained) == 1


ECHO_WORKER = """
from cairnq import Worker

worker = Worker.sqlite(ARGS["path"], concurrency=4, poll_interval_ms=ARGS["poll_interval_ms"])

@worker.task("echo")
async def echo(ctx, payload):
    return payload

worker.serve()
"""


async def test_sequential_calls_to_a_worker_process_never_wait_out_a_poll_interval(
    tmp_path: Path,
) -> None:
    """Many calls, each to a worker in another process that sleeps between
    them: neither side's wait may miss the other's commit (when one did, about
    one call in a hundred took a whole poll interval)."""
    path = str(tmp_path / "tasks.db")
    client = CairnQ(SQLiteStore(path))
    procs = Procs(tmp_path)
    try:
        await client.connect()
        procs.start("worker", ECHO_WORKER, {"path": path, "poll_interval_ms": WAIT_MS})
        # The caller's own waits are as long as the worker's: a missed wakeup
        # on either side costs a whole WAIT_MS.
        poll = {"poll_ms": WAIT_MS, "max_poll_ms": WAIT_MS}
        assert await client.call("echo", -1, timeout_ms=60_000, **poll) == -1  # the worker is up
        slow = []
        for i in range(300):
            seconds = await _seconds(client.call("echo", i, timeout_ms=30_000, **poll))
            if seconds >= PROMPT_S:
                slow.append((i, round(seconds, 3)))
        assert slow == [], (
            f"calls that waited out a poll interval (of 300): {slow}\n{procs.outputs()}"
        )
    finally:
        procs.cleanup()
        await client.close()
