"""The built-in PostgreSQL executor: a psycopg 3 connection pool."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["create_pool_executor", "check_schema_name", "PLAIN_IDENT"]

PLAIN_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*$")


def check_schema_name(schema: str) -> None:
    """A schema name must be a plain identifier (it is double-quoted, never escaped)."""
    if not isinstance(schema, str) or not PLAIN_IDENT.match(schema):
        raise ValueError(
            f"schema must match {PLAIN_IDENT.pattern} (letters, digits, _ and $), got {schema!r}"
        )


async def create_pool_executor(
    dsn: str, *, min_size: int = 1, max_size: int = 10, schema: str | None = None
) -> Any:
    from cairnq.errors import UnsupportedBackend

    if schema is not None:
        check_schema_name(schema)
    raise UnsupportedBackend("the PostgreSQL backend is not available in this build yet")
