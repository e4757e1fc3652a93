"""PostgreSQL: the executor seam: a protocol-only executor, and parameter numbering."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Optional, Sequence

import pytest
from backends import DIALECTS

from cairnq import (
    LostLease,
    PostgresStore,
)
from cairnq.store.postgres import positional_statement, to_positional

if "postgres" not in DIALECTS:
    pytest.skip("PostgreSQL is not available", allow_module_level=True)

import psycopg  # noqa: E402
from pg_kit import LEDGER, pg  # noqa: F401 (fixtures)
from psycopg.rows import dict_row  # noqa: E402

# ---------------------------------------------------------------------------
# 5. the executor seam: a protocol-only executor, and parameter numbering


class DictRowExecutor:
    """A PgExecutor written against the protocol only, on psycopg: ``$n``
    placeholders (raw cursor), dict rows, psycopg's default jsonb loader (so
    JSON comes back decoded). One shared autocommit connection for plain
    statements, a new connection per transaction."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.calls: list[tuple[str, str, Any]] = []
        self.closed = False
        self._conn: Optional[psycopg.AsyncConnection[Any]] = None
        self._lock = asyncio.Lock()

    async def _new(self) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(
            self.dsn, autocommit=True, row_factory=dict_row, cursor_factory=psycopg.AsyncRawCursor
        )

    async def _shared(self) -> psycopg.AsyncConnection[Any]:
        async with self._lock:
            if self._conn is None:
                self._conn = await self._new()
            return self._conn

    async def query(self, text: str, values: Sequence[Any]) -> list[dict[str, Any]]:
        self.calls.append(("query", text, list(values)))
        return await _query(await self._shared(), text, values)

    async def execute(self, sql: str) -> None:
        self.calls.append(("execute", sql, None))
        await (await self._shared()).execute(sql, prepare=False)

    @contextlib.asynccontextmanager
    async def transaction(self) -> Any:
        self.calls.append(("transaction", "", None))
        conn = await self._new()
        try:
            async with conn.transaction():
                yield _DictSession(conn, self.calls)
        finally:
            await conn.close()

    async def close(self) -> None:
        self.closed = True
        if self._conn is not None:
            await self._conn.close()


class _DictSession:
    def __init__(self, conn: Any, calls: list[Any]) -> None:
        self._conn = conn
        self._calls = calls

    async def query(self, text: str, values: Sequence[Any]) -> list[dict[str, Any]]:
        self._calls.append(("session.query", text, list(values)))
        return await _query(self._conn, text, values)

    async def execute(self, sql: str) -> None:
        self._calls.append(("session.execute", sql, None))
        await self._conn.execute(sql, prepare=False)


async def _query(conn: Any, text: str, values: Sequence[Any]) -> list[dict[str, Any]]:
    cur = conn.cursor()
    await cur.execute(text, list(values))
    return await cur.fetchall() if cur.description is not None else []


async def test_protocol_only_executor_runs_every_operation(pg):
    executor = DictRowExecutor(pg.target)
    try:
        store = PostgresStore(executor)
        await store.connect()
        assert store._json_is_text is False  # the probe saw decoded jsonb

        # the connect sequence as the executor saw it (API.md §11.3)
        kinds = [(k, t) for k, t, _ in executor.calls]
        assert kinds[0][0] == "query" and "current_schema()" in kinds[0][1]
        assert kinds[1][0] == "execute" and "cairnq_migrations" in kinds[1][1]
        assert sum(1 for k, _ in kinds if k == "transaction") == 10
        scripts = [t for k, t in kinds if k == "session.execute" and "lock table" not in t]
        assert len(scripts) == 10 and any("$$" in s for s in scripts)  # 0003 via execute
        checks = [v for k, _, v in executor.calls if k == "session.query"]
        assert [v for v in checks if v] and all(v == [n] for v, n in zip(checks[::2], LEDGER))
        tail = [t for k, t in kinds if k == "query"][-2:]
        assert "protocol_version" in tail[0]
        assert "'\"cairnq\"'::jsonb" in tail[1]
        for kind, text, values in executor.calls:
            if values:
                assert "$1" in text and isinstance(values, list)

        payload = {"order": {"id": 7, "lines": [1, 2.5, "x", None, True]}, "é": "ü ✓"}
        a = await store.submit(
            name="seam.a", payload=payload, queue="sq", metadata={"m": [1]}, priority=2
        )
        b = await store.submit(name="seam.b", payload=[1, 2], queue="sq")
        k1 = await store.submit(name="seam.k", payload={"v": 1}, queue="sq", key="seam-key")
        k2 = await store.submit(name="seam.k", payload={"v": 2}, queue="sq", key="seam-key")
        assert k1.id == k2.id and k2.payload == {"v": 1}
        got = await store.get(a.id)
        assert got.payload == payload and got.metadata == {"m": [1]} and got.status == "queued"
        assert isinstance(got.created_at_ms, int) and got.root_id == a.id
        assert (await store.get_by_key("seam-key")).id == k1.id

        [first] = await store.claim(queues=["sq"], worker_id="w_seam")
        assert first.id == a.id and first.status == "running" and first.attempt == 1
        assert first.payload == payload
        done = await store.complete(
            task_id=a.id, worker_id="w_seam", result={"r": [1, {"z": None}]}
        )
        assert done.status == "succeeded" and done.result == {"r": [1, {"z": None}]}
        assert done.progress == 1.0

        claimed = await store.claim(queues=["sq"], worker_id="w_seam", limit=5, names=["seam.b"])
        assert [t.id for t in claimed] == [b.id]
        failed = await store.fail(
            task_id=b.id, worker_id="w_seam", error={"code": "x", "message": "m"}, retryable=False
        )
        assert failed.status == "failed" and failed.error == {"code": "x", "message": "m"}
        with pytest.raises(LostLease):
            await store.complete(task_id=b.id, worker_id="w_seam", result=None)

        listed = await store.list(queue="sq")
        assert {t.id for t in listed} == {a.id, b.id, k1.id}
        assert [t.id for t in await store.list(status="failed")] == [b.id]
        assert (await store.list(name="seam.a"))[0].result == {"r": [1, {"z": None}]}
        assert await store.stats("sq") == {
            "sq": {"queued": 1, "running": 0, "succeeded": 1, "failed": 1, "canceled": 0}
        }
        assert (await store.cancel_by_key("seam-key")).status == "canceled"
        await asyncio.sleep(0.002)  # purge's cutoff is strict: finished >= 1 ms ago
        assert sorted(await store.purge(older_than_ms=0, queue="sq")) == sorted([a.id, b.id, k1.id])

        await store.close()
        assert executor.closed is False  # a supplied executor is never closed
        assert await executor.query("select 1 as one", []) == [{"one": 1}]
    finally:
        await executor.close()


def test_positional_statement_numbering():
    text, names = positional_statement("select * from t where b = :b and a = :a and c = :b")
    assert text == "select * from t where b = $1 and a = $2 and c = $1"
    assert names == ("b", "a")

    text, names = positional_statement("select :x::jsonb, 'a'::text, :y :: int, now()::date")
    assert text == "select $1::jsonb, 'a'::text, $2 :: int, now()::date"
    assert names == ("x", "y")

    text, names = positional_statement(
        "select :lease_ms2 -- :ignored in a comment\n  + :lease_ms2, :z_1"
    )
    assert names == ("lease_ms2", "z_1")
    assert ":ignored" not in text and "$1" in text and "$2" in text and "$3" not in text

    assert positional_statement("select 1") == ("select 1", ())


def test_to_positional_values():
    text, values = to_positional(
        "update t set x = :x::jsonb where id = :id and w = :w and id <> :x",
        {"id": "task_1", "w": None, "x": "{}", "unused": 9},
    )
    assert text == "update t set x = $1::jsonb where id = $2 and w = $3 and id <> $1"
    assert values == ["{}", "task_1", None]
    text, values = to_positional("select :q::text[], :b", {"b": True, "q": ["a", "b"]})
    assert text == "select $1::text[], $2" and values == [["a", "b"], True]
