"""The PostgreSQL executor seam: how ``PostgresStore`` reaches a database.

Applications may hand in their own executor (over any driver or pool); the
store calls it only through these protocols: ``$n`` placeholder SQL with a
positional value list, parameterless scripts through ``execute`` (simple query
protocol), ``transaction()`` as an async context manager, and an optional
``listen`` for push wakeups.
"""

from __future__ import annotations

from typing import Any, AsyncContextManager, Callable, Protocol, Sequence, runtime_checkable

__all__ = ["PgSession", "PgExecutor", "ListenUnavailable"]


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


# Optional member, looked up with getattr by the store:
#   async def listen(channels, on_notify, on_close) -> Callable[[], None]
ListenCallback = Callable[[str, "str | None"], None]
