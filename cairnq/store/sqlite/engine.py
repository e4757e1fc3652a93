"""One sqlite3 connection, driven from the event loop.

Statements run inline on the loop thread: a primary-key read or a one-row write
takes microseconds, far less than a hop to a worker thread and back, and the
hop is what makes thread-per-connection drivers slow. What must not block the
loop, or anyone else, is handled explicitly:

* Lock contention with other processes. ``busy_timeout`` is 0, so SQLite
  returns SQLITE_BUSY at once; the engine tries again every millisecond or so
  (``asyncio.sleep``, so reads and other coroutines run meanwhile), within
  ``busy_timeout_ms``. Waiting writers of every cairnq process on the file
  queue up for the lock (``turns.py``): before each attempt, a writer checks
  that no other has waited longer, so one that just committed lets the
  waiters go first (once they have waited ``turns.HOLD_NS``) instead of
  taking the lock back microseconds later; the lock goes to the writer that
  waited longest. Uncontended, the check is a clock read per write (the
  queue's file exists only under contention; then one ``fcntl`` call). A busy
  error reaches a caller only when it has waited its whole budget and one
  last attempt of its own failed.
* Write throughput. Writes issued outside a transaction are queued and
  flushed together by one callback scheduled with ``call_soon``: everything
  the loop produced in the same turn shares one BEGIN IMMEDIATE ... COMMIT,
  hence one fsync (group commit). Nothing waits to fill a batch: when no other
  callback is ready to run (the loop would go straight back to polling), a
  write executes at once in its caller, as its own autocommit transaction.
* One bad write among many. A statement that fails (a constraint, a value
  sqlite3 cannot bind, anything it raises) fails its own caller only: the
  others of its batch commit. If it took the whole transaction down with it,
  the others go back to the queue; if the COMMIT itself is refused (a
  deferred constraint), each write of the batch is run again on its own, so
  each gets its own outcome. Every caller's future is settled, whatever
  happens.
* The fsync of a batch. Its COMMIT runs on a dedicated committer thread
  (SQLite releases the GIL while it syncs), so the loop prepares the next
  batch meanwhile; the connection stays reserved ("the gate") until it is done.
* Multi-statement transactions. A transaction owns the connection from BEGIN
  to COMMIT (the "gate"); reads and the flusher wait for it, and the flusher
  runs right after it so queued writes are never starved by back-to-back
  transactions.
* Fairness on the loop. A coroutine awaiting store calls that need no I/O
  never suspends, so it could starve every other task of the loop (timers,
  heartbeats). Each call about to run inline (a read, a lone write, a
  transaction) first compares the monotonic clock with the end of a time
  slice (SLICE_S): when it is over, and the same task has held the loop since
  the slice began (a timer marker set at its start has not run: the loop has
  not polled), the call yields once with ``asyncio.sleep(0)``. Queued writes
  suspend anyway and are not slowed, so group commits stay whole; a flood of
  them is flushed in slices too. On a disk whose commits take longer than a
  slice on average, a commit is made inline (its fsync holding the loop) only
  when no timer falls due before it is expected to be done (twice the recent
  average): otherwise it goes to the committer thread, so a slow disk delays
  no timer (a heartbeat, a ticker) by a sync.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import sqlite3
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, Iterator

from cairnq.errors import StoreClosed
from cairnq.store.loop_state import nothing_due_before, nothing_else_ready
from cairnq.store.sqlite.file_watch import FileWatch
from cairnq.store.sqlite.fine_timer import FineTimer
from cairnq.store.sqlite.probe_stamps import note_stamp, take_stamp
from cairnq.store.sqlite.turns import HOLD_NS, WriteTurns

log = logging.getLogger("cairnq.store")

__all__ = ["SqliteEngine", "is_busy", "BusyPolicy"]

_SQLITE_BUSY = 5
# Enough to amortize the fsync; small enough that one flush never holds the
# loop for long when a flood of writes arrives at once.
MAX_BATCH = 256
# How long a deferred write waits for a transaction to carry it.
DEFER_WINDOW_S = 0.002
# A writer waiting for the lock tries again this often (jittered): the lock
# is free only between other writers' transactions, so waiters must look often.
POLL_S = 0.001
HOLD_S = HOLD_NS / 1e9
# The longest an inline caller runs before letting the loop poll.
SLICE_S = 0.001
# The expected time of a commit (its fsync) starts here and follows the
# commits measured since, as a moving average of this weight.
COMMIT_S_START = 0.001
COMMIT_S_WEIGHT = 0.2
_monotonic = time.monotonic


def is_busy(exc: BaseException) -> bool:
    """SQLITE_BUSY (any extended code): another connection holds the lock."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return bool(code & 0xFF == _SQLITE_BUSY)
    return "database is locked" in str(exc)


class BusyPolicy:
    """When to try the lock again after SQLITE_BUSY, for at most ``budget_ms``
    from ``started`` (default: now).

    For the first HOLD_S a writer of ours that holds the lock keeps it (it
    hands it over once the longest waiter has waited that long): attempts
    then thin out, each at about twice the time waited so far, so a short
    hold is caught at once without crowding out, at every gap between that
    writer's transactions, the writers that take no turns (the reference
    SDK). From then on, every POLL_S (jittered x0.5-1.5).
    """

    __slots__ = ("budget_s", "started")

    def __init__(self, budget_ms: int, started: float | None = None) -> None:
        self.budget_s = budget_ms / 1000
        self.started = _monotonic() if started is None else started

    @property
    def spent(self) -> bool:
        return _monotonic() - self.started >= self.budget_s

    def next_delay(self) -> float | None:
        """Seconds to sleep before retrying, or None when the budget is spent."""
        waited = _monotonic() - self.started
        remaining = self.budget_s - waited
        if remaining <= 0:
            return None
        if waited < HOLD_S - POLL_S:
            delay = min(max(waited, POLL_S), HOLD_S - waited)
        else:
            delay = POLL_S * random.uniform(0.5, 1.5)
        return min(delay, remaining)


class _Write:
    __slots__ = ("sql", "params", "future", "since", "alone")

    def __init__(self, sql: str, params: Any, future: asyncio.Future[list[Any]]) -> None:
        self.sql = sql
        self.params = params
        self.future = future
        self.since = _monotonic()
        self.alone = False  # its group's COMMIT was refused: it runs on its own


Outcome = tuple[_Write, Any, "BaseException | None"]


class SqliteEngine:
    """Executes statements for one connection; see the module docstring."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        busy_timeout_ms: int,
        *,
        turns: bool = True,
        data_version_sql: str | None = None,
    ) -> None:
        self.conn = conn
        self.busy_timeout_ms = busy_timeout_ms
        self._writes: deque[_Write] = deque()
        self._flush_handle: asyncio.Handle | asyncio.TimerHandle | None = None
        self._flushing = False
        self._lone_write_waited = False  # a lone write let the run queue go first, once
        # The file watch's reader (set by the store): a notification waiting to
        # be read does not keep a write from committing inline. It is most
        # often this connection's own last commit, and all it does is wake
        # this store's waiters, who look at the counters again after this
        # commit anyway.
        self.quiet_reader: Callable[[], None] | None = None
        # ... and its reader of what this connection's own commits caused
        # (set by the store; FileWatch.read_own_commit): called right after
        # each COMMIT made on the loop's thread, so that those notifications
        # are not taken for another connection's commit on its way.
        self.own_commit_reader: Callable[[], None] | None = None
        self._write_busy: BusyPolicy | None = None  # set while queued writes wait for the lock
        #: The main database's file name ("" for a memory or temporary database).
        self.database_file = _database_file(conn)
        self._turns = WriteTurns.open(self.database_file) if turns else None
        self._announced = False  # this engine is (or may be) in the queue of waiters
        self._begins_waiting = 0  # transactions now waiting for the lock
        self._in_txn = False
        self._gate_waiters: deque[asyncio.Future[None]] = deque()
        self._closing = False
        self._idle_waiters: list[asyncio.Future[None]] = []
        self._commit_thread: ThreadPoolExecutor | None = None
        self.commits = 0  # successful commits on this connection, for change waiters
        self._commit_waiters: set[asyncio.Future[None]] = set()
        # A waiter must count the changes since the read it decided to sleep
        # on, not since it began to wait: a commit in between would otherwise
        # go unnoticed for a whole timeout. Probes note where they stood here
        # (given the statement that reads the counter, ``data_version``;
        # without it, neither works).
        self._data_version_sql = data_version_sql
        self._stamp_key = object()  # this connection's, in the reading tasks' stamp books
        # Claim loops now sleeping until a change: while one is, deferred
        # writes have no claim to ride with and are flushed at once.
        self.claims_asleep = 0
        # The fairness slice: when it ends, whether the loop polled since it
        # began, and the timer that tells (None once it ran).
        self._slice_end = 0.0
        self._loop_polled = True
        self._marker: asyncio.TimerHandle | None = None
        self._slice_task: asyncio.Task[Any] | None = None
        self._commit_s = COMMIT_S_START  # the moving average of commit times

    # -- fairness on the loop --------------------------------------------

    async def _next_slice(self) -> None:
        """The slice is over: yield once if the same task has held the loop
        all along (it has not polled since the slice began)."""
        task = asyncio.current_task()
        if not self._loop_polled and task is self._slice_task:
            await asyncio.sleep(0)  # returns after the loop has polled
        self._slice_task = task
        self._slice_end = _monotonic() + SLICE_S
        self._loop_polled = False
        if self._marker is None:
            # A timer due at once runs after the loop's next poll, never before.
            # (One still pending from the slice before, which runs right after
            # this yield, stands in for it: a monopoly lasts two slices at most.)
            self._marker = asyncio.get_running_loop().call_at(0, self._polled)

    def _polled(self) -> None:
        self._marker = None
        self._loop_polled = True

    def _may_run_inline(self, loop: asyncio.AbstractEventLoop) -> bool:
        """May a write skip the queue: nothing queued or running, nothing else
        runnable (our slice marker aside; never where the run queue cannot be
        seen, as in uvloop: see loop_state)."""
        if self._writes or self._flush_handle is not None or self._in_txn:
            return False
        return self._may_commit_inline(loop)

    def _may_commit_inline(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Nothing else runnable, and no timer due during a commit begun now."""
        return nothing_else_ready(loop, self._marker, self.quiet_reader) and self._no_timer_due_during_commit(loop)

    def _no_timer_due_during_commit(self, loop: asyncio.AbstractEventLoop) -> bool:
        """No timer due before a commit begun now is expected to be done (its
        fsync, holding the loop, would hold the timer back). Commits expected
        within a fairness slice pass regardless: a hop to the committer thread
        would cost more than the timer could lose."""
        commit_s = self._commit_s
        if commit_s <= SLICE_S:
            return True
        return nothing_due_before(loop, loop.time() + 2 * commit_s, self._marker)

    @property
    def commit_s(self) -> float:
        """How long a commit takes here (a moving average, in seconds)."""
        return self._commit_s

    def _commit_took(self, started: float) -> None:
        """Fold a commit begun at ``started`` into the expected commit time."""
        self._commit_s += (_monotonic() - started - self._commit_s) * COMMIT_S_WEIGHT

    def _commit_in_thread(self) -> None:
        """The COMMIT, in the committer thread (timed there)."""
        started = _monotonic()
        self.conn.execute("COMMIT")
        self._commit_took(started)

    # -- reads -----------------------------------------------------------

    async def read(
        self,
        sql: str,
        params: Any,
        probe: str | None = None,
        bind: Callable[[Any], Any] | None = None,
    ) -> list[Any]:
        """A read outside any transaction, retried while the database is busy.

        ``probe``: a waiter may go to sleep on this read's answer (is the task
        done, is work due); the change counters (our commits, the file's
        data_version) are noted just before it, for the next wait of that kind
        to count from (``take_probe_stamp``).

        ``bind``: the statement's values are ``bind(params)``, made right after
        the stamp, with no suspension between them and the statement. A probe's
        values include its clock (``now_ms``: is work due?), and that clock must
        be no older than the stamp: bound before a wait for the gate, a probe
        would miss a task submitted during that wait (due by the submitter's
        clock, not yet by the probe's) while its stamp, taken after, already
        counted that submit, so the waiter would sleep through it."""
        if _monotonic() >= self._slice_end:
            await self._next_slice()
        policy: BusyPolicy | None = None
        while True:
            if self._in_txn:
                await self._wait_gate()
            try:
                # No suspension between the stamp and the statement: the stamp
                # is never younger than what the read saw.
                if probe is not None:
                    version = self.data_version()
                    if version is not None:
                        note_stamp(self._stamp_key, probe, (self.commits, version))
                values = params if bind is None else bind(params)
                return self.conn.execute(sql, values).fetchall()
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise
                policy = policy or BusyPolicy(self.busy_timeout_ms)
                delay = policy.next_delay()
                if delay is None:
                    raise
            await asyncio.sleep(delay)

    def take_probe_stamp(self, kind: str) -> tuple[int, int] | None:
        """(commits, data_version) noted before the current task's (or its
        starter's) last probe of ``kind``, once (see probe_stamps.py: each
        waiter sleeps on its own read)."""
        return take_stamp(self._stamp_key, kind)

    # -- group-committed writes -------------------------------------------

    async def write(self, sql: str, params: Any, *, deferred: bool = False) -> list[Any]:
        """Run a write outside any transaction; its rows, once committed.

        ``deferred``: the write is in no hurry (a worker's settlements and beats).
        It waits up to DEFER_WINDOW_S for a transaction to ride in (the worker's
        next claim, typically, which then commits both with one fsync) before
        it is flushed on its own. While a claim loop sleeps no claim is coming:
        it goes as any write (inline, when nothing else could join it).
        """
        if self._closing:
            raise StoreClosed()
        loop = asyncio.get_running_loop()
        if deferred and not self.claims_asleep:
            future: asyncio.Future[list[Any]] = loop.create_future()
            self._writes.append(_Write(sql, params, future))
            if self._flush_handle is None and not self._in_txn:
                self._flush_handle = loop.call_later(DEFER_WINDOW_S, self._flush)
            return await future
        if self._may_run_inline(loop):
            # Nothing else will run before the loop polls again, so nothing
            # could join a batch: commit now and skip the round trip.
            inline = True
            if _monotonic() >= self._slice_end:
                await self._next_slice()
                if self._closing:
                    raise StoreClosed()
                inline = self._may_run_inline(loop)
            turns = self._turns
            if inline and (turns is None or turns.my_turn()):
                started = _monotonic()
                try:
                    rows = self.conn.execute(sql, params).fetchall()
                except sqlite3.OperationalError as exc:
                    if not is_busy(exc):
                        raise
                    # busy: queue it, the flusher waits for the lock
                else:
                    self._commit_took(started)
                    self._committed_here()
                    if self._announced:
                        self._got_lock()
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

    @contextmanager
    def no_claim_coming(self) -> Iterator[None]:
        """A claim loop sleeps (or is about to): deferred writes held for its
        next claim transaction would wait for nothing. The ones waiting are
        flushed now, and new ones go at once until the block ends."""
        self.flush_deferred()
        self.claims_asleep += 1
        try:
            yield
        finally:
            self.claims_asleep -= 1

    def _flush(self) -> None:
        self._flush_handle = None
        self._flushing = True
        ends = _monotonic() + SLICE_S
        try:
            while self._writes and not self._in_txn and self._flush_handle is None:
                if not self._flush_batch():
                    break  # waiting for the lock, or for a COMMIT in the committer thread
                if self._writes and _monotonic() >= ends:
                    # A flood: let the loop poll between batches.
                    self._flush_handle = asyncio.get_running_loop().call_soon(self._flush)
                    break
        finally:
            self._flushing = False
        if not self._writes and self._write_busy is not None:
            # Nothing is left to wait for the lock.
            self._write_busy = None
            self._stop_waiting()
        self._notify_idle()

    def _next_batch(self) -> list[_Write]:
        """Up to MAX_BATCH queued writes; a write that must run alone, alone."""
        writes = self._writes
        batch: list[_Write] = []
        while writes and len(batch) < MAX_BATCH:
            w = writes[0]
            if w.future.cancelled():
                writes.popleft()
                continue
            if w.alone and batch:
                break
            batch.append(writes.popleft())
            if w.alone:
                break
        return batch

    def _flush_batch(self) -> bool:
        """Run one batch of queued writes. True when the queue may be flushed
        again right away; False when this flush is over: the batch waits for
        the lock (a retry is scheduled) or for its COMMIT in the committer
        thread (whose completion flushes what follows)."""
        batch = self._next_batch()
        if not batch:
            return True
        if not self._may_write_now():
            return self._wait_for_lock(batch, None)
        if len(batch) == 1:
            loop = asyncio.get_running_loop()
            if batch[0].alone or self._may_commit_inline(loop):
                self._lone_write_waited = False
                return self._write_alone(batch[0])
            if not self._lone_write_waited and self._no_timer_due_during_commit(loop):
                # Only other ready callbacks stand in the way (a waiter woken,
                # a task's next step): they run first, then this write looks
                # again. One loop turn, where the committer thread would add
                # its hop to the fsync; still in the way, it goes there.
                self._lone_write_waited = True
                self._requeue(batch)
                self._flush_handle = loop.call_soon(self._flush)
                return False
        self._lone_write_waited = False
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except Exception as exc:
            return self._begin_refused(batch, exc)
        self._got_lock()
        self._in_txn = True  # the gate stays held until the COMMIT is done
        outcomes = self._run_batch(batch)
        if outcomes is None:
            return True  # a write took the transaction down; the batch is settled or queued
        return self._commit(outcomes)

    def _may_write_now(self) -> bool:
        """Our turn at the lock, or the wait is over: when the budget is
        spent, a last attempt is made regardless of turns."""
        if self._my_turn():
            return True
        policy = self._write_busy
        return policy is not None and policy.spent

    def _begin_refused(self, batch: list[_Write], exc: Exception) -> bool:
        """BEGIN IMMEDIATE failed: the lock is taken (wait, and try again) or
        the connection refuses (the whole batch fails). As _flush_batch."""
        if is_busy(exc):
            return self._wait_for_lock(batch, exc)
        for w in batch:
            _settle(w.future, exc=exc)
        return True

    def _run_batch(self, batch: list[_Write]) -> list[Outcome] | None:
        """Each write of ``batch`` in the transaction just begun, its rows or
        its error kept for the COMMIT to settle. A write that fails alone
        fails only its caller. None when one took the whole transaction down:
        it failed, the others (rolled back through no fault of theirs) are
        queued again, and the gate is released."""
        conn = self.conn
        outcomes: list[Outcome] = []
        for i, w in enumerate(batch):
            try:
                rows = conn.execute(w.sql, w.params).fetchall()
            except Exception as exc:
                if conn.in_transaction:
                    outcomes.append((w, None, exc))  # only this caller fails
                    continue
                _settle(w.future, exc=exc)
                self._requeue(_settle_failed(outcomes) + batch[i + 1 :])
                self._release_gate()
                return None
            except BaseException as exc:  # KeyboardInterrupt and the like: no one is left waiting
                _rollback(conn)
                for x in batch:
                    _settle(x.future, exc=exc)
                self._release_gate()
                raise
            outcomes.append((w, rows, None))
        return outcomes

    def _write_alone(self, w: _Write) -> bool:
        """One write, as its own autocommit transaction."""
        started = _monotonic()
        try:
            rows = self.conn.execute(w.sql, w.params).fetchall()
        except Exception as exc:
            if is_busy(exc):
                return self._wait_for_lock([w], exc)
            self._got_lock()
            _settle(w.future, exc=exc)
        else:
            self._commit_took(started)
            self._committed_here()
            self._got_lock()
            _settle(w.future, rows)
            self._note_commit()
        return True

    def _commit(self, outcomes: list[Outcome]) -> bool:
        loop = asyncio.get_running_loop()
        if not self._may_commit_inline(loop):
            # The COMMIT (the fsync) runs in the committer thread, without the
            # GIL, while the loop goes on with the rest of its work.
            try:
                pending = loop.run_in_executor(self._committer(), self._commit_in_thread)
            except RuntimeError:  # the committer is shut down (the loop is closing): commit here
                log.debug("committer unavailable", exc_info=True)
            else:
                pending.add_done_callback(functools.partial(self._committed, outcomes))
                return False
        # Nothing else is runnable or due: a hop to the committer thread would
        # only add its wakeup to the fsync. Commit here.
        started = _monotonic()
        try:
            self.conn.execute("COMMIT")
        except Exception as exc:
            self._commit_refused(outcomes, exc)
        else:
            self._commit_took(started)
            self._committed_here()
            self._settle_committed(outcomes)
        self._release_gate()
        return self._flush_handle is None

    def _committed(self, outcomes: list[Outcome], commit: asyncio.Future[Any]) -> None:
        exc = asyncio.CancelledError() if commit.cancelled() else commit.exception()
        if exc is None:
            self._settle_committed(outcomes)
        else:
            self._commit_refused(outcomes, exc)
        self._release_gate()  # flushes whatever queued meanwhile, inline

    def _settle_committed(self, outcomes: list[Outcome]) -> None:
        for w, rows, error in outcomes:
            _settle(w.future, rows, error)
        self._note_commit()

    def _commit_refused(self, outcomes: list[Outcome], exc: BaseException) -> None:
        """The batch's COMMIT failed: nothing of it was written."""
        _rollback(self.conn)
        if is_busy(exc):  # the lock, not the writes: all of them wait and try again
            self._wait_for_lock([w for w, _, _ in outcomes], exc)
            return
        # Which write the COMMIT refused (a deferred constraint, say) is not
        # known: each runs again on its own and gets its own outcome.
        retry = _settle_failed(outcomes)
        for w in retry:
            w.alone = True
        self._requeue(retry)

    def _committer(self) -> ThreadPoolExecutor:
        if self._commit_thread is None:
            self._commit_thread = ThreadPoolExecutor(1, thread_name_prefix="cairnq-sqlite-commit")
        return self._commit_thread

    def _requeue(self, writes: Iterable[_Write]) -> None:
        self._writes.extendleft(reversed([w for w in writes if not w.future.done()]))

    # -- waiting for the lock ----------------------------------------------

    def _my_turn(self) -> bool:
        turns = self._turns
        return turns is None or turns.my_turn()

    def _announce(self) -> None:
        """Queue up for the lock (once), or tell the queue this waiter still polls."""
        self._announced = True
        if self._turns is not None:
            self._turns.wait()

    def _got_lock(self) -> None:
        """The lock was ours: the queued writes' wait is over, and this process
        is out of the queue of waiters (if it waits again, it starts at the back)."""
        self._write_busy = None
        self._announced = False
        if self._turns is not None:
            self._turns.served()

    def _stop_waiting(self) -> None:
        """A waiter gave up: leave the queue of waiters if nothing else here waits."""
        if self._write_busy is None and not self._begins_waiting:
            self._announced = False
            if self._turns is not None:
                self._turns.served()

    def _wait_for_lock(self, batch: list[_Write], exc: BaseException | None) -> bool:
        """The lock is taken (``exc``: SQLITE_BUSY) or another writer's turn
        (None): requeue the batch and try again in a moment. When the budget
        is spent, a last attempt is made regardless of turns; if that finds the
        lock taken too, the writes that have waited the whole budget fail."""
        self._requeue(batch)
        loop = asyncio.get_running_loop()
        if self._write_busy is None:
            self._write_busy = BusyPolicy(self.busy_timeout_ms)
        self._announce()
        delay = self._write_busy.next_delay()
        if delay is None:
            if exc is None:  # waited for turns only: the last attempt decides
                self._flush_handle = loop.call_soon(self._flush)
                return False
            self._expire(exc)
            if self._write_busy is None:
                self._notify_idle()
                return False
            delay = self._write_busy.next_delay() or 0.0
        self._flush_handle = loop.call_later(delay, self._flush)
        return False

    def _expire(self, exc: BaseException) -> None:
        """Fail the queued writes that have waited the whole budget (counted
        from when the lock was first found taken, or from their own arrival)."""
        policy = self._write_busy
        assert policy is not None
        now, budget = _monotonic(), policy.budget_s
        kept: deque[_Write] = deque()
        for w in self._writes:
            if now - max(policy.started, w.since) >= budget:
                _settle(w.future, exc=exc)
            elif not w.future.done():
                kept.append(w)
        self._writes = kept
        if kept:
            self._write_busy = BusyPolicy(
                self.busy_timeout_ms, started=min(max(policy.started, w.since) for w in kept)
            )
        else:
            self._write_busy = None
            self._stop_waiting()

    # -- transactions -----------------------------------------------------

    def transaction(self, *, stamp: str | None = None) -> "_Transaction":
        """BEGIN IMMEDIATE ... COMMIT, owning the connection throughout.

        Only the BEGIN is retried on SQLITE_BUSY (with the gate released while
        waiting); a failing body or COMMIT rolls back and raises. Writes queued
        for group commit ride along: they run first inside this transaction and
        are resolved by its COMMIT (one fsync for both), or go back to the queue
        if the transaction rolls back.

        ``stamp``: once committed, the transaction stands as the last probe of
        that kind (``take_probe_stamp``): a claim that found no more work
        than it took lets its claim loop sleep without reading again. The
        change counter is read inside the transaction, where no other
        connection can commit; our commits are counted up to this COMMIT's,
        before anything queued meanwhile is flushed (a handler's submit among
        them must wake the waiter).
        """
        return _Transaction(self, stamp)

    async def _open_transaction(self) -> list[Outcome]:
        """What entering ``transaction`` does: BEGIN IMMEDIATE in its turn,
        the queued writes run inside it (returned, to settle at the COMMIT)."""
        if self._closing:
            raise StoreClosed()
        if _monotonic() >= self._slice_end:
            await self._next_slice()
        queued: list[Outcome] | None = None
        while queued is None:  # None: a queued write took the transaction down; begin again
            await self._begin()
            queued = self._take_queued()
        return queued

    def _close_transaction(self, queued: list[Outcome], stamp: str | None, failed: bool) -> None:
        """What leaving ``transaction`` does: COMMIT, or ROLLBACK where the
        body raised (``failed``) or the COMMIT did; the gate is let go."""
        conn = self.conn
        try:
            if failed:
                self._roll_back(queued)
                return
            try:
                version = None if stamp is None else self._read_data_version()  # ours to read: we hold the gate
                try:
                    conn.execute("COMMIT")
                except BaseException:
                    for w, _, _ in queued:  # which write the COMMIT refused is not known
                        w.alone = True
                    raise
            except BaseException:
                self._roll_back(queued)
                raise
            self._committed_here()
            self._settle_committed(queued)
            if version is not None:
                assert stamp is not None
                note_stamp(self._stamp_key, stamp, (self.commits, version))
        finally:
            self._release_gate()

    def _roll_back(self, queued: list[Outcome]) -> None:
        """ROLLBACK the open transaction; the writes that rode in it go back
        to the queue (not their fault)."""
        _rollback(self.conn)
        self._requeue(w for w, _, _ in queued)

    def _take_queued(self) -> list[Outcome] | None:
        """Run the queued writes inside the transaction just begun. None if
        one of them took the transaction down (it fails; the others are queued
        again and the gate is released)."""
        if not self._writes:
            return []
        queued = [w for w in self._writes if not w.alone and not w.future.done()]
        self._writes = deque(w for w in self._writes if w.alone and not w.future.done())
        if self._flush_handle is not None and not self._writes:
            self._flush_handle.cancel()  # they are taken care of here
            self._flush_handle = None
        conn = self.conn
        done: list[Outcome] = []
        for i, w in enumerate(queued):
            try:
                rows = conn.execute(w.sql, w.params).fetchall()
            except Exception as exc:
                if conn.in_transaction:
                    done.append((w, None, exc))  # only this caller fails
                    continue
                _settle(w.future, exc=exc)
                self._requeue(_settle_failed(done) + queued[i + 1 :])
                self._release_gate()
                return None
            except BaseException:
                _rollback(conn)
                self._requeue(queued)
                self._release_gate()
                raise
            done.append((w, rows, None))
        return done

    async def _begin(self) -> None:
        """BEGIN IMMEDIATE with the gate held; waits its turn while others wait
        for the lock, and polls while the lock is taken, within the budget."""
        policy: BusyPolicy | None = None
        while True:
            if self._in_txn:
                await self._wait_gate()
                continue
            if not self._my_turn() and not (policy is not None and policy.spent):
                policy = policy or BusyPolicy(self.busy_timeout_ms)
                await self._wait_turn(policy)
                continue
            self._in_txn = True
            try:
                self.conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                self._release_gate()
                if not is_busy(exc):
                    raise
                policy = policy or BusyPolicy(self.busy_timeout_ms)
                if policy.spent:
                    self._stop_waiting()
                    raise
                await self._wait_turn(policy)
                continue
            except BaseException:
                self._release_gate()
                raise
            self._got_lock()
            return

    async def _wait_turn(self, policy: BusyPolicy) -> None:
        self._announce()
        self._begins_waiting += 1
        try:
            await asyncio.sleep(policy.next_delay() or 0)
        finally:
            self._begins_waiting -= 1

    async def _wait_gate(self) -> None:
        while self._in_txn:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._gate_waiters.append(future)
            await future

    def _release_gate(self) -> None:
        self._in_txn = False
        # Writes queued during the transaction go first, inline, so a stream of
        # transactions cannot starve them (unless a flush is running already:
        # it goes on by itself).
        if self._writes and self._flush_handle is None and not self._flushing:
            self._flush()
        while self._gate_waiters:
            waiter = self._gate_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
        self._notify_idle()

    # -- change notification ----------------------------------------------

    def _committed_here(self) -> None:
        """A COMMIT just made on the loop's thread (not the committer's, after
        which another connection may have written before the loop hears of
        it): the file watch reads what it caused now."""
        reader = self.own_commit_reader
        if reader is not None:
            try:
                reader()
            except Exception:  # a notification read must not undo a commit's bookkeeping
                log.debug("file watch: reading after a commit failed", exc_info=True)

    def _note_commit(self) -> None:
        self.commits += 1
        for waiter in self._commit_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._commit_waiters.clear()

    async def wait_commit(
        self, timeout_s: float, watch: FileWatch | None = None, fine: FineTimer | None = None
    ) -> None:
        """Return at this connection's next commit, at the next notification
        of ``watch`` (a change to the file's contents, held by the caller:
        see file_watch), or after ``timeout_s`` (to the tenth of a millisecond
        with a ``fine`` timer, else to the loop's whole milliseconds)."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._commit_waiters.add(waiter)
        if watch is not None:
            watch.add(waiter)
        timer = None
        if fine is None or not fine.settle_after(waiter, timeout_s):
            timer = loop.call_later(timeout_s, _settle_none, waiter)
        try:
            await waiter
        finally:
            if timer is not None:
                timer.cancel()
            self._commit_waiters.discard(waiter)
            if watch is not None:
                watch.discard(waiter)

    def data_version(self) -> int | None:
        """The file's change counter, or None while our own transaction owns
        the connection (it is checked again on the next tick), or when the
        engine was not given the statement that reads it."""
        if self._in_txn or self._closing:
            return None
        return self._read_data_version()

    def _read_data_version(self) -> int | None:
        sql = self._data_version_sql
        return None if sql is None else int(self.conn.execute(sql).fetchone()[0])

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
        if self._turns is not None:
            self._turns.close()
            self._turns = None
        self.conn.close()

    @property
    def closing(self) -> bool:
        return self._closing


def _database_file(conn: sqlite3.Connection) -> str:
    """The main database's file name ("" for a memory or temporary database)."""
    try:
        for _, name, path in conn.execute("pragma database_list").fetchall():
            if name == "main":
                return str(path or "")
    except sqlite3.Error:
        log.debug("database_list failed", exc_info=True)
    return ""


def _settle_failed(outcomes: list[Outcome]) -> list[_Write]:
    """Settle the writes that failed on their own; the others, to be run again."""
    again = []
    for w, _, error in outcomes:
        if error is not None:
            _settle(w.future, exc=error)
        else:
            again.append(w)
    return again


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


class _Transaction:
    """``SqliteEngine.transaction``: entered, the transaction is begun and
    its fetch handed out; left, committed, or rolled back if the body
    raised. (A class, not a generator-based context manager: no async
    generator, loop hooks and wrapper made for every claim.)"""

    __slots__ = ("_engine", "_stamp", "_queued")

    def __init__(self, engine: SqliteEngine, stamp: str | None) -> None:
        self._engine = engine
        self._stamp = stamp
        self._queued: list[Outcome] | None = None

    async def __aenter__(self) -> Callable[[str, Any], Awaitable[list[Any]]]:
        engine = self._engine
        self._queued = await engine._open_transaction()
        conn = engine.conn

        async def fetch(sql: str, params: Any) -> list[Any]:
            return conn.execute(sql, params).fetchall()

        return fetch

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        queued, self._queued = self._queued, None
        assert queued is not None
        self._engine._close_transaction(queued, self._stamp, failed=exc_type is not None)


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:  # the connection may already have rolled back
            log.debug("rollback failed", exc_info=True)
