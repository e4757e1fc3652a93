"""Reliability under contention: one SQLite file, 4 worker processes and 2
producer processes hammering it at once for ``CAIRNQ_SOAK_SECONDS``.

Every submitted task (producers record each id whose submit returned) must end
in the terminal state its payload prescribes:

    ok        succeeded at attempt 1
    fatal     handler raises TaskError (permanent)        -> failed at attempt 1, code "fatal"
    flaky n   fails retryably n times, then succeeds      -> succeeded at attempt n + 1
    exhaust   always fails retryably, max_attempts = 2    -> failed at attempt 2, code "handler_error"

none may be lost, no ``SQLITE_BUSY`` / "database is locked" may ever reach a
caller (producers record every exception they catch; workers record every
error their loop survives through ``on_error``; the processes' own output is
scanned too), and no task may run on two workers at once (handlers log start
and end with wall-clock times and the lease; overlaps are checked per task).

The second run does the same while a worker is SIGKILLed or SIGTERMed (and a
new one started) about every ``CAIRNQ_SOAK_CHAOS_S`` (default 1 s): killed
writers, recovered leases and draining workers must not starve anyone's
writes either. Tasks a killed worker touched must still end, each attempt run
once; the others as prescribed.

Sizes (environment): ``CAIRNQ_SOAK_SECONDS`` (default 15), ``CAIRNQ_SOAK_RATE``
(tasks per second per producer, default 100),
``CAIRNQ_SOAK_LEASE_MS`` (1500; workers beat every third of it), ``CAIRNQ_SOAK_WORKERS`` (4),
``CAIRNQ_SOAK_PRODUCERS`` (2). Worker and producer processes run under
``sys.executable`` with the test's tmp dir as cwd (never the repository root).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sqlite3
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from processes import Procs, procs, read_jsonl, wait_exit  # noqa: F401 (procs: a fixture)

SECONDS = float(os.environ.get("CAIRNQ_SOAK_SECONDS", "15"))
RATE = float(os.environ.get("CAIRNQ_SOAK_RATE", "100"))
N_WORKERS = int(os.environ.get("CAIRNQ_SOAK_WORKERS", "4"))
N_PRODUCERS = int(os.environ.get("CAIRNQ_SOAK_PRODUCERS", "2"))
CONCURRENCY = 4
LEASE_MS = int(os.environ.get("CAIRNQ_SOAK_LEASE_MS", "1500"))
DRAIN_TIMEOUT_S = 60 + SECONDS
CHAOS_INTERVAL_S = float(os.environ.get("CAIRNQ_SOAK_CHAOS_S", "1"))  # between kills, on average

BUSY_MARKERS = ("database is locked", "SQLITE_BUSY", "database table is locked", "SQLITE_LOCKED")

WORKER_SCRIPT = r'''
from cairnq import TaskError, Worker

LABEL = ARGS["label"]


def record(ctx, event):
    append(ARGS["log"], {"task": ctx.task_id, "attempt": ctx.attempt, "event": event,
                         "t": time.time(), "label": LABEL, "pid": os.getpid(),
                         "lease_ms": ARGS["lease_ms"]})


def on_error(exc, info):
    append(ARGS["errors"], {"who": LABEL, "via": "on_error", "phase": info.get("phase"),
                            "task": info.get("task_id"), "type": type(exc).__name__,
                            "message": str(exc), "code": getattr(exc, "sqlite_errorname", None)})


async def work(ctx, payload):
    record(ctx, "start")
    try:
        await asyncio.sleep(payload.get("sleep", 0))
        kind = payload["kind"]
        if kind == "fatal":
            raise TaskError("permanent failure", code="fatal")
        if kind == "flaky" and ctx.attempt <= payload["fails"]:
            raise RuntimeError(f"flaky attempt {ctx.attempt}")
        if kind == "exhaust":
            raise RuntimeError("always fails")
        return {"seq": payload["seq"], "producer": payload["producer"], "by": LABEL}
    finally:
        record(ctx, "end")


worker = Worker.sqlite(
    ARGS["target"], queues=["default"], concurrency=ARGS["concurrency"],
    lease_ms=ARGS["lease_ms"], poll_interval_ms=50, retry_backoff_ms=20,
    retry_backoff_max_ms=100, on_error=on_error,
)
worker.register("work", work)
worker.serve()
'''

PRODUCER_SCRIPT = r'''
import random
import traceback
from cairnq import CairnQ

LABEL = ARGS["label"]
rng = random.Random(ARGS["seed"])


def plan(seq):
    kind = rng.choices(["ok", "fatal", "flaky", "exhaust"], weights=[5, 1, 3, 1])[0]
    payload = {"kind": kind, "seq": seq, "producer": LABEL, "sleep": round(rng.uniform(0, 0.01), 4)}
    max_attempts = 3
    if kind == "flaky":
        payload["fails"] = rng.randint(1, 2)
    if kind == "exhaust":
        max_attempts = 2
    key = f"{LABEL}-{seq}" if rng.random() < 0.3 else None
    return payload, max_attempts, key


def failed(where, exc):
    append(ARGS["errors"], {"who": LABEL, "via": where, "type": type(exc).__name__,
                            "message": str(exc), "code": getattr(exc, "sqlite_errorname", None),
                            "t": time.time(), "trace": traceback.format_exc()[-800:]})


async def main():
    q = CairnQ.sqlite(ARGS["target"])
    deadline = time.monotonic() + ARGS["seconds"]
    started = time.monotonic()
    seq, ids = 0, []
    while time.monotonic() < deadline:
        burst = []
        for _ in range(rng.randint(1, 8)):
            seq += 1
            burst.append(plan(seq))

        async def one(payload, max_attempts, key):
            try:
                t = await q.submit("work", payload, key=key, max_attempts=max_attempts,
                                   priority=rng.randint(0, 2))
            except Exception as exc:
                failed("submit", exc)
                return
            ids.append(t.id)
            append(ARGS["ids"], {"id": t.id, "payload": payload, "max_attempts": max_attempts,
                                 "key": key, "status": t.status})

        await asyncio.gather(*(one(*b) for b in burst))  # concurrent: group commit + keyed txns
        try:  # reads under the same contention
            await q.stats("default")
            if ids:
                await q.get_status(rng.choice(ids))
                await q.get(rng.choice(ids))
        except Exception as exc:
            failed("read", exc)
        # pace to RATE tasks per second
        ahead = seq / ARGS["rate"] - (time.monotonic() - started)
        if ahead > 0:
            await asyncio.sleep(ahead)
    await q.close()

asyncio.run(main())
'''


def expected_outcome(record: dict[str, Any]) -> tuple[str, int, str | None]:
    """(status, attempt, error code) the payload prescribes."""
    payload = record["payload"]
    kind = payload["kind"]
    if kind == "ok":
        return "succeeded", 1, None
    if kind == "fatal":
        return "failed", 1, "fatal"
    if kind == "flaky":
        return "succeeded", payload["fails"] + 1, None
    if kind == "exhaust":
        return "failed", record["max_attempts"], "handler_error"
    raise AssertionError(kind)


def executions(log: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per task, one entry per handler call: attempt, label, start, end (or None)."""
    calls: dict[tuple[str, str, int], dict[str, Any]] = {}
    for ev in log:
        k = (ev["task"], ev["label"], ev["attempt"])
        if ev["event"] == "start":
            if k in calls:  # the same worker ran the same attempt twice: keep both
                k = (ev["task"], ev["label"] + "#dup", ev["attempt"])
            calls[k] = {"attempt": ev["attempt"], "label": ev["label"], "start": ev["t"],
                        "end": None, "lease_ms": ev["lease_ms"]}  # fmt: skip
        elif k in calls:
            calls[k]["end"] = ev["t"]
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (task, _, _), call in calls.items():
        out[task].append(call)
    for runs in out.values():
        runs.sort(key=lambda c: c["start"])
    return out


# A call cut short by a SIGKILL is run again once its lease runs out: lease_ms
# from its claim (or last beat), which came a little before its logged start.
CLAIM_TO_START_S = 0.1


def unlogged_attempts_explained_by_a_kill(runs: list[dict[str, Any]], attempt: int, fleet: Fleet) -> bool:
    """Some attempt up to ``attempt`` has no logged call, and for each such
    gap a worker was SIGKILLed (or stopped before it could serve) between the
    logged calls around it: claimed, then killed before its handler started.
    A gap no kill explains is not exempt: that would be an attempt lost."""
    logged = {c["attempt"]: c for c in runs}
    missing = [a for a in range(1, attempt + 1) if a not in logged]
    if not missing:
        return False
    kills = [fleet.signalled_at[label] for label in fleet.killed if label in fleet.signalled_at]
    for gap in missing:
        before = [c["end"] or c["start"] for a, c in logged.items() if a < gap]
        after = [c["start"] for a, c in logged.items() if a > gap]
        lo, hi = max(before, default=0.0), min(after, default=float("inf"))
        if not any(lo <= t <= hi for t in kills):
            return False
    return True


def overlapping(runs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Pairs of calls of one task that overlap in time while the first one's
    lease could not yet have run out (it is at least lease_ms from its claim,
    which came before its start)."""
    bad = []
    for i, a in enumerate(runs):
        a_end = a["end"] if a["end"] is not None else float("inf")
        slack = CLAIM_TO_START_S if a["end"] is None else 0.0
        for b in runs[i + 1 :]:
            if b["start"] < a_end and b["start"] < a["start"] - slack + a["lease_ms"] / 1000:
                bad.append((a, b))
    return bad


async def test_sqlite_contention_4_workers_2_producers(tmp_path: Path, procs: Procs) -> None:
    await run_contention(tmp_path, procs, chaos=False)


async def test_sqlite_contention_while_workers_are_killed_and_stopped(tmp_path: Path, procs: Procs) -> None:
    """The same, while workers are SIGKILLed or SIGTERMed (and replaced) every
    CHAOS_INTERVAL_S: killed writers, recovered leases and draining workers
    must not starve a producer's writes either."""
    await run_contention(tmp_path, procs, chaos=True)


class Fleet:
    """The worker processes of one run; ``chaos`` kills or stops one at random
    and starts a replacement, until told to stop."""

    def __init__(self, procs: Procs, args: dict[str, Any]) -> None:
        self.procs, self.args = procs, args
        self.live: list[tuple[str, Any]] = []
        self.killed: set[str] = set()  # SIGKILLed: their calls may end anyhow
        self.stopped: list[tuple[str, Any]] = []  # SIGTERMed: must drain and exit 0
        self.signalled_at: dict[str, float] = {}  # label -> wall time of its SIGKILL or SIGTERM
        self.serial = 0

    def start(self) -> None:
        label = f"W{self.serial}"
        self.serial += 1
        self.live.append((label, self.procs.start(f"worker-{label}", WORKER_SCRIPT, dict(self.args, label=label))))

    async def chaos(self, rng: random.Random) -> None:
        while True:
            await asyncio.sleep(rng.uniform(0.5, 1.5) * CHAOS_INTERVAL_S)
            label, proc = self.live.pop(rng.randrange(len(self.live)))
            self.signalled_at[label] = time.time()
            if rng.random() < 0.5:
                proc.kill()
                self.killed.add(label)
            else:
                proc.send_signal(signal.SIGTERM)
                self.stopped.append((label, proc))
            self.start()


async def run_contention(tmp_path: Path, procs: Procs, *, chaos: bool) -> None:
    db = tmp_path / "tasks.db"
    log, errors = tmp_path / "executions.jsonl", tmp_path / "errors.jsonl"

    # The schema exists before anyone else opens the file.
    from cairnq import CairnQ

    client = CairnQ.sqlite(str(db))
    await client.connect()
    await client.close()

    fleet = Fleet(procs, {"target": str(db), "log": str(log), "errors": str(errors),
                          "concurrency": CONCURRENCY, "lease_ms": LEASE_MS})  # fmt: skip
    for _ in range(N_WORKERS):
        fleet.start()
    disorder = asyncio.ensure_future(fleet.chaos(random.Random(7))) if chaos else None
    try:
        run = await produce_and_drain(tmp_path, db, procs, errors)
    finally:
        if disorder is not None:
            disorder.cancel()
    await stop_workers(fleet, log)
    judge(run, fleet, read_jsonl(log), read_jsonl(errors), procs, chaos)


async def produce_and_drain(tmp_path: Path, db: Path, procs: Procs, errors: Path) -> dict[str, Any]:
    """Run the producers, then wait until every task they submitted is terminal."""
    producers = [
        procs.start(
            f"producer-{i}",
            PRODUCER_SCRIPT,
            {"target": str(db), "label": f"P{i}", "ids": str(tmp_path / f"ids-{i}.jsonl"),
             "errors": str(errors), "seconds": SECONDS, "rate": RATE, "seed": 1000 + i},
        )  # fmt: skip
        for i in range(N_PRODUCERS)
    ]
    started = time.monotonic()
    for p in producers:
        code = await wait_exit(p, SECONDS + 60, "producer", procs.outputs)
        assert code == 0, procs.outputs()
    produce_s = time.monotonic() - started

    submitted: dict[str, dict[str, Any]] = {}
    for i in range(N_PRODUCERS):
        for rec in read_jsonl(tmp_path / f"ids-{i}.jsonl"):
            assert rec["id"] not in submitted, f"two submits returned the same id: {rec}"
            submitted[rec["id"]] = rec
    assert submitted, procs.outputs()

    raw = sqlite3.connect(str(db), isolation_level=None)
    raw.execute("pragma busy_timeout = 10000")
    try:
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while True:
            unfinished = raw.execute(
                "select count(*) from cairnq_tasks where status in ('queued', 'running')"
            ).fetchone()[0]
            if unfinished == 0:
                break
            assert time.monotonic() < deadline, f"{unfinished} tasks unfinished after the drain timeout"
            await asyncio.sleep(0.2)
        drain_s = time.monotonic() - started - produce_s
        rows = {
            r[0]: r
            for r in raw.execute(
                "select id, status, attempt, error, result, payload from cairnq_tasks"
            ).fetchall()
        }
        integrity = raw.execute("pragma integrity_check").fetchall()
    finally:
        raw.close()
    return {"submitted": submitted, "rows": rows, "integrity": integrity,
            "produce_s": produce_s, "drain_s": drain_s}  # fmt: skip


async def stop_workers(fleet: Fleet, log: Path) -> None:
    """SIGTERM the live workers; every stopped worker must have drained and exited 0."""
    for label, w in fleet.live:
        fleet.signalled_at[label] = time.time()
        w.send_signal(signal.SIGTERM)
    served = {ev["label"] for ev in read_jsonl(log)}
    for label, w in fleet.live + fleet.stopped:
        code = await wait_exit(w, 20, "worker", fleet.procs.outputs)
        if code == -signal.SIGTERM and label not in served:
            fleet.killed.add(label)  # stopped while still starting up, before its signal handlers
            continue
        assert code == 0, fleet.procs.outputs()


def judge(
    run: dict[str, Any],
    fleet: Fleet,
    log: list[dict[str, Any]],
    surfaced: list[dict[str, Any]],
    procs: Procs,
    chaos: bool,
) -> None:
    """Everything is measured first and reported, then asserted."""
    submitted, rows = run["submitted"], run["rows"]
    lost = [i for i in submitted if i not in rows]
    unexpected_rows = set(rows) - set(submitted)
    calls = executions(log)
    wrong: dict[str, Any] = {}
    repeated_attempts = redelivered = cut_short = 0
    overlaps = []
    for task_id, rec in submitted.items():
        if task_id not in rows:
            continue
        _, status, attempt, error, result, _ = rows[task_id]
        runs = calls.get(task_id, [])
        overlaps.extend(overlapping(runs))
        attempts = [c["attempt"] for c in runs]
        repeated_attempts += len(attempts) - len(set(attempts))  # one attempt run twice
        if any(c["label"] in fleet.killed for c in runs) or (
            chaos and unlogged_attempts_explained_by_a_kill(runs, attempt, fleet)
        ):
            # A SIGKILL may cut a call short, lose its settlement or land
            # between a claim and its call (an attempt with no logged call):
            # the task is run again and may end otherwise than prescribed,
            # but it ends.
            cut_short += 1
            if status not in ("succeeded", "failed"):
                wrong[task_id] = {"payload": rec["payload"], "got": status}
            continue
        want_status, want_attempt, want_code = expected_outcome(rec)
        code = json.loads(error)["code"] if error and status == "failed" else None
        redelivered += max(0, len(runs) - want_attempt)  # runs beyond what the payload prescribes
        if (status, attempt, code) != (want_status, want_attempt, want_code) or (
            sorted(set(attempts)) != list(range(1, attempt + 1))
            or any(c["end"] is None for c in runs)
            or (status == "succeeded" and json.loads(result)["seq"] != rec["payload"]["seq"])
        ):
            wrong[task_id] = {
                "payload": rec["payload"],
                "got": (status, attempt, code),
                "want": (want_status, want_attempt, want_code),
                "runs": [(c["attempt"], c["label"], round(c["start"], 3), c["end"] and round(c["end"], 3))
                         for c in runs],
            }  # fmt: skip
    busy = [e for e in surfaced if any(m in e["message"] for m in BUSY_MARKERS)]
    leaked = {
        label: out for label, out in procs.output_of().items() if any(m in out for m in BUSY_MARKERS)
    }
    by_worker = Counter(c["label"] for runs in calls.values() for c in runs)
    kinds = Counter(r["payload"]["kind"] for r in submitted.values())
    print(
        f"\n[reliability] sqlite contention: {N_WORKERS} workers x {CONCURRENCY} + {N_PRODUCERS} "
        f"producers, {SECONDS:.0f}s at {RATE:.0f}/s each, lease {LEASE_MS} ms"
        f"{f', {len(fleet.killed)} workers killed and {len(fleet.stopped)} stopped' if chaos else ''}: "
        f"tasks {len(submitted)} {dict(kinds)}, handler calls {sum(by_worker.values())}; "
        f"produce {run['produce_s']:.1f}s, drain {run['drain_s']:.1f}s -- lost: {len(lost)}, "
        f"duplicates: {redelivered} (attempts run twice: {repeated_attempts}; touched by a killed "
        f"worker: {cut_short}), errors surfaced: {len(surfaced)} (busy: {len(busy)} "
        f"{dict(Counter((e['via'], e.get('code')) for e in busy))}), overlaps: {len(overlaps)}, "
        f"wrong final state: {len(wrong)}"
    )

    # -- none lost, each in its prescribed terminal state, each attempt run once -------------------
    assert not lost, f"{len(lost)} submitted tasks are missing: {lost[:5]}"
    assert not unexpected_rows, "rows nobody submitted (or whose submit raised)"
    assert not wrong, "tasks not in their prescribed final state:\n" + "\n".join(
        json.dumps({task_id: info}) for task_id, info in list(wrong.items())[:10]
    )
    assert repeated_attempts == 0 and redelivered == 0
    assert run["integrity"] == [("ok",)]
    # -- no busy error ever reached a caller (nor anything else) ---------------------------------
    assert not busy, busy[:5]
    assert not leaked, leaked
    assert not surfaced, surfaced[:5]
    # -- never on two workers at once while a lease was valid ----------------------------------
    assert not overlaps, overlaps[:5]
    if not chaos:
        assert len(by_worker) == N_WORKERS, by_worker  # every worker took part
