"""PostgreSQL: the 0003 trigger's notifications, seen from a raw LISTEN connection."""

from __future__ import annotations

import asyncio

import pytest
from backends import DIALECTS
from pg_kit import connect, pg, run_sql  # noqa: F401 (fixtures)

if "postgres" not in DIALECTS:
    pytest.skip("PostgreSQL is not available", allow_module_level=True)


# ---------------------------------------------------------------------------
# 3. the 0003 trigger's notifications, seen from a raw LISTEN connection


class Notes:
    def __init__(self, dsn: str) -> None:
        self.conn = connect(dsn)
        self.conn.execute("listen cairnq_queued")
        self.conn.execute("listen cairnq_done")

    def take(self, expect: int = 0) -> list[tuple[str, str]]:
        """The notifications that arrive now: wait up to 3 s for ``expect`` of
        them, then 0.2 s more for any extra (so "none" means none in 0.2 s)."""
        got = []
        if expect:
            got += [
                (n.channel, n.payload) for n in self.conn.notifies(timeout=3, stop_after=expect)
            ]
        got += [(n.channel, n.payload) for n in self.conn.notifies(timeout=0.2)]
        return got

    def close(self) -> None:
        self.conn.close()


async def test_trigger_notifications(pg):
    dsn = pg.target
    store = pg.store()
    await store.connect()
    notes = Notes(dsn)
    try:
        w = "worker_n"
        queued = ("cairnq_queued", "nq")
        claim = lambda: store.claim(queues=["nq"], worker_id=w)  # noqa: E731

        t1 = await store.submit(name="n", queue="nq")
        assert notes.take(1) == [queued]
        [c] = await claim()
        assert c.id == t1.id
        assert notes.take() == []  # claim: none
        await store.heartbeat(task_id=t1.id, worker_id=w)
        await store.progress(task_id=t1.id, worker_id=w, progress=0.5, message="half")
        assert notes.take() == []  # non-status updates: none
        await store.complete(task_id=t1.id, worker_id=w, result={"ok": True})
        assert notes.take(1) == [("cairnq_done", t1.id)]

        t2 = await store.submit(name="n", queue="nq")
        assert notes.take(1) == [queued]
        await claim()
        await store.fail(task_id=t2.id, worker_id=w, error={"message": "no"}, retryable=False)
        assert notes.take(1) == [("cairnq_done", t2.id)]

        t3 = await store.submit(name="n", queue="nq", max_attempts=3)
        assert notes.take(1) == [queued]
        await claim()
        back = await store.fail(
            task_id=t3.id, worker_id=w, error={"message": "again"}, retryable=True
        )
        assert back.status == "queued"
        assert notes.take(1) == [queued]  # running -> queued
        await store.cancel(t3.id)
        assert notes.take(1) == [("cairnq_done", t3.id)]  # queued -> canceled

        t4 = await store.submit(name="n", queue="nq")
        assert notes.take(1) == [queued]
        await claim()
        flagged = await store.cancel(t4.id)
        assert flagged.status == "running" and flagged.cancel_requested_at_ms is not None
        assert notes.take() == []  # cancel of a running task: none
        ended = await store.complete(task_id=t4.id, worker_id=w, result=None)
        assert ended.status == "canceled"
        assert notes.take(1) == [("cairnq_done", t4.id)]

        # failed -> queued (retry) notifies; terminal -> terminal and purge do not
        assert (await store.retry(t2.id)).status == "queued"
        assert notes.take(1) == [queued]
        await store.cancel(t2.id)
        assert notes.take(1) == [("cairnq_done", t2.id)]
        run_sql(dsn, "update cairnq_tasks set status = 'failed' where id = %s", [t2.id])
        assert notes.take() == []  # canceled -> failed
        await asyncio.sleep(0.002)  # purge's cutoff is strict: finished >= 1 ms ago
        assert sorted(await store.purge(older_than_ms=0)) == sorted([t1.id, t2.id, t3.id, t4.id])
        assert notes.take() == []

        # lease recovery: running -> queued notifies with the queue
        t5 = await store.submit(name="n", queue="nq")
        assert notes.take(1) == [queued]
        await store.claim(queues=["nq"], worker_id=w, lease_ms=1)
        assert notes.take() == []
        await asyncio.sleep(0.02)
        [again] = await store.claim(queues=["nq"], worker_id="worker_m")
        assert again.id == t5.id and again.attempt == 2
        assert notes.take(1) == [queued]  # recovered, then claimed (claim: none)
    finally:
        notes.close()
