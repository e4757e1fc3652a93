"""A fleet on a real database (cairnq/store/postgres/fleet.py): each member's
listening session carries its mark, the fleet_turn statement lists the live
members, a worker that stops takes its mark off, and a store whose
claim_wake the user replaced forms no fleet (0.15.1's hook is honoured)."""

from __future__ import annotations

import asyncio
from typing import Any

from pg_kit import fetch, listening, pg  # noqa: F401  (the fixture)
from processes import until

from cairnq import CairnQ, PostgresStore, Worker
from cairnq.store.postgres.fleet import fleet_key, fleet_prefix

PREFIX = fleet_prefix(fleet_key(None, ["default"], ["noop"]))


def marked(dsn: str) -> set[str]:
    """The worker ids the fleet_turn statement finds, read as a bystander."""
    rows = fetch(
        dsn,
        "select query from pg_stat_activity where datname = current_database()"
        " and left(query, length(%s) + 8) = 'listen \"' || %s",
        [PREFIX, PREFIX],
    )
    return {q[len('listen "') + len(PREFIX) : -1] for (q,) in rows}


def worker(store: Any) -> Worker:
    w = Worker(store, ["default"], concurrency=2, poll_interval_ms=50)

    @w.task("noop")
    async def noop(ctx: Any, payload: Any) -> None:
        return None

    return w


async def test_members_are_listed_by_their_marks_until_they_stop(pg: Any) -> None:  # noqa: F811
    stores = [PostgresStore(pg.target) for _ in range(2)]
    workers = [worker(s) for s in stores]
    runs = [asyncio.ensure_future(w.run()) for w in workers]
    try:
        ids = {w.worker_id for w in workers}
        await until(lambda: marked(pg.target) == ids, 20, "both workers' marks")
        rows = await stores[0]._fetch("fleet_turn", {"prefix": PREFIX})
        assert {r[0] for r in rows} == ids
        leader = min(ids)
        leading = next(i for i, w in enumerate(workers) if w.worker_id == leader)
        await until(
            lambda: (
                stores[leading]._listener.fleet.members[leader].leader  # type: ignore[union-attr]
                and not stores[1 - leading]
                ._listener.fleet.members[workers[1 - leading].worker_id]
                .leader
            ),  # type: ignore[union-attr]
            20,
            "the smallest id to lead, alone",
        )
        # The leader stops, its store left open: its mark goes, the other leads.
        workers[leading].stop()
        await asyncio.wait_for(runs[leading], 10)
        other = workers[1 - leading].worker_id
        await until(lambda: marked(pg.target) == {other}, 20, "the leader's mark to go")
        await until(
            lambda: stores[1 - leading]._listener.fleet.members[other].leader,  # type: ignore[union-attr]
            20,
            "the other to lead",
        )
        q = CairnQ(PostgresStore(pg.target))
        task = await q.submit("noop", delay_ms=300)
        assert (await q.wait(task.id, timeout_ms=10_000)).status == "succeeded"
        await q.close()
    finally:
        for w in workers:
            w.stop()
        await asyncio.gather(*runs, return_exceptions=True)
        for s in stores:
            await s.close()
    await until(lambda: marked(pg.target) == set(), 10, "closed stores to leave no mark")


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
    listening session starts over (as a member's first mark makes it do) and
    is back before the read returns, and a task is submitted in the gap, when
    no session listened."""

    submitter: Any = None

    async def _fetch(self, name: str, params: dict[str, Any]) -> list[Any]:
        if name == "fleet_turn" and self.submitter is not None:
            listener = self._listener
            assert listener is not None
            if listener.connected:
                listener._restart()  # the session starts over now, during the read
            submitter, self.submitter = self.submitter, None
            await submitter.submit(name="noop", payload=None)  # unheard: nobody listens
            assert not listener.connected  # (it landed in the gap)
            await until(lambda: listener.connected, 10, "the session to come back")
        return await super()._fetch(name, params)


async def test_news_raised_while_the_session_starts_over_during_a_turn_is_not_slept_through(
    pg: Any,  # noqa: F811
) -> None:
    store, other = _SlowTurn(pg.target), PostgresStore(pg.target)
    try:
        await listening(store)
        await other.submit(name="warm", payload=None, queue="elsewhere")  # its next submit: one round trip
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
