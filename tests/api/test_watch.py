"""CairnQ.watch: change signals without polling tables (an addition to 0.15.1)."""

from __future__ import annotations

import asyncio
import sys
import textwrap
import time

import pytest

from cairnq.watch import WatchSignal


async def _next(signals: asyncio.Queue[WatchSignal], reason: str, timeout: float = 5.0) -> WatchSignal:
    deadline = time.monotonic() + timeout
    while True:
        signal = await asyncio.wait_for(signals.get(), max(0.01, deadline - time.monotonic()))
        if signal.reason == reason:
            return signal


async def test_watch_reports_changes_and_polls(backend) -> None:
    q = backend.client()
    await q.connect()
    signals: asyncio.Queue[WatchSignal] = asyncio.Queue()
    stop = q.watch(signals.put_nowait, poll_ms=200)
    try:
        await asyncio.sleep(0.3)  # the push listener (Postgres) comes up in the background
        assert (await _next(signals, "poll", timeout=2)).reason == "poll"
        task = await q.submit("job", queue="watched")
        if backend.dialect == "postgres":
            queued = await _next(signals, "queued")
            assert queued.queue == "watched"
            await q.cancel(task.id)
            done = await _next(signals, "done")
            assert done.task_id == task.id
        else:
            await _next(signals, "change")
    finally:
        stop()
    await asyncio.sleep(0.3)
    while not signals.empty():
        signals.get_nowait()
    await asyncio.sleep(0.5)
    assert signals.empty()  # unsubscribed: nothing more


async def test_watch_filters_queued_signals_by_queue(backend) -> None:
    if backend.dialect != "postgres":
        pytest.skip("queued signals are pushed by PostgreSQL only")
    q = backend.client()
    await q.connect()
    seen: list[WatchSignal] = []
    stop = q.watch(seen.append, queues=["mine"], poll_ms=60_000)
    try:
        await asyncio.sleep(0.5)
        await q.submit("job", queue="other")
        await q.submit("job", queue="mine")
        for _ in range(100):
            if any(s.reason == "queued" for s in seen):
                break
            await asyncio.sleep(0.02)
    finally:
        stop()
    assert [s.queue for s in seen if s.reason == "queued"] == ["mine"]


async def test_watch_survives_a_raising_callback(backend) -> None:
    q = backend.client()
    await q.connect()
    calls = 0

    def boom(signal: WatchSignal) -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("callback bug")

    stop = q.watch(boom, poll_ms=20)
    await asyncio.sleep(0.2)
    stop()
    assert calls >= 3  # it kept calling after the first exception


async def test_sqlite_watch_sees_other_processes(sqlite_backend, tmp_path) -> None:
    q = sqlite_backend.client()
    await q.connect()
    signals: asyncio.Queue[WatchSignal] = asyncio.Queue()
    stop = q.watch(signals.put_nowait, poll_ms=60_000)
    code = textwrap.dedent(
        f"""
        import asyncio
        from cairnq import CairnQ
        async def main():
            async with CairnQ.sqlite({sqlite_backend.target!r}) as q:
                await q.submit("from.elsewhere")
        asyncio.run(main())
        """
    )
    try:
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", code, cwd=str(tmp_path))
        assert await proc.wait() == 0
        signal = await _next(signals, "change", timeout=2)
        assert signal.reason == "change"
    finally:
        stop()
    assert [t.name for t in await q.list()] == ["from.elsewhere"]


def test_watch_needs_a_running_loop(tmp_path) -> None:
    from cairnq import CairnQ

    q = CairnQ.sqlite(str(tmp_path / "w.db"))
    with pytest.raises(RuntimeError):
        q.watch(lambda s: None)

