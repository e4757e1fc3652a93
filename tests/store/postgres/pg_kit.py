"""Helpers of the PostgreSQL-only tests (``tests/store/postgres/test_pg_*.py``):
the ``pg`` fixture (a fresh database per test), raw connections, the ledger
and meta readers, backend termination."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

import pytest
from backends import DIALECTS, make_backend

from cairnq import (
    PostgresStore,
)

if "postgres" not in DIALECTS:
    pytest.skip("PostgreSQL is not available", allow_module_level=True)

import psycopg  # noqa: E402

from cairnq.store.postgres.listener import DONE_CHANNEL, QUEUED_CHANNEL  # noqa: E402

LEDGER = [
    "0001_init.sql", "0002_purge_index.sql", "0003_notify.sql", "0004_lease_index.sql",
    "0005_clear_terminal_lease.sql", "0006_claim_name_index.sql", "0007_purge_status_index.sql",
    "0008_claim_due_index.sql", "0009_purge_queue_index.sql", "0010_drop_status_index.sql",
]  # fmt: skip
TABLES = {"cairnq_tasks", "cairnq_task_keys", "cairnq_meta", "cairnq_migrations"}
DB_NOW_MS = "select (extract(epoch from clock_timestamp()) * 1000)::bigint"


# ---------------------------------------------------------------------------
# fixtures and helpers


@pytest.fixture
def pg(tmp_path: Path) -> Iterator[Any]:
    """A brand-new PostgreSQL database (a ``tests.backends.Backend``)."""
    with make_backend("postgres", tmp_path) as backend:
        yield backend


def connect(dsn: str, **kwargs: Any) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True, **kwargs)


def fetch(dsn: str, query: str, params: Optional[Sequence[Any]] = None) -> list[tuple[Any, ...]]:
    with connect(dsn) as conn:
        return conn.execute(query, params).fetchall()  # type: ignore[arg-type]


def run_sql(dsn: str, query: str, params: Optional[Sequence[Any]] = None) -> None:
    with connect(dsn) as conn:
        conn.execute(query, params)  # type: ignore[arg-type]


def ledger(dsn: str, schema: str = "public") -> list[tuple[str, int]]:
    return [
        (name, applied)
        for name, applied in fetch(
            dsn, f'select name, applied_at_ms from "{schema}".cairnq_migrations order by name'
        )
    ]


def meta(dsn: str, schema: str = "public") -> dict[str, str]:
    return dict(fetch(dsn, f'select key, value from "{schema}".cairnq_meta'))  # type: ignore[arg-type]


def tables_in(dsn: str, schema: str) -> set[str]:
    rows = fetch(
        dsn,
        "select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace"
        " where n.nspname = %s and c.relkind = 'r'",
        [schema],
    )
    return {r[0] for r in rows}


def object_oids(dsn: str) -> dict[str, int]:
    """OIDs of everything the migrations create: a migration that re-ran
    (0003 drops/recreates the trigger, 0008 the claim indexes) changes them."""
    rows = fetch(
        dsn,
        "select c.relname, c.oid::bigint from pg_class c join pg_namespace n on n.oid = c.relnamespace"
        " where n.nspname = 'public' and c.relname like 'cairnq%'"
        " union all select 'trigger:' || tgname, oid::bigint from pg_trigger where tgname = 'cairnq_tasks_notify'"
        " union all select 'function:' || proname, oid::bigint from pg_proc where proname = 'cairnq_notify'",
    )
    return dict(rows)  # type: ignore[arg-type]


def backends_of(dsn: str, database: str) -> list[int]:
    """Every other backend connected to ``database`` (our pool, our listener)."""
    rows = fetch(
        dsn,
        "select pid from pg_stat_activity where datname = %s and pid <> pg_backend_pid()",
        [database],
    )
    return [r[0] for r in rows]


def terminate(dsn: str, pids: Sequence[int]) -> None:
    """pg_terminate_backend each pid and wait until they are gone."""
    with connect(dsn) as conn:
        for pid in pids:
            conn.execute("select pg_terminate_backend(%s)", [pid])
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            alive = conn.execute(
                "select count(*) from pg_stat_activity where pid = any(%s)", [list(pids)]
            ).fetchone()
            if not alive or alive[0] == 0:
                return
            time.sleep(0.02)
    raise AssertionError(f"backends {pids} did not exit")


def listener_pids(dsn: str, application_name: str) -> list[int]:
    """The LISTEN connection(s) opened from a DSN carrying ``application_name``."""
    rows = fetch(
        dsn,
        "select pid from pg_stat_activity where application_name = %s and query ilike 'listen%%'",
        [application_name],
    )
    return [r[0] for r in rows]


async def until(
    predicate: Callable[[], Any], timeout_s: float = 5.0, what: str = "condition"
) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def listening(store: PostgresStore, timeout_s: float = 5.0) -> None:
    """Connect, start the store's LISTEN connection on both channels (waits
    start it on their own, on the channels they need), and poll a bit until
    it is up."""
    await store.connect()
    assert store._listener is not None
    store._listener.want(QUEUED_CHANNEL, DONE_CHANNEL)
    await until(
        lambda: store._listener is not None and store._listener.connected, timeout_s, "listener"
    )


async def timed(aw: Any) -> float:
    start = time.monotonic()
    await aw
    return time.monotonic() - start


def status_counts(dsn: str) -> dict[str, int]:
    return dict(fetch(dsn, "select status, count(*) from cairnq_tasks group by status"))  # type: ignore[arg-type]
