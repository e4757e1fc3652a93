"""How a SQLite ``call()``'s latency settles on a fresh database file.

    python bench/call_warmup.py                  # 400 calls, medians of each 25
    python bench/call_warmup.py --pregrow        # the WAL grown first
    python bench/call_warmup.py --pause 1        # a second's pause before the calls

The ``call_latency`` set-up (a worker process of concurrency 4 answering
"echo", ``bench/workloads.py``'s ``_serve_worker``; one call to see it up),
on a new file, then ``--calls`` calls in a row (``timed_calls``); prints
the median of each ``--chunk`` calls, first to last. Until the WAL has reached its working
size every commit extends the file (and its sync records the new size), so
the first calls are slower; ``--pregrow`` inserts and drops a few MB on a
connection of its own before the worker starts, so the WAL is at full size
from the first call. ``--pause`` sleeps before the calls: a slow start
that went by time would be gone after it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from workloads import _serve_worker, timed_calls  # noqa: E402

PREGROW_ROWS = 40  # of 200 kB each: 8 MB of WAL, past the 1,000-page checkpoint


def _pregrow(db: str) -> int:
    """Grow ``db``'s WAL to beyond its checkpoint size; its size in bytes."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("create table ballast (x blob)")
        for _ in range(PREGROW_ROWS):
            conn.execute("begin")
            conn.execute("insert into ballast values (randomblob(200000))")
            conn.execute("commit")
        conn.execute("drop table ballast")
    finally:
        conn.close()  # the caller's connection stays open, so the WAL stays
    return os.path.getsize(db + "-wal")


async def run(calls: int, chunk: int, pregrow: bool, pause: float) -> list[float]:
    from cairnq import CairnQ

    db = os.path.join(tempfile.mkdtemp(prefix="cairnq-call-warmup-"), "calls.db")
    q = CairnQ.sqlite(db)
    await q.connect()
    try:
        # Before the worker starts, while the caller's connection keeps the
        # WAL there (grown once the worker was up, the first 25 calls still
        # took 2.9 ms in a trial run).
        if pregrow:
            print(f"WAL grown to {_pregrow(db):,} bytes")
        proc = _serve_worker("sqlite", db, 4)
        try:
            await q.call("ready", timeout_ms=60_000)
            await asyncio.sleep(pause)
            samples = await timed_calls(q, calls)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    finally:
        await q.close()
    return [statistics.median(samples[k : k + chunk]) for k in range(0, len(samples), chunk)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--chunk", type=int, default=25)
    parser.add_argument("--pregrow", action="store_true")
    parser.add_argument("--pause", type=float, default=0.0)
    args = parser.parse_args()
    medians = asyncio.run(run(args.calls, args.chunk, args.pregrow, args.pause))
    print(f"median ms of each {args.chunk} calls, first to last:")
    print("  " + "  ".join(f"{m:.2f}" for m in medians))


if __name__ == "__main__":
    main()
