"""PostgreSQL: keyed submits take the protocol's advisory lock."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from backends import DIALECTS

if "postgres" not in DIALECTS:
    pytest.skip("PostgreSQL is not available", allow_module_level=True)

import psycopg  # noqa: E402
from pg_kit import fetch, pg  # noqa: F401 (fixtures)

# ---------------------------------------------------------------------------
# 7. keyed submits take the protocol's advisory lock


async def test_keyed_submit_waits_for_the_advisory_lock(pg):
    dsn = pg.target
    store = pg.store()
    await store.connect()
    holder = psycopg.connect(dsn)  # not autocommit: the lock lives until commit
    try:
        holder.execute("select pg_advisory_xact_lock(hashtextextended('k'::text, 0))")
        finished: dict[str, float] = {}

        async def keyed(key: str) -> Any:
            task = await store.submit(name="locked", key=key)
            finished[key] = time.monotonic()
            return task

        blocked = asyncio.ensure_future(keyed("k"))
        free = await asyncio.wait_for(keyed("other"), 3)  # a different key does not wait
        assert free.status == "queued"
        await asyncio.sleep(0.5)
        assert not blocked.done()
        assert fetch(dsn, "select count(*) from cairnq_task_keys where key = 'k'") == [(0,)]

        released = time.monotonic()
        holder.commit()
        task = await asyncio.wait_for(blocked, 5)
        assert finished["k"] >= released
        assert task.status == "queued"
        assert (await store.get_by_key("k")).id == task.id
    finally:
        holder.close()


async def test_keyed_mutations_also_take_the_lock(pg):
    dsn = pg.target
    store = pg.store()
    await store.connect()
    task = await store.submit(name="locked", key="k2")
    holder = psycopg.connect(dsn)
    try:
        holder.execute("select pg_advisory_xact_lock(hashtextextended('k2'::text, 0))")
        cancel = asyncio.ensure_future(store.cancel_by_key("k2"))
        await asyncio.sleep(0.4)
        assert not cancel.done()
        assert (await store.get(task.id)).status == "queued"
        holder.commit()
        assert (await asyncio.wait_for(cancel, 5)).status == "canceled"
    finally:
        holder.close()
