"""Where a SQLite ``call()``'s time goes: both processes' statements on one clock.

    python bench/call_timeline.py                    # 200 warm-up calls, then 50 traced
    python bench/call_timeline.py --calls 200 --show 3
    python bench/call_timeline.py --calls 100 --gap-ms 30   # calls now and then
    python bench/call_timeline.py --calls 300 --fine        # each phase taken apart

A caller in this process and a worker in a second one (the ``call_latency``
set-up) share a database file. Every ``execute`` on either store's sqlite3
connection is logged with its start and end (``drain_statements.TimedConnection``,
on ``time.monotonic()``: one clock for every process on Linux), and so is
the moment the handler runs.
For a few calls the script prints the merged timeline; for all of them, the
median of each phase:

    submit      the caller's INSERT (its commit included)
    woken       its end -> the worker's claim UPDATE begins
    claim       the claim UPDATE and its COMMIT
    to handler  the claim's COMMIT ends -> the handler runs
    to write    the handler -> the completion's UPDATE begins
    settled     the completion's UPDATE begins -> the call returns: its COMMIT
                (on the engine's committer thread, not logged), the caller's
                wake-up and its final read

``--fine`` splits the phases further (where the worker's wake-up, its
probe, its claim statement and its commit go; the caller's wake-up and
reads; the steps from the claim's COMMIT to the handler, marked in the
worker's private methods) and also logs every poll of the worker's event
loop ("EPOLL", with the timeout it was given in microseconds and the events
it returned), so the loop turns a call costs are counted; then the same
statements run in a bare loop on one connection (``bare_statements``), to
read the traced ones against.

The timing wrapper adds one Python call per statement in each process.
Logs go to a temporary directory of their own: not the database's, whose
every write the worker's file watch would see.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from drain_statements import TimedConnection  # noqa: E402
from sdk_client import client  # noqa: E402

Entry = tuple[float, float, str, str]  # start, end, who ("c" or "w"), what


def logging_to(log: list[Entry], who: str) -> Callable[[str, float, float], None]:
    """A ``TimedConnection`` recorder that appends each statement to ``log``."""

    def record(sql: str, started: float, ended: float) -> None:
        log.append((started, ended, who, " ".join(sql.split()[:3])[:32]))

    return record


_WORKER = r"""
import asyncio, atexit, json, sys, time
sys.path.insert(0, sys.argv[3])
from call_timeline import logging_to
from drain_statements import TimedConnection
from cairnq import Worker

log = []
worker = Worker.sqlite(sys.argv[1], concurrency=4)

@worker.task("echo")
async def echo(ctx, payload):
    now = time.monotonic()
    log.append((now, now, "w", "HANDLER"))
    return payload

async def logged(w):
    engine = w.store._engine  # bench only: the store's one engine
    engine.conn = TimedConnection(engine.conn, logging_to(log, "w"))

worker.run_beside(logged)
if len(sys.argv) > 4 and sys.argv[4] == "fine":
    def polls_logged(loop_select):
        def select(timeout=None):
            began = time.monotonic()
            events = loop_select(timeout)
            waited = "None" if timeout is None else str(round(timeout * 1e6))
            log.append((began, time.monotonic(), "w", f"EPOLL {waited} {len(events)}"))
            return events
        return select

    def marked(what, fn):
        def step(*args, **kwargs):
            out = fn(*args, **kwargs)
            now = time.monotonic()
            log.append((now, now, "w", what))
            return out
        return step

    def claim_marked(claim):
        async def step(*args, **kwargs):
            out = await claim(*args, **kwargs)
            now = time.monotonic()
            log.append((now, now, "w", "CLAIMED"))
            return out
        return step

    async def polls(w):
        selector = asyncio.get_running_loop()._selector  # bench only: the loop's selector
        selector.select = polls_logged(selector.select)
        # Marks after the claim's COMMIT (bench only: private steps): the
        # engine's gate released, the claim back in the claim loop, its
        # calls dispatched.
        w.store._engine._release_gate = marked("GATE RELEASED", w.store._engine._release_gate)
        w._port.claim = claim_marked(w._port.claim)
        w._dispatch = marked("DISPATCHED", w._dispatch)

    worker.run_beside(polls)
atexit.register(lambda: open(sys.argv[2], "w").write(json.dumps(log)))
worker.serve()
"""


async def traced_calls(
    q: Any,
    worker_code: str,
    target: str,
    worker_log: str,
    warm_up: int,
    calls: int,
    log: list[Entry],
    start_logging: Callable[[], None],
    gap_s: float = 0.0,
    worker_args: tuple[str, ...] = (),
) -> list[Entry]:
    """Start ``worker_code`` in a process of its own (argv: ``target``,
    ``worker_log``, this directory), warm up with ``warm_up`` calls of the
    caller ``q``, then ``start_logging()`` and time ``calls`` calls into
    ``log`` (as "CALL" entries), ``gap_s`` apart. Returns the worker's log."""
    here = os.path.dirname(os.path.abspath(__file__))
    argv = [sys.executable, "-c", worker_code, target, worker_log, here, *worker_args]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    try:
        await q.call("echo", {}, timeout_ms=60_000)  # (also waits for the worker to start)
        for i in range(warm_up):
            await q.call("echo", {"i": i}, timeout_ms=30_000)
        start_logging()
        for i in range(calls):
            if gap_s:
                await asyncio.sleep(gap_s)
            started = time.monotonic()
            await q.call("echo", {"i": i}, timeout_ms=30_000)
            log.append((started, time.monotonic(), "c", "CALL"))
    finally:
        proc.send_signal(signal.SIGINT)  # the worker drains and writes its log
        proc.wait(timeout=30)
    with open(worker_log) as f:
        return [tuple(e) for e in json.load(f)]


def report(
    caller: list[Entry],
    worker: list[Entry],
    show: int,
    phases: Callable[[Entry, list[Entry]], dict[str, float] | None],
) -> None:
    """Print the merged timeline of the first ``show`` calls, then the
    median of each phase over every call ``phases`` could read."""
    events = sorted(e for e in caller + worker if e[3] != "CALL")
    calls = [e for e in caller if e[3] == "CALL"]
    found = []
    for k, call in enumerate(calls):
        during = [e for e in events if call[0] <= e[0] <= call[1]]
        if k < show:
            print(f"-- call {k}: {(call[1] - call[0]) * 1000:.3f} ms (start, duration, who, what)")
            for start, end, who, what in during:
                print(f"   {(start - call[0]) * 1000:7.3f} +{(end - start) * 1000:6.3f}  {who}  {what}")
        got = phases(call, during)
        if got is not None:
            found.append(got)
    print(f"\nmedian of {len(found)} of {len(calls)} calls (ms):")
    names = list(found[0]) if found else []
    width = max(map(len, names), default=0)
    for name in names:
        print(f"  {name:<{width}} {statistics.median(p[name] for p in found):6.3f}")


async def trace(
    db: str, logs: str, warm_up: int, calls: int, gap_s: float = 0.0, fine: bool = False
) -> tuple[list[Entry], list[Entry]]:
    log: list[Entry] = []
    async with client("sqlite", db) as q:
        await q.connect()

        def start_logging() -> None:
            engine = q.store._engine  # bench only, as above
            engine.conn = TimedConnection(engine.conn, logging_to(log, "c"))

        worker = await traced_calls(
            q, _WORKER, db, os.path.join(logs, "worker.json"), warm_up, calls, log, start_logging, gap_s,
            ("fine",) if fine else (),
        )
    return log, worker


def _landmarks(during: list[Entry]) -> tuple[Entry, Entry, Entry, Entry, Entry] | None:
    """The caller's insert, the worker's claim UPDATE, its COMMIT, the
    handler and the completion UPDATE of one call; None when its timeline is
    not the usual one."""
    try:
        insert = next(e for e in during if e[2] == "c" and e[3].startswith("insert"))
        updates = [e for e in during if e[2] == "w" and e[3].startswith("update")]
        claim, complete = updates[0], updates[1]
        commit = next(e for e in during if e[2] == "w" and e[3] == "COMMIT" and e[0] >= claim[1])
        handler = next(e for e in during if e[3] == "HANDLER")
    except (StopIteration, IndexError):
        return None
    return insert, claim, commit, handler, complete


def phases(call: Entry, during: list[Entry]) -> dict[str, float] | None:
    """One call's phases (ms), or None when its timeline is not the usual one."""
    found = _landmarks(during)
    if found is None:
        return None
    insert, claim, commit, handler, complete = found
    ms = 1000
    return {
        "submit": (insert[1] - insert[0]) * ms,
        "woken": (claim[0] - insert[1]) * ms,
        "claim": (commit[1] - claim[0]) * ms,
        "to handler": (handler[0] - commit[1]) * ms,
        "to write": (complete[0] - handler[0]) * ms,
        "settled": (call[1] - complete[0]) * ms,
        "call": (call[1] - call[0]) * ms,
    }


def fine_phases(call: Entry, during: list[Entry]) -> dict[str, float] | None:
    """``phases`` taken apart (ms), and the worker's loop polls in the call."""
    found = _landmarks(during)
    if found is None:
        return None
    insert, claim, commit, handler, complete = found
    after = [e for e in during if e[0] >= insert[1]]
    try:
        probe = next(e for e in after if e[2] == "w" and e[3].startswith("select"))
        begin = next(e for e in after if e[2] == "w" and e[3].startswith("BEGIN"))
    except StopIteration:
        return None
    looks = [e for e in after if e[2] == "w" and e[3].startswith("pragma") and e[0] <= probe[0]]
    try:
        released = next(e for e in during if e[3] == "GATE RELEASED" and e[0] >= commit[1])
        claimed = next(e for e in during if e[3] == "CLAIMED" and e[0] >= released[0])
        dispatched = next(e for e in during if e[3] == "DISPATCHED" and e[0] >= claimed[0])
        poll = next(e for e in during if e[3].startswith("EPOLL") and e[0] >= dispatched[0])
    except StopIteration:
        return None
    seen = looks[-1][1] if looks else probe[0]  # the worker's look that saw the insert
    reads = [e for e in during if e[2] == "c" and e[3].startswith("select") and e[0] >= complete[1]]
    caller_reads = reads[0][0] if reads else call[1]
    polls = [e for e in during if e[3].startswith("EPOLL")]
    ms = 1000
    return {
        "insert (its commit included)": (insert[1] - insert[0]) * ms,
        "-> the worker's look that saw it": (seen - insert[1]) * ms,
        "-> its probe": (probe[0] - seen) * ms,
        "the probe": (probe[1] - probe[0]) * ms,
        "-> BEGIN IMMEDIATE": (begin[0] - probe[1]) * ms,
        "-> the claim UPDATE": (claim[0] - begin[1]) * ms,
        "the claim UPDATE": (claim[1] - claim[0]) * ms,
        "-> its COMMIT (rows, plan, stamp)": (commit[0] - claim[1]) * ms,
        "the COMMIT": (commit[1] - commit[0]) * ms,
        "-> the handler": (handler[0] - commit[1]) * ms,
        "  -> the engine's gate released": (released[0] - commit[1]) * ms,
        "  -> the claim back in the claim loop": (claimed[0] - released[0]) * ms,
        "  -> its calls dispatched": (dispatched[0] - claimed[0]) * ms,
        "  -> the loop's next poll": (poll[0] - dispatched[0]) * ms,
        "  the poll, and on to the handler": (handler[0] - poll[0]) * ms,
        "-> the completion UPDATE": (complete[0] - handler[0]) * ms,
        "the completion UPDATE": (complete[1] - complete[0]) * ms,
        "-> the caller's first read after it": (caller_reads - complete[1]) * ms,
        "the caller's reads": (call[1] - caller_reads) * ms,
        "the call": (call[1] - call[0]) * ms,
        "worker loop polls (count)": float(len(polls)),
        "  of which returned events": float(sum(1 for e in polls if not e[3].endswith(" 0"))),
    }


def bare_statements(db: str, n: int, gap_s: float) -> dict[str, float]:
    """The worker's statements of a call in a bare loop on one connection (no
    SDK, no second process, the store's durability): insert a task, then
    BEGIN IMMEDIATE, the claim of one row, COMMIT, then its completion in a
    transaction of its own (as the worker's batch is); ``n`` times after 200
    warm-up rounds, ``gap_s`` apart. Medians (ms) of each statement's
    ``execute``, timed as the traced ones are."""
    import floors

    floors._fresh_schema("sqlite", db)
    insert, claim, complete = (
        floors._statement("sqlite", name) for name in ("insert_task", "claim_one_queue_one_name", "complete")
    )
    conn = floors._sqlite_floor_conn(db)
    timed: dict[str, list[float]] = {
        "the claim UPDATE": [], "its COMMIT": [], "the completion UPDATE": [], "its COMMIT ": [],
    }  # fmt: skip
    try:
        for i in range(-200, n):
            now = int(time.time() * 1000)
            conn.execute(insert, dict(floors._submit_row(i + 200), name="echo", run_at_ms=now, now_ms=now))
            conn.execute("BEGIN IMMEDIATE")
            began = time.perf_counter()
            cur = conn.execute(claim, {
                "worker_id": "bare", "lease_until_ms": now + 30_000, "now_ms": now,
                "queue": "default", "name": "echo", "limit": 4,
            })  # fmt: skip
            claimed = time.perf_counter()
            (row,) = cur.fetchall()
            committing = time.perf_counter()
            conn.execute("COMMIT")
            committed = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")  # (the worker's completion is a batch's transaction)
            completing = time.perf_counter()
            conn.execute(complete, {"id": row[0], "result": "{}", "worker_id": "bare", "now_ms": now}).fetchall()
            completed = time.perf_counter()
            conn.execute("COMMIT")
            if i >= 0:
                timed["the claim UPDATE"].append(claimed - began)
                timed["its COMMIT"].append(committed - committing)
                timed["the completion UPDATE"].append(completed - completing)
                timed["its COMMIT "].append(time.perf_counter() - completed)
            if gap_s:
                time.sleep(gap_s)
    finally:
        conn.close()
    return {name: statistics.median(samples) * 1000 for name, samples in timed.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warm-up", type=int, default=200)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--show", type=int, default=2, help="print the full timeline of this many calls")
    parser.add_argument("--gap-ms", type=float, default=0, help="between the traced calls (default: none)")
    parser.add_argument("--fine", action="store_true", help="finer phases, and the worker's loop polls")
    args = parser.parse_args()
    db = os.path.join(tempfile.mkdtemp(prefix="cairnq-timeline-db-"), "call.db")
    logs = tempfile.mkdtemp(prefix="cairnq-timeline-logs-")
    caller, worker = asyncio.run(trace(db, logs, args.warm_up, args.calls, args.gap_ms / 1000, args.fine))
    report(caller, worker, args.show, fine_phases if args.fine else phases)
    if args.fine:
        # The statements alone, for the traced ones to be read against: one
        # loop back to back, one with a call's pause between rounds (its
        # worker sleeps between calls, its caches cool).
        for gap_s in (0.0, 0.001):
            bare = bare_statements(os.path.join(tempfile.mkdtemp(prefix="cairnq-bare-"), "bare.db"), 1000, gap_s)
            print(f"\nthe same statements in a bare loop, {gap_s * 1000:g} ms apart (ms, medians of 1,000):")
            for name, ms in bare.items():
                print(f"  {name:<22} {ms:6.3f}")


if __name__ == "__main__":
    main()
