"""PostgreSQL group commit: a write with nothing in flight is sent at once; the
writes that come while it is on its way are sent together, and every one of
them commits (against the real server; the spies count, they do not stand in)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from backends import DIALECTS
from pg_kit import fetch, pg  # noqa: F401 (fixtures)

if "postgres" not in DIALECTS:
    pytest.skip("PostgreSQL is not available", allow_module_level=True)


class Sends:
    """Counts what the batcher sends: lone writes and batches (their sizes)."""

    def __init__(self, batcher: Any, clock: Any = None) -> None:
        self.lone = 0
        self.batches: list[int] = []
        self.sent_at: list[int] = []  # the loop turn (clock()) each lone write was sent in
        rows, many = batcher._rows, batcher._batch_writer

        async def lone(text: str, values: list[Any], prepare: bool = True) -> list[Any]:
            self.lone += 1
            if clock is not None:
                self.sent_at.append(clock())
            return await rows(text, values, prepare)

        async def batch(writes: list[tuple[str, list[Any], bool]]) -> list[Any]:
            self.batches.append(len(writes))
            return await many(writes)

        batcher._rows = lone
        if many is not None:
            batcher._batch_writer = batch


async def _chatter(stop: asyncio.Event, turns: list[int]) -> None:
    """Something else always ready on the loop (a busy application), counting turns."""
    while not stop.is_set():
        turns[0] += 1
        await asyncio.sleep(0)


async def test_sequential_submits_each_go_at_once_even_on_a_busy_loop(pg: Any) -> None:
    store = pg.store()
    await store.connect()
    turns = [0]
    sends = Sends(store._writes, clock=lambda: turns[0])
    stop = asyncio.Event()
    busy = asyncio.ensure_future(_chatter(stop, turns))
    asked_at = []
    try:
        for i in range(20):
            asked_at.append(turns[0])
            await store.submit(name="seq", payload={"i": i})
    finally:
        stop.set()
        await busy
    assert (sends.lone, sends.batches) == (20, [])
    assert sends.sent_at == asked_at  # sent in the turn it was asked for, not a turn later
    assert fetch(pg.target, "select count(*) from cairnq_tasks where name = 'seq'") == [(20,)]


async def test_writes_behind_one_in_flight_go_together(pg: Any) -> None:
    store = pg.store()
    await store.connect()
    sends = Sends(store._writes)
    tasks = await asyncio.gather(*(store.submit(name="burst", payload={"i": i}) for i in range(50)))
    assert len({t.id for t in tasks}) == 50
    # the first at once, the 49 queued behind it in one transaction (or a few,
    # if the first came back while they were still being queued)
    assert sends.lone >= 1 and sends.lone + sum(sends.batches) == 50
    assert len(sends.batches) <= 2, sends.batches
    assert fetch(pg.target, "select count(*) from cairnq_tasks where name = 'burst'") == [(50,)]


async def test_a_bad_write_behind_one_in_flight_fails_alone(pg: Any) -> None:
    store = pg.store()
    await store.connect()
    good = [store.submit(name="ok", payload={"i": i}) for i in range(10)]
    bad = store.submit(name="bad", payload={"s": "\x00"})  # PostgreSQL text holds no NUL
    results = await asyncio.gather(*good[:5], bad, *good[5:], return_exceptions=True)
    failed = [r for r in results if isinstance(r, BaseException)]
    assert len(failed) == 1, results
    assert fetch(pg.target, "select count(*) from cairnq_tasks where name = 'ok'") == [(10,)]
    assert fetch(pg.target, "select count(*) from cairnq_tasks where name = 'bad'") == [(0,)]
