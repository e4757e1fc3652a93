"""``SQLiteStore``: the embedded default. One file, one connection per store."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from contextlib import AbstractAsyncContextManager, contextmanager
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterator

from cairnq._ids import now_ms
from cairnq._speedups import dumps, encode_ids
from cairnq._sql import Statement, load_migrations, load_statements
from cairnq.errors import DatabaseReplaced, StoreClosed
from cairnq.store.base import TaskStore
from cairnq.store.driver import STATEMENTS, Fetch, observed
from cairnq.store.own import is_own, register_own
from cairnq.store.sqlite.echo import row_echo, row_filler
from cairnq.store.sqlite.engine import SqliteEngine, is_busy
from cairnq.store.sqlite.file_watch import FileWatch, watch_database
from cairnq.store.sqlite.opening import (
    SYNCHRONOUS_MODES,
    is_memory_path,
    open_connection,
    refresh_statistics,
)
from cairnq.store.validation import check_busy_timeout_ms, check_choice

log = logging.getLogger("cairnq.store")

__all__ = ["SQLiteStore"]

STATISTICS_INTERVAL_S = 60.0
STATISTICS_BUSY_RETRY_S = 1.0
# Polling the change counter where no file watch tells of writes (see
# file_watch: Windows, URI and memory databases, CAIRNQ_SQLITE_FILE_WATCH=0):
# a fresh wait checks after 1 ms, backing off to every 2 ms; each check reads
# shared memory, not the database.
CHANGE_POLL_MIN_S = 0.001
CHANGE_POLL_MAX_S = 0.002
# With a file watch, a waiter looks at the counter when told the files were
# written, then every NOTICE_POLL_S for NOTICE_CLOSE_S (a commit reaches the
# counter only after its WAL write is reported: after its fsync, under
# synchronous=FULL, so the first look may come too soon), then less and less
# often (at twice the time since the notification). Otherwise, every
# QUIET_POLL_S: a safety net for writes the kernel does not report (made on
# the other side of a network or virtual file system, say).
NOTICE_POLL_S = 0.001
NOTICE_CLOSE_S = 0.025
QUIET_POLL_S = 0.1
# Within FINE_WINDOW_S of a notification, where a timerfd allows (see
# fine_timer), the looks come every FINE_POLL_S instead: the commit behind
# the notification is published when its fsync returns, typically 0.2-1 ms
# after the write, and a waiter on whole milliseconds would see it up to a
# millisecond late (twice in every call(): the worker woken, then the caller).
FINE_POLL_S = 0.0002
FINE_WINDOW_S = 0.004
# ... and closer still where the publication is expected: every CLOSE_POLL_S
# for twice a commit's time (this connection's own, on average: the same
# disk), at least CLOSE_WINDOW_MIN_S.
CLOSE_POLL_S = 0.00005
CLOSE_WINDOW_MIN_S = 0.001
# How often an idle wait checks that the path still names the file we have
# open (a stat(2); never per statement).
FILE_CHECK_INTERVAL_S = 0.25
_monotonic = time.monotonic
DIALECT = "sqlite"
# The reads a waiter decides to sleep on, by the wait that follows them: the
# wait counts changes from just before the read (see SqliteEngine.read).
_CLAIM_WAIT = "claim"
_DONE_WAIT = "done"
_PROBES = {
    "claimable_probe": _CLAIM_WAIT,
    "claimable_probe_any_name": _CLAIM_WAIT,
    "claimable_probe_one_queue_one_name": _CLAIM_WAIT,
    "get_status": _DONE_WAIT,
    "get_status_by_key": _DONE_WAIT,
}
_STATEMENTS = STATEMENTS

# SQLite binds times resolved from the SDK clock at bind time; the base passes
# relative values (the Postgres statements add them to the database clock).
_DERIVED: dict[str, Callable[[dict[str, Any], int], Any]] = {
    "now_ms": lambda p, now: now,
    "run_at_ms": lambda p, now: now + p["delay_ms"],
    "lease_until_ms": lambda p, now: now + p["lease_ms"],
    "before_ms": lambda p, now: now - p["older_than_ms"],
}
# List-valued parameters travel as JSON array text, expanded with json_each.
_LISTS = frozenset(("queues", "names", "ids", "keys"))
_JSON_LISTS = frozenset(("results",))  # of JSON texts or None: strings and nulls

Binder = Callable[[dict[str, Any]], dict[str, Any]]


def _as_given(params: dict[str, Any]) -> dict[str, Any]:
    return params


def _make_binder(stmt: Statement) -> Binder:
    derived = [(p, _DERIVED[p]) for p in stmt.params if p in _DERIVED]
    lists = [p for p in stmt.params if p in _LISTS]
    json_lists = [p for p in stmt.params if p in _JSON_LISTS]
    if not derived and not lists and not json_lists:
        # Every value goes in as the caller gave it: sqlite3 looks each name
        # up in the mapping (and ignores the rest), so no copy is needed.
        return _as_given

    def bind(params: dict[str, Any]) -> dict[str, Any]:
        out = params.copy()  # (the caller's dict keeps its own values)
        if derived:
            now = now_ms()
            for p, derive in derived:
                out[p] = derive(params, now)
        for p in lists:
            value = params[p]
            out[p] = None if value is None else encode_ids(value)
        for p in json_lists:
            out[p] = dumps(list(params[p]))
        return out

    return bind


class SQLiteStore(TaskStore):
    """Tasks in a SQLite file (or ``":memory:"``).

    ``synchronous`` is an addition to the reference API: None (the default)
    leaves SQLite's default, FULL, under which a submit that returned survives
    power loss. ``"normal"`` trades that for fewer fsyncs: in WAL mode a crash
    of the process loses nothing, a power cut may lose the last commits.
    """

    def __init__(
        self, path: str, *, busy_timeout_ms: int = 5_000, synchronous: str | None = None
    ) -> None:
        if synchronous is not None:
            check_choice("synchronous", synchronous, SYNCHRONOUS_MODES)
        check_busy_timeout_ms(busy_timeout_ms)
        self.path = str(path)
        self.busy_timeout_ms = busy_timeout_ms
        self.synchronous = synchronous.lower() if synchronous else None
        self._statements = load_statements("sqlite")
        self._binders = {name: _make_binder(s) for name, s in self._statements.items()}
        self._echoes = {
            name: echo
            for name, s in self._statements.items()
            if (echo := row_echo(s)) is not None
        }
        self._fillers = {
            name: fill
            for name, s in self._statements.items()
            if (fill := row_filler(s)) is not None
        }
        self._engine: SqliteEngine | None = None
        self._connect_lock: asyncio.Lock | None = None
        self._generation = 0  # bumped by every close; a connect that spans one fails
        self._closing = False
        self._close_task: asyncio.Task[None] | None = None
        self._memory = is_memory_path(self.path)
        self._memory_lost = False
        self._statistics_due = 0.0
        self._maintenance: asyncio.Task[None] | None = None
        # (st_dev, st_ino) of the file opened; None for memory and URI paths.
        self._file_identity: tuple[int, int] | None = None
        self._file_check_due = 0.0
        # Told when the file is written (one per connection, shared by every
        # waiter, made by the first wait: a store that never waits holds no
        # watch); None: waiters poll. _watch_path: the file to watch, until
        # a watch was tried.
        self._watch: FileWatch | None = None
        self._watch_path: str | None = None
        #: Migrations the last connect applied (file names); empty when none were due.
        self.migrations_applied: list[str] = []

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    # -- lifecycle ---------------------------------------------------------

    async def connect(self) -> None:
        await self._connected()

    async def _connected(self) -> SqliteEngine:
        engine = self._engine
        if engine is not None:
            return engine
        if self._closing:
            raise StoreClosed()
        if self._memory_lost:
            raise StoreClosed(
                f"in-memory database {self.path!r} was closed — its contents went with the "
                "connection, so reopening would silently start from empty. Use a file path if "
                "the store needs to outlive a close."
            )
        if self._connect_lock is None:
            self._connect_lock = asyncio.Lock()
        async with self._connect_lock:
            if self._engine is not None:
                return self._engine
            generation = self._generation
            applied: list[str] = []
            conn = await asyncio.to_thread(
                open_connection,
                self.path,
                busy_timeout_ms=self.busy_timeout_ms,
                synchronous=self.synchronous,
                statements=self._statements,
                migrations=load_migrations("sqlite"),
                applied=applied,
            )
            self.migrations_applied = applied
            if generation != self._generation or self._closing:
                conn.close()
                raise RuntimeError("store was closed while connecting")
            self._engine = SqliteEngine(
                conn,
                self.busy_timeout_ms,
                data_version_sql=self._statements["data_version"].text,
            )
            self._statistics_due = time.monotonic() + STATISTICS_INTERVAL_S
            self._file_identity = self._identity()
            self._file_check_due = time.monotonic() + FILE_CHECK_INTERVAL_S
            if not self._memory and not self.path.startswith("file:"):
                self._watch_path = self._engine.database_file or self.path
        self._start_sweeper()
        return self._engine

    async def close(self) -> None:
        """Turn new work away, finish what is queued, close the connection.

        Concurrent calls share one close. File stores reopen on next use; an
        in-memory store cannot (its data is gone) and raises StoreClosed.
        """
        if self._close_task is None:
            self._closing = True  # from this call on, new work is turned away
            self._generation += 1
            self._close_task = asyncio.get_running_loop().create_task(self._close())
        task = self._close_task
        try:
            await asyncio.shield(task)
        finally:
            if task.done() and self._close_task is task:
                self._close_task = None

    async def _close(self) -> None:
        try:
            if self._sweeper is not None:
                await self._sweeper.stop()
            if self._maintenance is not None:
                await asyncio.gather(self._maintenance, return_exceptions=True)
            engine, self._engine = self._engine, None
            self._close_watch()
            if engine is not None:
                await engine.drain_and_close()
                if self._memory:
                    self._memory_lost = True
        finally:
            self._closing = False

    async def protocol_version(self) -> int:
        rows = await self._fetch("protocol_version", {})
        return int(rows[0][0]) if rows else 0

    # -- the driver seam -----------------------------------------------------

    async def _fetch(self, name: str, params: dict[str, Any]) -> list[Any]:
        if _STATEMENTS.on:
            return await observed(name, DIALECT, self._send(name, params, deferred=False))
        return await self._send(name, params, deferred=False)

    async def _fetch_deferred(self, name: str, params: dict[str, Any]) -> list[Any]:
        """Held for the next claim transaction to carry (see the engine)."""
        if not is_own(self, "_fetch"):
            # _fetch is wrapped: it sees every statement, these included
            # (they then commit on their own).
            return await self._fetch(name, params)
        if _STATEMENTS.on:
            return await observed(name, DIALECT, self._send(name, params, deferred=True))
        return await self._send(name, params, deferred=True)

    async def _send(self, name: str, params: dict[str, Any], *, deferred: bool) -> list[Any]:
        """Run one statement: the driver's only way to the engine outside a
        transaction (``deferred``: a deferred write)."""
        engine = self._engine
        if engine is None or self._closing:
            engine = await self._connected_or_closed()
        if _monotonic() >= self._statistics_due:
            self._schedule_statistics()
        stmt = self._statements[name]
        sql = stmt.specialize(params) if stmt.filters else stmt.text
        if stmt.is_read:
            # Bound by the engine when it runs the read: a probe's clock must
            # be no older than its stamp (see SqliteEngine.read).
            return await engine.read(sql, params, _PROBES.get(name), self._binders[name])
        bound = self._binders[name](params)
        echo = self._echoes.get(name)
        if echo is None:
            rows = await engine.write(sql, bound, deferred=deferred)
            fill = self._fillers.get(name)
            return rows if fill is None else fill(bound, rows)
        await engine.write(sql, bound, deferred=deferred)
        return [echo(bound)]

    async def _connected_or_closed(self) -> SqliteEngine:
        if self._closing:
            raise StoreClosed()
        return await self._connected()

    def _claim_transaction(self) -> AbstractAsyncContextManager[Fetch]:
        # Committed, it stands as the claim loop's last probe: a claim loop
        # that found no more work than it took sleeps on it (claim_wake).
        return self._transaction(stamp=_CLAIM_WAIT)

    @property
    def _claim_wake_pushed(self) -> bool:
        """A claim that came back short may sleep at once: its transaction's
        stamp (engine.transaction) counts every commit since it, ours and
        other connections', for ``claim_wake``. Only while both are cairnq's
        own (a replaced claim session leaves no stamp)."""
        return is_own(self, "claim_session") and is_own(self, "claim_wake")

    def _transaction(self, *, stamp: str | None = None) -> AbstractAsyncContextManager[Fetch]:
        return _NamedTransaction(self, stamp)

    async def _engine_for_transaction(self) -> SqliteEngine:
        engine = self._engine
        if engine is None or self._closing:
            engine = await self._connected_or_closed()
        return engine

    def _named_fetch(self, run: Callable[[str, Any], Awaitable[list[Any]]]) -> Fetch:
        """A fetch that runs statements by name, as ``_fetch`` does, through
        ``run`` (a transaction's)."""
        statements, binders = self._statements, self._binders
        echoes, fillers = self._echoes, self._fillers

        async def run_named(name: str, params: dict[str, Any]) -> list[Any]:
            stmt = statements[name]
            sql = stmt.specialize(params) if stmt.filters else stmt.text
            bound = binders[name](params)
            rows = await run(sql, bound)
            echo = echoes.get(name)
            if echo is not None:
                return [echo(bound)]
            fill = fillers.get(name)
            return rows if fill is None else fill(bound, rows)

        def fetch(name: str, params: dict[str, Any]) -> Awaitable[list[Any]]:
            if _STATEMENTS.on:
                return observed(name, DIALECT, run_named(name, params))
            return run_named(name, params)

        return fetch

    # -- wakeups: noticing changes without re-reading tables ------------------

    @contextmanager
    def _claims_resting(self) -> Iterator[bool]:
        """The claim loop is about to sleep (see ``WorkerPort.resting``):
        deferred writes go at once from here, the ones waiting go now."""
        engine = self._engine
        if engine is None or self._closing:
            yield False  # (connecting or closing: claim_wake sorts it out)
            return
        with engine.no_claim_coming():
            yield True

    async def claim_wake(self, queues: list[str], timeout_ms: int) -> None:
        # The claim loop is going to sleep (its probe found nothing, or its
        # sources are idle): no claim transaction is coming for deferred
        # writes to ride with.
        engine = await self._connected_or_closed()
        with engine.no_claim_coming():
            await self._wait_for_change(timeout_ms / 1000, _CLAIM_WAIT)

    async def task_done_wake(self, task_id: str, timeout_ms: int) -> bool | None:
        await self._wait_for_change(timeout_ms / 1000, _DONE_WAIT)
        return None  # a change, not necessarily this task's: the waiter re-probes

    async def _wait_for_change(self, timeout_s: float, kind: str | None = None) -> bool:
        """Wait up to ``timeout_s`` for a commit to the file, by this store (told
        at once) or by any other connection (seen on the file's change counter,
        read when the file watch reports a write, or polled every few
        milliseconds where there is none). True if one happened.

        With ``kind``, changes count from just before the last probe of that
        kind (the read that found nothing to do), if any: a commit that landed
        after that read but before this wait began ends the wait at once
        instead of being taken for the starting point and slept through."""
        engine = await self._connected_or_closed()
        watch = self._watch
        if watch is None and self._watch_path is not None and self._engine is engine:
            watch = self._watch = watch_database(self._watch_path)
            self._watch_path = None
            if watch is not None:
                engine.quiet_reader = watch.reader
                engine.own_commit_reader = watch.read_own_commit
        if watch is None or not watch.live:
            return await self._await_change(engine, None, timeout_s, kind)
        # Held before the counter is read: a write from then on is reported
        # (one before it was, if recent: see NOTICE_CLOSE_S).
        with watch.waiting():
            return await self._await_change(engine, watch, timeout_s, kind)

    async def _await_change(
        self, engine: SqliteEngine, watch: FileWatch | None, timeout_s: float, kind: str | None
    ) -> bool:
        deadline = _monotonic() + timeout_s
        stamp = None if kind is None else engine.take_probe_stamp(kind)
        version = engine.data_version()
        if stamp is None:
            commits = engine.commits
        else:
            commits, probed_version = stamp
            if engine.commits != commits or (version is not None and version != probed_version):
                return True
            version = probed_version  # also when our transaction hides the counter now
        tick = CHANGE_POLL_MIN_S
        while True:
            now = _monotonic()
            remaining = deadline - now
            if remaining <= 0:
                return False
            if watch is not None and watch.live:
                # Backing off from the last notification (one that came just
                # before this wait began counts too: its commit may be on the
                # way), down to the safety net.
                since = now - watch.last_notice
                fine = watch.fine
                if since < FINE_WINDOW_S and fine is not None:
                    if since < max(2 * engine.commit_s, CLOSE_WINDOW_MIN_S):
                        sleep = CLOSE_POLL_S
                    else:
                        sleep = FINE_POLL_S
                elif since < NOTICE_CLOSE_S:
                    sleep, fine = NOTICE_POLL_S, None
                else:
                    sleep, fine = min(since, QUIET_POLL_S), None
                await engine.wait_commit(min(sleep, remaining), watch, fine)
            else:
                await engine.wait_commit(min(tick, remaining))
                tick = min(tick * 2, CHANGE_POLL_MAX_S)
            if self._engine is not engine or engine.commits != commits:
                return True
            if _monotonic() >= self._file_check_due and await self._reopened_if_replaced(engine):
                return True
            now_version = engine.data_version()
            if now_version is not None:
                if version is not None and now_version != version:
                    return True
                version = now_version

    def _close_watch(self) -> None:
        self._watch_path = None
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.close()
            if self._engine is not None:
                self._engine.quiet_reader = None
                self._engine.own_commit_reader = None

    # -- the file under the path ------------------------------------------------

    def _identity(self) -> tuple[int, int] | None:
        """(device, inode) of the file at the path; None when nothing is
        there, or for in-memory and URI databases (not checked)."""
        if self._memory or self.path.startswith("file:"):
            return None
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_dev, st.st_ino)

    async def _reopened_if_replaced(self, engine: SqliteEngine) -> bool:
        """Whether the path still names the file this store has open, checked
        while idle. If the file was deleted or replaced (a restore from
        backup, a test fixture, an operator "resetting" the queue), every
        other process that opens the path now sees another database: this
        store closes its connection to the old file and reopens the path on
        its next statement, and reports what it did. True if it did."""
        self._file_check_due = _monotonic() + FILE_CHECK_INTERVAL_S
        opened = self._file_identity
        if opened is None:
            return False
        now = self._identity()
        if now == opened:
            return False
        reason = "was deleted" if now is None else "was replaced by another file"
        if self._engine is engine:
            self._engine = None
            self._file_identity = None
            self._close_watch()
            await engine.drain_and_close()
            self._survived(DatabaseReplaced(self.path, reason))
        return True

    # -- planner statistics upkeep -------------------------------------------

    def _schedule_statistics(self) -> None:
        self._statistics_due = time.monotonic() + STATISTICS_INTERVAL_S
        if self._maintenance is None or self._maintenance.done():
            self._maintenance = asyncio.get_running_loop().create_task(self._refresh_statistics())

    async def _refresh_statistics(self) -> None:
        engine = self._engine
        if engine is None or engine.closing:
            return
        try:
            async with engine.exclusive() as conn:
                refresh_statistics(conn, self._statements)
        except Exception as exc:  # best effort: busy, read-only file, ...
            log.debug("planner statistics refresh skipped", exc_info=True)
            if is_busy(exc):
                # Another process held the write lock at that instant (this
                # connection does not wait for it): try again soon, not in a minute.
                self._statistics_due = time.monotonic() + STATISTICS_BUSY_RETRY_S


register_own(SQLiteStore)


class _NamedTransaction:
    """``SQLiteStore._transaction``: the engine's transaction, its statements
    run by name. (A class, as the engine's: no async generator a claim.)"""

    __slots__ = ("_store", "_stamp", "_inner")

    def __init__(self, store: SQLiteStore, stamp: str | None) -> None:
        self._store = store
        self._stamp = stamp
        self._inner: AbstractAsyncContextManager[Callable[[str, Any], Awaitable[list[Any]]]] | None = None

    async def __aenter__(self) -> Fetch:
        store = self._store
        engine = await store._engine_for_transaction()
        inner = self._inner = engine.transaction(stamp=self._stamp)
        return store._named_fetch(await inner.__aenter__())

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        inner, self._inner = self._inner, None
        assert inner is not None
        await inner.__aexit__(exc_type, exc, tb)


if TYPE_CHECKING:  # the driver satisfies the seam's protocol (checked by mypy)
    from cairnq.store.driver import StoreDriver

    def _is_driver(store: SQLiteStore) -> StoreDriver:
        return store
