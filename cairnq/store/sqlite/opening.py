"""Opening a SQLite database: pragmas, WAL, migrations, statistics, version check.

Runs in a worker thread (``asyncio.to_thread``): index builds, ANALYZE and the
waits on other processes' locks all happen here, with SQLite's own
``busy_timeout`` in force, and never block the event loop.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from pathlib import Path
from typing import Mapping, Sequence

from cairnq._ids import now_ms
from cairnq._sql import Migration, Statement
from cairnq.store.base import check_protocol_version

log = logging.getLogger("cairnq.store")

__all__ = ["open_connection", "is_memory_path", "run_migrations", "refresh_statistics"]

WAL_RETRY_S = 0.05
WAL_RETRY_BUDGET_S = 5.0
# Bounds the rows ANALYZE reads per index during upkeep, so the periodic
# refresh (which runs on the event loop) stays in the milliseconds.
ANALYSIS_LIMIT = 1000
SYNCHRONOUS_MODES = ("full", "normal", "extra")


def is_memory_path(path: str) -> bool:
    return path == ":memory:" or path == "" or "mode=memory" in path


def open_connection(
    path: str,
    *,
    busy_timeout_ms: int,
    synchronous: str | None,
    statements: Mapping[str, Statement],
    migrations: Sequence[Migration],
    applied: list[str] | None = None,
) -> sqlite3.Connection:
    """An open, migrated, checked connection. ``applied`` collects the names of
    the migrations this open applied."""
    uri = path.startswith("file:")
    memory = is_memory_path(path)
    if not memory and not uri:
        Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(
        path,
        isolation_level=None,  # autocommit: the store issues BEGIN itself
        check_same_thread=False,  # opened here, used on the event loop thread
        cached_statements=512,
        uri=uri,
    )
    try:
        conn.execute(f"pragma busy_timeout = {int(busy_timeout_ms)}")
        if not memory:
            _switch_to_wal(conn)
        conn.execute("pragma foreign_keys = on")  # the key rows' cascade needs it
        if synchronous is not None:
            conn.execute(f"pragma synchronous = {synchronous}")
        done = run_migrations(conn, statements, migrations)
        if applied is not None:
            applied.extend(done)
        try:
            refresh_statistics(conn, statements)
        except sqlite3.Error:
            log.debug("planner statistics bootstrap failed", exc_info=True)
        conn.execute(f"pragma analysis_limit = {ANALYSIS_LIMIT}")
        conn.execute("pragma busy_timeout = 0")  # from here on the engine waits, async
        rows = conn.execute(statements["protocol_version"].text).fetchall()
        check_protocol_version(int(rows[0][0]) if rows else 0)
    except BaseException:
        conn.close()
        raise
    return conn


def _switch_to_wal(conn: sqlite3.Connection) -> None:
    deadline = time.monotonic() + WAL_RETRY_BUDGET_S
    while True:
        try:
            mode = conn.execute("pragma journal_mode = wal").fetchone()[0]
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc):
                raise
            if time.monotonic() >= deadline:
                raise sqlite3.OperationalError(
                    "could not switch the database to WAL mode: it stayed locked by another "
                    f"connection for {WAL_RETRY_BUDGET_S:g} s"
                ) from exc
            time.sleep(WAL_RETRY_S)
            continue
        if str(mode).lower() != "wal":
            raise sqlite3.OperationalError(
                f"could not switch the database to WAL mode: journal_mode stayed {mode!r}"
            )
        return


def run_migrations(
    conn: sqlite3.Connection,
    statements: Mapping[str, Statement],
    migrations: Sequence[Migration],
) -> list[str]:
    """Apply every migration not yet in the ledger, each in its own write
    transaction, where it is looked up again: processes cold-starting
    together take turns and each migration runs once. Those the ledger
    already lists are skipped without the write lock, so opening a migrated
    file never waits on other processes' writes."""
    conn.execute(statements["migrations_ledger"].text)
    applied_sql = statements["migration_applied"].text
    record_sql = statements["record_migration"].text
    applied: list[str] = []
    for migration in migrations:
        if conn.execute(applied_sql, {"name": migration.name}).fetchall():
            continue  # a ledger row is never taken back
        conn.execute("BEGIN IMMEDIATE")
        try:
            if not conn.execute(applied_sql, {"name": migration.name}).fetchall():
                for stmt in migration.statements():
                    conn.execute(stmt)
                conn.execute(record_sql, {"name": migration.name, "now_ms": now_ms()})
                applied.append(migration.name)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    if applied:
        log.info("applied migrations: %s", ", ".join(applied))
    return applied


def refresh_statistics(conn: sqlite3.Connection, statements: Mapping[str, Statement]) -> None:
    """ANALYZE until cairnq_tasks has statistics, then let PRAGMA optimize decide.

    Several plans (json_each id lists, the claim variants) are only chosen
    reliably with sqlite_stat1 present. ANALYZE of an empty table records
    nothing, so the bootstrap repeats until the table has rows.
    """
    present = conn.execute(statements["statistics_present"].text).fetchone()[0]
    if present:
        present = conn.execute(statements["statistics_rows"].text).fetchone()[0]
    conn.execute(statements["optimize" if present else "analyze"].text)
