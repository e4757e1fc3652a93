"""The store factory both front doors share (``CairnQ.sqlite/postgres``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cairnq import CairnQ, PostgresStore, SQLiteStore
from cairnq.store.factory import open_store, postgres_store, sqlite_store


def test_sqlite_store_takes_the_shared_keywords(tmp_path: Path) -> None:
    store = sqlite_store(str(tmp_path / "q.db"), busy_timeout_ms=7, synchronous="NORMAL")
    assert type(store) is SQLiteStore
    assert (store.busy_timeout_ms, store.synchronous) == (7, "normal")
    with pytest.raises(ValueError, match="synchronous must be one of"):
        sqlite_store(":memory:", synchronous="sometimes")
    with pytest.raises(TypeError, match="busy_timeout_ms must be an int"):
        sqlite_store(":memory:", busy_timeout_ms=True)


def test_postgres_store_takes_the_shared_keywords() -> None:
    store = postgres_store("postgresql://nowhere/x", min_size=2, max_size=3, schema="s1")
    assert type(store) is PostgresStore
    assert (store.min_size, store.max_size, store.schema) == (2, 3, "s1")
    with pytest.raises(ValueError, match="schema must be a plain identifier"):
        postgres_store("postgresql://nowhere/x", schema="a b")


def test_open_store_by_dialect(tmp_path: Path) -> None:
    assert type(open_store("sqlite", ":memory:", busy_timeout_ms=1)) is SQLiteStore
    assert type(open_store("postgres", "postgresql://nowhere/x", max_size=2)) is PostgresStore
    with pytest.raises(ValueError, match="unknown dialect"):
        open_store("mysql", "x")  # type: ignore[arg-type]


async def test_the_client_opens_its_store_through_the_factory(backend: Any) -> None:
    if backend.dialect == "sqlite":
        q = CairnQ.sqlite(backend.target, busy_timeout_ms=9, synchronous="normal")
        assert (q.store.busy_timeout_ms, q.store.synchronous) == (9, "normal")  # type: ignore[attr-defined]
    else:
        q = CairnQ.postgres(backend.target, max_size=2)
        assert q.store.max_size == 2  # type: ignore[attr-defined]
    try:
        task = await q.submit("n")
        assert (await q.get(task.id)) is not None
    finally:
        await q.close()
