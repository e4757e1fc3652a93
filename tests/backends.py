"""Real databases for tests: a SQLite file, or a throwaway PostgreSQL database.

PostgreSQL is reached at ``CAIRNQ_TEST_PG`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``); each test gets its own
database, created before and dropped after. Set ``CAIRNQ_TEST_DIALECTS`` to
e.g. ``sqlite`` to run a subset.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

from cairnq import CairnQ, Worker
from cairnq.store.base import TaskStore

ADMIN_DSN = os.environ.get("CAIRNQ_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def _postgres_available() -> bool:
    try:
        import psycopg
    except ImportError:
        return False
    try:
        with psycopg.connect(ADMIN_DSN, connect_timeout=3):
            return True
    except Exception:
        return False


def _dialects() -> tuple[str, ...]:
    wanted = os.environ.get("CAIRNQ_TEST_DIALECTS")
    if wanted:
        return tuple(d.strip() for d in wanted.split(",") if d.strip())
    from cairnq.store.postgres import PostgresStore

    ready = getattr(PostgresStore, "AVAILABLE", False)
    return ("sqlite", "postgres") if ready and _postgres_available() else ("sqlite",)


DIALECTS = _dialects()


def dsn_for(database: str) -> str:
    base, _, _ = ADMIN_DSN.rpartition("/")
    return f"{base}/{database}"


def create_database() -> str:
    import psycopg

    name = f"cairnq_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'create database "{name}"')
    return name


def drop_database(name: str) -> None:
    import psycopg

    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'drop database if exists "{name}" with (force)')


@dataclass
class Backend:
    """One test's database, and everything built on it (closed at the end)."""

    dialect: str
    target: str  # SQLite file path, or Postgres DSN
    database: Optional[str] = None
    _stores: list[TaskStore] = field(default_factory=list)

    def store(self, **kwargs: Any) -> TaskStore:
        if self.dialect == "sqlite":
            from cairnq import SQLiteStore

            store: TaskStore = SQLiteStore(self.target, **kwargs)
        else:
            from cairnq import PostgresStore

            store = PostgresStore(self.target, **kwargs)
        self._stores.append(store)
        return store

    def client(self, store_kwargs: Optional[dict[str, Any]] = None, **kwargs: Any) -> CairnQ:
        return CairnQ(self.store(**(store_kwargs or {})), **kwargs)

    def worker(
        self, queues: tuple[str, ...] = ("default",), store: Optional[TaskStore] = None, **kwargs: Any
    ) -> Worker:
        return Worker(store or self.store(), list(queues), **kwargs)

    async def aclose(self) -> None:
        for store in self._stores:
            with contextlib.suppress(Exception):
                await store.close()
        self._stores.clear()


_EXPECTED_LEDGER = (
    "0001_init.sql", "0002_purge_index.sql", "0003_notify.sql", "0004_lease_index.sql",
    "0005_clear_terminal_lease.sql", "0006_claim_name_index.sql", "0007_purge_status_index.sql",
    "0008_claim_due_index.sql", "0009_purge_queue_index.sql", "0010_drop_status_index.sql",
)  # fmt: skip


def reset_database(name: str) -> None:
    """Empty a test database between tests: no tasks, no keys, stock meta and
    ledger. Much cheaper than a new database per test; tests that change the
    schema itself ask for a fresh database instead."""
    import psycopg

    with psycopg.connect(dsn_for(name), autocommit=True) as conn:
        present = conn.execute("select to_regclass('public.cairnq_tasks') is not null").fetchone()
        if not present or not present[0]:
            return
        conn.execute("truncate cairnq_task_keys, cairnq_tasks")
        conn.execute("delete from cairnq_meta where key not in ('protocol_version', 'schema_version')")
        conn.execute("update cairnq_meta set value = '1' where key = 'protocol_version'")
        conn.execute("update cairnq_meta set value = '10' where key = 'schema_version'")
        conn.execute("delete from cairnq_migrations where not (name = any(%s))", [list(_EXPECTED_LEDGER)])


@contextlib.contextmanager
def make_backend(dialect: str, tmp_path: Path, pg_database: Optional[str] = None) -> Iterator[Backend]:
    """``pg_database``: a shared per-session database to reuse (reset first);
    without one, a brand-new database is created and dropped."""
    if dialect == "sqlite":
        yield Backend("sqlite", str(tmp_path / "tasks.db"))
        return
    if dialect != "postgres":
        raise ValueError(dialect)
    if pg_database is not None:
        reset_database(pg_database)
        yield Backend("postgres", dsn_for(pg_database), database=pg_database)
        return
    name = create_database()
    try:
        yield Backend("postgres", dsn_for(name), database=name)
    finally:
        drop_database(name)
