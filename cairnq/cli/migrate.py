"""``cairnq migrate``: bring a database up to date and report where it stands.

Migrations run whenever a store connects; this command connects, then reads
the versions and the migration ledger. The protocol statements have no read
of the ledger or of ``schema_version``, so those two reads are done here
(read-only, on a connection of their own for SQLite, on the store's own
executor for Postgres).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sqlite3
from typing import Any, Optional

from cairnq import CairnQ, PostgresStore, create_pool_executor

from cairnq.cli.common import (
    EXIT_OK,
    DatabaseError,
    Target,
    emit_json,
    fmt_time,
    log,
    one_line,
    probe_postgres,
    resolve_target,
    settle,
    table,
)

__all__ = ["add_parser"]

_LEDGER_SQL = "select name, applied_at_ms from cairnq_migrations order by name"
_META_SQL = "select key, value from cairnq_meta"


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "migrate",
        parents=[common],
        help="apply pending migrations; show versions and the ledger",
        description="Open the database (creating a SQLite file if needed), apply every "
        "pending migration, and report protocol_version, schema_version and the "
        "migration ledger (name, applied at). Exit 3 if the database cannot be opened "
        "or speaks another protocol.",
    )
    p.set_defaults(run=run, parser=p)


# -- reading the ledger and meta ------------------------------------------------------


def _sqlite_read(path: str, sql: str) -> list[tuple[Any, ...]]:
    """Rows of one read on a private connection; [] if the table is absent."""
    uri = path.startswith("file:")
    conn = sqlite3.connect(path, uri=uri)
    try:
        try:
            return [tuple(r) for r in conn.execute(sql).fetchall()]
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []
            raise
    finally:
        conn.close()


async def _pg_read(executor: Any, sql: str) -> list[tuple[Any, ...]]:
    try:
        rows = await executor.query(sql, [])
    except Exception as exc:
        if "does not exist" in str(exc):  # undefined_table on a brand-new database
            return []
        raise
    return [tuple(r.values()) if isinstance(r, dict) else tuple(r) for r in rows]


async def _read(target: Target, executor: Any, sql: str) -> list[tuple[Any, ...]]:
    if executor is not None:
        return await _pg_read(executor, sql)
    if target.location in ("", ":memory:"):
        return []  # a private in-memory database: nothing to read from outside
    return await asyncio.to_thread(_sqlite_read, target.location, sql)


# -- the command --------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_migrate(args))


async def _migrate(args: argparse.Namespace) -> int:
    target = resolve_target(args)
    executor = None
    try:
        if target.is_postgres:
            await probe_postgres(target.location)
            executor = await create_pool_executor(target.location, min_size=1, max_size=2)
        before: set[str] = set()
        if target.is_postgres or target.sqlite_exists():
            before = {r[0] for r in await _read(target, executor, _LEDGER_SQL)}
        if executor is not None:
            client = CairnQ(PostgresStore(executor))
        else:
            client = CairnQ.sqlite(target.location)
        try:
            await client.connect()
            protocol = await client.store.protocol_version()
            ledger = await _read(target, executor, _LEDGER_SQL)
            meta = dict(await _read(target, executor, _META_SQL))
        finally:
            with contextlib.suppress(Exception):
                await client.close()
    except Exception as exc:
        log.debug("migrate failed", exc_info=True)
        raise DatabaseError(f"cannot migrate {target.describe()}: {one_line(exc)}") from exc
    finally:
        if executor is not None:
            with contextlib.suppress(Exception):
                await executor.close()
        await settle()

    schema = _int_or_none(meta.get("schema_version"))
    migrations = [{"name": str(name), "applied_at_ms": int(at)} for name, at in ledger]
    applied = [m["name"] for m in migrations if m["name"] not in before]
    if args.json:
        emit_json(
            {
                "database": target.describe(),
                "dialect": target.dialect,
                "protocol_version": protocol,
                "schema_version": schema,
                "applied": applied,
                "migrations": migrations,
            }
        )
        return EXIT_OK
    print(f"database          {target.describe()}")
    print(f"protocol_version  {protocol}")
    print(f"schema_version    {'-' if schema is None else schema}")
    print(f"applied now       {', '.join(applied) if applied else 'nothing (up to date)'}")
    print()
    rows = [(m["name"], fmt_time(m["applied_at_ms"])) for m in migrations]
    print("\n".join(table(("MIGRATION", "APPLIED"), rows)))
    return EXIT_OK


def _int_or_none(value: Optional[str]) -> Optional[int]:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None
