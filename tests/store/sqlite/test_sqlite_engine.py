"""The SQLite engine: group commit, lock contention, transactions, close."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from cairnq import CairnQ, StoreClosed
from cairnq.store.sqlite import engine as engine_module
from cairnq.store.sqlite.engine import HOLD_S, POLL_S, BusyPolicy, is_busy
from descriptors import LISTED, descriptor_targets


def _count(path: str) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute("select count(*) from cairnq_tasks").fetchone()[0]


def _commits(store) -> list[int]:
    """Record how many writes each COMMIT carried (by watching the engine)."""
    sizes: list[int] = []
    engine = store._engine
    original = engine._flush_batch

    def flush_batch() -> bool:
        sizes.append(min(len(engine._writes), 256))
        return original()

    engine._flush_batch = flush_batch
    return sizes


async def test_concurrent_writes_share_one_commit(sqlite_backend) -> None:
    q = sqlite_backend.client()
    await q.connect()
    sizes = _commits(q.store)
    tasks = await asyncio.gather(*(q.submit("n", {"i": i}) for i in range(50)))
    assert len({t.id for t in tasks}) == 50
    assert sizes == [50]  # fifty submits, one transaction, one fsync
    assert _count(sqlite_backend.target) == 50


async def test_a_lone_write_commits_inline(sqlite_backend) -> None:
    q = sqlite_backend.client()
    await q.connect()
    sizes = _commits(q.store)
    for i in range(3):
        await q.submit("n", {"i": i})
    assert sizes == []  # nothing else was runnable: no queue, no batch, no extra hop
    assert _count(sqlite_backend.target) == 3


async def test_a_failing_statement_fails_only_its_caller(sqlite_backend) -> None:
    q = sqlite_backend.client()
    store = q.store
    await q.connect()
    engine = store._engine
    good = [engine.write("insert into cairnq_meta (key, value) values (?, 'v')", (f"k{i}",)) for i in range(3)]
    dup = engine.write("insert into cairnq_meta (key, value) values ('protocol_version', 'x')", ())
    results = await asyncio.gather(*good, dup, return_exceptions=True)
    assert isinstance(results[3], sqlite3.IntegrityError)
    assert results[:3] == [[], [], []]
    with sqlite3.connect(sqlite_backend.target) as conn:
        keys = {r[0] for r in conn.execute("select key from cairnq_meta")}
        proto = conn.execute("select value from cairnq_meta where key = 'protocol_version'").fetchone()
    assert {"k0", "k1", "k2"} <= keys
    assert proto == ("1",)


def _hold_write_lock(path: str, seconds: float) -> subprocess.Popen[str]:
    script = textwrap.dedent(
        f"""
        import sqlite3, sys, time
        conn = sqlite3.connect({path!r}, isolation_level=None)
        conn.execute("begin immediate")
        print("locked", flush=True)
        time.sleep({seconds})
        conn.execute("commit")
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


async def test_busy_database_is_waited_out_without_blocking_the_loop(sqlite_backend) -> None:
    q = sqlite_backend.client()
    await q.connect()
    holder = _hold_write_lock(sqlite_backend.target, 0.6)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    tick = asyncio.ensure_future(ticker())
    started = time.monotonic()
    task = await q.submit("waited")  # SQLITE_BUSY until the other process commits
    elapsed = time.monotonic() - started
    tick.cancel()
    holder.wait(timeout=10)
    assert 0.3 < elapsed < 3.0
    assert ticks >= 20  # the loop kept running while we waited
    assert (await q.get(task.id)) is not None
    # Reads are never blocked by another process's write lock in WAL mode.


async def test_busy_budget_exhausted_raises_and_writes_nothing(sqlite_backend) -> None:
    q = sqlite_backend.client(store_kwargs={"busy_timeout_ms": 200})
    await q.connect()
    holder = _hold_write_lock(sqlite_backend.target, 1.5)
    try:
        with pytest.raises(sqlite3.OperationalError) as err:
            await asyncio.gather(q.submit("a"), q.submit("b"))
        assert is_busy(err.value)
        with pytest.raises(sqlite3.OperationalError):
            await q.submit("c", key="k")  # a keyed submit's BEGIN IMMEDIATE is retried too
        assert await q.list() == []  # reads keep working meanwhile
    finally:
        holder.wait(timeout=10)
    assert _count(sqlite_backend.target) == 0
    await q.submit("after")  # and the store is fine afterwards
    assert _count(sqlite_backend.target) == 1


def test_busy_policy_polls_quickly_once_the_hold_is_over(monkeypatch: pytest.MonkeyPatch) -> None:
    # The lock is free only between other writers' transactions: a waiter
    # that backed off to tens of milliseconds missed every chance. During the
    # first HOLD_S (another writer of ours may keep the lock that long) the
    # attempts thin out; then they come every millisecond or so.
    clock = [1000.0]
    monkeypatch.setattr(engine_module, "_monotonic", lambda: clock[0])
    policy = BusyPolicy(100)
    schedule = []  # (waited so far, delay before the next attempt)
    while (d := policy.next_delay()) is not None:
        schedule.append((clock[0] - policy.started, d))
        clock[0] += d
    in_hold = [d for waited, d in schedule if waited < HOLD_S]
    after = [d for waited, d in schedule if waited >= HOLD_S]
    assert in_hold[:3] == pytest.approx([POLL_S, POLL_S, 2 * POLL_S])  # about twice the wait so far
    assert len(in_hold) <= 6
    assert after and max(after) <= 1.5 * POLL_S
    assert sum(d for _, d in schedule) == pytest.approx(0.1)  # the whole budget, no more
    assert policy.spent


async def test_close_turns_new_work_away_and_finishes_queued_writes(sqlite_backend) -> None:
    q = sqlite_backend.client()
    await q.connect()
    pending = [asyncio.ensure_future(q.submit("n", {"i": i})) for i in range(20)]
    await asyncio.sleep(0)  # they are queued, not yet committed
    closing = asyncio.ensure_future(q.store.close())
    await asyncio.sleep(0)
    with pytest.raises(StoreClosed):
        await q.submit("late")
    await closing
    finished = await asyncio.gather(*pending)  # every queued submit committed
    assert len({t.id for t in finished}) == 20
    assert _count(sqlite_backend.target) == 20
    # A file store reopens on next use.
    await q.submit("reopened")
    assert _count(sqlite_backend.target) == 21


async def test_concurrent_closes_share_one(sqlite_backend) -> None:
    store = sqlite_backend.store()
    await store.connect()
    await asyncio.gather(store.close(), store.close(), store.close())
    assert store._engine is None


async def test_closed_memory_store_does_not_reopen_empty() -> None:
    q = CairnQ.sqlite(":memory:")
    task = await q.submit("x")
    assert (await q.get(task.id)) == task
    await q.close()
    with pytest.raises(StoreClosed, match="in-memory"):
        await q.get(task.id)


async def test_close_waits_for_an_open_transaction(sqlite_backend) -> None:
    store = sqlite_backend.store()
    await store.connect()
    entered = asyncio.Event()
    release = asyncio.Event()

    async def slow_transaction() -> None:
        async with store._transaction() as fetch:
            await fetch("lock_key", {"key": "k"})
            entered.set()
            await release.wait()
            await fetch("upsert_key", {"key": "k", "task_id": "nobody"})

    work = asyncio.ensure_future(slow_transaction())
    await entered.wait()
    closing = asyncio.ensure_future(store.close())
    await asyncio.sleep(0.05)
    assert not closing.done()
    release.set()
    with pytest.raises(sqlite3.IntegrityError):  # the key points at no task: FK enforced
        await work
    await closing


async def test_reads_wait_for_a_transaction_rather_than_seeing_inside_it(sqlite_backend) -> None:
    q = sqlite_backend.client()
    await q.connect()
    store = q.store
    task = await q.submit("x")
    inside = asyncio.Event()
    release = asyncio.Event()

    async def txn() -> None:
        async with store._transaction() as fetch:
            await fetch("cancel", {"id": task.id})
            inside.set()
            await release.wait()
            raise RuntimeError("roll it back")

    work = asyncio.ensure_future(txn())
    await inside.wait()
    read = asyncio.ensure_future(q.get(task.id))
    await asyncio.sleep(0.02)
    assert not read.done()
    release.set()
    with pytest.raises(RuntimeError):
        await work
    assert (await read).status == "queued"  # the rolled-back cancel was never visible


async def test_cancelled_submit_that_was_still_queued_writes_nothing(sqlite_backend) -> None:
    q = sqlite_backend.client()
    await q.connect()
    first = asyncio.ensure_future(q.submit("a"))
    second = asyncio.ensure_future(q.submit("b"))
    await asyncio.sleep(0)  # both queued behind the flush
    second.cancel()
    await first
    with pytest.raises(asyncio.CancelledError):
        await second
    assert [t.name for t in await q.list()] == ["a"]


def _deferred_update(q) -> asyncio.Future:
    """A write deferred the way a worker's settlements are."""
    sql = "update cairnq_tasks set priority = 7"
    return asyncio.ensure_future(q.store._engine.write(sql, {}, deferred=True))


def _updated(path: str) -> bool:
    with sqlite3.connect(path) as conn:
        return conn.execute("select priority from cairnq_tasks").fetchone()[0] == 7


async def _turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_deferred_writes_wait_for_a_claim_to_ride_with(sqlite_backend, monkeypatch) -> None:
    # A ride that would take a minute: only flush_deferred can end the wait in time.
    monkeypatch.setattr(engine_module, "DEFER_WINDOW_S", 60.0)
    q = sqlite_backend.client()
    await q.submit("n", {})
    write = _deferred_update(q)
    await _turns()
    assert not write.done()  # held back: a claim may come and commit both at once
    q.store._engine.flush_deferred()  # what a claim loop going to sleep does: no claim is coming
    await asyncio.wait_for(write, 10)  # (its COMMIT may go to the committer thread)
    assert _updated(sqlite_backend.target)


async def test_deferred_writes_go_at_once_while_the_claim_loop_sleeps(sqlite_backend, monkeypatch) -> None:
    q = sqlite_backend.client()
    await q.submit("n", {})
    sleeper = asyncio.ensure_future(q.store.claim_wake(["default"], 60_000))
    await _turns()
    assert q.store._engine.claims_asleep == 1
    monkeypatch.setattr(engine_module, "DEFER_WINDOW_S", 60.0)
    write = _deferred_update(q)
    await asyncio.wait_for(write, 10)  # not held back for a ride (a minute)
    assert _updated(sqlite_backend.target)
    await sleeper  # our own commit is a change: the sleeper wakes
    assert q.store._engine.claims_asleep == 0


async def test_a_cancelled_transaction_rolls_back_and_its_riders_are_written_after(
    sqlite_backend, monkeypatch
) -> None:
    """Cancelled inside its body, a transaction writes nothing of its own: its
    statements roll back, the deferred write that rode in it goes back to the
    queue (and is written), and the next transaction begins at once."""
    monkeypatch.setattr(engine_module, "DEFER_WINDOW_S", 60.0)
    q = sqlite_backend.client()
    task = await q.submit("n", {})
    store = q.store
    rider = _deferred_update(q)
    await _turns()
    assert not rider.done()  # waiting for a transaction to ride with
    inside = asyncio.Event()

    async def cancelled_transaction() -> None:
        async with store._transaction() as fetch:
            await fetch("cancel", {"id": task.id})
            inside.set()
            await asyncio.sleep(60)

    work = asyncio.ensure_future(cancelled_transaction())
    await inside.wait()
    assert not rider.done() and not store._engine._writes  # it rode in, for a COMMIT that never comes
    work.cancel()
    with pytest.raises(asyncio.CancelledError):
        await work
    assert (await q.get(task.id)).status == "queued"  # the cancel rolled back

    async def next_transaction() -> None:
        async with store._transaction() as fetch:
            await fetch("cancel", {"id": task.id})

    await asyncio.wait_for(next_transaction(), 10)  # the gate was let go
    await asyncio.wait_for(rider, 10)  # requeued, then carried by that transaction
    assert _updated(sqlite_backend.target)
    assert (await q.get(task.id)).status == "canceled"


def _temporary_files_open() -> list[str]:
    """The SQLite temporary files this process holds open (unlinked at once,
    they show only among its descriptors)."""
    return [target for target in descriptor_targets() if "etilqs_" in target]


@pytest.mark.skipif(not LISTED, reason="reads /proc/self/fd (Linux)")
async def test_a_transactions_statement_journal_stays_in_memory(sqlite_backend) -> None:
    """A multi-row write after another in one transaction (a claim riding with
    settlements) keeps a statement journal of the pages it changes; past 64 KiB
    SQLite spills it to a temporary file unless temporary data is kept in
    memory, which costs a file created and unlinked in every such transaction."""
    q = sqlite_backend.client()
    await q.connect()
    for start in range(0, 600, 100):
        await asyncio.gather(*(q.submit("n", {"i": i, "pad": "x" * 200}) for i in range(start, start + 100)))
    conn = q.store._engine.conn
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("update cairnq_tasks set priority = priority + 1")
        conn.execute("update cairnq_tasks set status = 'running', worker_id = 'w', attempt = attempt + 1")
        assert _temporary_files_open() == []
    finally:
        conn.execute("ROLLBACK")
    await q.close()
