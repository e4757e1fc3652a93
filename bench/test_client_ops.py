"""Client operations through the public API, per dialect.

Batches of 100 operations per timed round (sequential awaits), so the event
loop's own overhead is amortized the same way a program sees it.
"""

from __future__ import annotations

import asyncio
from typing import Any, Iterator

import pytest

from cairnq import CairnQ

BATCH = 100


@pytest.fixture(scope="module")
def client(loop: asyncio.AbstractEventLoop, target: tuple[str, str]) -> Iterator[CairnQ]:
    dialect, where = target
    q = CairnQ.sqlite(where) if dialect == "sqlite" else CairnQ.postgres(where)
    loop.run_until_complete(q.connect())
    yield q
    loop.run_until_complete(q.close())


def test_submit_100_sequential(benchmark, run, client: CairnQ) -> None:
    async def batch() -> None:
        for i in range(BATCH):
            await client.submit("bench.submit", {"i": i})

    benchmark.pedantic(run(batch), rounds=10, iterations=1, warmup_rounds=1)


def test_submit_640_concurrent_64(benchmark, run, client: CairnQ) -> None:
    async def batch() -> None:
        async def lane(k: int) -> None:
            for i in range(10):
                await client.submit("bench.submit", {"i": i, "lane": k})

        await asyncio.gather(*(lane(k) for k in range(64)))

    benchmark.pedantic(run(batch), rounds=10, iterations=1, warmup_rounds=1)


def test_get_100(benchmark, run, client: CairnQ, loop: asyncio.AbstractEventLoop) -> None:
    task = loop.run_until_complete(client.submit("bench.get", {"x": 1}))

    async def batch() -> None:
        for _ in range(BATCH):
            await client.get(task.id)

    benchmark.pedantic(run(batch), rounds=20, iterations=1, warmup_rounds=2)


def test_cancel_100(benchmark, run, client: CairnQ, loop: asyncio.AbstractEventLoop) -> None:
    async def setup() -> list[str]:
        return [(await client.submit("bench.cancel")).id for _ in range(BATCH)]

    def prepare() -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (loop.run_until_complete(setup()),), {}

    def cancel_all(ids: list[str]) -> None:
        async def batch() -> None:
            for task_id in ids:
                await client.cancel(task_id)

        loop.run_until_complete(batch())

    benchmark.pedantic(cancel_all, setup=prepare, rounds=10, iterations=1)


def test_purge_1000(benchmark, client: CairnQ, loop: asyncio.AbstractEventLoop) -> None:
    async def setup() -> None:
        ids = [t.id for t in await asyncio.gather(*(client.submit("bench.purge") for _ in range(1000)))]
        await asyncio.gather(*(client.cancel(i) for i in ids))

    def prepare() -> tuple[tuple[Any, ...], dict[str, Any]]:
        loop.run_until_complete(setup())
        return (), {}

    def purge() -> None:
        deleted = loop.run_until_complete(client.purge(name="bench.purge", limit=1000))
        assert len(deleted) == 1000

    benchmark.pedantic(purge, setup=prepare, rounds=5, iterations=1)
