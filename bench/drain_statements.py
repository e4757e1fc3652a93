"""Where a SQLite drain's database time goes, statement by statement.

    python bench/drain_statements.py                 # 20,000 no-op tasks, concurrency 64
    python bench/drain_statements.py --tasks 5000 --switch-interval 0.0001
    python bench/drain_statements.py --floor         # the bare loop's statements too

A worker drains a bulk-loaded backlog (the same set-up as
``profile_drain.py``) while every call on its store's sqlite3 connection is
timed by kind (BEGIN, COMMIT, the claim and settlement UPDATEs, reads), and
so is the fetch of each statement's rows (the claim's RETURNING rows are
stepped through there: database time, which the floor loop pays too). What
is left of the wall time per task is ours: the event loop, the contexts, the
dispatch and the bookkeeping. No sampling profiler runs, so the wall time is
close to an ordinary drain's; the wrapper adds a Python call or two per
statement (a few statements per 64 tasks).

The cyclic garbage collector's passes during the drain are counted and
timed too (``gc.callbacks``): their time is part of "the rest", spent in
whatever allocation set them off. A drain that keeps more tracked objects
alive at once than the young generation's threshold (700) collects about
once per claim, finding almost nothing to free.

``--switch-interval`` sets ``sys.setswitchinterval`` first: how long a
thread waiting for the GIL lets the running one go on (5 ms by default).
It matters wherever a commit runs on the committer thread (see
``cairnq/store/sqlite/engine.py``).

``--floor`` also drains a second backlog of the same size with the riding
floor loop (``floors._floor_sqlite_riding``: the same claim and settlement
statements, one connection, no SDK), its statements timed the same way:
whether our statements cost what the floor's do, and what the floor's own
loop costs besides them.

Each table ends with the process's CPU time a task (user and system,
``getrusage``; every thread's) and the wall time less it: what the process
spent waiting, mostly for the disk. Where the second is small, the drain is
bound by the CPU and not the disk, so every microsecond of our Python a
task is a microsecond of the drain's.

``--wal-autocheckpoint N`` sets that pragma on the worker's connection
(SQLite's default: 1000 pages; 0: no checkpoints during the drain): the
COMMITs that also checkpoint the WAL are the slow tail of the COMMIT
line, whose median, 90th percentile and maximum are printed too.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import resource
import sys
import tempfile
import time
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import floors  # noqa: E402
from memory import client, counting_worker, drained, prepare_backlog  # noqa: E402
from workloads import CollectorPasses  # noqa: E402


Record = Callable[[str, float, float], None]


def cpu_s() -> float:
    """The process's CPU time so far, user and system, every thread's."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class TimedConnection:
    """A sqlite3 connection that tells ``record(sql, started, ended)`` of each
    ``execute`` (``time.monotonic()``: one clock for every process on Linux,
    so ``call_timeline.py`` lines two processes' statements up with it), and
    ``fetched(sql, started, ended)`` (if given) of each ``fetchall`` and
    ``fetchone`` on its cursor. A statement's ``execute`` runs it up to its
    first row; a RETURNING statement's other rows are stepped through by the
    fetch, which is the database's time too."""

    def __init__(self, conn: Any, record: Record, fetched: Record | None = None) -> None:
        self._conn = conn
        self._record = record
        self._fetched = fetched

    def execute(self, sql: str, *args: Any) -> Any:
        started = time.monotonic()
        try:
            cursor = self._conn.execute(sql, *args)
        finally:
            self._record(sql, started, time.monotonic())
        return cursor if self._fetched is None else _TimedCursor(cursor, sql, self._fetched)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class _TimedCursor:
    def __init__(self, cursor: Any, sql: str, fetched: Record) -> None:
        self._cursor = cursor
        self._sql = sql
        self._fetched = fetched

    def fetchall(self) -> Any:
        return self._timed(self._cursor.fetchall)

    def fetchone(self) -> Any:
        return self._timed(self._cursor.fetchone)

    def _timed(self, fetch: Callable[[], Any]) -> Any:
        started = time.monotonic()
        try:
            return fetch()
        finally:
            self._fetched(self._sql, started, time.monotonic())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


def _by_kind(
    times: dict[str, list[float]], commits: list[float] | None = None, suffix: str = ""
) -> Record:
    """A recorder that adds each statement's count and time to its kind's
    (``suffix`` appended: the fetches' lines), and each COMMIT's time to
    ``commits``."""

    def record(sql: str, started: float, ended: float) -> None:
        entry = times[_kind(sql) + suffix]
        entry[0] += 1
        entry[1] += ended - started
        if commits is not None and sql == "COMMIT":
            commits.append(ended - started)

    return record


def _kind(sql: str) -> str:
    if sql.startswith("--"):  # a statement file's text, its comment first
        sql = "\n".join(line for line in sql.splitlines() if not line.startswith("--"))
    words = sql.split(None, 3)
    head = (
        " ".join(words[:3])
        if words and words[0].lower() in ("update", "insert", "delete")
        else words[0]
    )
    return head.upper() if len(head) <= 12 else head[:40]


async def drain(
    db: str,
    concurrency: int,
    tasks: int,
    times: dict[str, list[float]],
    passes: CollectorPasses,
    commits: list[float] | None = None,
    wal_autocheckpoint: int | None = None,
) -> tuple[float, float]:
    """The drain's wall time and the process's CPU time during it."""
    async with client(db) as q:
        await q.store.connect()
        engine = q.store._engine  # bench only: the store's one engine
        if wal_autocheckpoint is not None:
            engine.conn.execute(f"pragma wal_autocheckpoint = {int(wal_autocheckpoint)}")
        engine.conn = TimedConnection(
            engine.conn, _by_kind(times, commits), _by_kind(times, suffix=", rows fetched")
        )
        worker, done = counting_worker(q.store, concurrency)
        cpu = [cpu_s()]

        def ended() -> None:
            passes.stop()
            cpu.append(cpu_s())

        passes.start()
        elapsed = await drained(worker, done, tasks, 0.005, ended=ended)
        return elapsed, cpu[1] - cpu[0]


def floor_drain(
    db: str, tasks: int, times: dict[str, list[float]], commits: list[float]
) -> tuple[float, float]:
    """The riding floor loop over ``db``'s backlog, its statements timed; its
    wall time, and the process's CPU time during it (its connection's
    opening too)."""

    def timed(conn: Any) -> TimedConnection:
        return TimedConnection(conn, _by_kind(times, commits), _by_kind(times, suffix=", rows fetched"))

    began = cpu_s()
    elapsed = tasks / floors._floor_sqlite_riding(db, tasks, 64, wrap=timed)
    return elapsed, cpu_s() - began


def print_table(
    title: str,
    n: int,
    elapsed: float,
    times: dict[str, list[float]],
    commits: list[float],
    rest: str,
    cpu: float,
) -> None:
    in_db = sum(spent for _, spent in times.values())
    print(f"{title}: {n / elapsed:,.0f} tasks/s, {elapsed / n * 1e6:.1f} us per task")
    print(f"{'statement':<44}{'calls':>7}{'us/task':>10}{'us/call':>10}")
    for kind, (calls, spent) in sorted(times.items(), key=lambda kv: -kv[1][1]):
        print(f"{kind:<44}{calls:>7}{spent / n * 1e6:>10.2f}{spent / calls * 1e6:>10.1f}")
    if commits:
        commits.sort()
        median, p90 = commits[len(commits) // 2], commits[int(len(commits) * 0.9)]
        print(f"  COMMIT: median {median * 1e3:.3f} ms, 90th percentile {p90 * 1e3:.3f} ms, "
              f"max {commits[-1] * 1e3:.3f} ms")  # fmt: skip
    print(f"{'in the database':<44}{'':>7}{in_db / n * 1e6:>10.2f}")
    print(f"{rest:<44}{'':>7}{(elapsed - in_db) / n * 1e6:>10.2f}")
    print(f"{'CPU time (user and system)':<44}{'':>7}{cpu / n * 1e6:>10.2f}")
    print(f"{'waiting (the wall time less the CPU time)':<44}{'':>7}{(elapsed - cpu) / n * 1e6:>10.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--switch-interval", type=float, default=None)
    parser.add_argument("--wal-autocheckpoint", type=int, default=None)
    parser.add_argument("--floor", action="store_true", help="time the riding floor loop's statements too")
    args = parser.parse_args()
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    db = os.path.join(tempfile.mkdtemp(prefix="cairnq-statements-"), "drain.db")
    asyncio.run(prepare_backlog(db, args.tasks))
    times: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    passes = CollectorPasses()
    commits: list[float] = []
    elapsed, cpu = asyncio.run(
        drain(db, args.concurrency, args.tasks, times, passes, commits, args.wal_autocheckpoint)
    )
    n = args.tasks
    title = f"{n:,} tasks at concurrency {args.concurrency}"
    print_table(title, n, elapsed, times, commits, "the rest (ours: loop, dispatch, bookkeeping)", cpu)
    for generation in range(3):
        count, spent = passes.passes[generation], passes.spent[generation]
        if count:
            label = f"  of which: collector passes, generation {generation}"
            print(f"{label:<44}{count:>7}{spent / n * 1e6:>10.2f}{spent / count * 1e6:>10.1f}")
    if args.floor:
        floor_db = os.path.join(tempfile.mkdtemp(prefix="cairnq-statements-"), "floor.db")
        asyncio.run(prepare_backlog(floor_db, n))
        floor_times: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
        floor_commits: list[float] = []
        floor_elapsed, floor_cpu = floor_drain(floor_db, n, floor_times, floor_commits)
        print()
        print_table("the riding floor loop, 64 a claim", n, floor_elapsed, floor_times, floor_commits,
                    "the rest (the loop's own Python)", floor_cpu)  # fmt: skip


if __name__ == "__main__":
    main()
