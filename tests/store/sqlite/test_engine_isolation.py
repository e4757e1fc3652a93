"""The SQLite engine settles every caller, and a bad write fails only itself.

Driven directly (raw SQL on a real file, no store, no argument checks): a
parameter SQLite cannot bind (a lone surrogate, an int beyond 64 bits), a
statement that rolls the whole transaction back, or a COMMIT refused by a
deferred constraint must fail its own caller, and only it, on every path a
write can take: inline, flushed alone, in a group commit (committed on the
loop or in the committer thread), riding in a transaction, or inside one.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path
from typing import Any, Awaitable

import pytest

from cairnq.store.sqlite import engine as engine_module
from cairnq.store.sqlite.engine import SqliteEngine

INSERT = "insert into t (k, v) values (?, ?)"
# A statement that takes its whole transaction down with it.
ROLLBACK_ALL = "insert into t (k, v) values (?, 'roll everything back')"
# Accepted by its statement, refused by the COMMIT (the parent row is missing).
ORPHAN = "insert into child (k, parent) values (?, 'no such parent')"
HANG_GUARD_S = 30  # a caller left unsettled fails the test instead of hanging it
UNBINDABLE = {"lone surrogate": ("\ud800", UnicodeEncodeError), "int beyond 64 bits": (2**70, OverflowError)}


def _schema(path: str) -> None:
    with sqlite3.connect(path, isolation_level=None) as conn:
        conn.execute("pragma journal_mode = wal")
        conn.execute("create table t (k text primary key, v)")
        conn.execute("create table parent (k text primary key)")
        conn.execute(
            "create table child (k text primary key, parent text"
            " references parent (k) deferrable initially deferred)"
        )
        conn.execute(
            "create trigger t_rollback before insert on t when new.v = 'roll everything back'"
            " begin select raise(rollback, 'rolled back by the trigger'); end"
        )
    conn.close()


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = str(tmp_path / "engine.db")
    _schema(path)
    return path


@pytest.fixture
def ride_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """Deferred writes wait for a transaction for as long as the test needs."""
    monkeypatch.setattr(engine_module, "DEFER_WINDOW_S", 60.0)


async def _engine(path: str) -> SqliteEngine:
    # busy_timeout 0, as the store opens it: the engine does the waiting
    conn = sqlite3.connect(path, timeout=0, isolation_level=None, check_same_thread=False)
    conn.execute("pragma foreign_keys = on")
    return SqliteEngine(conn, busy_timeout_ms=5_000)


def _keys(path: str, table: str = "t") -> set[str]:
    with sqlite3.connect(path) as conn:
        keys = {r[0] for r in conn.execute(f"select k from {table}")}  # table: a literal of this file
    conn.close()
    return keys


async def _settled(*calls: Awaitable[Any]) -> list[Any]:
    """Each call's rows or exception; a call never settled fails the test."""
    return await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), HANG_GUARD_S)


class Spinner:
    """Keeps the loop's run queue non-empty, the way a busy worker does: writes
    are then queued for a group commit, and COMMITs go to the committer thread."""

    def __init__(self) -> None:
        self.task: asyncio.Task[None] | None = None

    async def _spin(self) -> None:
        while True:
            await asyncio.sleep(0)

    async def __aenter__(self) -> "Spinner":
        self.task = asyncio.ensure_future(self._spin())
        await asyncio.sleep(0)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        assert self.task is not None
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


def _loop_kept_busy(busy: bool) -> Any:
    """A Spinner when ``busy``, else nothing."""
    return Spinner() if busy else contextlib.nullcontext()


async def _then_usable(engine: SqliteEngine, path: str) -> None:
    """The engine took no harm: nothing left queued or held, and it writes."""
    assert engine.idle
    await asyncio.wait_for(engine.write(INSERT, ("after", 1)), HANG_GUARD_S)
    assert "after" in _keys(path)
    await engine.drain_and_close()


# -- a parameter SQLite cannot bind ------------------------------------------------------------


@pytest.mark.parametrize("bad", UNBINDABLE.values(), ids=UNBINDABLE.keys())
async def test_unbindable_inline_write_raises_to_its_caller(db: str, bad: Any) -> None:
    engine = await _engine(db)
    value, error = bad
    (result,) = await _settled(engine.write(INSERT, ("bad", value)))  # nothing else runnable: inline
    assert isinstance(result, error)
    await _then_usable(engine, db)


@pytest.mark.parametrize("bad", UNBINDABLE.values(), ids=UNBINDABLE.keys())
async def test_unbindable_write_flushed_alone_is_settled(db: str, bad: Any) -> None:
    engine = await _engine(db)
    value, error = bad
    async with Spinner():  # the write is queued, then flushed on its own
        (result,) = await _settled(engine.write(INSERT, ("bad", value)))
    assert isinstance(result, error)
    await _then_usable(engine, db)


@pytest.mark.parametrize("bad", UNBINDABLE.values(), ids=UNBINDABLE.keys())
@pytest.mark.parametrize("committer", [False, True], ids=["commit on the loop", "commit in the thread"])
async def test_unbindable_write_in_a_group_commit_fails_alone(db: str, bad: Any, committer: bool) -> None:
    engine = await _engine(db)
    value, error = bad
    good = [engine.write(INSERT, (f"k{i}", i)) for i in range(10)]
    async with _loop_kept_busy(committer):
        results = await _settled(*good[:5], engine.write(INSERT, ("bad", value)), *good[5:])
    assert isinstance(results[5], error)
    assert results[:5] + results[6:] == [[]] * 10
    assert _keys(db) == {f"k{i}" for i in range(10)}
    await _then_usable(engine, db)


@pytest.mark.parametrize("bad", UNBINDABLE.values(), ids=UNBINDABLE.keys())
async def test_unbindable_deferred_write_riding_in_a_transaction_fails_alone(
    db: str, bad: Any, ride_window: None
) -> None:
    engine = await _engine(db)
    value, error = bad
    queued = [asyncio.ensure_future(engine.write(INSERT, (f"r{i}", i), deferred=True)) for i in range(4)]
    queued.insert(2, asyncio.ensure_future(engine.write(INSERT, ("bad", value), deferred=True)))
    await asyncio.sleep(0)  # all five queued, waiting for a transaction to ride in
    assert not any(r.done() for r in queued)
    async with engine.transaction() as run:
        await run(INSERT, ("own", 0))
    results = await _settled(*queued)
    assert isinstance(results[2], error)
    assert results[:2] + results[3:] == [[]] * 4
    assert _keys(db) == {"own", "r0", "r1", "r2", "r3"}
    await _then_usable(engine, db)


@pytest.mark.parametrize("bad", UNBINDABLE.values(), ids=UNBINDABLE.keys())
async def test_unbindable_statement_in_a_transaction_rolls_it_back(db: str, bad: Any) -> None:
    engine = await _engine(db)
    value, error = bad
    with pytest.raises(error):
        async with engine.transaction() as run:
            await run(INSERT, ("own", 0))
            await run(INSERT, ("bad", value))
    assert _keys(db) == set()
    await _then_usable(engine, db)


@pytest.mark.parametrize("bad", UNBINDABLE.values(), ids=UNBINDABLE.keys())
async def test_unbindable_read_raises_to_its_caller(db: str, bad: Any) -> None:
    engine = await _engine(db)
    value, error = bad
    (result,) = await _settled(engine.read("select * from t where v = ?", (value,)))
    assert isinstance(result, error)
    await _then_usable(engine, db)


# -- a statement that takes the transaction down; a COMMIT that is refused -------------------------


@pytest.mark.parametrize("committer", [False, True], ids=["commit on the loop", "commit in the thread"])
async def test_a_write_that_rolls_back_its_group_commit_fails_alone(db: str, committer: bool) -> None:
    engine = await _engine(db)
    good = [engine.write(INSERT, (f"k{i}", i)) for i in range(10)]
    async with _loop_kept_busy(committer):
        results = await _settled(*good[:5], engine.write(ROLLBACK_ALL, ("bad",)), *good[5:])
    assert isinstance(results[5], sqlite3.IntegrityError)
    assert results[:5] + results[6:] == [[]] * 10
    assert _keys(db) == {f"k{i}" for i in range(10)}
    await _then_usable(engine, db)


async def test_a_rider_that_rolls_back_the_transaction_fails_alone(db: str, ride_window: None) -> None:
    engine = await _engine(db)
    queued = [asyncio.ensure_future(engine.write(INSERT, (f"r{i}", i), deferred=True)) for i in range(4)]
    queued.insert(2, asyncio.ensure_future(engine.write(ROLLBACK_ALL, ("bad",), deferred=True)))
    await asyncio.sleep(0)
    async with engine.transaction() as run:  # the transaction itself is not at fault
        await run(INSERT, ("own", 0))
    results = await _settled(*queued)
    assert isinstance(results[2], sqlite3.IntegrityError)
    assert results[:2] + results[3:] == [[]] * 4
    assert _keys(db) == {"own", "r0", "r1", "r2", "r3"}
    await _then_usable(engine, db)


@pytest.mark.parametrize("committer", [False, True], ids=["commit on the loop", "commit in the thread"])
async def test_a_write_whose_commit_is_refused_fails_alone(db: str, committer: bool) -> None:
    engine = await _engine(db)
    await engine.write("insert into parent (k) values ('p')", ())
    good = [engine.write("insert into child (k, parent) values (?, 'p')", (f"c{i}",)) for i in range(10)]
    async with _loop_kept_busy(committer):
        results = await _settled(*good[:5], engine.write(ORPHAN, ("orphan",)), *good[5:])
    assert isinstance(results[5], sqlite3.IntegrityError)  # FOREIGN KEY constraint failed, at COMMIT
    assert results[:5] + results[6:] == [[]] * 10
    assert _keys(db, "child") == {f"c{i}" for i in range(10)}
    await _then_usable(engine, db)


# -- through the store and the worker, on both dialects -----------------------------------------------
# (Up-front argument checks may turn these values away before any statement
# runs; either way only the bad call fails.)


async def test_one_unencodable_submit_among_good_ones_fails_alone(backend: Any) -> None:
    q = backend.client()
    await q.connect()
    good = [q.submit("good", {"i": i}) for i in range(10)]
    results = await _settled(*good[:5], q.submit("bad", queue="bad \ud800"), *good[5:])
    assert isinstance(results[5], ValueError)  # UnicodeEncodeError is one too
    tasks = results[:5] + results[6:]
    assert not [r for r in tasks if isinstance(r, BaseException)], tasks
    assert sorted(t.payload["i"] for t in await q.list(limit=100)) == list(range(10))


async def test_a_bad_progress_write_costs_other_tasks_nothing(backend: Any) -> None:
    q = backend.client()
    worker = backend.worker(concurrency=8, poll_interval_ms=20, retry_backoff_ms=0)
    everyone_started = asyncio.Event()
    started: list[str] = []
    seen: dict[int, BaseException] = {}

    @worker.task("job")
    async def job(ctx: Any, payload: dict[str, Any]) -> str:
        started.append(ctx.task_id)
        if len(started) == 8:
            everyone_started.set()
        await everyone_started.wait()  # all eight write their progress in the same loop turn
        message = "processing \udcff.csv" if payload["bad"] else "processing ok.csv"
        try:
            await ctx.progress(0.5, message)
        except ValueError as exc:  # a file name os.listdir could not decode
            seen[payload["i"]] = exc
        return "done"

    tasks = [await q.submit("job", {"i": i, "bad": i == 3}) for i in range(8)]
    async with worker.background():
        done = [await q.wait(t.id, timeout_ms=HANG_GUARD_S * 1000, poll_ms=10) for t in tasks]
    assert list(seen) == [3]
    assert [(t.status, t.attempt, t.result) for t in done] == [("succeeded", 1, "done")] * 8
    assert [t.message for t in done if t.payload["i"] != 3] == ["processing ok.csv"] * 7
