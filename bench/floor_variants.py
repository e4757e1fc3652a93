"""The SQLite riding floor loop, changed one way at a time: would the change pay?

    python bench/floor_variants.py                               # every variant, 5,000 tasks, 4 rounds
    python bench/floor_variants.py --variants riding,threads-32 --work-us 10
    python bench/floor_variants.py --dir /dev/shm                # no fsync: CPU only

Each round drains a fresh backlog (``floors._drain_backlog``) once per
variant, in turn, and prints microseconds a task; the summary gives each
variant's median against ``riding``'s. The loop is
``floors._floor_sqlite_riding``'s: claim 64 with the protocol's
``claim_one_queue_one_name``, settle them with ``complete_many`` in the next
claim's transaction, one connection, WAL, ``synchronous=FULL``.

Variants:

* ``riding``: the loop as ``compare.py`` runs it, with the protocol's claim
  (which returns every column but the six it sets or selects by: see its
  ``fill-row`` header).
* ``returning-all``: the claim ends ``returning *`` instead (what it did
  before the store filled those six columns in itself).
* ``returning-id``: the claim returns only ``id`` (what a RETURNING list
  costs the database at all).
* ``cache-64mb``: ``pragma cache_size = -65536`` (SQLite's page cache at
  64 MiB instead of its default 2 MiB).
* ``foreign-keys``: ``pragma foreign_keys = on``, as the store sets it.
* ``threads-32`` / ``threads-64``: the statements on a second thread while
  this one does the per-task work (``--work-us``), two claims in flight at
  once of 32 or 64 tasks: whether overlapping a worker's Python with the
  database (SQLite releases the GIL while it steps) would pay on this host.
  ``threads-32`` keeps at most 64 tasks claimed, as a worker of concurrency
  64 must; ``threads-64`` holds up to 128.

``--work-us`` burns that much pure Python per claimed task between the
claim and its settlement, in every variant (a stand-in for what an SDK
does per task: about 7-9 us here for ours). ``--switch-interval`` sets
``sys.setswitchinterval`` (the threaded variants depend on how soon a
thread waiting for the GIL gets it back; 5 ms by default).
"""

from __future__ import annotations

import argparse
import os
import queue
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import floors

BATCH = 64


def _burn(tasks: int, per_task_us: float, loops_per_us: float) -> None:
    """Pure-Python work, holding the GIL, about ``per_task_us`` a task."""
    for _ in range(int(tasks * per_task_us * loops_per_us)):
        pass


def _loops_per_us() -> float:
    n = 2_000_000
    started = time.perf_counter()
    for _ in range(n):
        pass
    return n / ((time.perf_counter() - started) * 1e6)


def _serial(
    path: str, n: int, claim: str, pragmas: list[str], work: Callable[[int], None]
) -> float:
    """The riding loop (``floors._floor_sqlite_riding``), on this thread;
    seconds for ``n`` tasks."""

    def with_pragmas(conn: Any) -> Any:
        for pragma in pragmas:
            conn.execute(pragma)
        return conn

    return n / floors._floor_sqlite_riding(path, n, BATCH, with_pragmas, claim, work)


def _threaded(path: str, n: int, batch: int, work: Callable[[int], None]) -> float:
    """Two claims of ``batch`` in flight: a database thread claims and
    settles (each settlement riding the next claim), this thread works."""
    claimed: queue.SimpleQueue[list[str] | None] = queue.SimpleQueue()
    finished: queue.SimpleQueue[list[str]] = queue.SimpleQueue()
    settled = [0]
    failure: list[Exception] = []

    def database() -> None:
        conn = floors._sqlite_floor_conn(path)  # (sqlite3 connections stay on their thread)
        claim, settle = floors._sqlite_drain_steps(conn, batch)
        in_flight, handed = 0, 0
        try:
            while True:
                riding: list[str] = []
                if in_flight == 2 or handed >= n:  # nothing more to claim: wait for work back
                    if in_flight == 0:
                        break
                    riding += finished.get()
                    in_flight -= 1
                while in_flight and not finished.empty():
                    riding += finished.get()
                    in_flight -= 1
                now = int(time.time() * 1000)
                conn.execute("begin immediate")
                if riding:
                    settled[0] += settle(riding, now)
                ids = claim(now) if handed < n else []
                conn.execute("commit")
                if ids:
                    handed += len(ids)
                    in_flight += 1
                    claimed.put(ids)
                elif in_flight == 0 and not riding:
                    break
        except Exception as exc:  # noqa: BLE001 (re-raised by the caller, on its thread)
            failure.append(exc)
        finally:
            conn.close()
            claimed.put(None)

    thread = threading.Thread(target=database, name="floor-database")
    started = time.perf_counter()
    thread.start()
    while (ids := claimed.get()) is not None:
        work(len(ids))
        finished.put(ids)
    thread.join()
    elapsed = time.perf_counter() - started
    if failure:
        raise failure[0]
    if settled[0] < n:
        raise RuntimeError(f"settled {settled[0]} of {n} tasks")
    return elapsed


def _variants(work: Callable[[int], None]) -> dict[str, Callable[[str, int], float]]:
    claim = floors._statement("sqlite", "claim_one_queue_one_name")
    head, found, _ = claim.rpartition("returning ")
    assert found, "the claim statement no longer ends with a RETURNING list"
    claim_all, claim_id = head + "returning *\n", head + "returning id\n"
    return {
        "riding": lambda path, n: _serial(path, n, claim, [], work),
        "returning-all": lambda path, n: _serial(path, n, claim_all, [], work),
        "returning-id": lambda path, n: _serial(path, n, claim_id, [], work),
        "cache-64mb": lambda path, n: _serial(path, n, claim, ["pragma cache_size = -65536"], work),
        "foreign-keys": lambda path, n: _serial(path, n, claim, ["pragma foreign_keys = on"], work),
        "threads-32": lambda path, n: _threaded(path, n, 32, work),
        "threads-64": lambda path, n: _threaded(path, n, 64, work),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--variants", default="", help="comma-separated (default: all)")
    parser.add_argument("--work-us", type=float, default=0.0, help="pure Python per task, in us")
    parser.add_argument("--switch-interval", type=float, default=None)
    parser.add_argument(
        "--dir", default=None, help="where the databases go (default: the temp directory)"
    )
    args = parser.parse_args()
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    loops_per_us = _loops_per_us()
    per_task = args.work_us

    def work(tasks: int) -> None:
        if per_task:
            _burn(tasks, per_task, loops_per_us)

    variants = _variants(work)
    chosen = [v for v in args.variants.split(",") if v] or list(variants)
    unknown = [v for v in chosen if v not in variants]
    if unknown:
        raise SystemExit(f"unknown variant(s) {unknown}: choose from {', '.join(variants)}")
    samples: dict[str, list[float]] = {v: [] for v in chosen}
    print(f"{args.tasks:,} tasks a drain, {args.work_us} us of Python a task", flush=True)
    for r in range(args.rounds):
        for name in chosen:
            with tempfile.TemporaryDirectory(dir=args.dir) as directory:
                path = os.path.join(directory, "floor.db")
                floors._drain_backlog("sqlite", path, args.tasks)
                us = variants[name](path, args.tasks) * 1e6 / args.tasks
            samples[name].append(us)
            print(f"round {r + 1}  {name:17s} {us:7.2f} us a task", flush=True)
    print("\nmedian us a task (range), and against riding's median:")
    base = statistics.median(samples["riding"]) if "riding" in samples else None
    for name, values in samples.items():
        median = statistics.median(values)
        against = f"  {base / median:5.3f}x riding's rate" if base else ""
        print(f"  {name:17s} {median:7.2f} ({min(values):.2f}-{max(values):.2f}){against}")


if __name__ == "__main__":
    main()
