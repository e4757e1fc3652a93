"""Turns the events of :mod:`cairnq.events` into the numbers of :mod:`metrics`.

The recorder keeps plain Python numbers (ints, bucket lists), one series per
(queue, task name) made on first sight; an event costs a couple of dict
lookups and additions, no lock and no allocation. An exporter reads them when
scraped (``prometheus.py``). Numbers are per process: every worker of the
process feeds them; the gauges read the one worker given.
"""

from __future__ import annotations

import asyncio
import os
import time
from bisect import bisect_left
from typing import TYPE_CHECKING, Awaitable, Callable, Optional, TypeVar

from cairnq import events

T = TypeVar("T")

if TYPE_CHECKING:
    from cairnq.worker import Worker

__all__ = ["Histogram", "TaskSeries", "Recorder", "WAIT_BUCKETS", "LATENCY_BUCKETS"]

# Seconds. Queue waits and runs span milliseconds to hours; round trips, less.
WAIT_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
)  # fmt: skip
LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
)  # fmt: skip

# Index of each task kind's counter in TaskSeries.counts.
TASK_COUNTERS = (
    "task.claimed", "task.succeeded", "task.failed", "task.retried", "task.canceled",
    "task.lease_lost",
)  # fmt: skip
_INDEX = {kind: i for i, kind in enumerate(TASK_COUNTERS)}
_bisect = bisect_left


class Histogram:
    """Counts per bucket (``le`` upper bounds, the last one +Inf) and a sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, int]]:
        """Prometheus-style buckets: (upper bound, count at or below it)."""
        out: list[tuple[str, int]] = []
        total = 0
        for bound, count in zip((*map(repr, self.bounds), "+Inf"), self.counts):
            total += count
            out.append((bound, total))
        return out


class TaskSeries:
    """The numbers of one (queue, task name)."""

    __slots__ = ("counts", "wait", "run")

    def __init__(self) -> None:
        self.counts = [0] * len(TASK_COUNTERS)
        self.wait = Histogram(WAIT_BUCKETS)
        self.run = Histogram(WAIT_BUCKETS)


class Recorder:
    """Subscribes to the events and keeps the numbers; ``start()`` / ``stop()``.

    ``statements=True`` also counts every protocol statement (it turns on the
    ``statement`` events, which cost a clock read per statement).
    ``sample_interval_s``: how often ``sample(worker)`` (run beside the worker,
    see ``Worker.run_beside``) reads queue depth through ``stats()``; its
    outcome is also the health check's "store reachable".
    """

    def __init__(
        self,
        worker: Optional["Worker"] = None,
        *,
        statements: bool = False,
        sample_interval_s: float = 5.0,
    ) -> None:
        if not sample_interval_s > 0:
            raise ValueError(f"sample_interval_s must be positive, got {sample_interval_s!r}")
        self.worker = worker
        self.statements = statements
        self.sample_interval_s = float(sample_interval_s)
        self.tasks: dict[str, dict[str, TaskSeries]] = {}  # queue -> name -> series
        self.claims = [0, 0, 0]  # round trips, empty, failed
        self.claim_latency = Histogram(LATENCY_BUCKETS)
        self.heartbeats = [0, 0]  # rounds, failed
        self.heartbeat_latency = Histogram(LATENCY_BUCKETS)
        self.statement_series: dict[tuple[str, str], tuple[list[int], Histogram]] = {}
        self.depth: dict[tuple[str, str], int] = {}  # (queue, status) -> tasks
        # The last sample: when it succeeded (monotonic), and the error of the
        # last one if it failed.
        self.sampled_at: Optional[float] = None
        self.sample_error: Optional[str] = None
        self._stops: list[Callable[[], None]] = []
        self._closed = False

    # -- subscription -----------------------------------------------------------

    def start(self) -> "Recorder":
        if self._stops:
            return self
        sub = events.subscribe
        self._stops = [
            sub(self._on_claimed, ("task.claimed",)),
            sub(self._on_settled, events.SETTLEMENT_KINDS),
            sub(self._on_lease_lost, ("task.lease_lost",)),
            sub(self._on_claim, ("claim",)),
            sub(self._on_heartbeat, ("heartbeat",)),
        ]
        if self.statements:
            self._stops.append(sub(self._on_statement, ("statement",)))
        return self

    def stop(self) -> None:
        """Unsubscribe, and end the sampler at its next round."""
        stops, self._stops = self._stops, []
        for stop in stops:
            stop()
        self._closed = True

    # -- handlers: quick, no allocation once a series exists ---------------------

    def _series(self, queue: str, name: str) -> TaskSeries:
        by_name = self.tasks.get(queue)
        if by_name is None:
            by_name = self.tasks[queue] = {}
        series = by_name.get(name)
        if series is None:
            series = by_name[name] = TaskSeries()
        return series

    # Fields by position (a named tuple's attribute is a slower descriptor):
    # 2 queue, 3 name, 6 wait_s, 7 run_s; histogram updates inlined.

    def _on_claimed(self, event: events.TaskEvent) -> None:
        try:
            series = self.tasks[event[2]][event[3]]
        except KeyError:
            series = self._series(event[2], event[3])
        series.counts[0] += 1
        wait_s = event[6]
        if wait_s is not None:
            hist = series.wait
            hist.counts[_bisect(WAIT_BUCKETS, wait_s)] += 1
            hist.sum += wait_s

    def _on_settled(self, event: events.TaskEvent) -> None:
        try:
            series = self.tasks[event[2]][event[3]]
        except KeyError:
            series = self._series(event[2], event[3])
        series.counts[_INDEX[event[0]]] += 1
        run_s = event[7]
        if run_s is not None:
            hist = series.run
            hist.counts[_bisect(WAIT_BUCKETS, run_s)] += 1
            hist.sum += run_s

    def _on_lease_lost(self, event: events.TaskEvent) -> None:
        self._series(event.queue, event.name).counts[5] += 1

    def _on_claim(self, event: events.ClaimEvent) -> None:
        claims = self.claims
        claims[0] += 1
        if event.error is not None:
            claims[2] += 1
        elif event.calls == 0:
            claims[1] += 1
        self.claim_latency.observe(event.duration_s)

    def _on_heartbeat(self, event: events.HeartbeatEvent) -> None:
        self.heartbeats[0] += 1
        if event.error is not None:
            self.heartbeats[1] += 1
        self.heartbeat_latency.observe(event.duration_s)

    def _on_statement(self, event: events.StatementEvent) -> None:
        key = (event.name, event.dialect)
        entry = self.statement_series.get(key)
        if entry is None:
            entry = self.statement_series[key] = ([0], Histogram(LATENCY_BUCKETS))
        entry[0][0] += 1
        entry[1].observe(event.duration_s)

    # -- the sampler ----------------------------------------------------------------

    async def sample(self, worker: "Worker") -> None:
        """Read queue depth through ``stats()`` every ``sample_interval_s``,
        on the worker's loop (``worker.run_beside(recorder.sample)``)."""
        interval = self.sample_interval_s
        queues = set(worker.queues)
        file = _DatabaseFile.of(worker.store)
        while not self._closed:
            try:
                stats = await _within(worker.store.stats(), max(1.0, interval))
                if file is not None:
                    file.check()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.sample_error = _describe(exc)
            else:
                depth: dict[tuple[str, str], int] = {}
                for queue in queues:
                    for status, count in stats.get(queue, {}).items():
                        depth[queue, str(status)] = count
                self.depth = depth
                self.sampled_at = time.monotonic()
                self.sample_error = None
            await asyncio.sleep(interval)


async def _within(read: Awaitable[T], timeout_s: float) -> T:
    """``read``'s value, or asyncio.TimeoutError after ``timeout_s``. Not
    ``asyncio.wait_for``: on Python 3.10 and 3.11 a cancellation that lands as
    the awaited read finishes is swallowed there (its value is handed back
    instead), and the sampler, cancelled by its worker on the way out, would
    sample on and hold the worker's ``run()`` open for good."""
    task = asyncio.ensure_future(read)
    try:
        done, _ = await asyncio.wait((task,), timeout=timeout_s)
    except asyncio.CancelledError:
        await _cancelled(task)
        raise
    if not done:
        await _cancelled(task)
        raise asyncio.TimeoutError  # (TimeoutError itself from 3.11 on)
    return task.result()


async def _cancelled(task: "asyncio.Future[T]") -> None:
    """Cancel ``task`` and wait for it to end, as ``wait_for`` does: the read
    is over (its connection given back) before the sampler goes on or ends."""
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


class DatabaseFileGone(Exception):
    """The SQLite file the worker has open is no longer at its path."""


class _DatabaseFile:
    """A SQLite worker keeps its connection to the file it opened, whatever
    happens to the name: if the file is removed or replaced (a restore that
    moves another file into place), the worker goes on reading and writing a
    file nobody else sees, and its work is lost when it closes. The sampler
    compares the file at the path with the one seen at the first sample."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.identity: Optional[tuple[int, int]] = None

    @classmethod
    def of(cls, store: object) -> "Optional[_DatabaseFile]":
        from cairnq.store.sqlite import SQLiteStore
        from cairnq.store.sqlite.opening import is_memory_path

        if not isinstance(store, SQLiteStore):
            return None
        path = store.path
        if not path or path.startswith("file:") or is_memory_path(path):
            return None
        return cls(os.path.abspath(path))

    def check(self) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise DatabaseFileGone(f"the database file {self.path} was removed") from None
        identity = (st.st_dev, st.st_ino)
        if self.identity is None:
            self.identity = identity
        elif identity != self.identity:
            raise DatabaseFileGone(f"the database file {self.path} was replaced by another file")


def _describe(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "stats() timed out"
    if isinstance(exc, DatabaseFileGone):
        return str(exc)
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip().rstrip(":")
