"""Throwaway PostgreSQL databases for tests (psycopg, imported on use)."""

from __future__ import annotations

__all__ = ["create_database", "drop_database"]


def create_database(admin_dsn: str, name: str) -> tuple[str, str]:
    """Create database ``name`` through ``admin_dsn``; its DSN and name."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    return make_conninfo(admin_dsn, dbname=name), name


def drop_database(admin_dsn: str, name: str) -> None:
    """Drop it, closing whatever is still connected (PostgreSQL 13+)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name))
        )
