"""PostgreSQL: ctx.succeed_in: the handler's writes and the settlement in one transaction."""

from __future__ import annotations

from typing import Any, Optional

import pytest
from backends import DIALECTS
from pg_kit import fetch, pg, run_sql  # noqa: F401 (fixtures)

from cairnq import (
    LostLease,
    SQLiteStore,
    TaskContext,
    UnsupportedBackend,
)

if "postgres" not in DIALECTS:
    pytest.skip("PostgreSQL is not available", allow_module_level=True)


# ---------------------------------------------------------------------------
# 6. ctx.succeed_in: the handler's writes and the settlement in one transaction


async def _claimed_context(store: Any, worker_id: str, ctx_worker: Optional[str] = None) -> Any:
    task = await store.submit(name="tx.task", payload={"n": 1}, queue="txq")
    [claimed] = await store.claim(queues=["txq"], worker_id=worker_id)
    assert claimed.id == task.id
    return TaskContext(store, claimed, ctx_worker or worker_id, 30_000)


async def test_succeed_in_commits_write_and_settlement_together(pg):
    dsn = pg.target
    store = pg.store()
    await store.connect()
    run_sql(dsn, "create table side_effects (task_id text primary key, note text not null)")
    ctx = await _claimed_context(store, "w_tx")
    seen: list[Any] = []

    async def write(session: Any) -> Any:
        await session.query(
            "insert into side_effects (task_id, note) values ($1, $2)", [ctx.task_id, "done"]
        )
        await session.execute("insert into side_effects (task_id, note) values ('extra', 'script')")
        # inside the transaction: our write is visible to us, not to others
        seen.append(
            await session.query("select note from side_effects where task_id = $1", [ctx.task_id])
        )
        seen.append(fetch(dsn, "select count(*) from side_effects"))
        seen.append(fetch(dsn, "select status from cairnq_tasks where id = %s", [ctx.task_id]))
        return {"wrote": 2}

    task = await ctx.succeed_in(write)
    assert task.status == "succeeded" and task.result == {"wrote": 2}
    assert [dict(r) for r in seen[0]] == [{"note": "done"}]
    assert seen[1] == [(0,)] and seen[2] == [("running",)]  # nothing committed before the end
    assert sorted(fetch(dsn, "select task_id, note from side_effects")) == sorted(
        [(ctx.task_id, "done"), ("extra", "script")]
    )
    assert (await store.get(ctx.task_id)).status == "succeeded"
    assert ctx.settled and not ctx.lost_lease

    calls = []
    assert await ctx.succeed_in(lambda s: calls.append(s)) is None  # settled: a no-op
    assert calls == []


async def test_succeed_in_lost_lease_rolls_back_the_write(pg):
    dsn = pg.target
    store = pg.store()
    await store.connect()
    run_sql(dsn, "create table side_effects (task_id text primary key, note text not null)")
    ctx = await _claimed_context(store, "w_owner", ctx_worker="w_impostor")
    called = []

    async def write(session: Any) -> Any:
        called.append(True)
        await session.query(
            "insert into side_effects (task_id, note) values ($1, $2)", [ctx.task_id, "x"]
        )
        return "result"

    with pytest.raises(LostLease):
        await ctx.succeed_in(write)
    assert called == [True]
    assert fetch(dsn, "select count(*) from side_effects") == [(0,)]
    task = await store.get(ctx.task_id)
    assert task.status == "running" and task.worker_id == "w_owner" and task.result is None
    assert ctx.lost_lease and ctx.lease_lost.is_set()
    with pytest.raises(LostLease):  # known lost: refused locally, write not called
        await ctx.succeed_in(write)
    assert called == [True]


async def test_succeed_in_write_error_rolls_back_and_leaves_task_running(pg):
    dsn = pg.target
    store = pg.store()
    await store.connect()
    run_sql(dsn, "create table side_effects (task_id text primary key, note text not null)")
    ctx = await _claimed_context(store, "w_tx")

    async def write(session: Any) -> Any:
        await session.query(
            "insert into side_effects (task_id, note) values ($1, $2)", [ctx.task_id, "x"]
        )
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await ctx.succeed_in(write)
    assert fetch(dsn, "select count(*) from side_effects") == [(0,)]
    assert (await store.get(ctx.task_id)).status == "running"
    assert not ctx.settled and not ctx.lost_lease
    assert (await ctx.succeed(7)).status == "succeeded"


async def test_succeed_in_unsupported_on_sqlite(tmp_path):
    store = SQLiteStore(str(tmp_path / "tasks.db"))
    try:
        ctx = await _claimed_context(store, "w_sqlite")
        called = []

        async def write(session: Any) -> Any:
            called.append(session)
            return 1

        with pytest.raises(UnsupportedBackend):
            await ctx.succeed_in(write)
        assert called == []
        assert (await store.get(ctx.task_id)).status == "running"
    finally:
        await store.close()
