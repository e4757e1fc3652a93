"""One sqlite3 connection, driven from the event loop.

Statements run inline on the loop thread: a primary-key read or a one-row write
takes microseconds, far less than a hop to a worker thread and back, and the
hop is what makes thread-per-connection drivers slow. What must not block the
loop is handled explicitly:

* Lock contention with other processes. ``busy_timeout`` is 0, so SQLite
  returns SQLITE_BUSY at once and the engine waits with ``asyncio.sleep``
  (1 ms doubling to 50 ms, jittered, within ``busy_timeout_ms``), letting
  reads and other coroutines run meanwhile.
* Write throughput. Writes issued outside a transaction are queued and
  flushed together by one callback scheduled with ``call_soon``: everything
  the loop produced in the same turn shares one BEGIN IMMEDIATE ... COMMIT,
  hence one fsync (group commit). Nothing waits to fill a batch: when no other
  callback is ready to run (the loop would go straight back to polling), a
  write executes at once in its caller, as its own autocommit transaction.
* The fsync of a batch. Its COMMIT runs on a dedicated committer thread
  (SQLite releases the GIL while it syncs), so the loop prepares the next
  batch meanwhile; the connection stays reserved ("the gate") until it is done.
* Multi-statement transactions. A transaction owns the connection from BEGIN
  to COMMIT (the "gate"); reads and the flusher wait for it, and the flusher
  runs right after it so queued writes are never starved by back-to-back
  transactions.
"""

from __future__ import annotations

import asyncio
import logging
import random
import sqlite3
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Awaitable, Callable

from cairnq.errors import StoreClosed

log = logging.getLogger("cairnq.store")

__all__ = ["SqliteEngine", "is_busy", "BusyPolicy"]

_SQLITE_BUSY = 5
# Enough to amortize the fsync; small enough that one flush never holds the
# loop for long when a flood of writes arrives at once.
MAX_BATCH = 256
# How long a deferred write waits for a transaction to ride in.
RIDE_WINDOW_S = 0.002


def is_busy(exc: BaseException) -> bool:
    """SQLITE_BUSY (any extended code): another connection holds the lock."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return bool(code & 0xFF == _SQLITE_BUSY)
    return "database is locked" in str(exc)


class BusyPolicy:
    """Backoff for SQLITE_BUSY: 1 ms doubling to 50 ms, jittered x0.5-1.5,
    for at most ``budget_ms`` in total."""

    __slots__ = ("budget_ms", "_started", "_delay")

    def __init__(self, budget_ms: int) -> None:
        self.budget_ms = budget_ms
        self._started: float | None = None
        self._delay = 0.001

    def next_delay(self) -> float | None:
        """Seconds to sleep before retrying, or None when the budget is spent."""
        now = time.monotonic()
        if self._started is None:
            self._started = now
        remaining = self.budget_ms / 1000 - (now - self._started)
        if remaining <= 0:
            return None
        delay = min(self._delay * random.uniform(0.5, 1.5), remaining)
        self._delay = min(self._delay * 2, 0.05)
        return delay


class _Write:
    __slots__ = ("sql", "params", "future")

    def __init__(self, sql: str, params: Any, future: asyncio.Future[list[Any]]) -> None:
        self.sql = sql
        self.params = params
        self.future = future


class SqliteEngine:
    """Executes statements for one connection; see the module docstring."""

    def __init__(self, conn: sqlite3.Connection, busy_timeout_ms: int) -> None:
        self.conn = conn
        self.busy_timeout_ms = busy_timeout_ms
        self._writes: deque[_Write] = deque()
        self._flush_handle: asyncio.Handle | asyncio.TimerHandle | None = None
        self._write_busy: BusyPolicy | None = None
        self._in_txn = False
        self._gate_waiters: deque[asyncio.Future[None]] = deque()
        self._closing = False
        self._idle_waiters: list[asyncio.Future[None]] = []
        self._commit_thread: ThreadPoolExecutor | None = None
        self.commits = 0  # successful commits on this connection, for change waiters
        self._commit_waiters: set[asyncio.Future[None]] = set()
        # Claim loops now sleeping until a change: while one is, deferred
        # writes have no claim to ride with and are flushed at once.
        self.claims_asleep = 0

    # -- reads -----------------------------------------------------------

    async def read(self, sql: str, params: Any) -> list[Any]:
        """A read outside any transaction, retried while the database is busy."""
        policy: BusyPolicy | None = None
        while True:
            if self._in_txn:
                await self._wait_gate()
            try:
                return self.conn.execute(sql, params).fetchall()
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise
                policy = policy or BusyPolicy(self.busy_timeout_ms)
                delay = policy.next_delay()
                if delay is None:
                    raise
            await asyncio.sleep(delay)

    # -- group-committed writes -------------------------------------------

    async def write(self, sql: str, params: Any, *, defer: bool = False) -> list[Any]:
        """Run a write outside any transaction; its rows, once committed.

        ``defer``: the write is in no hurry (a worker's settlements and beats).
        It waits up to RIDE_WINDOW_S for a transaction to ride in (the worker's
        next claim, typically, which then commits both with one fsync) before
        it is flushed on its own.
        """
        if self._closing:
            raise StoreClosed()
        loop = asyncio.get_running_loop()
        if defer:
            future: asyncio.Future[list[Any]] = loop.create_future()
            self._writes.append(_Write(sql, params, future))
            if self._flush_handle is None and not self._in_txn:
                if self.claims_asleep:  # no claim is coming to ride with
                    self._flush_handle = loop.call_soon(self._flush)
                else:
                    self._flush_handle = loop.call_later(RIDE_WINDOW_S, self._flush)
            return await future
        if not self._writes and self._flush_handle is None and not self._in_txn:
            ready = getattr(loop, "_ready", None)  # asyncio's run queue (absent in uvloop)
            if ready is not None and not ready:
                # Nothing else will run before the loop polls again, so nothing
                # could join a batch: commit now and skip the round trip.
                try:
                    rows = self.conn.execute(sql, params).fetchall()
                except sqlite3.OperationalError as exc:
                    if not is_busy(exc):
                        raise  # busy: queue it, the flusher retries
                else:
                    self._note_commit()
                    return rows
        future = loop.create_future()
        self._writes.append(_Write(sql, params, future))
        if not self._in_txn:
            handle = self._flush_handle
            if handle is None or (isinstance(handle, asyncio.TimerHandle) and not self._write_busy):
                if handle is not None:
                    handle.cancel()  # a deferred write was waiting: this one is not
                self._flush_handle = loop.call_soon(self._flush)
        return await future

    def flush_deferred(self) -> None:
        """Stop waiting for a ride: flush the deferred writes on the next loop turn."""
        handle = self._flush_handle
        if isinstance(handle, asyncio.TimerHandle) and not self._write_busy and not self._in_txn:
            handle.cancel()
            self._flush_handle = asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_handle = None
        while self._writes and not self._in_txn:
            if not self._flush_batch():
                return  # busy (a retry is scheduled) or a commit is in flight
        self._notify_idle()

    def _flush_batch(self) -> bool:
        """Run up to MAX_BATCH queued writes. True when the queue may be flushed
        again right away; False when this flush is over: the batch waits on its
        COMMIT in the committer thread, or on a retry (the database was busy),
        or it committed here and its gate release flushed what followed."""
        batch = [self._writes.popleft() for _ in range(min(MAX_BATCH, len(self._writes)))]
        batch = [w for w in batch if not w.future.cancelled()]
        if not batch:
            return True
        conn = self.conn
        try:
            if len(batch) == 1:
                w = batch[0]
                try:
                    rows = conn.execute(w.sql, w.params).fetchall()
                except sqlite3.Error as exc:
                    if is_busy(exc):
                        raise
                    _settle(w.future, exc=exc)
                else:
                    _settle(w.future, rows)
                    self._note_commit()
                self._write_busy = None
                return True
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            if is_busy(exc):
                return self._retry_busy(batch, exc)
            for w in batch:
                _settle(w.future, exc=exc)
            return True
        self._write_busy = None
        self._in_txn = True  # the gate stays held until the COMMIT is done
        outcomes: list[tuple[_Write, Any, BaseException | None]] = []
        try:
            for w in batch:
                try:
                    outcomes.append((w, conn.execute(w.sql, w.params).fetchall(), None))
                except sqlite3.Error as exc:
                    if not conn.in_transaction:
                        raise  # the statement took the whole transaction down
                    outcomes.append((w, None, exc))  # only this caller fails
        except BaseException as exc:
            _rollback(conn)
            for w in batch:
                _settle(w.future, exc=exc)
            self._release_gate()
            if not isinstance(exc, Exception):
                raise
            return True
        loop = asyncio.get_running_loop()
        ready = getattr(loop, "_ready", None)
        if ready is not None and not ready:
            # Nothing else is runnable: a hop to the committer thread would only
            # add its wakeup to the fsync. Commit here.
            commit: asyncio.Future[Any] = loop.create_future()
            try:
                conn.execute("COMMIT")
            except BaseException as exc:
                commit.set_exception(exc)
            else:
                commit.set_result(None)
            self._committed(commit, batch, outcomes)  # its gate release flushes the rest
            return False
        # The COMMIT (the fsync) runs in the committer thread, without the GIL,
        # while the loop goes on with the rest of its work.
        pending = loop.run_in_executor(self._committer(), conn.execute, "COMMIT")
        pending.add_done_callback(lambda f: self._committed(f, batch, outcomes))
        return False

    def _committed(
        self,
        commit: asyncio.Future[Any],
        batch: list[_Write],
        outcomes: list[tuple[_Write, Any, BaseException | None]],
    ) -> None:
        exc = commit.exception()
        if exc is not None:
            _rollback(self.conn)
            for w in batch:
                _settle(w.future, exc=exc)
        else:
            for w, rows, error in outcomes:
                _settle(w.future, rows, error)
            self._note_commit()
        self._release_gate()  # flushes whatever queued meanwhile, inline

    def _committer(self) -> ThreadPoolExecutor:
        if self._commit_thread is None:
            self._commit_thread = ThreadPoolExecutor(1, thread_name_prefix="cairnq-sqlite-commit")
        return self._commit_thread

    def _retry_busy(self, batch: list[_Write], exc: BaseException) -> bool:
        self._writes.extendleft(reversed(batch))
        if self._write_busy is None:
            self._write_busy = BusyPolicy(self.busy_timeout_ms)
        delay = self._write_busy.next_delay()
        if delay is None:  # budget spent: every queued write fails
            self._write_busy = None
            while self._writes:
                _settle(self._writes.popleft().future, exc=exc)
            self._notify_idle()
            return False
        loop = asyncio.get_running_loop()
        self._flush_handle = loop.call_later(delay, self._flush)
        return False

    # -- transactions -----------------------------------------------------

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Callable[[str, Any], Awaitable[list[Any]]]]:
        """BEGIN IMMEDIATE ... COMMIT, owning the connection throughout.

        Only the BEGIN is retried on SQLITE_BUSY (with the gate released while
        waiting); a failing body or COMMIT rolls back and raises. Writes queued
        for group commit ride along: they run first inside this transaction and
        are resolved by its COMMIT (one fsync for both), or go back to the queue
        if the transaction rolls back.
        """
        if self._closing:
            raise StoreClosed()
        await self._begin()
        conn = self.conn
        riders = self._take_riders()

        async def fetch(sql: str, params: Any) -> list[Any]:
            return conn.execute(sql, params).fetchall()

        try:
            yield fetch
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            self._writes.extendleft(reversed([w for w, _, _ in riders]))  # not their fault
            raise
        else:
            for w, rows, error in riders:
                _settle(w.future, rows, error)
            self._note_commit()
        finally:
            self._release_gate()

    def _take_riders(self) -> list[tuple[_Write, Any, BaseException | None]]:
        """Run the queued writes inside the transaction just begun."""
        if not self._writes:
            return []
        if self._flush_handle is not None:
            self._flush_handle.cancel()  # they are taken care of here
            self._flush_handle = None
        batch = [w for w in self._writes if not w.future.cancelled()]
        self._writes.clear()
        conn = self.conn
        done: list[tuple[_Write, Any, BaseException | None]] = []
        for i, w in enumerate(batch):
            try:
                done.append((w, conn.execute(w.sql, w.params).fetchall(), None))
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    done.append((w, None, exc))  # only this caller fails
                    continue
                # The statement took the transaction down: it fails, the others
                # (rolled back with it) go back to the queue, and so does the
                # transaction's own work: the caller sees the error.
                _settle(w.future, exc=exc)
                self._writes.extend(x for x, _, _ in done)
                self._writes.extend(batch[i + 1 :])
                self._release_gate()
                raise
        return done

    async def _begin(self) -> None:
        policy: BusyPolicy | None = None
        while True:
            if self._in_txn:
                await self._wait_gate()
                continue
            self._in_txn = True
            try:
                self.conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                self._release_gate()
                if not is_busy(exc):
                    raise
                policy = policy or BusyPolicy(self.busy_timeout_ms)
                delay = policy.next_delay()
                if delay is None:
                    raise
                await asyncio.sleep(delay)
            except BaseException:
                self._release_gate()
                raise

    async def _wait_gate(self) -> None:
        while self._in_txn:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._gate_waiters.append(future)
            await future

    def _release_gate(self) -> None:
        self._in_txn = False
        # Writes queued during the transaction go first, inline, so a stream of
        # transactions cannot starve them.
        if self._writes and self._flush_handle is None:
            self._flush()
        while self._gate_waiters:
            waiter = self._gate_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
        self._notify_idle()

    # -- change notification ----------------------------------------------

    def _note_commit(self) -> None:
        self.commits += 1
        for waiter in self._commit_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._commit_waiters.clear()

    async def wait_commit(self, timeout_s: float) -> None:
        """Return at this connection's next commit, or after ``timeout_s``."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._commit_waiters.add(waiter)
        timer = loop.call_later(timeout_s, _settle_none, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._commit_waiters.discard(waiter)

    def data_version(self, sql: str) -> int | None:
        """The file's change counter, or None while our own transaction owns
        the connection (it is checked again on the next tick)."""
        if self._in_txn or self._closing:
            return None
        return int(self.conn.execute(sql).fetchone()[0])

    # -- maintenance and shutdown ------------------------------------------

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[sqlite3.Connection]:
        """The raw connection, with no transaction of ours open (maintenance)."""
        while self._in_txn:
            await self._wait_gate()
        self._in_txn = True
        try:
            yield self.conn
        finally:
            self._release_gate()

    @property
    def idle(self) -> bool:
        return not self._writes and not self._in_txn and self._flush_handle is None

    def _notify_idle(self) -> None:
        if self.idle:
            for waiter in self._idle_waiters:
                if not waiter.done():
                    waiter.set_result(None)
            self._idle_waiters.clear()

    async def drain_and_close(self) -> None:
        """Refuse new work, finish queued writes and any open transaction, close."""
        self._closing = True
        while not self.idle:
            if self._writes and self._flush_handle is None and not self._in_txn:
                self._flush()
                continue
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._idle_waiters.append(future)
            await future
        if self._commit_thread is not None:
            self._commit_thread.shutdown(wait=False)
        self.conn.close()

    @property
    def closing(self) -> bool:
        return self._closing


def _settle(
    future: asyncio.Future[list[Any]], rows: Any = None, exc: BaseException | None = None
) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(rows)


def _settle_none(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:  # the connection may already have rolled back
            log.debug("rollback failed", exc_info=True)
