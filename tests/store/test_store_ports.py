"""The store's ports: one place decides whether a private fast path may stand
in for a store method (``is_own``), and the worker port honours a method the
user replaced, on both dialects."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cairnq import PostgresStore, SQLiteStore
from cairnq.store.own import OWN_CHECKED, is_own
from cairnq.store.ports import StoreWatchPort, StoreWorkerPort


def driver(backend: Any) -> type:
    return SQLiteStore if backend.dialect == "sqlite" else PostgresStore


def test_a_stock_store_is_all_cairnqs_own(backend: Any) -> None:
    store = backend.store()
    assert [name for name in OWN_CHECKED if not is_own(store, name)] == []


@pytest.mark.parametrize("name", OWN_CHECKED)
def test_a_method_replaced_on_the_instance_is_not_own(backend: Any, name: str) -> None:
    store = backend.store()
    setattr(store, name, getattr(store, name))  # even a pass-through
    assert not is_own(store, name)
    assert all(is_own(store, other) for other in OWN_CHECKED if other != name)


@pytest.mark.parametrize("name", OWN_CHECKED)
def test_a_subclass_override_is_not_own_and_a_plain_subclass_is(backend: Any, name: str) -> None:
    base = driver(backend)

    async def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return await getattr(base, name)(self, *args, **kwargs)

    overriding = type("Overriding", (base,), {name: method})(backend.target)
    plain = type("Plain", (base,), {})(backend.target)
    assert not is_own(overriding, name)
    assert all(is_own(plain, n) for n in OWN_CHECKED)


def test_a_method_patched_on_the_class_is_not_own(backend: Any, monkeypatch: Any) -> None:
    base = driver(backend)
    store = backend.store()
    original = base.heartbeat_batch

    async def heartbeat_batch(self: Any, **kwargs: Any) -> Any:
        return await original(self, **kwargs)

    monkeypatch.setattr(base, "heartbeat_batch", heartbeat_batch)
    assert not is_own(store, "heartbeat_batch")
    monkeypatch.undo()
    assert is_own(store, "heartbeat_batch")


async def test_the_worker_port_calls_a_replaced_claim_session_with_its_keywords(backend: Any) -> None:
    store = backend.store()
    seen: list[dict[str, Any]] = []
    original = store.claim_session

    async def claim_session(**kwargs: Any) -> Any:
        seen.append(kwargs)
        return await original(**kwargs)

    store.claim_session = claim_session  # type: ignore[method-assign]
    port = StoreWorkerPort(store, "worker_1", 30_000)
    await store.submit(name="n")

    async def plan(draw: Any) -> Any:
        return await draw(["n"], 1)

    claimed, probed = await port.claim(["default"], ["n"], plan, probe=False, single_draw=True)
    assert [t.name for t in claimed] == ["n"] and probed  # a replaced claim always probes
    assert [set(kw) for kw in seen] == [{"queues", "worker_id", "lease_ms", "names", "plan"}]


async def test_a_fetch_wrapper_sees_the_deferred_writes_and_the_lone_draw(backend: Any) -> None:
    base = driver(backend)

    class Metered(base):  # type: ignore[valid-type, misc]
        seen: list[str]

        async def _fetch(self, name: str, params: dict[str, Any]) -> list[Any]:
            self.seen.append(name)
            return await super()._fetch(name, params)

    store = Metered(backend.target)
    store.seen = []
    backend._stores.append(store)
    port = StoreWorkerPort(store, "worker_1", 30_000)
    task = await store.submit(name="n")

    async def plan(draw: Any) -> Any:
        return await draw(["n"], 1)

    [claimed], _ = await port.claim(["default"], ["n"], plan, probe=False, single_draw=True)
    assert await port.beat([task.id]) == {task.id: False}
    assert await port.complete_many_deferred([task.id], None) == {task.id: "succeeded"}
    # PostgreSQL draws alone, outside a transaction, so through _fetch; a
    # SQLite claim is a transaction's statement, which _fetch never saw.
    drawn = ["claim_one_queue_one_name"] if backend.dialect == "postgres" else []
    assert [n for n in store.seen if n != "insert_task"] == [*drawn, "heartbeat_batch", "complete_many"]


async def test_the_watch_port_sees_another_connections_commit_on_sqlite(sqlite_backend: Any) -> None:
    store, other = sqlite_backend.store(), sqlite_backend.store()
    await store.connect()
    port = StoreWatchPort(store)
    assert await port.watch_push(lambda *args: None) is None  # SQLite pushes nothing
    assert await port.wait_for_change(0.01) is False
    await other.connect()
    waiting = asyncio.ensure_future(port.wait_for_change(30.0))
    await asyncio.sleep(0.05)  # the wait has read the file's change counter
    await other.submit(name="n")
    assert await waiting is True


async def test_the_watch_port_subscribes_to_pushes_on_postgres(backend: Any) -> None:
    if backend.dialect != "postgres":
        pytest.skip("PostgreSQL pushes notifications")
    store = backend.store()
    got: list[tuple[Any, ...]] = []
    unsubscribe = await StoreWatchPort(store).watch_push(lambda *args: got.append(args))
    assert unsubscribe is not None
    unsubscribe()
