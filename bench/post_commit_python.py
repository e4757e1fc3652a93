"""What Python costs right after a commit's fsync: why SQLite ``submit_seq``
sits further below its floor on a disk than in memory.

    python bench/post_commit_python.py                 # a temporary directory, then /dev/shm
    python bench/post_commit_python.py --dirs /var/tmp --submits 4000 --spin-us 5

For each directory, alternating, four loops of ``--submits`` one-row
commits on a fresh database (WAL, ``synchronous=FULL``):

* ``floor``: ``submit_seq``'s floor loop (``floors.floor_submit_seq``'s
  statement and values, stdlib sqlite3);
* ``floor + work``: the same, plus a fixed piece of plain Python after each
  commit (``--work`` small objects made and kept, about what an SDK's
  submit does around its statement), timed on its own;
* ``floor + spin``: the floor loop, plus a busy wait of ``--spin-us`` after
  each commit that reads the clock and touches nothing else: time away from
  the statement without the work's memory traffic;
* ``ours``: our ``submit`` loop, its store's connection timed per statement
  (``drain_statements.TimedConnection``), the rest being ours.

Where a commit waits for the disk, the thread sleeps in the fsync and the
code that runs after it starts cold (caches, branch predictors; on a virtual
machine the vCPU was halted). On a memory file system the commit does not
sleep. The same Python then costs more per submit on the disk than in
memory: that difference is the host's, not the SDK's, and an SDK that does
more Python per statement than the bare loop pays it in proportion.

The "rest" column is the total less what was added (the work, the spin):
the statement's own time and the loop around it; for ``ours``, the time in
our statements. Where it grows with the work and not with the spin, the
work slowed the statements that follow it (what it touched evicted what
SQLite uses), which no time-only model of an SDK's overhead accounts for.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import floors  # noqa: E402
from drain_statements import TimedConnection, _by_kind  # noqa: E402
from sdk_client import client  # noqa: E402


class _Item:
    __slots__ = ("index", "fields", "pair")


def _work(units: int) -> list[_Item]:
    """Plain Python: ``units`` small objects, each with a dict and a tuple."""
    made = []
    for j in range(units):
        item = _Item()
        item.index, item.fields, item.pair = j, {"i": j}, (j, str(j))
        made.append(item)
    return made


def _spin(seconds: float) -> None:
    """A busy wait that reads the clock and touches nothing else."""
    clock = time.perf_counter
    ends = clock() + seconds
    while clock() < ends:
        pass


def floor_loop(path: str, submits: int, units: int, spin_s: float = 0.0) -> tuple[float, float]:
    """(µs per submit, µs of them in the added work or spin) for the floor loop."""
    floors._fresh_schema("sqlite", path)
    sql = floors._statement("sqlite", "insert_task")
    conn = floors._sqlite_floor_conn(path)
    clock, in_work = time.perf_counter, 0.0
    started = clock()
    for i in range(submits):
        now = int(time.time() * 1000)
        conn.execute(sql, dict(floors._submit_row(i), run_at_ms=now, now_ms=now))
        if units or spin_s:
            began = clock()
            if units:
                _work(units)
            else:
                _spin(spin_s)
            in_work += clock() - began
    elapsed = clock() - started
    conn.close()
    return elapsed / submits * 1e6, in_work / submits * 1e6


async def our_loop(path: str, submits: int) -> tuple[float, float]:
    """(µs per submit, µs of them in our store's statements) for our submit."""
    times: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    async with client("sqlite", path) as q:
        await q.submit("warm")
        engine = q.store._engine  # bench only: the store's one engine
        engine.conn = TimedConnection(engine.conn, _by_kind(times))
        started = time.perf_counter()
        for i in range(submits):
            await q.submit("noop", {"i": i})
        elapsed = time.perf_counter() - started
    in_db = sum(spent for _, spent in times.values())
    return elapsed / submits * 1e6, in_db / submits * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_dirs = [tempfile.gettempdir()] + (["/dev/shm"] if os.path.isdir("/dev/shm") else [])
    parser.add_argument("--dirs", default=",".join(default_dirs), help="comma-separated directories")
    parser.add_argument("--submits", type=int, default=2_000)
    parser.add_argument("--work", type=int, default=12, help="objects the added work makes per submit")
    parser.add_argument("--spin-us", type=float, default=3.0, help="the busy wait after each commit (µs)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows: dict[tuple[str, str], list[tuple[float, float]]] = collections.defaultdict(list)
    for _ in range(args.rounds):
        for directory in args.dirs.split(","):
            def fresh() -> str:
                return os.path.join(tempfile.mkdtemp(prefix="cairnq-postcommit-", dir=directory), "q.db")

            rows[directory, "floor"].append(floor_loop(fresh(), args.submits, 0))
            rows[directory, "floor + work"].append(floor_loop(fresh(), args.submits, args.work))
            rows[directory, "floor + spin"].append(floor_loop(fresh(), args.submits, 0, args.spin_us / 1e6))
            rows[directory, "ours"].append(asyncio.run(our_loop(fresh(), args.submits)))
    print(f"{args.submits:,} one-row commits a loop, medians of {args.rounds} rounds (us per submit)")
    print(f"{'directory':<24}{'loop':<16}{'total':>8}{'added':>10}{'rest':>8}"
          "   added: the work or spin / all but our statements")  # fmt: skip
    for (directory, loop), samples in rows.items():
        total = statistics.median(s[0] for s in samples)
        if loop == "floor":
            added, rest = "", total
        elif loop == "ours":  # (total, time in our statements)
            added = f"{statistics.median(s[0] - s[1] for s in samples):.1f}"
            rest = statistics.median(s[1] for s in samples)
        else:  # (total, time in the added work or spin)
            added = f"{statistics.median(s[1] for s in samples):.1f}"
            rest = statistics.median(s[0] - s[1] for s in samples)
        print(f"{directory:<24}{loop:<16}{total:>8.1f}{added:>10}{rest:>8.1f}")


if __name__ == "__main__":
    main()
