"""``cairnq.store.loop_state``: may a write commit inline? On asyncio's own
loop (whose run queue can be seen) and on uvloop (whose run queue cannot: the
documented fallback is "always batch", and writes still commit)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest

from cairnq.store.loop_state import can_see_run_queue, nothing_due_before, nothing_else_ready
from cairnq.store.sqlite.engine import SqliteEngine

try:
    import uvloop
except ImportError:  # not installed: the uvloop cases are skipped
    uvloop = None

LOOPS = ["asyncio", "uvloop"]


def _run(kind: str, main: Callable[[], Awaitable[Any]]) -> Any:
    """``main()`` to completion on a new loop of ``kind``."""
    if kind == "uvloop":
        if uvloop is None:
            pytest.skip("uvloop is not installed (pip install -e '.[dev]' brings it)")
        loop = uvloop.new_event_loop()
    else:
        loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(asyncio.wait_for(main(), 60))
    finally:
        loop.close()


def _noop() -> None:
    pass


def test_the_default_loop_shows_its_run_queue() -> None:
    async def main() -> list[bool]:
        loop = asyncio.get_running_loop()
        seen = [can_see_run_queue(loop), nothing_else_ready(loop)]
        first = loop.call_soon(_noop)
        seen += [nothing_else_ready(loop), nothing_else_ready(loop, first)]
        second = loop.call_soon(_noop)
        seen += [nothing_else_ready(loop, first), nothing_else_ready(loop, second)]
        await asyncio.sleep(0)  # both ran
        seen.append(nothing_else_ready(loop, first))
        return seen

    seen = _run("asyncio", main)
    visible, idle, one_queued, only_ignored, two_queued, two_queued_other, idle_again = seen
    assert visible and idle and idle_again
    assert not one_queued  # something else would run before the loop polls
    assert only_ignored  # the caller's own handle does not count
    assert not two_queued and not two_queued_other


def test_the_default_loop_shows_its_timers() -> None:
    async def main() -> list[bool]:
        loop = asyncio.get_running_loop()
        now = loop.time()
        seen = [nothing_due_before(loop, now + 30)]  # only _run's timeout (60 s) is set
        soon = loop.call_later(0.05, _noop)
        later = loop.call_later(10, _noop)
        seen += [
            nothing_due_before(loop, now + 0.01),  # the first is due after that
            nothing_due_before(loop, now + 1),  # ... but not after this
            nothing_due_before(loop, now + 1, soon),  # the caller's own does not count
            nothing_due_before(loop, now + 11, soon),  # the later one does
        ]
        soon.cancel()  # dead, though still in the heap until asyncio drops it
        seen.append(nothing_due_before(loop, now + 1))
        later.cancel()
        return seen

    seen = _run("asyncio", main)
    assert seen == [True, True, False, True, False, True]


def test_uvloop_falls_back_to_always_batching() -> None:
    async def main() -> tuple[bool, bool, bool, bool]:
        loop = asyncio.get_running_loop()
        handle = loop.call_soon(_noop)
        return (
            can_see_run_queue(loop),
            nothing_else_ready(loop),
            nothing_else_ready(loop, handle),
            nothing_due_before(loop, loop.time()),
        )

    assert _run("uvloop", main) == (False, False, False, False)


def _engine(path: Path) -> SqliteEngine:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("pragma journal_mode=wal")
    conn.execute("create table t (x integer)")
    return SqliteEngine(conn, 1_000)


def test_a_lone_write_commits_inline_on_the_default_loop(tmp_path: Path) -> None:
    """With nothing else runnable the write never suspends: it has committed
    when its coroutine first returns (no loop turn)."""

    async def main() -> tuple[bool, int]:
        engine = _engine(tmp_path / "inline.db")
        try:
            write = engine.write("insert into t values (1)", ())
            try:
                write.send(None)
            except StopIteration:
                return True, engine.commits
            write.close()
            return False, engine.commits
        finally:
            await engine.drain_and_close()

    assert _run("asyncio", main) == (True, 1)


def test_a_lone_write_does_not_commit_inline_when_a_timer_falls_due_meanwhile(tmp_path: Path) -> None:
    """Expected to take longer than the time left before a timer is due, the
    commit goes to the committer thread (the write suspends); the loop stays
    free for the timer. With the timer far off, it commits inline again."""

    async def main() -> tuple[bool, bool, int]:
        loop = asyncio.get_running_loop()
        engine = _engine(tmp_path / "timer.db")
        try:
            for i in range(3):  # the expected commit time is learned from real commits
                await engine.write("insert into t values (?)", (i,))
            engine._commit_s = 0.050  # a slow disk (commits > a slice), as far as the engine knows
            timer = loop.call_later(0.010, _noop)
            write = engine.write("insert into t values (10)", ())
            try:
                write.send(None)
                suspended_with_timer = True
            except StopIteration:
                suspended_with_timer = False
            else:
                write.close()
            timer.cancel()
            await asyncio.sleep(0.02)
            write = engine.write("insert into t values (11)", ())
            try:
                write.send(None)
                suspended_without = True
            except StopIteration:
                suspended_without = False
            else:
                write.close()
            await asyncio.sleep(0.05)
            # A fast disk (commits within a slice): inline, timer or not.
            engine._commit_s = 0.0002
            timer = loop.call_later(0.010, _noop)
            write = engine.write("insert into t values (12)", ())
            try:
                write.send(None)
                suspended_fast = True
            except StopIteration:
                suspended_fast = False
            else:
                write.close()
            timer.cancel()
            return suspended_with_timer, suspended_without, suspended_fast
        finally:
            await engine.drain_and_close()

    with_timer, without, fast = _run("asyncio", main)
    assert with_timer and not without and not fast


@pytest.mark.parametrize("kind", LOOPS)
def test_writes_commit_on_every_loop(tmp_path: Path, kind: str) -> None:
    """A lone write and a burst of concurrent writes all commit, inline or
    batched, whatever the loop shows of its run queue."""
    path = tmp_path / f"{kind}.db"

    async def main() -> None:
        engine = _engine(path)
        try:
            await engine.write("insert into t values (0)", ())
            burst = [engine.write("insert into t values (?)", (i,)) for i in range(1, 50)]
            await asyncio.gather(*burst)
            async with engine.transaction() as run:
                await run("insert into t values (50)", ())
        finally:
            await engine.drain_and_close()

    _run(kind, main)
    conn = sqlite3.connect(path)
    try:
        assert [x for (x,) in conn.execute("select x from t order by x")] == list(range(51))
    finally:
        conn.close()


@pytest.mark.parametrize("kind", LOOPS)
def test_a_store_works_on_every_loop(backend: Any, kind: str) -> None:
    """Submit, claim and settle through the store (the SQLite engine or the
    PostgreSQL batcher), on each loop."""

    async def main() -> list[str]:
        try:
            store = backend.store()
            lone = await store.submit(name="t", payload={"i": -1})
            submits = [store.submit(name="t", payload={"i": i}) for i in range(20)]
            burst = await asyncio.gather(*submits)
            claimed = await store.claim(queues=["default"], worker_id="w", limit=25, names=["t"])
            await asyncio.gather(
                *(store.complete(task_id=t.id, worker_id="w", result={"ok": True}) for t in claimed)
            )
            return sorted([(await store.get(t.id)).status for t in [lone, *burst]])
        finally:
            await backend.aclose()

    assert _run(kind, main) == ["succeeded"] * 21
