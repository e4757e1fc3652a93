"""``PostgresStore``: the same operations on PostgreSQL, for many hosts.

Differences from SQLite, all below the TaskStore seam: times come from the
database clock inside the statements; claims lock with FOR UPDATE SKIP LOCKED;
keyed operations serialize on an advisory lock every SDK computes the same
way; LISTEN/NOTIFY shortens idle waits; and concurrent writes are grouped into
one pipelined transaction (one round trip, one WAL flush) by ``PgWriteBatcher``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Optional

from cairnq._sql import Statement, load_migrations, load_statements
from cairnq.errors import SchemaMismatch
from cairnq.store.base import TaskStore, check_protocol_version
from cairnq.store.driver import STATEMENTS, Emit, Fetch, observed
from cairnq.store.own import is_own, register_own
from cairnq.store.postgres.batcher import PgWriteBatcher
from cairnq.store.postgres.fleet import FleetMember, fleet_key, fleet_prefix
from cairnq.store.postgres.fleet_session import FleetSession
from cairnq.store.postgres.listener import DONE_CHANNEL, QUEUED_CHANNEL, Listener
from cairnq.store.postgres.params import compile_template, positional_statement, selective_literal
from cairnq.store.postgres.pool import create_pool_executor
from cairnq.store.postgres.rows import rows_of as _rows_of
from cairnq.store.validation import check_schema_name

log = logging.getLogger("cairnq.store")

DIALECT = "postgres"
_STATEMENTS = STATEMENTS

__all__ = ["PostgresStore"]


_MAX_BOUND_TEXTS = 4_096  # bound per value combination; callers could pass anything


def _value_key(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _connection_lost(exc: BaseException) -> bool:
    """The connection (not the statement) failed: psycopg's OperationalError
    family (server shutdown, terminated backend, network), or the like."""
    if isinstance(exc, (ConnectionError, OSError)):
        return True
    try:
        import psycopg
    except ImportError:
        return False
    return isinstance(exc, psycopg.OperationalError)


class PostgresStore(TaskStore):
    """Tasks in PostgreSQL. ``source``: a DSN (the store builds and owns a
    psycopg pool) or any ``PgExecutor`` (used as is, never closed)."""

    AVAILABLE = True

    def __init__(
        self,
        source: Any,
        *,
        min_size: int = 1,
        max_size: int = 10,
        schema: Optional[str] = None,
    ) -> None:
        if schema is not None:
            check_schema_name(schema)
        self.source = source
        self.min_size = min_size
        self.max_size = max_size
        self.schema = schema
        self._statements = load_statements("postgres")
        self._positional: dict[tuple[str, str], tuple[str, tuple[str, ...]]] = {}
        # Statements with one text whatever the values (no literals, no
        # optional filters): name -> (text, parameter order), bound by lookup.
        self._plain: dict[str, tuple[str, tuple[str, ...]]] = {}
        # Statements annotated plan-per-value (see cairnq._sql.ANNOTATIONS): those values.
        self._selective = {n: s.plan_per_value for n, s in self._statements.items() if s.plan_per_value}
        self._with_literals: dict[tuple[Any, ...], tuple[str, tuple[str, ...]]] = {}
        # Statements annotated plan-custom: sent unprepared, planned with each call's values.
        self._unprepared = frozenset(n for n, s in self._statements.items() if s.plan_custom)
        self._executor: Any = None
        self._owns_executor = isinstance(source, str)
        self._rows: Callable[..., Awaitable[list[Any]]] | None = None
        self._writes: PgWriteBatcher | None = None
        self._listener: Listener | None = None
        self._fleet_session: FleetSession | None = None
        self._news_for: set[str] = set()  # workers whose waits need news of work (see _news_wanted)
        self._closing: set[asyncio.Task[None]] = set()  # fleet sessions closing, leaders' probes
        self._connect_lock: asyncio.Lock | None = None
        self._wakeable: set[str] = set()
        #: Migrations the last connect applied (file names); empty when none were due.
        self.migrations_applied: list[str] = []

    def __repr__(self) -> str:
        where = "executor" if not isinstance(self.source, str) else "dsn"
        return f"PostgresStore({where}, schema={self.schema!r})"

    # -- lifecycle ---------------------------------------------------------

    async def connect(self) -> None:
        await self._connected()

    async def _connected(self) -> Any:
        if self._executor is not None:
            return self._executor
        if self._connect_lock is None:
            self._connect_lock = asyncio.Lock()
        async with self._connect_lock:
            if self._executor is not None:
                return self._executor
            if self._owns_executor:
                executor = await create_pool_executor(
                    self.source, min_size=self.min_size, max_size=self.max_size, schema=self.schema
                )
            else:
                executor = self.source
            try:
                await self._guard_schema(executor)
                await self._migrate(executor)
                rows = await _rows_of(executor)(self._sql("protocol_version"), [])
                check_protocol_version(int(rows[0][0]) if rows else 0)
                probe = await _rows_of(executor)(self._sql("json_wire_probe"), [])
                self._json_is_text = probe[0][0] == '"cairnq"'
            except BaseException:
                if self._owns_executor:
                    await executor.close()
                raise
            self._rows = _rows_of(executor)
            self._writes = PgWriteBatcher(executor, self._rows)
            # Started by the first wait that needs it (see listener.py).
            self._listener = Listener(executor, self._dsn_for_listen())
            self._fleet_session = FleetSession(executor, self._bind)
            self._listener.fleet.overflow = self._fleet_overflow
            self._listener.fleet.verify = self._fleet_verify
            self._executor = executor
        self._start_sweeper()
        return executor

    def _dsn_for_listen(self) -> Optional[str]:
        return self.source if isinstance(self.source, str) else None

    async def _guard_schema(self, executor: Any) -> None:
        rows = await _rows_of(executor)(self._sql("installations"), [])
        current = rows[0][0] if rows else None
        found = [r[1] for r in rows if r[1] is not None]
        if self.schema is not None:
            if current != self.schema:
                raise SchemaMismatch(
                    f"cairnq is configured for schema {self.schema!r} but this connection resolves "
                    f"to {current!r}; check the connection's search_path"
                )
            return
        if current is None or not found or current in found:
            return
        listed = ", ".join(repr(s) for s in found)
        raise SchemaMismatch(
            f"cairnq tables already exist in schema {listed} of this database, but this "
            f"connection resolves to {current!r}, where there are none. Connecting would "
            "create a second installation the first never sees: point this process at the "
            "same schema (schema=..., or options=-c search_path=... in the DSN), or pass "
            "schema= to confirm a separate installation is meant."
        )

    async def _migrate(self, executor: Any) -> None:
        try:
            await executor.execute(self._statements["migrations_ledger"].text)
        except Exception:
            # Two processes creating the ledger at once: "if not exists" is not
            # atomic in PostgreSQL and the loser gets a unique violation on the
            # catalog. If the table is there now, the race was lost harmlessly.
            rows = await _rows_of(executor)(self._sql("ledger_present"), [])
            if not (rows and rows[0][0]):
                raise
        applied = []
        for migration in load_migrations("postgres"):
            async with executor.transaction() as session:
                await session.execute(self._statements["migrations_lock"].text)
                text, _ = self._positional_for("migration_applied")
                if not await session.query(text, [migration.name]):
                    await session.execute(migration.script)
                    text, _ = self._positional_for("record_migration")
                    await session.query(text, [migration.name])
                    applied.append(migration.name)
        if applied:
            log.info("applied migrations: %s", ", ".join(applied))
        self.migrations_applied = applied

    async def close(self) -> None:
        if self._sweeper is not None:
            await self._sweeper.stop()
        executor, self._executor = self._executor, None
        if self._listener is not None:
            self._listener.stop()
            self._listener = None
        session, self._fleet_session = self._fleet_session, None
        if session is not None:
            await session.close()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
        if self._writes is not None:
            await self._writes.drain()
            self._writes = None
        if executor is not None and self._owns_executor:
            await executor.close()

    async def protocol_version(self) -> int:
        rows = await self._fetch("protocol_version", {})
        return int(rows[0][0]) if rows else 0

    # -- statements ----------------------------------------------------------

    def _sql(self, name: str) -> str:
        return self._positional_for(name)[0]

    def _positional_for(self, name: str, sql: Optional[str] = None) -> tuple[str, tuple[str, ...]]:
        stmt: Statement = self._statements[name]
        text = sql if sql is not None else stmt.text
        key = (name, text)
        found = self._positional.get(key)
        if found is None:
            found = self._positional[key] = positional_statement(text)
        return found

    def _bind(self, name: str, params: dict[str, Any]) -> tuple[str, list[Any]]:
        plain = self._plain.get(name)
        if plain is None:
            stmt = self._statements[name]
            if name in self._selective:
                return self._bind_with_literals(stmt, params)
            if stmt.filters:
                text, names = self._positional_for(name, stmt.specialize(params))
                return text, [params[n] for n in names]
            plain = self._plain[name] = self._positional_for(name)
        text, names = plain
        return text, [params[n] for n in names]

    def _bind_with_literals(self, stmt: Statement, params: dict[str, Any]) -> tuple[str, list[Any]]:
        selective = self._selective[stmt.name]
        key = (stmt.name, *(_value_key(params.get(p)) for p in selective))
        if stmt.filters:  # which optional filters are given shapes the text too
            key += tuple(params.get(p) is None for p, _ in stmt.filters)
        found = self._with_literals.get(key)
        if found is None:
            literals = {p: selective_literal(params.get(p)) for p in selective}
            template = compile_template(stmt.specialize(params))
            found = template.bind({p: v for p, v in literals.items() if v is not None})
            if len(self._with_literals) >= _MAX_BOUND_TEXTS:
                self._with_literals.clear()
            self._with_literals[key] = found
        text, names = found
        return text, [params[n] for n in names]

    # -- the driver seam ---------------------------------------------------------

    async def _fetch(self, name: str, params: dict[str, Any]) -> list[Any]:
        if _STATEMENTS.on:
            return await observed(name, DIALECT, self._send(name, params, grouped=True))
        return await self._send(name, params, grouped=True)

    def _lone_draw_fetch(self) -> Fetch:
        # A lone claim draw commits in one round trip on its own; inside
        # BEGIN ... COMMIT it takes three. A wrapped _fetch sees it too.
        return self._fetch_alone if is_own(self, "_fetch") else self._fetch

    async def _fetch_alone(self, name: str, params: dict[str, Any]) -> list[Any]:
        """A write alone, in autocommit, sent at once: not grouped behind
        the settlements in flight, so a claim overlaps them."""
        if _STATEMENTS.on:
            return await observed(name, DIALECT, self._send(name, params, grouped=False))
        return await self._send(name, params, grouped=False)

    async def _send(self, name: str, params: dict[str, Any], *, grouped: bool) -> list[Any]:
        """``grouped``: a write joins the group commit of the writes issued
        in the same loop turn (reads never wait for one)."""
        if self._executor is None:
            await self._connected()
        text, values = self._bind(name, params)
        read = self._statements[name].is_read
        prepare = name not in self._unprepared
        try:
            if read or not grouped:
                assert self._rows is not None
                return await self._rows(text, values, prepare)
            assert self._writes is not None
            return await self._writes.write(text, values, prepare)
        except Exception as exc:
            if not _connection_lost(exc):
                raise
            await self._recover_connections()
            if not read:
                raise  # a write is never replayed: it may have committed
            assert self._rows is not None
            return await self._rows(text, values, prepare)

    async def _recover_connections(self) -> None:
        recover = getattr(self._executor, "_recover", None)
        if recover is not None:
            try:
                await recover()
            except Exception:
                log.debug("pool check after a lost connection failed", exc_info=True)

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[Fetch]:
        async with self._transaction_with_session() as (fetch, _session):
            yield fetch

    @asynccontextmanager
    async def _transaction_with_session(self) -> AsyncIterator[tuple[Fetch, Any]]:
        executor = self._executor or await self._connected()
        try:
            async with executor.transaction() as session:
                rows_of: Callable[..., Awaitable[list[Any]]] = _rows_of(session)

                def fetch(name: str, params: dict[str, Any]) -> Awaitable[list[Any]]:
                    text, values = self._bind(name, params)
                    prepare = name not in self._unprepared
                    if _STATEMENTS.on:
                        return observed(name, DIALECT, rows_of(text, values, prepare))
                    return rows_of(text, values, prepare)

                yield fetch, session
        except Exception as exc:
            if _connection_lost(exc):
                await self._recover_connections()
            raise

    # -- push wakeups ----------------------------------------------------------------

    def _register_wakeable(self, queues: Any) -> None:
        self._wakeable.update(queues)
        if self._listener is not None:
            self._listener.watch_queues(queues)

    @property
    def _claim_wake_pushed(self) -> bool:
        listener = self._listener
        return listener is not None and listener.connected

    async def claim_wake(self, queues: list[str], timeout_ms: int) -> bool | None:
        listener = self._listener
        if listener is None:
            await asyncio.sleep(timeout_ms / 1000)
            return None
        return await listener.wait_queued(queues, timeout_ms / 1000)

    # -- the fleet of idle workers (see fleet.py) ----------------------------------------

    def _fleet_member(self, worker_id: str, queues: list[str], names: Any, interval_ms: int) -> FleetMember | None:
        """This worker as a member of its fleet, once its session is up; None
        while it acts alone (no listener, no session of its own, or a second
        worker of this store: the session carries one mark)."""
        listener, session = self._listener, self._fleet_session
        if session is None or not session.available:
            return None
        if listener is None or not listener.available:
            if session.up:
                session.lost()  # no leader could listen here: no fleet
            return None
        fleet = listener.fleet
        marked = fleet.marked()
        if marked is not None and marked.id != worker_id:
            return None  # the session carries another worker's mark
        key = fleet_key(self.schema, queues, names)
        member = fleet.join(worker_id, key, queues, interval_ms / 1000, names)
        if member.mark is None:  # an id no mark can spell: alone
            fleet.leave(worker_id)
            return None
        session.start(member.mark)  # (no-op once up with this mark)
        return member if session.up else None

    def _news_wanted(self, worker_id: str, wanted: bool) -> None:
        """Whether this worker's waits need news of work (it leads or acts
        alone) or not (it waits at its fleet's gate). The listening session
        stops listening for it once no worker of this store needs it."""
        if wanted:
            self._news_for.add(worker_id)
            return
        self._news_for.discard(worker_id)
        if not self._news_for and self._listener is not None:
            self._listener.drop(QUEUED_CHANNEL)

    async def _fleet_wait(self, worker_id: str, queues: list[str], names: Any, interval_ms: int) -> bool | None:
        """A worker's idle wait. In a fleet: the leader waits up to a poll
        interval for news, as a lone worker does; the others at the gate,
        until the leader opens it or their next turn (the caller probes after
        a wait that ends without news). Otherwise ``claim_wake``."""
        member = self._fleet_member(worker_id, queues, names, interval_ms)
        listener, session = self._listener, self._fleet_session
        if member is None or listener is None or session is None:
            self._news_wanted(worker_id, True)
            return await self.claim_wake(queues, interval_ms)
        fleet = listener.fleet
        began = listener.sessions
        if fleet.turn_due(member):
            if fleet.list_due(member):
                rows = await self._fetch("fleet_turn", {"prefix": fleet_prefix(member.key)})
                members = [row[0] for row in rows]
                fleet.took_turn(member, members)
                if member.id in members:
                    session.seen()
                else:
                    session.lost()  # its mark is gone: so is the session, on the server
            else:
                fleet.took_turn(member)  # the list last read holds
            try:
                if not member.leader:
                    await session.let_go()
                elif not await session.keep(member.gate):
                    fleet.turn_soon(member)  # another session still keeps it: look again
            except Exception:
                log.debug("fleet gate: the session failed, acting alone", exc_info=True)
        if member.leader:
            self._news_wanted(worker_id, True)
            listener.watch_queues(queues)
            listener.want(QUEUED_CHANNEL)
            if not listener.connected:
                # Not listening (yet, or any more): claim_wake waits for the
                # session to be back, and the caller probes.
                return await self.claim_wake(queues, interval_ms)
            if listener.sessions != began:
                # The session started over during the turn's read: what was
                # raised in between went unheard. The caller probes.
                return False
            return await fleet.wait(member, member.interval_s)
        self._news_wanted(worker_id, False)
        outcome = await session.wait(member.gate, member.next_turn - time.monotonic())
        if outcome == "opened":
            return True
        if outcome == "unkept":
            # The leader is gone, or not keeping yet: poll until a turn, soon.
            fleet.turn_soon(member)
            until_turn = max(0.0, member.next_turn - time.monotonic())
            await asyncio.sleep(min(member.interval_s, until_turn))
        return False  # its turn (or no session: the next wait acts alone)

    def _fleet_probe_due(self, worker_id: str, queues: list[str], names: Any, interval_ms: int) -> bool | None:
        """Whether a worker told of work probes first all the same: None (the
        worker's own poll interval) unless it is a member that does not lead
        (its turns probe for it: False)."""
        member = self._fleet_member(worker_id, queues, names, interval_ms)
        if member is None or member.leader:
            return None
        return False

    def _fleet_claimed(self, worker_id: str, full: bool) -> None:
        """A claim of the worker came back, full or short: a leader that
        stays behind a while opens the gate for the others (fleet.py,
        ``Fleet.claimed``)."""
        listener = self._listener
        member = None if listener is None else listener.fleet.members.get(worker_id)
        if listener is not None and member is not None:
            listener.fleet.claimed(member, full)

    def _fleet_overflow(self, member: FleetMember) -> None:
        if self._fleet_session is not None:
            self._fleet_session.open(member.interval_s)

    def _fleet_verify(self, member: FleetMember) -> None:
        """Whether a leader that may be behind is: one probe (is a task of its
        queues and names due?), and the gate opens if so."""

        async def verify() -> None:
            try:
                params = self._claim_params(sorted(member.queues), member.id, 30_000, member.names)
                due, expired = await self._probe(params)
            except Exception:
                log.debug("fleet: a leader's probe failed", exc_info=True)
                return
            if (due or expired) and member.leader:
                self._fleet_overflow(member)

        task = asyncio.get_running_loop().create_task(verify())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def _fleet_leave(self, worker_id: str) -> None:
        """The worker's claim loop stopped: out of the fleet. If it carried
        the session's mark, the session goes (its gate with it: the others
        look for a new leader); the next member, if any, opens its own."""
        self._news_for.discard(worker_id)
        listener, session = self._listener, self._fleet_session
        if listener is None:
            return
        fleet = listener.fleet
        marked = fleet.marked()
        if fleet.leave(worker_id) is None:
            return
        if session is not None and marked is not None and marked.id == worker_id:
            self._fleet_session = FleetSession(self._executor, self._bind)
            closing = asyncio.get_running_loop().create_task(session.close())
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)

    async def task_done_wake(self, task_id: str, timeout_ms: int) -> bool | None:
        """Sleep up to ``timeout_ms``; returns True early when told the task finished."""
        listener = self._listener
        if listener is None:
            await asyncio.sleep(timeout_ms / 1000)
            return False
        return await listener.wait_done(task_id, timeout_ms / 1000)

    async def _watch_push(self, emit: Emit) -> Optional[Callable[[], None]]:
        await self._connected()
        if self._listener is None:
            return None

        def forward(channel: str, payload: Optional[str]) -> None:
            if channel == QUEUED_CHANNEL:
                emit("queued", payload, None)
            elif channel == DONE_CHANNEL:
                emit("done", None, payload)

        return self._listener.subscribe(forward)


register_own(PostgresStore)

if TYPE_CHECKING:  # the driver satisfies the seam's protocol (checked by mypy)
    from cairnq.store.driver import StoreDriver

    def _is_driver(store: PostgresStore) -> StoreDriver:
        return store
