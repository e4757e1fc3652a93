"""One way to open a store from the keywords ``CairnQ.sqlite/postgres`` and
``Worker.sqlite/postgres`` share, so the two front doors cannot drift apart."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Optional

if TYPE_CHECKING:
    from cairnq.store.base import TaskStore
    from cairnq.store.postgres.store import PostgresStore
    from cairnq.store.sqlite.store import SQLiteStore

__all__ = ["sqlite_store", "postgres_store", "open_store"]


def sqlite_store(
    path: str, *, busy_timeout_ms: int = 5_000, synchronous: Optional[str] = None
) -> SQLiteStore:
    """A SQLite store at ``path`` (a file, or ``":memory:"``); not yet opened."""
    from cairnq.store.sqlite.store import SQLiteStore

    return SQLiteStore(path, busy_timeout_ms=busy_timeout_ms, synchronous=synchronous)


def postgres_store(
    source: Any, *, min_size: int = 1, max_size: int = 10, schema: Optional[str] = None
) -> PostgresStore:
    """A PostgreSQL store over ``source`` (a DSN: the store owns its pool; or
    a ``PgExecutor``, used as is); not yet connected."""
    from cairnq.store.postgres.store import PostgresStore

    return PostgresStore(source, min_size=min_size, max_size=max_size, schema=schema)


def open_store(dialect: Literal["sqlite", "postgres"], target: Any, **options: Any) -> TaskStore:
    """``sqlite_store(target, **options)`` or ``postgres_store(target, **options)``."""
    if dialect == "sqlite":
        return sqlite_store(target, **options)
    if dialect == "postgres":
        return postgres_store(target, **options)
    raise ValueError(f"unknown dialect {dialect!r}; expected 'sqlite' or 'postgres'")
