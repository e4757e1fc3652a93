"""``cairnq migrate``: bring a database up to date and report where it stands.

Migrations run whenever a store connects; this command connects, then reads
the versions and the migration ledger through the store.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from typing import Any

from cairnq import CairnQ, PostgresStore, create_pool_executor
from cairnq.cli.common import (
    EXIT_OK,
    DatabaseError,
    emit_json,
    fmt_time,
    log,
    one_line,
    resolve_target,
    settle,
    table,
)

__all__ = ["add_parser"]


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


# -- the command --------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_migrate(args))


async def _migrate(args: argparse.Namespace) -> int:
    target = resolve_target(args)
    executor = None
    try:
        if target.is_postgres:
            executor = await create_pool_executor(target.location, min_size=1, max_size=2)
        if executor is not None:
            client = CairnQ(PostgresStore(executor))
        else:
            client = CairnQ.sqlite(target.location)
        try:
            await client.connect()
            store = client.store
            protocol = await store.protocol_version()
            schema: int | None = await store.schema_version()
            ledger = await store.applied_migrations()
            applied = list(getattr(store, "migrations_applied", []))
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

    migrations: list[dict[str, Any]] = [
        {"name": str(name), "applied_at_ms": int(at)} for name, at in ledger
    ]
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

