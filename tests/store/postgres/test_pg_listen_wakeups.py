"""PostgreSQL: LISTEN wakeups in our store."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Sequence

import pytest
from backends import DIALECTS
from pg_kit import listener_pids, listening, pg, terminate, timed, until  # noqa: F401 (fixtures)

import cairnq
from cairnq import (
    CairnQ,
    ListenUnavailable,
    PostgresStore,
    create_pool_executor,
)

if "postgres" not in DIALECTS:
    pytest.skip("PostgreSQL is not available", allow_module_level=True)


# ---------------------------------------------------------------------------
# 4. LISTEN wakeups in our store


async def test_claim_wake_woken_by_another_stores_submit(pg):
    waiter_store, submitter = pg.store(), pg.store()
    await submitter.connect()
    await listening(waiter_store)

    # a submit to another queue does not wake it
    wait = asyncio.ensure_future(waiter_store.claim_wake(["q"], 800))
    await asyncio.sleep(0.05)
    start = time.monotonic()
    await submitter.submit(name="w", queue="elsewhere")
    await wait
    assert time.monotonic() - start > 0.6

    # a submit to "q" does, within ~200 ms
    wait = asyncio.ensure_future(waiter_store.claim_wake(["q"], 5000))
    await asyncio.sleep(0.05)
    assert not wait.done()
    start = time.monotonic()
    await submitter.submit(name="w", queue="q")
    await wait
    assert time.monotonic() - start < 0.3

    # a notification between waits is buffered for the next one, then consumed
    await submitter.submit(name="w", queue="q")
    await asyncio.sleep(0.2)
    assert await timed(waiter_store.claim_wake(["q"], 3000)) < 0.1
    assert await timed(waiter_store.claim_wake(["q"], 300)) > 0.25

    # one of several queues
    wait = asyncio.ensure_future(waiter_store.claim_wake(["a", "q2"], 5000))
    await asyncio.sleep(0.05)
    start = time.monotonic()
    await submitter.submit(name="w", queue="q2")
    await wait
    assert time.monotonic() - start < 0.3


async def test_task_done_wake_woken_by_another_store(pg):
    waiter_store, other = pg.store(), pg.store()
    await other.connect()
    await listening(waiter_store)

    done = await other.submit(name="d", queue="dq")
    unrelated = await other.submit(name="d", queue="dq")
    [c] = await other.claim(queues=["dq"], worker_id="w_other")
    assert c.id == done.id

    wait = asyncio.ensure_future(waiter_store.task_done_wake(done.id, 5000))
    await asyncio.sleep(0.05)
    await other.cancel(unrelated.id)  # another task finishing does not wake it
    await asyncio.sleep(0.3)
    assert not wait.done()
    start = time.monotonic()
    await other.complete(task_id=done.id, worker_id="w_other", result=1)
    await wait
    assert time.monotonic() - start < 0.3

    queued = await other.submit(name="d", queue="dq2")
    wait = asyncio.ensure_future(waiter_store.task_done_wake(queued.id, 5000))
    await asyncio.sleep(0.05)
    start = time.monotonic()
    await other.cancel(queued.id)
    await wait
    assert time.monotonic() - start < 0.3


async def test_task_done_wake_says_it_was_told_and_wait_reads_the_row_once(pg):
    """A cairnq_done for the awaited task: task_done_wake returns True, and the
    waiter reads the finished row with one ``get`` (no status probe first)."""
    from cairnq import CairnQ, PostgresStore

    class Metered(PostgresStore):
        seen: list[str] = []

        async def _fetch(self, name, params):
            self.seen.append(name)
            return await super()._fetch(name, params)

    waiter_store, other = Metered(pg.target), pg.store()
    try:
        await listening(waiter_store)
        task = await other.submit(name="d", queue="tq")
        wait = asyncio.ensure_future(
            CairnQ(waiter_store).wait(task.id, timeout_ms=5_000, poll_ms=2_000)
        )
        await asyncio.sleep(0.1)  # one status probe, then asleep for 2 s
        Metered.seen.clear()
        await other.cancel(task.id)
        done = await asyncio.wait_for(wait, 1)
        assert done.status == "canceled"
        assert Metered.seen == ["get"]

        queued = await other.submit(name="d", queue="tq")
        told = asyncio.ensure_future(waiter_store.task_done_wake(queued.id, 5_000))
        await asyncio.sleep(0.05)
        await other.cancel(queued.id)
        assert await told is True
        assert await waiter_store.task_done_wake(queued.id, 10) is False  # a timeout: not told
    finally:
        await waiter_store.close()


def _metered_store(pg: Any) -> Any:
    """A PostgresStore noting the name of every lone statement (``_fetch``)."""
    from cairnq import PostgresStore

    class Metered(PostgresStore):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.seen: list[str] = []

        async def _fetch(self, name, params):
            self.seen.append(name)
            return await super()._fetch(name, params)

    return Metered(pg.target)


async def test_worker_told_of_work_claims_without_probing_and_idles_after_a_short_claim(pg):
    """Woken by cairnq_queued, the worker claims at once (no probe), in
    autocommit (no transaction), and a claim that found less than it could
    take sends it back to sleep instead of probing again."""
    store, client = _metered_store(pg), pg.client()
    await listening(store)
    await client.connect()
    worker = pg.worker(("nq",), store=store, concurrency=4, poll_interval_ms=5_000)
    transactions = 0
    begin = store._transaction

    def counting_transaction():
        nonlocal transactions
        transactions += 1
        return begin()

    store._transaction = counting_transaction

    @worker.task("n")
    async def handler(ctx, payload):
        return payload

    async with worker.background():
        await asyncio.sleep(0.3)  # its first probe found nothing: asleep for up to 5 s
        store.seen.clear()
        transactions = 0
        for i in range(3):
            assert await client.call("n", {"i": i}, queue="nq", timeout_ms=3_000) == {"i": i}
        await asyncio.sleep(0.1)
        assert not [n for n in store.seen if n.startswith("claimable_probe")], store.seen
        assert transactions == 0


async def test_a_worker_kept_busy_by_notifications_still_recovers_expired_leases(pg):
    """Claims that skip the probe skip lease recovery too; the worker still
    probes (and recovers) at least once per poll interval."""
    store, client = pg.store(), pg.client()
    await listening(store)
    await client.connect()
    lost = await client.submit("n", {"lost": True}, queue="rq")
    [claimed] = await client.store.claim(queues=["rq"], worker_id="w_dead", lease_ms=100)
    assert claimed.id == lost.id
    worker = pg.worker(("rq",), store=store, concurrency=2, poll_interval_ms=300)

    @worker.task("n")
    async def handler(ctx, payload):
        return payload

    async with worker.background():
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            await client.submit("n", {}, queue="rq")  # news of work every 20 ms
            got = await client.get(lost.id)
            if got is not None and got.status == "succeeded":
                break
            await asyncio.sleep(0.02)
    got = await client.get(lost.id)
    assert got is not None and (got.status, got.attempt) == ("succeeded", 2)


async def test_worker_with_long_poll_interval_picks_up_at_once_when_listening(pg):
    store, client = pg.store(), pg.client()
    await listening(store)
    await client.connect()
    ran = asyncio.Event()
    worker = pg.worker(("wq",), store=store, poll_interval_ms=5000)

    @worker.task("wake.me")
    async def handler(ctx, payload):
        ran.set()
        return payload

    runner = asyncio.ensure_future(worker.run())
    try:
        await asyncio.sleep(0.3)  # the worker found nothing and is idle (for up to 5 s)
        start = time.monotonic()
        task = await client.submit("wake.me", {"n": 1}, queue="wq")
        await asyncio.wait_for(ran.wait(), 3)
        assert time.monotonic() - start < 0.5
        done = await client.wait(task.id, timeout_ms=3000)
        assert done.status == "succeeded" and done.result == {"n": 1}
    finally:
        worker.stop()
        await asyncio.wait_for(runner, 10)


async def test_a_wait_begun_before_the_listening_session_is_up_ends_when_it_is(pg):
    """A wait that starts while the store's LISTEN session is still connecting
    cannot be told anything until it is up: it ends (False: look for
    yourself) as soon as the session listens, not after its whole timeout,
    and the wait after it is pushed."""
    store, submitter = pg.store(), pg.store()
    await submitter.connect()
    await store.connect()
    assert store._listener is not None and not store._listener.connected
    assert await store.claim_wake(["q"], 5000) is False
    assert store._listener.connected, "the wait ended before a session listened"
    took = await timed(store.claim_wake(["q"], 3000))
    assert took > 2.5  # connected now: a real wait, which nothing ends

    fresh = pg.store()
    await fresh.connect()
    assert await timed(fresh.task_done_wake("task_nobody", 5000)) < 2.5


async def test_a_store_listens_only_to_what_its_waits_need(pg):
    """No listening session for a store that only submits (each submit raises
    cairnq_queued, which a session would have to take in); a result wait
    starts one on cairnq_done only; a claim wait adds cairnq_queued."""
    dsn = pg.target
    store = PostgresStore(f"{dsn}?application_name=cq_lazy")
    pg._stores.append(store)  # closed with the backend
    for i in range(5):
        await store.submit(name="s", payload={"i": i})
    await asyncio.sleep(0.3)
    assert listener_pids(dsn, "cq_lazy") == []
    task = await store.submit(name="s")
    assert await store.task_done_wake(task.id, 5000) is False  # ended when the session came up
    assert store._listener._session_channels == {"cairnq_done"}
    await store.claim_wake(["q"], 5000)  # starts it over with cairnq_queued added
    await until(lambda: store._listener.connected, 5, "listener back")
    assert store._listener._session_channels == {"cairnq_done", "cairnq_queued"}
    other = pg.store()
    wait = asyncio.ensure_future(store.claim_wake(["q"], 5000))
    await asyncio.sleep(0.05)
    await other.submit(name="w", queue="q")
    assert await asyncio.wait_for(wait, 2) is True  # told


async def test_a_worker_whose_first_idle_wait_began_before_listening_claims_at_once(pg):
    """The worker's first claim finds nothing before its store listens; a
    task submitted a moment later is claimed within moments, not after the
    worker's (long) poll interval."""
    client = pg.client()
    await client.connect()
    store = pg.store()
    ran = asyncio.Event()
    worker = pg.worker(("wq",), store=store, poll_interval_ms=10_000)

    @worker.task("wake.me")
    async def handler(ctx, payload):
        ran.set()
        return payload

    runner = asyncio.ensure_future(worker.run())
    try:
        await until(lambda: store._listener is not None and store._listener.connected, 5, "listener")
        await asyncio.sleep(0.2)
        start = time.monotonic()
        await client.submit("wake.me", {"n": 1}, queue="wq")
        await asyncio.wait_for(ran.wait(), 15)
        assert time.monotonic() - start < 2.5, "the worker slept through its first wait"
    finally:
        worker.stop()
        await asyncio.wait_for(runner, 10)


class QueryOnly:
    """An executor with only the required protocol members (no ``listen``)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.closed = False

    async def query(self, text: str, values: Sequence[Any]) -> list[Any]:
        return await self._inner.query(text, values)

    async def execute(self, sql: str) -> None:
        await self._inner.execute(sql)

    def transaction(self) -> Any:
        return self._inner.transaction()

    async def close(self) -> None:
        self.closed = True


class RefusesListen(QueryOnly):
    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.listen_calls = 0

    async def listen(self, channels: Any, on_notify: Any, on_close: Any) -> Any:
        self.listen_calls += 1
        raise ListenUnavailable("transaction-mode pooler: LISTEN is not supported")


@pytest.mark.parametrize("kind", [QueryOnly, RefusesListen])
async def test_executor_without_listen_is_a_plain_poller(pg, kind, caplog):
    caplog.set_level(logging.DEBUG, logger="cairnq")
    inner = await create_pool_executor(pg.target)
    try:
        executor, client_executor = kind(inner), kind(inner)  # one listener per store
        store = PostgresStore(executor)
        client = CairnQ(PostgresStore(client_executor))
        await store.connect()
        await asyncio.sleep(0.1)
        assert not store._listener.connected

        # wakes are plain sleeps, without errors, even with work arriving
        wait = asyncio.ensure_future(store.claim_wake(["pq"], 400))
        await client.submit("poll.me", {"i": 0}, queue="pq")
        assert await timed(wait) > 0.3
        assert await timed(store.task_done_wake("task_x", 200)) >= 0.19

        errors: list[Any] = []
        worker = cairnq.Worker(
            store,
            ["pq"],
            poll_interval_ms=100,
            concurrency=2,
            on_error=lambda e, i: errors.append((e, i)),
        )

        @worker.task("poll.me")
        async def handler(ctx, payload):
            return payload["i"]

        ids = [(await client.submit("poll.me", {"i": i}, queue="pq")).id for i in range(1, 6)]
        async with worker.background():
            for task_id in ids:
                done = await client.wait(task_id, timeout_ms=5000)
                assert done.status == "succeeded"
        assert errors == []
        assert not store._listener.connected
        if isinstance(executor, RefusesListen):
            # disabled for the connection lifetime: asked once per store, never retried
            assert executor.listen_calls == 1 and client_executor.listen_calls == 1
        await client.close()
        await store.close()
        assert not executor.closed and not client_executor.closed
        assert not [
            r
            for r in caplog.records
            if r.name.startswith("cairnq") and r.levelno >= logging.WARNING
        ]
    finally:
        await inner.close()


async def test_killed_listener_releases_waiters_and_is_reestablished(pg):
    dsn = pg.target
    store = PostgresStore(f"{dsn}?application_name=cq_waiter")
    pg._stores.append(store)  # closed with the backend
    submitter = pg.store()
    await submitter.connect()
    await listening(store)
    await asyncio.sleep(0.05)
    [pid] = listener_pids(dsn, "cq_waiter")

    wait = asyncio.ensure_future(store.claim_wake(["kq"], 10_000))
    done_wait = asyncio.ensure_future(store.task_done_wake("task_never", 10_000))
    await asyncio.sleep(0.05)
    start = time.monotonic()
    terminate(dsn, [pid])
    await asyncio.wait_for(asyncio.gather(wait, done_wait), 5)
    assert time.monotonic() - start < 3  # released, not left to sleep 10 s
    await until(lambda: not store._listener.connected, 3, "listener marked down")

    # a wait while it is down kicks off the reconnect, and ends (told
    # nothing) once a session listens again: well before its timeout
    assert await timed(store.claim_wake(["kq"], 8000)) < 5
    await until(lambda: store._listener.connected, 5, "listener re-established")
    await asyncio.sleep(0.05)
    new = listener_pids(dsn, "cq_waiter")
    assert len(new) == 1 and new != [pid]

    wait = asyncio.ensure_future(store.claim_wake(["kq"], 5000))
    await asyncio.sleep(0.05)
    start = time.monotonic()
    await submitter.submit(name="k", queue="kq")
    await wait
    assert time.monotonic() - start < 0.3
