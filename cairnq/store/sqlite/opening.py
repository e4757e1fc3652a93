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
# Bounds the rows ANALYZE reads per index, so measuring a large table takes
# milliseconds (the periodic refresh runs on the event loop).
ANALYSIS_LIMIT = 1000
SYNCHRONOUS_MODES = ("full", "normal", "extra")
# Below this many rows cairnq_tasks keeps seeded planner statistics (see
# refresh_statistics); SEEDED_ROWS is the row count they describe.
STATISTICS_MIN_ROWS = 10_000
SEEDED_ROWS = 1_000_000


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
        conn.execute(f"pragma analysis_limit = {ANALYSIS_LIMIT}")
        try:
            refresh_statistics(conn, statements)
        except sqlite3.Error:
            log.debug("planner statistics bootstrap failed", exc_info=True)
        # A multi-row write inside a transaction (a claim riding with its
        # settlements, a batch of writes) keeps a statement journal, so that
        # it can fail alone; past 64 KiB SQLite spills that journal to a
        # temporary file, created and unlinked in every such transaction. In
        # memory it costs no file. The sorter then never spills either, so
        # this comes after the migrations (an index they create sorts the
        # whole table), and every statement of ours that sorts is limited or
        # groups a bounded set (tests/store/test_query_plans.py holds them to it).
        conn.execute("pragma temp_store = memory")
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
    """Keep planner statistics for cairnq_tasks that lead to large-table plans.

    Statistics ANALYZE records while the table is small ("one row per
    anything") make the planner scan where it should seek, and PRAGMA optimize
    only measures again once the table has grown 25-fold: a multi-name claim
    walked the whole table for each candidate (~300 ms at 20,000 rows) until
    then. So while the table holds fewer than STATISTICS_MIN_ROWS rows it gets
    seeded statistics of a large one (``seed_statistics.sql``); once it holds
    more, it is measured (ANALYZE), and from then on PRAGMA optimize decides.
    A rewrite is marked with a schema change so every connection to the file
    replans, not only this one. Other processes (other SDKs included) may
    ANALYZE the small table meanwhile: the next refresh seeds again.
    """
    state = _statistics_state(conn, statements)
    if state == "measured":
        conn.execute(statements["optimize"].text)  # a large table's own: SQLite decides
        return
    if state == "seeded":
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Again under the write lock: processes opening together rewrite once.
        if _statistics_state(conn, statements) != "stale":
            conn.execute("COMMIT")
            return
        small = _tasks_up_to(conn, statements) < STATISTICS_MIN_ROWS
        # ANALYZE also creates sqlite_stat1 when the file has none yet.
        conn.execute(statements["analyze"].text)
        if small:
            conn.execute(statements["forget_statistics"].text)
            conn.execute(statements["seed_statistics"].text)
        # A view of that name left by anyone else would refuse the mark.
        conn.execute(statements["statistics_changed_unmark"].text)
        conn.execute(statements["statistics_changed_mark"].text)
        conn.execute(statements["statistics_changed_unmark"].text)
        # Loaded before the COMMIT: after it, a busy lock could strand this
        # connection on what the ANALYZE above measured of the small table.
        conn.execute(statements["reload_statistics"].text)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _statistics_state(conn: sqlite3.Connection, statements: Mapping[str, Statement]) -> str:
    """"seeded" (and the table still small), "measured" (on a large table),
    or "stale": none, measured while small, partly either, or seeded on a
    table that has outgrown them."""
    if not conn.execute(statements["statistics_present"].text).fetchone()[0]:
        return "stale"
    rows, indexes, seeded = conn.execute(statements["statistics_rows"].text).fetchone()
    if rows is None:
        return "stale"
    if seeded == indexes:
        return "seeded" if _tasks_up_to(conn, statements) < STATISTICS_MIN_ROWS else "stale"
    if seeded:
        return "stale"  # partly measured since (an index analyzed on its own)
    return "measured" if rows >= STATISTICS_MIN_ROWS else "stale"


def _tasks_up_to(conn: sqlite3.Connection, statements: Mapping[str, Statement]) -> int:
    rows = conn.execute(statements["tasks_up_to"].text, {"limit": STATISTICS_MIN_ROWS}).fetchone()
    return int(rows[0])
