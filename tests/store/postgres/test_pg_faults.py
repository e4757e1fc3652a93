"""PostgreSQL: faults: backends terminated under the store."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

import pytest
from backends import DIALECTS

if "postgres" not in DIALECTS:
    pytest.skip("PostgreSQL is not available", allow_module_level=True)

import psycopg  # noqa: E402
from pg_kit import backends_of, fetch, pg, status_counts, terminate, until  # noqa: F401 (fixtures)

# ---------------------------------------------------------------------------
# 9. faults: backends terminated under the store


async def _twice(op: Callable[[], Any]) -> Any:
    """The next operation may fail on a dead connection; the one after must not."""
    try:
        return await op()
    except psycopg.OperationalError:
        pass
    try:
        return await op()
    except psycopg.OperationalError as exc:
        pytest.fail(
            f"the store did not recover: the second operation after the kill failed too: {exc!r}"
        )


async def test_store_recovers_after_its_backends_are_terminated(pg):
    dsn, db = pg.target, pg.database
    store = pg.store(max_size=4)
    await store.connect()
    seed = await store.submit(name="f", payload={"i": 0}, queue="fq")
    # grow the pool to several connections
    await asyncio.gather(*(store.submit(name="f", key=f"grow-{i}", queue="gq") for i in range(8)))
    await asyncio.gather(*(store.get(seed.id) for _ in range(8)))

    ops: list[Callable[[], Any]] = [
        lambda: store.get(seed.id),
        lambda: store.submit(name="f", payload={"i": 1}, queue="fq"),
        lambda: store.list(queue="fq"),
        lambda: store.submit(name="f", key="fault-key", queue="fq"),
        lambda: store.claim(queues=["fq"], worker_id="w_fault"),
        lambda: store.stats(),
    ]
    for op in ops:
        pids = backends_of(dsn, db)
        assert pids
        terminate(dsn, pids)
        assert await _twice(op) is not None
        assert await op() is not None  # and it stays healthy

    assert (await store.get(seed.id)).id == seed.id
    assert (await store.get_by_key("fault-key")) is not None


async def test_worker_keeps_draining_when_its_connections_are_terminated(pg):
    dsn, db = pg.target, pg.database
    client = pg.client()
    errors: list[tuple[BaseException, dict[str, Any]]] = []
    worker = pg.worker(
        ("dq",),
        concurrency=4,
        lease_ms=1000,
        poll_interval_ms=50,
        on_error=lambda exc, info: errors.append((exc, info)),
    )
    handled: list[int] = []

    @worker.task("drain")
    async def handler(ctx, payload):
        await asyncio.sleep(0.02)
        handled.append(payload["i"])
        return payload["i"]

    total = 60
    for i in range(total):
        await client.submit("drain", {"i": i}, queue="dq", max_attempts=20)
    await client.close()

    runner = asyncio.ensure_future(worker.run())
    try:
        await until(lambda: len(handled) >= 12, 20, "a third of the tasks")
        terminate(dsn, backends_of(dsn, db))
        await until(lambda: len(handled) >= 30, 20, "more tasks after the kill")
        terminate(dsn, backends_of(dsn, db))
        deadline = time.monotonic() + 40
        while status_counts(dsn).get("succeeded", 0) < total:
            assert time.monotonic() < deadline, status_counts(dsn)
            await asyncio.sleep(0.1)
    finally:
        worker.stop()
        await asyncio.wait_for(runner, 15)

    assert status_counts(dsn) == {"succeeded": total}  # none lost, none failed
    results = sorted(r[0] for r in fetch(dsn, "select result from cairnq_tasks"))
    assert results == list(range(total))
    assert errors, "the terminated connections were not reported through on_error"
    for exc, info in errors:
        assert info.get("phase") in ("claim", "execute"), info
        assert isinstance(exc, psycopg.Error), repr(exc)


# 10. the connection kept checked out for lone statements


async def test_pool_of_one_never_waits_on_its_kept_connection(pg):
    store = pg.store(min_size=1, max_size=1)
    await store.connect()
    task = await store.submit(name="h", queue="hq")
    # a transaction (claim) and lone statements, interleaved and concurrent
    claimed, got, _ = await asyncio.wait_for(
        asyncio.gather(
            store.claim(queues=["hq"], worker_id="w_hot"),
            store.get(task.id),
            store.submit(name="h", queue="hq"),
        ),
        timeout=10,
    )
    assert [t.id for t in claimed] == [task.id] and got.id == task.id
    assert store._executor._hot is None  # with one connection nothing is kept aside
    await store.close()


async def test_kept_connection_serves_lone_statements_and_goes_back_on_close(pg):
    dsn, db = pg.target, pg.database
    store = pg.store(min_size=1, max_size=4)
    await store.connect()
    task = await store.submit(name="h", queue="hq")
    executor = store._executor
    kept = executor._hot
    assert kept is not None
    for _ in range(20):
        await store.get(task.id)
    assert executor._hot is kept  # one connection for all of them, not a checkout each
    # concurrent lone statements: the kept one serves one, the pool the others
    gets = await asyncio.gather(*(store.get(task.id) for _ in range(8)))
    assert {t.id for t in gets} == {task.id}
    await store.close()
    assert executor._hot is None and kept.closed
    await _no_backends_left(dsn, db)


async def test_kept_connection_terminated_is_replaced(pg):
    dsn = pg.target
    store = pg.store(max_size=4)
    await store.connect()
    task = await store.submit(name="h", queue="hq")
    kept = store._executor._hot
    pid = kept.info.backend_pid
    terminate(dsn, [pid])
    assert (await _twice(lambda: store.get(task.id))).id == task.id
    assert store._executor._hot is not kept and kept.closed
    assert (await store.get(task.id)).id == task.id
    await store.close()


async def test_close_during_a_lone_statement_still_returns_the_kept_connection(pg):
    dsn, db = pg.target, pg.database
    store = pg.store(max_size=4)
    await store.connect()
    await store.submit(name="h", queue="hq")
    executor = store._executor
    slow = asyncio.ensure_future(executor._query_raw("select pg_sleep(0.3)", []))
    await asyncio.sleep(0.1)  # the sleep runs on the kept connection
    kept = executor._hot
    assert kept is not None and executor._hot_busy
    await asyncio.gather(store.close(), slow)
    assert executor._hot is None and kept.closed
    await _no_backends_left(dsn, db)


def _pooled_backends(dsn: str, db: str) -> list[tuple[int, str]]:
    """The store's pooled connections: every backend of ``db`` but a fleet
    member's session (named by its mark) and the LISTEN session."""
    return fetch(
        dsn,
        "select pid, query from pg_stat_activity where datname = %s and pid <> pg_backend_pid()"
        " and application_name not like 'cairnq_fleet%%' and query not ilike 'listen %%'",
        [db],
    )


async def test_a_quiet_store_keeps_one_pooled_connection(pg):
    """Lone statements, transactions (its migrations, a keyed submit) and a
    batch of writes, one after another, share the kept connection: the store
    holds one pooled connection, not one for each kind of use."""
    dsn, db = pg.target, pg.database
    store = pg.store()  # the defaults: min_size=1, max_size=10
    await store.connect()
    task = await store.submit(name="h", queue="hq")
    await store.get(task.id)
    await store.submit(name="h", queue="hq", key="k1")  # a transaction
    await store.claim(queues=["hq"], worker_id="w_quiet")
    await store.complete_many(task_ids=[task.id], worker_id="w_quiet", result=None)
    await store.cancel(task.id)
    # (the DSN check's own connection may still be listed a moment)
    await until(lambda: len(_pooled_backends(dsn, db)) == 1, 5.0, "one pooled connection")
    await asyncio.sleep(0.2)
    assert len(_pooled_backends(dsn, db)) == 1, _pooled_backends(dsn, db)
    from cairnq.store.postgres.pool import POOL_MAX_IDLE_S

    assert store._executor.pool.max_idle == POOL_MAX_IDLE_S  # spares go back within a minute
    await store.close()


async def _store_keeping_a_connection(pg: Any) -> tuple[Any, Any, Any, Any]:
    """(store, a task of it, its executor, the connection it keeps), once a
    lone statement has made it keep one."""
    store = pg.store(max_size=4)
    await store.connect()
    task = await store.submit(name="h", queue="hq")
    executor = store._executor
    kept = executor._hot
    assert kept is not None
    return store, task, executor, kept


async def test_a_transaction_on_the_kept_connection_leaves_lone_statements_free(pg):
    store, task, executor, kept = await _store_keeping_a_connection(pg)

    async def slow_transaction() -> None:
        async with executor.transaction() as session:
            await session.query("select pg_sleep(0.3)", [])

    slow = asyncio.ensure_future(slow_transaction())
    await asyncio.sleep(0.1)
    assert executor._hot_busy  # lent to the transaction
    started = time.monotonic()
    got = await asyncio.wait_for(store.get(task.id), 5)  # served by another connection
    assert got.id == task.id and time.monotonic() - started < 0.25
    await slow
    assert executor._hot is kept and not executor._hot_busy
    assert (await store.get(task.id)).id == task.id
    await store.close()


async def test_a_failed_transaction_gives_the_kept_connection_back_to_the_pool(pg):
    store, task, executor, kept = await _store_keeping_a_connection(pg)
    with pytest.raises(psycopg.errors.DivisionByZero):
        async with executor.transaction() as session:
            await session.query("select 1 / 0", [])
    # the pool checks it; the next lone statement keeps one again
    assert executor._hot is None and not executor._hot_busy
    assert (await store.get(task.id)).id == task.id
    assert executor._hot is not None
    assert not kept.closed or executor._hot is not kept
    await store.close()


async def test_an_idle_worker_keeps_one_pooled_connection(pg):
    """Startup (migrations, the fleet's join), claims that find nothing, probes
    and turns: a worker with nothing to do holds one pooled connection
    besides its fleet session and its LISTEN session."""
    dsn, db = pg.target, pg.database
    worker = pg.worker(("iq",), concurrency=4, poll_interval_ms=50)

    @worker.task("noop")
    async def noop(ctx, payload):
        return None

    run = asyncio.ensure_future(worker.run())
    try:
        await asyncio.sleep(1.0)  # twenty poll intervals of claims, probes and turns
        await until(lambda: len(_pooled_backends(dsn, db)) == 1, 5.0, "one pooled connection")
    finally:
        worker.stop()
        await run


async def _no_backends_left(dsn: str, db: str) -> None:
    """Every connection of the store is gone from the server. A backend whose
    client closed its socket exits a moment later (pg_stat_activity still
    lists it meanwhile); one the store leaked stays, and this times out."""
    await until(lambda: backends_of(dsn, db) == [], 5.0, "the store's backends to exit")
