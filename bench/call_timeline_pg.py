"""Where a PostgreSQL ``call()``'s time goes: both processes on one clock.

    python bench/call_timeline_pg.py                  # 200 warm-up calls, then 60 traced
    python bench/call_timeline_pg.py --calls 200 --show 3

The PostgreSQL twin of ``call_timeline.py``: a caller in this process and a
worker (concurrency 4) in a second one share a fresh database. Both log, on
``time.monotonic()`` (one clock for every process on Linux), every protocol
statement (cairnq's ``statement`` events: from the statement's hand-over to
the driver to its answer), every ``cairnq_queued`` / ``cairnq_done``
notification their listener takes in, and the worker the moment its handler
runs. For a few calls it prints the merged timeline; for all of them, the
median of each phase:

    insert -> notified   the caller's insert sent -> the worker's listener hears cairnq_queued
    -> claim sent         the worker wakes and sends its claim
    claim                 the claim's round trip (its commit included)
    -> handler            the claimed row -> the handler runs
    -> completion sent    the handler returns -> its completion is sent
    completion            the completion's round trip (its commit included)
    -> caller notified    -> the caller's listener hears cairnq_done
    -> get sent           the caller wakes and sends its read
    get                   the read's round trip
    -> returned           -> call() returns

The listener's hook is wrapped in both processes (bench only: one Python
call per notification); subscribing to statement events costs each
statement a little too.

``--floor`` then times the floor of the same call the same way: the bare
two-process call of ``compare.py``'s ``floor_call_processes`` (a psycopg
worker with no SDK, woken by the same notifications; the caller on psycopg's
sync API), its round trips and notifications logged on the same clock, and
prints its phases beside ours (see ``phases``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

Entry = tuple[float, float, str, str]  # start, end, who ("c" or "w"), what


def logging_into(log: list[Entry], who: str) -> Callable[[], None]:
    """Append this process's statements and notifications to ``log`` (before
    its store connects: a listener keeps the hook it started with)."""
    from cairnq import events
    from cairnq.store.postgres.listener import Listener

    def statement(event: Any) -> None:
        now = time.monotonic()
        log.append((now - event.duration_s, now, who, event.name))

    heard = Listener._on_notify

    def on_notify(self: Any, channel: str, payload: Any) -> None:
        now = time.monotonic()
        log.append((now, now, who, f"NOTIFY {channel}"))
        heard(self, channel, payload)

    Listener._on_notify = on_notify  # type: ignore[method-assign]
    return events.subscribe(statement, ["statement"])


_WORKER = r"""
import atexit, json, sys, time
sys.path.insert(0, sys.argv[3])
from call_timeline_pg import logging_into
from cairnq import Worker

log = []
logging_into(log, "w")
worker = Worker.postgres(sys.argv[1], concurrency=4)

@worker.task("echo")
async def echo(ctx, payload):
    now = time.monotonic()
    log.append((now, now, "w", "HANDLER"))
    return payload

atexit.register(lambda: open(sys.argv[2], "w").write(json.dumps(log)))
worker.serve()
"""


async def trace(dsn: str, worker_log: str, warm_up: int, calls: int) -> tuple[list[Entry], list[Entry]]:
    from call_timeline import traced_calls  # (not in the worker, which imports this module)
    from cairnq import CairnQ

    log: list[Entry] = []
    logging_into(log, "c")
    async with CairnQ.postgres(dsn) as q:
        await q.connect()
        worker = await traced_calls(q, _WORKER, dsn, worker_log, warm_up, calls, log, log.clear)
    return log, worker


def phases(call: Entry, during: list[Entry]) -> dict[str, float] | None:
    """One call's phases (ms), or None when its timeline is not the usual one.
    The bare call (``--floor``) logs no handler: there the claim's answer ->
    the completion sent is one gap, and its caller logs its ``get`` from the
    moment it was woken (no "-> get sent")."""

    def first(who: str, prefix: str) -> Entry:
        return next(e for e in during if e[2] == who and e[3].startswith(prefix))

    try:
        insert, queued = first("c", "insert_task"), first("w", "NOTIFY cairnq_queued")
        claim, complete = first("w", "claim"), first("w", "complete")
        done, get = first("c", "NOTIFY cairnq_done"), first("c", "get")
    except StopIteration:
        return None
    handler = next((e for e in during if e[2] == "w" and e[3] == "HANDLER"), None)
    ms = 1000
    out = {
        "insert -> notified": (queued[0] - insert[0]) * ms,
        "-> claim sent": (claim[0] - queued[0]) * ms,
        "claim": (claim[1] - claim[0]) * ms,
    }
    if handler is not None:
        out["-> handler"] = (handler[0] - claim[1]) * ms
    out["-> completion sent"] = (complete[0] - (claim[1] if handler is None else handler[0])) * ms
    out.update({
        "completion": (complete[1] - complete[0]) * ms,
        "-> caller notified": (done[0] - complete[1]) * ms,
        "-> get sent": (get[0] - done[0]) * ms,
        "get": (get[1] - get[0]) * ms,
        "-> returned": (call[1] - get[1]) * ms,
        "call": (call[1] - call[0]) * ms,
    })  # fmt: skip
    return out


def trace_floor(dsn: str, worker_log: str, calls: int) -> tuple[list[Entry], list[Entry]]:
    """The bare two-process call (``floors.floor_call_processes``), logged."""
    import json

    import floors

    floors._fresh_schema("postgres", dsn)
    log: list[Entry] = []
    proc = floors._spawn_bare_worker("postgres", dsn, log=worker_log)
    try:
        floors._floor_pg_call_processes(dsn, calls, proc, log)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    with open(worker_log) as f:
        worker = [tuple(e) for e in json.load(f)]
    return log, worker  # type: ignore[return-value]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warm-up", type=int, default=200)
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--show", type=int, default=2, help="print the full timeline of this many calls")
    parser.add_argument("--floor", action="store_true", help="then the bare two-process call, timed alike")
    args = parser.parse_args()
    from call_timeline import report
    from compare import Database  # (neither in the worker, which imports this module)

    logs = tempfile.mkdtemp(prefix="cairnq-timeline-logs-")
    with Database("postgres") as dsn:
        caller, worker = asyncio.run(trace(dsn, os.path.join(logs, "worker.json"), args.warm_up, args.calls))
    report(caller, worker, args.show, phases)
    if args.floor:
        print("\nthe bare two-process call (floor_call_processes), timed alike:")
        with Database("postgres") as dsn:
            caller, worker = trace_floor(dsn, os.path.join(logs, "floor-worker.json"), args.calls)
        report(caller, worker, args.show, phases)


if __name__ == "__main__":
    main()
