"""One PostgreSQL round trip three ways, in one process: what asyncio adds.

    python bench/pg_round_trip.py                     # 2,000 of each, 5 rounds
    python bench/pg_round_trip.py --ops 5000 --rounds 3

``bench/call_timeline_pg.py --floor`` shows each of our ``call()``'s round
trips taking longer than the bare call's. The bare call's processes use
psycopg's blocking API: the thread waits in libpq for the reply. Ours use
psycopg's asyncio API: the socket is registered with the event loop, the
loop wakes on it, and the waiting task is resumed. This script separates
that from cairnq's own Python. Each round, on a fresh database (migrated
by our SDK, one task in it), alternating:

* ``sync``: psycopg's blocking API, the connection settings of
  ``floors.py``'s bare loops (autocommit, prepared at once, a raw cursor,
  json read as text);
* ``async``: the same statements on psycopg's asyncio API, settings alike:
  the loops of ``floors.py``'s ``floor_get`` and ``floor_submit_seq``;
* ``ours``: the SDK's ``get`` and ``submit``, which run the same statements
  (``workloads.py``'s loops, as ``compare.py`` runs them).

for two statements: ``get`` (a read by primary key) and ``insert_task`` (a
one-row commit; ``ours`` submits). ``--loop uvloop`` runs the two asyncio
ways on uvloop (installed separately). It prints the median microseconds an
operation of each way over the rounds, and the differences: ``async -
sync`` is the asyncio side of psycopg, ``ours - async`` cairnq's Python
around the statement.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

WAYS = ("sync", "async", "ours")


def _sync_us(cur: Any, sql: str, values: Callable[[int], list[Any]], ops: int) -> float:
    """Microseconds a blocking execute-and-fetch of ``sql`` takes, with
    ``values(i)`` the i-th operation's values (one warm-up first, i = -1)."""
    cur.execute(sql, values(-1), prepare=True)
    cur.fetchall()
    started = time.perf_counter()
    for i in range(ops):
        cur.execute(sql, values(i), prepare=True)
        cur.fetchall()
    return (time.perf_counter() - started) / ops * 1e6


def run_sync(target: str, task_id: str, ops: int) -> dict[str, float]:
    from floors import _pg_dollar, _pg_floor_conn_sync, _submit_row

    get, get_slots = _pg_dollar("get")
    insert, insert_slots = _pg_dollar("insert_task")
    get_values = [{"id": task_id}[s] for s in get_slots]
    first = ops + 1  # (the async way's floor loop inserts rows 0..ops)

    def insert_values(i: int) -> list[Any]:
        row = _submit_row(first + 1 + i)
        return [row[s] for s in insert_slots]

    conn = _pg_floor_conn_sync(target)
    try:
        cur = conn.cursor()
        return {
            "get": _sync_us(cur, get, lambda i: get_values, ops),
            "insert_task": _sync_us(cur, insert, insert_values, ops),
        }
    finally:
        conn.close()


def run_async(target: str, task_id: str, ops: int) -> dict[str, float]:
    """``floors.py``'s own loops for ``get`` and ``submit_seq``."""
    from floors import _floor_pg_get, _floor_pg_submit_seq

    return {
        "get": 1e6 / asyncio.run(_floor_pg_get(target, task_id, ops)),
        "insert_task": 1e6 / asyncio.run(_floor_pg_submit_seq(target, ops)),
    }


def run_ours(target: str, ops: int) -> dict[str, float]:
    """``workloads.py``'s ``get`` and ``submit_seq``: what ``compare.py``
    measures against those floor loops."""
    import workloads

    options = {"get_n": ops, "submit_n": ops}
    return {
        "get": 1e6 / asyncio.run(workloads.get("postgres", target, options))["value"],
        "insert_task": 1e6 / asyncio.run(workloads.submit_seq("postgres", target, options))["value"],
    }


def measure(ops: int, rounds: int) -> dict[str, dict[str, list[float]]]:
    """Per way, per statement: microseconds an operation, one value a round
    (each round on a fresh database: the floor loop's rows have fixed ids)."""
    from compare import Database
    from floors import _fresh_schema

    samples: dict[str, dict[str, list[float]]] = {w: {"get": [], "insert_task": []} for w in WAYS}
    for r in range(rounds):
        with Database("postgres") as target:
            task_id = _fresh_schema("postgres", target)
            assert task_id is not None
            for way in WAYS if r % 2 == 0 else WAYS[::-1]:
                if way == "sync":
                    got = run_sync(target, task_id, ops)
                elif way == "async":
                    got = run_async(target, task_id, ops)
                else:
                    got = run_ours(target, ops)
                for statement, us in got.items():
                    samples[way][statement].append(us)
    return samples


def report(samples: dict[str, dict[str, list[float]]]) -> None:
    head = f"{'statement':<12} {'sync':>8} {'async':>8} {'ours':>8}   {'async - sync':>12} {'ours - async':>12}"
    print(head + "  (us an op, medians)")
    for statement in ("get", "insert_task"):
        med = {w: statistics.median(samples[w][statement]) for w in WAYS}
        print(
            f"{statement:<12} {med['sync']:>8.1f} {med['async']:>8.1f} {med['ours']:>8.1f}   "
            f"{med['async'] - med['sync']:>12.1f} {med['ours'] - med['async']:>12.1f}"
        )
    for way in WAYS:
        spread = ", ".join(f"{statement} {min(v):.1f}-{max(v):.1f}" for statement, v in samples[way].items())
        print(f"  {way} rounds: {spread}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=2000, help="operations of each statement, each way, a round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    args = parser.parse_args()
    if args.loop == "uvloop":
        import uvloop

        uvloop.install()  # (asyncio.run then makes uvloop's loops)
    report(measure(args.ops, args.rounds))


if __name__ == "__main__":
    main()
