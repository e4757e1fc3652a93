"""The worker: lifecycle."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest
from worker_kit import FAST, Gauge, finish, make

from cairnq import (
    CairnQ,
    ProtocolVersionMismatch,
    Worker,
)

# -- 10. lifecycle -------------------------------------------------------------


async def test_run_returns_after_stop_and_drains_in_flight_calls(backend) -> None:
    q = backend.client()
    w = make(backend)
    started = asyncio.Event()

    @w.task
    async def slow(ctx):
        started.set()
        await asyncio.sleep(0.3)
        return "slow-ok"

    task = await q.submit("slow")
    run = asyncio.ensure_future(w.run())
    await asyncio.wait_for(started.wait(), 5)
    w.stop()
    await asyncio.sleep(0.05)
    assert not run.done()  # waiting for the call in flight; it is not cancelled
    await asyncio.wait_for(run, 5)
    row = await q.get(task.id)
    assert (row.status, row.result) == ("succeeded", "slow-ok")
    # run() does not close the store: it is still usable
    assert (await w.store.get(task.id)).status == "succeeded"


async def test_stop_then_no_more_claims(backend) -> None:
    q = backend.client()
    w = make(backend)

    @w.task
    async def job(ctx):
        return "ok"

    first = await q.submit("job")
    run = asyncio.ensure_future(w.run())
    assert (await finish(q, first.id)).status == "succeeded"
    w.stop()
    await asyncio.wait_for(run, 5)
    second = await q.submit("job")
    await asyncio.sleep(0.1)
    assert (await q.get(second.id)).status == "queued"


async def test_run_concurrency_override(backend) -> None:
    q = backend.client()
    w = make(backend, concurrency=1)
    gauge = Gauge()

    @w.task
    async def job(ctx):
        with gauge:
            await asyncio.sleep(0.1)

    tasks = [await q.submit("job") for _ in range(3)]
    async with w.background(concurrency=3):
        for t in tasks:
            assert (await finish(q, t.id)).status == "succeeded"
    assert gauge.max == 3


async def test_background_with_an_empty_body_returns(backend) -> None:
    """stop() issued before run() got going must still stop it (API §5.2)."""
    w = make(backend)

    @w.task
    async def job(ctx):
        return 1

    async def body():
        async with w.background():
            pass

    runner = asyncio.ensure_future(body())
    done, _ = await asyncio.wait({runner}, timeout=1.5)
    if not done:
        w.stop()  # unstick the run so the test can end
        await asyncio.wait_for(runner, 5)
    assert done, "background() with an empty body never returned"


async def test_background_raises_run_failure(backend) -> None:
    if backend.dialect != "sqlite":
        pytest.skip("bumps protocol_version with sqlite3")
    q = backend.client()
    await q.connect()
    await q.close()
    with sqlite3.connect(backend.target) as conn:
        conn.execute("update cairnq_meta set value = '2' where key = 'protocol_version'")

    w = make(backend)
    with pytest.raises(ProtocolVersionMismatch) as err:
        async with w.background():
            await asyncio.sleep(0.1)
    assert str(err.value) == "storage protocol_version=2, SDK supports 1"

    w2 = make(backend)
    with pytest.raises(KeyError) as body_err:
        async with w2.background():
            await asyncio.sleep(0.1)
            raise KeyError("body")
    assert isinstance(body_err.value.__cause__, ProtocolVersionMismatch)

    w3 = make(backend)
    original = ValueError("original cause")
    with pytest.raises(KeyError) as body_err:
        async with w3.background():
            await asyncio.sleep(0.1)
            raise KeyError("body") from original
    assert body_err.value.__cause__ is original


def _count_closes(store) -> list[int]:
    closes: list[int] = []
    orig = store.close

    async def close():
        closes.append(1)
        await orig()

    store.close = close
    return closes


async def test_factory_worker_owns_its_store(backend) -> None:
    if backend.dialect != "sqlite":
        pytest.skip("Worker.sqlite")
    q = backend.client()
    w = Worker.sqlite(backend.target, **FAST)
    closes = _count_closes(w.store)

    @w.task
    async def job(ctx):
        return "owned"

    task = await q.submit("job")
    async with w.background() as running:
        assert running is w
        assert (await finish(q, task.id)).result == "owned"
        assert closes == []
    assert closes == [1]


async def test_constructed_worker_does_not_own_its_store(backend) -> None:
    q = backend.client()
    store = backend.store()
    w = Worker(store, ["default"], **FAST)
    closes = _count_closes(store)

    @w.task
    async def job(ctx):
        return "shared"

    task = await q.submit("job")
    async with w.background():
        assert (await finish(q, task.id)).result == "shared"
    assert closes == []
    assert (await store.get(task.id)).status == "succeeded"
    await w.close()  # close() closes it, owned or not
    assert closes == [1]


async def test_worker_id_and_serve_inside_a_loop(backend) -> None:
    w = make(backend)
    other = make(backend)
    assert w.worker_id.startswith("worker_")
    assert len(w.worker_id) == len("worker_") + 26
    assert w.worker_id != other.worker_id
    with pytest.raises(RuntimeError):
        w.serve()


def test_serve_runs_until_stop_and_closes_an_owned_store(sqlite_backend) -> None:
    path = sqlite_backend.target

    async def submit() -> str:
        async with CairnQ.sqlite(path) as q:
            return (await q.submit("job")).id

    task_id = asyncio.run(submit())
    w = Worker.sqlite(path, **FAST)
    closes = _count_closes(w.store)

    @w.task
    async def job(ctx):
        w.stop()
        await asyncio.sleep(0.05)  # in flight when stop() is called: drained
        return "served"

    w.serve()
    assert closes == [1]

    async def read():
        async with CairnQ.sqlite(path) as q:
            return await q.get(task_id)

    row = asyncio.run(read())
    assert (row.status, row.result) == ("succeeded", "served")


def _block_writes(backend, task_id: str):
    """Take, on a connection of its own, what the completion of ``task_id``
    must wait for (SQLite: the write lock; PostgreSQL: the task's row lock);
    returns the function that lets go."""
    if backend.dialect == "sqlite":
        conn = sqlite3.connect(backend.target, isolation_level=None)
        conn.execute("begin immediate")
    else:
        import psycopg

        conn = psycopg.connect(backend.target)
        conn.execute("select 1 from cairnq_tasks where id = %s for update", (task_id,))

    def release() -> None:
        conn.rollback()  # ends the open transaction, on either driver
        conn.close()

    return release


async def test_a_call_lets_go_of_its_asyncio_task_once_it_ends_not_when_its_completion_is_written(
    backend,
) -> None:
    # A finished call's task, coroutine and context are freed by reference
    # counting as soon as the call ends: a drain keeps one claim's worth of
    # calls alive, not two (the young-generation collector stays quiet).
    import weakref

    q = backend.client()
    w = make(backend)
    seen: list[weakref.ref] = []
    released: list = []
    returned = asyncio.Event()

    @w.task
    async def quick(ctx):
        seen.append(weakref.ref(asyncio.current_task()))
        released.append(_block_writes(backend, ctx.task_id))
        returned.set()
        return "ok"

    task = await q.submit("quick")
    run = asyncio.ensure_future(w.run())
    try:
        await asyncio.wait_for(returned.wait(), 5)
        for _ in range(20):
            await asyncio.sleep(0.005)
        assert (await q.get(task.id)).status == "running"  # the completion waits for the lock
        assert seen[0]() is None, "the ended call's asyncio task is still referenced"
    finally:
        for release in released:
            release()
    row = await finish(q, task.id)
    assert (row.status, row.result) == ("succeeded", "ok")
    w.stop()
    await asyncio.wait_for(run, 5)
