"""The driver seam: what a dialect (SQLite, PostgreSQL) provides the operations.

The operations (``cairnq/store/ops/``) are written once over these methods;
nothing above the store knows how a dialect implements them. ``StoreDriver``
is the typed contract (each driver module checks its class against it);
``DriverDefaults`` is the base the operations inherit: the five methods every
driver must write, and a plain fallback for the rest (sleep for wakeups, no
push, every write on its own).

Glossary of the seam:

* *statement*: one file ``protocol/<dialect>/<name>.sql``, run by its name
  with a dict of named parameters; rows come back as sequences in table order.
* *deferred*: a write nobody is waiting on (a worker's settlements and
  heartbeats) that a driver may hold briefly and commit with its next
  transaction instead of on its own (SQLite: the next claim transaction).
* *alone*: a write sent at once, in autocommit, overlapping nothing held or
  grouped (PostgreSQL: a lone claim draw, one round trip).

The driver methods keep the names 0.15.1 gave them (``_fetch`` is a
documented hook subclasses wrap), hence the underscores.
"""

from __future__ import annotations

import asyncio
import builtins
import time
from abc import ABC, abstractmethod
from contextlib import AbstractAsyncContextManager
from typing import Any, Awaitable, Callable, Literal, Protocol, Sequence

from cairnq.errors import UnsupportedBackend
from cairnq.events import StatementEvent, channel

__all__ = ["Fetch", "PushReason", "Emit", "StoreDriver", "DriverDefaults", "STATEMENTS", "observed"]

# Run one statement by name with its parameters; its rows.
Fetch = Callable[[str, dict[str, Any]], Awaitable[builtins.list[Any]]]

# What a driver with push notifications reports: new work in a queue, or a
# task that finished.
PushReason = Literal["queued", "done"]
Emit = Callable[[PushReason, "str | None", "str | None"], None]


# Statement events (``cairnq.events``): a driver's statement-running functions
# test ``STATEMENTS.on`` and, only then, run the statement through ``observed``.
STATEMENTS = channel("statement")
_perf_counter = time.perf_counter


async def observed(
    name: str, dialect: str, pending: Awaitable[builtins.list[Any]]
) -> builtins.list[Any]:
    """Await one statement's rows and report it (name, rows, time, error)."""
    started = _perf_counter()
    try:
        rows = await pending
    except BaseException as exc:
        if STATEMENTS.on:
            STATEMENTS.emit(StatementEvent("statement", name, dialect, 0, _perf_counter() - started, exc))
        raise
    if STATEMENTS.on:
        STATEMENTS.emit(StatementEvent("statement", name, dialect, len(rows), _perf_counter() - started, None))
    return rows


class StoreDriver(Protocol):
    """What a dialect must provide. Every method is called on the store."""

    #: Migrations the last connect applied (file names); empty when none were due.
    migrations_applied: builtins.list[str]

    async def connect(self) -> None:
        """Open (and migrate) the database; idempotent, concurrent-safe."""

    async def close(self) -> None:
        """Finish the writes held or in flight, then release the connections."""

    async def protocol_version(self) -> int:
        """``cairnq_meta.protocol_version`` (0 when absent)."""

    async def _fetch(self, name: str, params: dict[str, Any]) -> builtins.list[Any]:
        """Run statement ``name`` on its own (autocommit) and return its rows.
        (0.15.1's hook: subclasses wrap it, for metrics say.)"""

    async def _fetch_deferred(self, name: str, params: dict[str, Any]) -> builtins.list[Any]:
        """``_fetch`` for a deferred write: it may commit with the driver's
        next transaction instead of on its own."""

    def _lone_draw_fetch(self) -> Fetch | None:
        """How a claim with one draw and nothing to recover runs that draw
        alone (outside a transaction), where that is cheaper than BEGIN ...
        COMMIT; None: inside one."""

    def _transaction(self) -> AbstractAsyncContextManager[Fetch]:
        """One write transaction; yields a fetch bound to it (commit on a
        clean exit, roll back on an exception)."""

    def _claim_transaction(self) -> AbstractAsyncContextManager[Fetch]:
        """The write transaction of a claim session (``_transaction``, where a
        driver notes nothing more: see ``_claim_wake_pushed``)."""

    def _transaction_with_session(self) -> AbstractAsyncContextManager[tuple[Fetch, Any]]:
        """A transaction that also yields the driver's session, for a caller's
        own writes in it (PostgreSQL; others raise UnsupportedBackend)."""

    def _register_wakeable(self, queues: Sequence[str]) -> None:
        """A worker claims from these queues: buffer pushed news of work for them."""

    async def claim_wake(self, queues: builtins.list[str], timeout_ms: int) -> bool | None:
        """Sleep up to ``timeout_ms``; return early on news of work (True
        when told of it: the claim loop then skips its probe)."""

    @property
    def _claim_wake_pushed(self) -> bool:
        """``claim_wake`` is woken by pushed news, and news that lands before
        the wait begins is kept for it (or, SQLite, counted from the claim
        transaction's own commit): a claim that came back short may sleep at
        once instead of probing again."""

    async def task_done_wake(self, task_id: str, timeout_ms: int) -> bool | None:
        """Sleep up to ``timeout_ms``; return early when the task finishes
        (True when told so: waiters then read it at once)."""

    async def _watch_push(self, emit: Emit) -> Callable[[], None] | None:
        """Subscribe ``emit(reason, queue, task_id)`` to pushed notifications;
        an unsubscribe, or None when the driver pushes nothing."""

    async def _wait_for_change(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the database to change; True if it did."""


class DriverDefaults(ABC):
    """The seam's required methods, and fallbacks for the optional ones."""

    @abstractmethod
    async def connect(self) -> None: ...

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def protocol_version(self) -> int: ...

    @abstractmethod
    async def _fetch(self, name: str, params: dict[str, Any]) -> builtins.list[Any]:
        """Run statement ``name`` on its own (autocommit) and return its rows.
        (0.15.1's hook, same signature: subclasses wrap it, for metrics say.)"""

    async def _fetch_deferred(self, name: str, params: dict[str, Any]) -> builtins.list[Any]:
        """By default a deferred write is a plain ``_fetch``."""
        return await self._fetch(name, params)

    def _lone_draw_fetch(self) -> Fetch | None:
        return None

    @abstractmethod
    def _transaction(self) -> AbstractAsyncContextManager[Fetch]:
        """One write transaction; yields a fetch bound to it."""

    def _claim_transaction(self) -> AbstractAsyncContextManager[Fetch]:
        return self._transaction()

    def _transaction_with_session(self) -> AbstractAsyncContextManager[tuple[Fetch, Any]]:
        raise UnsupportedBackend(
            "this store cannot share a transaction with the caller — complete_in "
            f"requires a Postgres store (see PgExecutor); {type(self).__name__} has none"
        )

    def _register_wakeable(self, queues: Sequence[str]) -> None:
        """Drivers with push notifications buffer wakeups for these queues."""

    async def claim_wake(self, queues: builtins.list[str], timeout_ms: int) -> bool | None:
        """Sleep up to ``timeout_ms``; drivers that can, return early on new work
        (and return True when told of it: the claim loop then skips its probe)."""
        await asyncio.sleep(timeout_ms / 1000)
        return None

    @property
    def _claim_wake_pushed(self) -> bool:
        """``claim_wake`` is woken by pushed news of work, and news that lands
        before the wait begins is kept for it (PostgreSQL with its listener up)."""
        return False

    async def task_done_wake(self, task_id: str, timeout_ms: int) -> bool | None:
        """Sleep up to ``timeout_ms``; drivers that can, return early when it
        finishes (and return True when told so: waiters then read it at once)."""
        await asyncio.sleep(timeout_ms / 1000)
        return None

    async def _watch_push(self, emit: Emit) -> Callable[[], None] | None:
        """Subscribe ``emit(reason, queue, task_id)`` to pushed notifications
        ("queued" with its queue, "done" with its task id); returns an
        unsubscribe, or None when the driver pushes nothing."""
        return None

    async def _wait_for_change(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the database to change; True if it did."""
        await asyncio.sleep(timeout_s)
        return False
