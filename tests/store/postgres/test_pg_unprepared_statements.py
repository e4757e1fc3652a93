"""Statements annotated ``plan-custom`` are sent unprepared, every other one
prepared: what the server holds as prepared statements after a worker's
writes, alone and batched (the plans themselves: test_query_plans.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from backends import DIALECTS
from pg_kit import pg  # noqa: F401 (fixtures)

from cairnq._sql import load_statements

if "postgres" not in DIALECTS:
    pytest.skip("PostgreSQL is not available", allow_module_level=True)

CUSTOM = sorted(name for name, stmt in load_statements("postgres").items() if stmt.plan_custom)


async def _prepared_texts(store: Any) -> set[str]:
    # One pooled connection (max_size=1): the one every statement ran on.
    rows = await store._executor._query_raw("select statement from pg_prepared_statements", [], False)
    return {row[0] for row in rows}


async def test_plan_custom_statements_are_never_prepared_alone_or_batched(pg: Any) -> None:
    assert CUSTOM == ["complete_each"]
    store = pg.store(min_size=1, max_size=1)
    try:
        for i in range(8):
            await store.submit(name="n", payload={"i": i})
        held = [t.id for t in await store.claim(queues=["default"], worker_id="w", limit=8, names=["n"])]
        assert len(held) == 8
        for batch in (held[0:2], held[2:4]):  # alone: nothing else in flight
            settled = await store._complete_each_json(batch, "w", ['{"a":1}', None], deferred=False)
            assert settled == {batch[0]: "succeeded", batch[1]: "succeeded"}
        # Together: the first goes alone, the two behind it are pipelined in
        # one transaction by the write batcher (seen on their way).
        batches: list[list[tuple[str, bool]]] = []
        writer = store._writes._batch_writer

        async def seen(statements: list[tuple[str, list[Any], bool]]) -> Any:
            batches.append([(text, prepare) for text, _, prepare in statements])
            return await writer(statements)

        store._writes._batch_writer = seen
        beats, each, many = await asyncio.gather(
            store.heartbeat_batch(task_ids=held[7:], worker_id="w"),
            store._complete_each_json(held[4:6], "w", ['{"a":2}', "3"], deferred=False),
            store.complete_many(task_ids=held[6:7], worker_id="w", result=None),
        )
        assert set(each) == set(held[4:6]) and set(many) == {held[6]} and set(beats) == {held[7]}
        assert batches == [[(store._sql("complete_each"), False), (store._sql("complete_many"), True)]]
        assert [(await store.get(task_id=i)).result for i in (held[0], held[1], held[4], held[5])] == [
            {"a": 1}, None, {"a": 2}, 3,
        ]  # fmt: skip

        prepared = await _prepared_texts(store)
        for name in CUSTOM:
            assert store._sql(name) not in prepared, f"{name} was prepared"
        # Every other statement is prepared as before.
        for name in ("get", "complete_many", "heartbeat_batch"):
            assert store._sql(name) in prepared, name
    finally:
        await store.close()
