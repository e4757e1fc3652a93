"""Where the backend's tasks live, read from its ``OPTIONS``.

* ``"db"``: a SQLite file path, or a ``postgresql://`` DSN;
* no ``"db"``, and Django's ``default`` database is PostgreSQL: that database,
  reached with its own connection settings, in a schema of cairnq's own
  (``"schema"``, default ``"cairnq"``), so Django's tables and cairnq's never meet;
* ``"schema"`` with a DSN: that schema (created if absent);
* ``"max_attempts"`` (default 1): a Django task that raises has failed, as with
  Django's own backends; more attempts retry it with cairnq's backoff.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from cairnq.store.base import TaskStore
from cairnq.store.factory import postgres_store, sqlite_store

__all__ = ["DEFAULT_SCHEMA", "StoreSpec", "django_database_dsn", "store_spec"]

DEFAULT_SCHEMA = "cairnq"
_POSTGRES_SCHEMES = ("postgresql://", "postgres://")
# DATABASES[...]["OPTIONS"] keys that are Django's own, not libpq parameters.
_DJANGO_ONLY = frozenset(
    {"isolation_level", "server_side_binding", "pool", "assume_role", "cursor_factory", "context"}
)
_KNOWN = frozenset({"db", "schema", "max_attempts"})


@dataclass(frozen=True)
class StoreSpec:
    """One store's address: what a backend and a worker process both open."""

    dialect: Literal["sqlite", "postgres"]
    target: str  # file path or DSN
    schema: str | None = None
    max_attempts: int = 1

    def open(self) -> TaskStore:
        """A new store (not yet connected)."""
        if self.dialect == "sqlite":
            return sqlite_store(self.target)
        return postgres_store(self.target, schema=self.schema)

    def describe(self) -> str:
        """Where, without a password."""
        if self.dialect == "sqlite":
            return f"SQLite {self.target}"
        return f"PostgreSQL schema {self.schema or 'public'}"


def store_spec(options: Mapping[str, Any], databases: Mapping[str, Any]) -> StoreSpec:
    """The spec for a backend's ``OPTIONS``; ``databases`` is Django's DATABASES.
    Raises ValueError with the reason when it cannot be built."""
    unknown = sorted(set(options) - _KNOWN)
    if unknown:
        raise ValueError(f"unknown OPTIONS {unknown}; expected some of {sorted(_KNOWN)}")
    attempts = options.get("max_attempts", 1)
    if type(attempts) is not int or attempts < 1:
        raise ValueError(f"OPTIONS['max_attempts'] must be a whole number >= 1, got {attempts!r}")
    schema = options.get("schema")
    if schema is not None and not isinstance(schema, str):
        raise ValueError(f"OPTIONS['schema'] must be a string, got {schema!r}")
    db = options.get("db")
    if db is not None:
        if not isinstance(db, str) or not db:
            raise ValueError(f"OPTIONS['db'] must be a file path or a DSN, got {db!r}")
        if db.startswith(_POSTGRES_SCHEMES):
            return StoreSpec("postgres", db, schema, attempts)
        if schema is not None:
            raise ValueError("OPTIONS['schema'] applies to PostgreSQL only; 'db' is a SQLite file")
        return StoreSpec("sqlite", db, None, attempts)
    default = databases.get("default") or {}
    if "postgresql" not in str(default.get("ENGINE", "")):
        raise ValueError(
            "OPTIONS['db'] is missing: give a SQLite file path or a postgresql:// DSN "
            "(without it, Django's default database must be PostgreSQL, and cairnq uses it "
            "in a schema of its own)"
        )
    return StoreSpec("postgres", django_database_dsn(default), schema or DEFAULT_SCHEMA, attempts)


def django_database_dsn(database: Mapping[str, Any]) -> str:
    """A libpq connection string for one entry of Django's DATABASES."""
    from psycopg.conninfo import make_conninfo

    params: dict[str, Any] = {
        key: value
        for key, value in (database.get("OPTIONS") or {}).items()
        if key not in _DJANGO_ONLY and isinstance(value, (str, int))
    }
    for setting, param in (("NAME", "dbname"), ("USER", "user"), ("PASSWORD", "password"),
                           ("HOST", "host"), ("PORT", "port")):  # fmt: skip
        value = database.get(setting)
        if value not in (None, ""):
            params[param] = str(value)
    return make_conninfo("", **params)
