"""A fleet on a real database (cairnq/store/postgres/fleet.py and
fleet_session.py): each member's session carries its mark, the fleet_turn
statement lists the live members, only the leader listens and keeps the gate
the others wait at, the gate opens when the leader has more work than it can
take and when its session ends, a worker that stops takes its mark off, and a
store whose claim_wake the user replaced forms no fleet (0.15.1's hook is
honoured)."""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

from pg_kit import fetch, listening, pg  # noqa: F401  (the fixture)
from processes import until

from cairnq import CairnQ, PostgresStore, Worker
from cairnq.store.postgres.fleet import fleet_key, fleet_prefix
from cairnq.store.postgres.fleet_session import GATE_CLASS, FleetSession, gate_of

KEY = fleet_key(None, ["default"], ["noop"])
PREFIX = fleet_prefix(KEY)


def marked(dsn: str) -> set[str]:
    """The worker ids the fleet's marks name, read as a bystander."""
    rows = fetch(
        dsn,
        "select application_name from pg_stat_activity where datname = current_database()"
        " and left(application_name, length(%s)) = %s",
        [PREFIX, PREFIX],
    )
    return {name[len(PREFIX) :] for (name,) in rows}


def listening_sessions(dsn: str) -> int:
    """Sessions of the database whose last command was a LISTEN."""
    rows = fetch(
        dsn,
        "select count(*) from pg_stat_activity where datname = current_database()"
        " and query ilike 'listen%%' and pid <> pg_backend_pid()",
    )
    return int(rows[0][0])


def _gate_locks(dsn: str, granted: bool, mode: str) -> int:
    """The fleet's gate's lock requests in pg_locks, granted or waiting, of
    ``mode``."""
    rows = fetch(
        dsn,
        "select count(*) from pg_locks where locktype = 'advisory' and granted = %s"
        " and mode = %s and classid = %s::oid and objid = %s::oid and objsubid = 2"
        # advisory locks are per database: a fleet on another database of the
        # server (another test's, a benchmark's) takes the same keys
        " and database = (select oid from pg_database where datname = current_database())",
        [granted, mode, GATE_CLASS, gate_of(KEY) & 0xFFFFFFFF],
    )
    return int(rows[0][0])


def at_the_gate(dsn: str) -> int:
    """Sessions waiting for the fleet's gate."""
    return _gate_locks(dsn, False, "ShareLock")


def keepers(dsn: str) -> int:
    """Sessions holding the fleet's gate."""
    return _gate_locks(dsn, True, "ExclusiveLock")


def worker(store: Any, interval_ms: int = 50, concurrency: int = 2, seen: Any = None) -> Worker:
    w = Worker(store, ["default"], concurrency=concurrency, poll_interval_ms=interval_ms)

    @w.task("noop")
    async def noop(ctx: Any, payload: Any) -> None:
        if seen is not None:
            seen.append(w.worker_id)
            await asyncio.sleep(0.2)  # busy a while: the others must help
        return None

    return w


@asynccontextmanager
async def running(workers: list[Worker], stores: list[PostgresStore]) -> AsyncIterator[list[Any]]:
    """The workers running (their run() futures), stopped and their stores
    closed on the way out."""
    runs = [asyncio.ensure_future(w.run()) for w in workers]
    try:
        yield runs
    finally:
        for w in workers:
            w.stop()
        await asyncio.gather(*runs, return_exceptions=True)
        for s in stores:
            await s.close()


def _member(store: PostgresStore, w: Worker) -> Any:
    return store._listener.fleet.members[w.worker_id]  # type: ignore[union-attr]


async def test_members_are_listed_by_their_marks_until_they_stop(pg: Any) -> None:  # noqa: F811
    stores = [PostgresStore(pg.target) for _ in range(2)]
    workers = [worker(s) for s in stores]
    async with running(workers, stores) as runs:
        ids = {w.worker_id for w in workers}
        await until(lambda: marked(pg.target) == ids, 20, "both workers' marks")
        rows = await stores[0]._fetch("fleet_turn", {"prefix": PREFIX})
        assert {r[0] for r in rows} == ids
        leader = min(ids)
        leading = next(i for i, w in enumerate(workers) if w.worker_id == leader)
        other = workers[1 - leading].worker_id
        await until(
            lambda: (
                _member(stores[leading], workers[leading]).leader
                and not _member(stores[1 - leading], workers[1 - leading]).leader
            ),
            20,
            "the smallest id to lead, alone",
        )
        # The leader alone listens and keeps the gate; the other waits at it.
        await until(lambda: at_the_gate(pg.target) == 1, 20, "the other member at the gate")
        await until(lambda: listening_sessions(pg.target) == 1, 20, "the leader alone to listen")
        assert stores[leading]._fleet_session.keeping == gate_of(KEY)  # type: ignore[union-attr]
        # The leader stops, its store left open: its mark goes, the other leads.
        workers[leading].stop()
        await asyncio.wait_for(runs[leading], 10)
        await until(lambda: marked(pg.target) == {other}, 20, "the leader's mark to go")
        survivor = _member(stores[1 - leading], workers[1 - leading])
        await until(lambda: survivor.leader, 20, "the other to lead")
        q = CairnQ(PostgresStore(pg.target))
        task = await q.submit("noop", delay_ms=300)
        assert (await q.wait(task.id, timeout_ms=10_000)).status == "succeeded"
        await q.close()
    await until(lambda: marked(pg.target) == set(), 10, "closed stores to leave no mark")


async def test_more_work_than_the_leader_can_take_opens_the_gate_for_the_others(
    pg: Any,  # noqa: F811
) -> None:
    """12 tasks of 0.2 s each, submitted at once (one group commit), into a
    fleet of three workers of 2 slots: the leader hears it, draws full and
    has no free slot for a while, so it opens the gate, and the others claim
    too, at once, not at their turns (2 s away or more)."""
    stores = [PostgresStore(pg.target) for _ in range(3)]
    q = CairnQ(PostgresStore(pg.target))
    seen: list[str] = []
    workers = [worker(s, interval_ms=1_000, seen=seen) for s in stores]
    async with running(workers, [*stores, q.store]):
        await until(lambda: at_the_gate(pg.target) == 2, 30, "two members at the gate")
        await asyncio.sleep(0.5)
        began = time.monotonic()
        await asyncio.gather(*(q.submit("noop", {"i": i}) for i in range(12)))

        async def all_done() -> None:
            while (await q.stats())["default"]["succeeded"] < 12:
                await asyncio.sleep(0.02)

        await asyncio.wait_for(all_done(), 30)
        took = time.monotonic() - began
        assert len(set(seen)) == 3, seen  # all three took part
        # 12 tasks x 0.2 s on 6 slots: 0.4 s; the leader alone would take 1.2 s.
        assert took < 1.1, took


async def test_the_gate_opens_when_its_keepers_session_ends_and_then_is_found_unkept(
    pg: Any,  # noqa: F811
) -> None:
    keeper_store, waiter_store = PostgresStore(pg.target), PostgresStore(pg.target)
    await keeper_store.connect()
    await waiter_store.connect()
    keeper = keeper_store._fleet_session
    waiter = waiter_store._fleet_session
    assert keeper is not None and waiter is not None
    try:
        keeper.start(PREFIX + "k")
        waiter.start(PREFIX + "w")
        await until(lambda: keeper.up and waiter.up, 10, "both sessions")
        gate = gate_of(KEY)
        assert await waiter.wait(gate, 5) == "unkept"  # nobody keeps it: at once
        assert await keeper.keep(gate)
        assert await waiter_store._fleet_session.keep(gate) is False  # one keeper
        assert await waiter.wait(gate, 0.3) == "turn"  # kept, and not opened
        waiting = asyncio.ensure_future(waiter.wait(gate, 30))
        await until(lambda: at_the_gate(pg.target) == 1, 10, "the waiter at the gate")
        keeper.open(1.0)
        assert await asyncio.wait_for(waiting, 5) == "opened"
        opening = keeper._opening
        assert opening is not None
        await asyncio.wait_for(opening, 5)  # taken again once the grant was let go
        assert keeper.keeping == gate
        keeper.open(1.0)  # within a quarter interval of the last: not again
        assert keeper._opening is opening
        # A wait given up is still the one in flight: the next wait takes it.
        given_up = asyncio.ensure_future(waiter.wait(gate, 30))
        await until(lambda: at_the_gate(pg.target) == 1, 10, "the waiter back at the gate")
        given_up.cancel()
        await asyncio.sleep(0.2)
        assert at_the_gate(pg.target) == 1  # still waiting on the server
        waiting = asyncio.ensure_future(waiter.wait(gate, 30))
        await asyncio.sleep(0.1)
        assert at_the_gate(pg.target) == 1  # the same wait, not a second one
        await keeper.close()  # the keeper's session ends: the gate opens by itself
        assert await asyncio.wait_for(waiting, 5) == "opened"
        assert await waiter.wait(gate, 5) == "unkept"
    finally:
        await keeper_store.close()
        await waiter_store.close()


async def test_a_fleet_session_the_server_ends_is_opened_again_and_the_fleet_reforms(
    pg: Any,  # noqa: F811
) -> None:
    """The server ends the leader's fleet session (an operator's
    pg_terminate_backend, a failover): its gate opens and its mark goes
    while its worker knows nothing of it. The other takes over; the leader,
    not finding its mark at its next turn, opens a session again and leads
    again: one keeper, one member at the gate, both marks listed."""
    stores = [PostgresStore(pg.target) for _ in range(2)]
    workers = [worker(s, interval_ms=100) for s in stores]
    async with running(workers, stores):
        ids = {w.worker_id for w in workers}
        await until(lambda: keepers(pg.target) == 1 and at_the_gate(pg.target) == 1, 20, "formed")
        leader = min(ids)
        fetch(
            pg.target,
            "select pg_terminate_backend(pid) from pg_stat_activity where application_name = %s",
            [PREFIX + leader],
        )
        await until(lambda: marked(pg.target) == ids - {leader}, 10, "the leader's mark gone")
        await until(
            lambda: marked(pg.target) == ids
            and keepers(pg.target) == 1
            and at_the_gate(pg.target) == 1,
            30,
            "the leader's session back, and one keeper",
        )
        q = CairnQ(PostgresStore(pg.target))
        task = await q.submit("noop")
        assert (await q.wait(task.id, timeout_ms=10_000)).status == "succeeded"
        await q.close()


class _NoSession:
    """An executor without ``dedicated``: its workers form no fleet."""


async def test_a_fleet_session_needs_an_executor_that_can_open_one() -> None:
    assert not FleetSession(_NoSession(), lambda name, params: ("", [])).available


async def test_a_store_whose_claim_wake_is_replaced_forms_no_fleet(pg: Any) -> None:  # noqa: F811
    store = PostgresStore(pg.target)
    calls = []
    original = store.claim_wake

    async def claim_wake(queues: list[str], timeout_ms: int) -> Any:
        calls.append(timeout_ms)
        return await original(queues, timeout_ms)

    store.claim_wake = claim_wake  # type: ignore[method-assign]
    w = worker(store)
    run = asyncio.ensure_future(w.run())
    try:
        await until(lambda: len(calls) >= 5, 20, "the worker to call the replaced claim_wake")
        assert marked(pg.target) == set()
        assert set(calls) == {50}  # every poll interval, as in 0.15.1
    finally:
        w.stop()
        await run
        await store.close()


class _SlowTurn(PostgresStore):
    """A store whose first fleet_turn read is slow: while it is on its way the
    listening session starts over (as a lost connection or a change of
    channels makes it do) and is back before the read returns, and a task is
    submitted in the gap, when no session listened."""

    submitter: Any = None

    async def _fetch(self, name: str, params: dict[str, Any]) -> list[Any]:
        if name == "fleet_turn" and self.submitter is not None:
            listener = self._listener
            assert listener is not None
            # The new session waits for the submit below to land: a submit
            # slower than a reconnect (a loaded host) would not be in the gap.
            listen, landed = listener._listen, asyncio.Event()

            async def held_back(*args: Any) -> Any:
                await landed.wait()
                return await listen(*args)

            listener._listen = held_back
            if listener.connected:
                listener._restart()  # the session starts over now, during the read
            submitter, self.submitter = self.submitter, None
            await submitter.submit(name="noop", payload=None)  # unheard: nobody listens
            assert not listener.connected  # (it landed in the gap)
            listener._listen = listen
            landed.set()
            await until(lambda: listener.connected, 10, "the session to come back")
        return await super()._fetch(name, params)


async def test_news_raised_while_the_session_starts_over_during_a_turn_is_not_slept_through(
    pg: Any,  # noqa: F811
) -> None:
    store, other = _SlowTurn(pg.target), PostgresStore(pg.target)
    try:
        await listening(store)
        assert store._fleet_member("w_slow_turn", ["default"], ["noop"], 5_000) is None  # (opening)
        session = store._fleet_session
        assert session is not None
        await until(lambda: session.up, 10, "the fleet session")
        # Warm: its next submit is one round trip.
        await other.submit(name="warm", payload=None, queue="elsewhere")
        store.submitter = other
        began = asyncio.get_running_loop().time()
        # A worker's first idle waits (it joins the fleet, takes its turn, and
        # waits up to its poll interval), until one has begun before the
        # submit and returned after it: the caller then probes.
        for _ in range(5):
            await store._fleet_wait("w_slow_turn", ["default"], ["noop"], 5_000)
            if store.submitter is None:
                break
        assert store.submitter is None  # the submit did land in the gap
        assert asyncio.get_running_loop().time() - began < 2.5, "slept through the unheard submit"
    finally:
        await store.close()
        await other.close()
