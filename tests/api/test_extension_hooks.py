"""The lower-level hooks API.md documents for custom stores, workers and
executors behave as in 0.15.1: code written against them keeps working.

Found by introspecting both SDKs side by side; each test here failed before
its fix.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cairnq import CairnQ, PgExecutor, PostgresStore, SQLiteStore, Task, TaskContext, TaskTimeout, Worker
from cairnq.store.base import specialize, statement_params
from cairnq.store.postgres.listener import Listener


def _metered(dialect: str) -> type:
    """A store subclass wrapping the documented hook ``_fetch(name, params)``."""
    base = SQLiteStore if dialect == "sqlite" else PostgresStore

    class Metered(base):  # type: ignore[valid-type, misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.seen: list[str] = []

        async def _fetch(self, name: str, params: dict[str, Any]) -> list[Any]:
            self.seen.append(name)
            return await super()._fetch(name, params)

    return Metered


async def test_a_fetch_wrapper_sees_every_statement_and_the_worker_settles(backend) -> None:
    store = _metered(backend.dialect)(backend.target)
    q = CairnQ(store)
    worker = Worker(store, ["default"], heartbeat_interval_ms=20, lease_ms=2_000)

    @worker.task("slow")
    async def slow(ctx: TaskContext, payload: dict[str, Any]) -> int:
        await asyncio.sleep(0.1)  # long enough for a batch heartbeat
        return int(payload["n"]) * 2

    try:
        async with worker.background():
            results = await asyncio.gather(*(q.call("slow", {"n": n}, timeout_ms=10_000) for n in range(3)))
        assert results == [0, 2, 4]
        assert "heartbeat_batch" in store.seen
        assert {"complete_many", "complete_each", "complete"} & set(store.seen)
    finally:
        await store.close()


def test_statement_params_and_specialize() -> None:
    sql = "select * from t where (:q is null or queue = :q) and (:s is null or status = :s) -- c :zz\n and x = :x::int"
    assert specialize(sql, {"q": "a", "s": None}) == (
        "select * from t where queue = :q and (:s is null or status = :s) -- c :zz\n and x = :x::int"
    )
    assert specialize("where (:q::text is null or queue = :q)", {"q": "a"}) == "where queue = :q"
    assert specialize("where (:q is null or queue = :q)", {}) == "where (:q is null or queue = :q)"
    assert statement_params("select :a, :b, :a, x::int -- :c\n , :d") == ("a", "b", "d")
    # 0.15.1 also counted ":e" inside a string (and rewrote it): not a parameter.
    assert statement_params("select ':e'") == ()


def test_context_observers() -> None:
    task = Task("task_1", "n", "default", "running", {}, {}, attempt=1)
    ctx = TaskContext(SQLiteStore(":memory:"), task, "worker_1", 30_000)
    fresh = Task("task_1", "n", "default", "running", {}, {}, attempt=1, progress=0.5)
    assert ctx._observe(fresh) is fresh
    assert ctx._observe(None) is None
    assert not ctx._cancel_seen
    ctx._observe_cancel(cancel_requested=True)
    assert ctx._cancel_seen


class _NoListen:
    async def query(self, text: str, values: Any) -> list[Any]:
        return []

    async def execute(self, sql: str) -> None:
        return None

    def transaction(self) -> Any:
        raise NotImplementedError

    async def close(self) -> None:
        return None


class _InheritsTheProtocol(_NoListen, PgExecutor):
    """Subclasses the protocol and so inherits only its listen() declaration."""


def test_pg_executor_declares_listen_and_the_store_polls_without_one() -> None:
    assert callable(getattr(PgExecutor, "listen", None))
    assert not isinstance(_NoListen(), PgExecutor)
    assert Listener(_NoListen(), None)._disabled
    assert Listener(_InheritsTheProtocol(), None)._disabled


@pytest.mark.parametrize(
    ("args", "kwargs", "text"),
    [
        (("task_x",), {"key": "kk"}, "key kk did not finish in time"),
        (("task_x",), {}, "task task_x did not finish in time"),
        (("kk",), {"key": "kk", "timeout_ms": 5}, "key kk did not finish within 5ms: "),
    ],
)
def test_task_timeout_names_the_key_when_waited_on_by_key(args: Any, kwargs: Any, text: str) -> None:
    err = TaskTimeout(*args, **kwargs)
    assert str(err).startswith(text)
    assert err.task_id == args[0] and err.key == kwargs.get("key")
