"""The PostgreSQL executor seam: how ``PostgresStore`` reaches a database.

Applications may hand in their own executor (over any driver or pool); the
store calls it only through these protocols: ``$n`` placeholder SQL with a
positional value list, parameterless scripts through ``execute`` (simple query
protocol), ``transaction()`` as an async context manager, and the optional
``listen`` for push wakeups and ``dedicated`` for a fleet's sessions.
"""

from __future__ import annotations

from typing import Any, AsyncContextManager, Callable, Protocol, Sequence, runtime_checkable

__all__ = ["PgSession", "PgExecutor", "ListenUnavailable"]


# on_notify(channel, payload) of listen().
ListenCallback = Callable[[str, "str | None"], None]


class ListenUnavailable(Exception):
    """LISTEN can never work on this executor (e.g. a transaction-mode pooler).

    The store then stays a poller for this connection's lifetime. Deliberately
    not a CairnQError: it is a capability report, not a failure.
    """


@runtime_checkable
class PgSession(Protocol):
    async def query(self, text: str, values: Sequence[Any]) -> list[Any]:
        """One statement with $1..$n placeholders; rows indexable by column name."""
        ...

    async def execute(self, sql: str) -> None:
        """Parameterless SQL, possibly several statements (simple query protocol)."""
        ...


@runtime_checkable
class PgExecutor(PgSession, Protocol):
    def transaction(self) -> AsyncContextManager[PgSession]:
        """One connection, one transaction: commit on clean exit, roll back on error."""
        ...

    async def close(self) -> None:
        """Release resources (called only for executors the store created)."""
        ...

    async def listen(
        self, channels: Sequence[str], on_notify: ListenCallback, on_close: Callable[[], None]
    ) -> Callable[[], None]:
        """Optional: subscribe one dedicated connection to ``channels``; call
        ``on_notify(channel, payload)`` per notification and ``on_close()`` if
        the connection drops by itself; return a sync ``stop()``. Raise
        ``ListenUnavailable`` when LISTEN can never work. The store looks it up
        with getattr: an executor without it (or with only this declaration,
        inherited) is polled instead."""
        ...

    async def dedicated(self, application_name: str) -> Any:
        """Optional: one connection of its own, outside the pool, in
        autocommit, named ``application_name`` in ``pg_stat_activity``; the
        object answers ``query(text, values)`` (rows as tuples) and
        ``close()``. A statement cancelled from asyncio must end on the
        server too. Idle workers of one database form a fleet through such
        sessions (``fleet_session.py``); without it each worker polls and
        listens on its own."""
        ...
