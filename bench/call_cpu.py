"""CPU per ``call()``, caller and worker process, against a fresh database.

    python bench/call_cpu.py [--calls 1000] [--dialect sqlite|postgres] [--target PATH_OR_DSN]
    python bench/call_cpu.py --calls 200 --gap-ms 30      # calls now and then, not back to back

Runs ``workloads.call_latency`` (a worker process of concurrency 4 answering
"echo") and reports the p50 with the CPU time of this process and of the
worker (``getrusage`` of the children once it has exited), each divided by
the number of calls. Without ``--target`` the database is a temp SQLite file,
or with ``--dialect postgres`` a new PostgreSQL database (dropped after).
Both include start-up (imports, the store's opening), a
few percent at 1,000 calls. With ``--gap-ms`` the calls are that far apart,
and what both processes spend meanwhile (looking for changes after each
write) counts too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import workloads  # noqa: E402
from compare import Database  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--dialect", default="sqlite", choices=("sqlite", "postgres"))
    parser.add_argument("--target", default=None, help="a SQLite path or a PostgreSQL DSN (default: a fresh database)")
    parser.add_argument("--gap-ms", type=float, default=0, help="between calls (default: none)")
    args = parser.parse_args()
    with contextlib.ExitStack() as scope:
        target = args.target or scope.enter_context(Database(args.dialect))
        started = time.process_time()
        options = {"calls": args.calls, "call_gap_ms": args.gap_ms}
        result = asyncio.run(workloads.call_latency(args.dialect, target, options))
        caller = time.process_time() - started
    worker = resource.getrusage(resource.RUSAGE_CHILDREN)
    per = 1e6 / args.calls
    print(
        f"p50 {result['value']:.2f} ms; CPU per call: caller {caller * per:.0f} us, "
        f"worker {(worker.ru_utime + worker.ru_stime) * per:.0f} us"
    )


if __name__ == "__main__":
    main()
