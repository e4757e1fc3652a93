"""Workers as real processes: kill -9, SIGTERM drain, a second signal, workers
with different handler sets, cross-process pickup latency, and interop with
the reference SDK's worker and client (API.md §5; OPERATIONS.md §4.9, §5).

Every worker here is a separate Python process running ``worker.serve()``. Our
package runs under ``sys.executable`` with a temporary directory as cwd (the
repository root would shadow the installed package); the reference SDK runs
through ``refsdk.spawn``. Both run the *same* worker script (the two APIs are
identical): every handler call appends

    <task_id> <pid> <attempt> <unix time> <worker label> <start|end>

to a shared executions log, so the test can tell who ran what, and when.
Each worker also listens on a private queue ``warm-<label>``; a task sent there
proves the process is up and claiming.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pytest
import refsdk
from processes import popen_script, reap, until

from cairnq import CairnQ

# -- the worker script (runs under either SDK) ----------------------------------

_OUR_PRELUDE = """
import asyncio, json, sys
ARGS = json.loads(sys.argv[1])
def emit(value):
    pass
"""

WORKER_SCRIPT = r"""
import os, time
from cairnq import Worker

LOG = ARGS["log"]
LABEL = ARGS["label"]


def record(ctx, event):
    line = f"{ctx.task_id} {os.getpid()} {ctx.attempt} {time.time():.6f} {LABEL} {event}\n"
    with open(LOG, "a") as f:
        f.write(line)
        f.flush()


def handler_for(name):
    async def handler(ctx, payload):
        record(ctx, "start")
        delay = 0.0
        if isinstance(payload, dict):
            delay = float(payload.get("sleep", 0))
            if payload.get("sleep_first_attempt_only") and ctx.attempt > 1:
                delay = 0.0
        if delay:
            await asyncio.sleep(delay)
        record(ctx, "end")
        return {"by": LABEL}

    return handler


options = dict(
    queues=ARGS["queues"],
    concurrency=ARGS["concurrency"],
    lease_ms=ARGS["lease_ms"],
    poll_interval_ms=ARGS["poll_interval_ms"],
    retry_backoff_ms=0,
)
factory = Worker.sqlite if ARGS["dialect"] == "sqlite" else Worker.postgres
worker = factory(ARGS["target"], **options)
for name in ARGS["names"]:
    worker.register(name, handler_for(name))
worker.serve()
"""

WARM = "warm"


@dataclass(frozen=True)
class Line:
    task_id: str
    pid: int
    attempt: int
    time: float
    label: str
    event: str


def read_log(path: Path) -> list[Line]:
    if not path.exists():
        return []
    lines = []
    for raw in path.read_text().splitlines():
        parts = raw.split()
        if len(parts) != 6:
            continue  # a line still being written
        task_id, pid, attempt, at, label, event = parts
        lines.append(Line(task_id, int(pid), int(attempt), float(at), label, event))
    return lines


def starts(lines: list[Line], label: Optional[str] = None) -> list[Line]:
    return [ln for ln in lines if ln.event == "start" and (label is None or ln.label == label)]


@dataclass
class WorkerProc:
    label: str
    proc: subprocess.Popen[Any]
    out: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.out.read_text() if self.out.exists() else ""


class Workers:
    """Starts worker processes for one test; kills the survivors at the end
    (each by its own pid)."""

    def __init__(self, tmp_path: Path, backend: Any) -> None:
        self.tmp_path = tmp_path
        self.backend = backend
        self.log = tmp_path / "executions.log"
        self.started: list[WorkerProc] = []

    def _args(
        self,
        label: str,
        names: list[str],
        *,
        queues: tuple[str, ...],
        concurrency: int,
        lease_ms: int,
        poll_interval_ms: int,
    ) -> dict[str, Any]:
        return {
            "dialect": self.backend.dialect,
            "target": self.backend.target,
            "log": str(self.log),
            "label": label,
            "names": [*names, WARM],
            "queues": [*queues, f"warm-{label}"],
            "concurrency": concurrency,
            "lease_ms": lease_ms,
            "poll_interval_ms": poll_interval_ms,
        }

    def start(
        self,
        label: str,
        names: list[str],
        *,
        queues: tuple[str, ...] = ("default",),
        concurrency: int = 4,
        lease_ms: int = 30_000,
        poll_interval_ms: int = 100,
        reference: bool = False,
    ) -> WorkerProc:
        args = self._args(
            label, names, queues=queues, concurrency=concurrency, lease_ms=lease_ms,
            poll_interval_ms=poll_interval_ms,
        )  # fmt: skip
        out = self.tmp_path / f"worker-{label}.out"
        sink = open(out, "w")
        try:
            if reference:
                proc = refsdk.spawn(WORKER_SCRIPT, args, stdout=sink, stderr=subprocess.STDOUT)
            else:
                proc = popen_script(_OUR_PRELUDE + WORKER_SCRIPT, args, self.tmp_path, sink)
        finally:
            sink.close()
        worker = WorkerProc(label, proc, out)
        self.started.append(worker)
        return worker

    def cleanup(self) -> None:
        reap(w.proc for w in self.started)


@pytest.fixture
def workers(tmp_path: Path, backend: Any) -> Any:
    w = Workers(tmp_path, backend)
    try:
        yield w
    finally:
        w.cleanup()


@pytest.fixture
def sqlite_workers(tmp_path: Path, sqlite_backend: Any) -> Any:
    w = Workers(tmp_path, sqlite_backend)
    try:
        yield w
    finally:
        w.cleanup()


# -- helpers -------------------------------------------------------------------------


async def wait_exit(w: WorkerProc, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while w.proc.poll() is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"worker {w.label} still running after {timeout}s:\n{w.output()}")
        await asyncio.sleep(0.01)
    return w.proc.returncode


async def ready(client: CairnQ, *procs: WorkerProc, timeout_s: float = 30) -> None:
    """A warm-up task on each worker's private queue has run: it is up and claiming."""
    for w in procs:
        task = await client.submit(WARM, {}, queue=f"warm-{w.label}")
        done = await client.wait(
            task.id, timeout_ms=int(timeout_s * 1000), poll_ms=10, max_poll_ms=50
        )
        assert done.status == "succeeded", (done, w.output())
        assert done.result == {"by": w.label}


async def finish_all(client: CairnQ, ids: list[str], timeout_s: float = 30) -> dict[str, Any]:
    out = {}
    for task_id in ids:
        out[task_id] = await client.wait(
            task_id, timeout_ms=int(timeout_s * 1000), poll_ms=10, max_poll_ms=100
        )
    return out


async def connected_client(backend: Any) -> CairnQ:
    client = backend.client()
    await client.connect()  # the schema exists before any worker opens the database
    return client


def max_overlap(lines: list[Line], label: str) -> int:
    """Most calls of ``label`` in flight at once, from start/end lines (a call
    without an end counts until the end of the log)."""
    events = []
    for ln in lines:
        if ln.label == label:
            events.append((ln.time, 1 if ln.event == "start" else -1))
    events.sort(key=lambda e: (e[0], e[1]))  # ends before starts at equal times
    current = peak = 0
    for _, delta in events:
        current += delta
        peak = max(peak, current)
    return peak


# -- 1. kill -9 ------------------------------------------------------------------------


async def test_kill_9_worker_tasks_are_redelivered_after_lease_expiry(backend, workers) -> None:
    lease_ms, concurrency, n = 1_500, 8, 40
    client = await connected_client(backend)
    rng = random.Random(7)
    ids = [
        (await client.submit("slow", {"sleep": round(rng.uniform(0.3, 1.0), 3)})).id
        for _ in range(n)
    ]

    a = workers.start("A", ["slow"], concurrency=concurrency, lease_ms=lease_ms)
    await until(
        lambda: len(starts(read_log(workers.log), "A")) >= 6, 30, "worker A to start 6 tasks"
    )
    os.kill(a.pid, signal.SIGKILL)
    assert await wait_exit(a, 5) == -signal.SIGKILL
    killed_at = time.time()

    before = read_log(workers.log)
    a_started = {ln.task_id: ln for ln in starts(before, "A")}
    a_ended = {ln.task_id for ln in before if ln.label == "A" and ln.event == "end"}
    in_flight = set(a_started) - a_ended
    assert in_flight, "the kill should have caught tasks mid-handler"
    assert all(ln.attempt == 1 for ln in a_started.values())

    b = workers.start("B", ["slow"], concurrency=concurrency, lease_ms=lease_ms)
    done = await finish_all(client, ids, timeout_s=40)

    # none lost: every task succeeded
    bad = {i: (t.status, t.error) for i, t in done.items() if t.status != "succeeded"}
    assert not bad, bad
    lines = read_log(workers.log)
    b_starts = starts(lines, "B")
    assert not [ln for ln in starts(lines, "A") if ln.time > killed_at]

    # redelivered = claimed by A, then recovered once A's lease expired
    redelivered = {i for i, t in done.items() if t.attempt > 1}
    assert all(done[i].attempt == 2 for i in redelivered), {i: done[i].attempt for i in redelivered}
    assert in_flight <= redelivered, (in_flight, redelivered)
    assert len(redelivered) <= concurrency, redelivered  # A never held more than that
    for task_id in redelivered:
        assert done[task_id].result == {"by": "B"}
        [second] = [ln for ln in b_starts if ln.task_id == task_id]
        assert second.attempt == 2
        first = a_started.get(task_id)
        if first is not None:  # claimed at or before its start line; lease >= claim + lease_ms
            assert second.time >= first.time + lease_ms / 1000 - 0.2, (first, second)
    for task_id, task in done.items():
        if task_id not in redelivered:
            assert task.attempt == 1
            assert len([ln for ln in starts(lines) if ln.task_id == task_id]) == 1
    assert max_overlap(before, "A") <= concurrency

    b.proc.send_signal(signal.SIGTERM)
    assert await wait_exit(b, 10) == 0, b.output()


# -- 2. SIGTERM drains; a second signal does not wait ----------------------------------------


async def test_sigterm_drains_in_flight_calls_and_claims_nothing_more(backend, workers) -> None:
    concurrency, n = 4, 12
    client = await connected_client(backend)
    ids = [(await client.submit("slow", {"sleep": 1.0})).id for _ in range(n)]

    w = workers.start("W", ["slow"], concurrency=concurrency, lease_ms=5_000)
    await until(lambda: len(starts(read_log(workers.log), "W")) >= concurrency, 30, "4 starts")
    signaled_at = time.time()
    w.proc.send_signal(signal.SIGTERM)
    code = await wait_exit(w, 6)
    drained_in = time.time() - signaled_at
    assert code == 0, w.output()
    assert drained_in < 4, drained_in

    lines = read_log(workers.log)
    started = {ln.task_id for ln in starts(lines, "W")}
    assert len(started) == concurrency
    assert not [ln for ln in starts(lines) if ln.time > signaled_at], "claimed after the signal"
    ended = {ln.task_id for ln in lines if ln.event == "end"}
    assert started <= ended

    for task_id in ids:
        task = await client.get(task_id)
        assert task is not None
        if task_id in started:  # finished, not requeued
            assert (task.status, task.attempt, task.result) == ("succeeded", 1, {"by": "W"}), task
        else:  # never claimed
            assert (task.status, task.attempt, task.worker_id) == ("queued", 0, None), task


@pytest.mark.parametrize("second", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
async def test_second_signal_during_drain_exits_at_once(backend, workers, second) -> None:
    lease_ms, concurrency = 1_500, 3
    client = await connected_client(backend)
    payload = {"sleep": 5.0, "sleep_first_attempt_only": True}
    ids = [(await client.submit("slow", payload)).id for _ in range(concurrency)]

    w = workers.start("W", ["slow"], concurrency=concurrency, lease_ms=lease_ms)
    await until(lambda: len(starts(read_log(workers.log), "W")) >= concurrency, 30, "3 starts")
    w.proc.send_signal(signal.SIGTERM)
    await asyncio.sleep(0.5)
    assert w.proc.poll() is None, "the first signal should drain (handlers sleep 5 s)"
    interrupted_at = time.time()
    w.proc.send_signal(second)
    code = await wait_exit(w, 3)
    assert time.time() - interrupted_at < 2.5
    if second == signal.SIGINT:
        assert code != 0, w.output()
        assert "KeyboardInterrupt" in w.output(), w.output()
    else:
        assert code == -signal.SIGTERM, (code, w.output())

    lines = read_log(workers.log)
    assert not [ln for ln in lines if ln.event == "end"], "handlers were interrupted mid-sleep"
    for task_id in ids:  # nothing was settled or requeued by the dying worker
        task = await client.get(task_id)
        assert task is not None and task.status == "running" and task.attempt == 1, task

    workers.start("B", ["slow"], concurrency=concurrency, lease_ms=lease_ms)
    done = await finish_all(client, ids, timeout_s=20)
    for task_id, task in done.items():
        assert (task.status, task.attempt, task.result) == ("succeeded", 2, {"by": "B"}), task
    lines = read_log(workers.log)
    for task_id in ids:
        [redo] = [ln for ln in starts(lines, "B") if ln.task_id == task_id]
        assert redo.attempt == 2


# -- 3. two workers, different handler sets, one queue ------------------------------------------


async def test_workers_with_disjoint_handlers_share_a_queue(backend, workers) -> None:
    client = await connected_client(backend)
    a = workers.start("A", ["a"], concurrency=4)
    b = workers.start("B", ["b"], concurrency=4)
    await ready(client, a, b)

    owner: dict[str, str] = {}
    for i in range(30):
        for name, label in (("a", "A"), ("b", "B")):
            task = await client.submit(name, {"sleep": 0.02, "i": i})
            owner[task.id] = label
    done = await finish_all(client, list(owner))

    for task_id, task in done.items():
        assert (task.status, task.attempt, task.result) == (
            "succeeded",
            1,
            {"by": owner[task_id]},
        ), task
    lines = read_log(workers.log)
    ran = [ln for ln in starts(lines) if ln.task_id in owner]
    assert len(ran) == 60
    assert all(ln.label == owner[ln.task_id] for ln in ran)
    assert {ln.pid for ln in ran if ln.label == "A"} == {a.pid}
    assert {ln.pid for ln in ran if ln.label == "B"} == {b.pid}
    assert await client.list(status="failed") == []
    assert (await client.stats("default"))["default"]["succeeded"] == 60


# -- 4. fast pickup across processes (SQLite change counter) -----------------------------------


async def test_sqlite_pickup_and_call_latency_across_processes(
    sqlite_backend, sqlite_workers
) -> None:
    workers = sqlite_workers
    client = await connected_client(sqlite_backend)
    w = workers.start("W", ["fast"], concurrency=1, poll_interval_ms=500)
    await ready(client, w)

    pickups = []
    for _ in range(10):
        await asyncio.sleep(0.3)  # the worker is idle again, in its 500 ms wait
        submitted_at = time.time()
        task = await client.submit("fast", {})
        line = await until(
            lambda: next((ln for ln in starts(read_log(workers.log)) if ln.task_id == task.id), None),
            5, f"{task.id} to start", interval=0.002,
        )  # fmt: skip
        pickups.append(line.time - submitted_at)

    calls = []
    for _ in range(10):
        await asyncio.sleep(0.3)
        t0 = time.perf_counter()
        result = await client.call("fast", {}, timeout_ms=5_000)
        calls.append(time.perf_counter() - t0)
        assert result == {"by": "W"}

    pickup_ms, call_ms = statistics.median(pickups) * 1000, statistics.median(calls) * 1000
    print(
        f"\nSQLite cross-process pickup median {pickup_ms:.1f} ms; call() median {call_ms:.1f} ms"
    )
    print("  pickups ms:", [round(p * 1000, 1) for p in pickups])
    print("  calls ms:  ", [round(c * 1000, 1) for c in calls])
    assert pickup_ms < 50, pickups
    assert call_ms < 50, calls


# -- 5. interop with the reference SDK --------------------------------------------------------------

REF_CLIENT = """
async def main():
    if ARGS["dialect"] == "sqlite":
        q = cairnq.CairnQ.sqlite(ARGS["target"])
    else:
        q = cairnq.CairnQ.postgres(ARGS["target"])
    try:
        if ARGS["op"] == "submit":
            ids = []
            for i in range(ARGS["n"]):
                ids.append((await q.submit("interop.echo", {"i": i}, queue=ARGS["queue"])).id)
            emit(ids)
        else:
            out = {}
            for task_id in ARGS["ids"]:
                t = await q.wait(task_id, timeout_ms=30000, poll_ms=20, max_poll_ms=100)
                out[task_id] = {"status": t.status, "attempt": t.attempt, "result": t.result,
                                "error": t.error}
            emit(out)
    finally:
        await q.close()

asyncio.run(main())
"""


def ref_client(backend: Any, **args: Any) -> Any:
    return refsdk.run(REF_CLIENT, {"dialect": backend.dialect, "target": backend.target, **args})


@pytest.mark.interop
async def test_reference_client_our_worker(backend, workers) -> None:
    await connected_client(backend)  # migrated before the reference touches it
    ids = await asyncio.to_thread(ref_client, backend, op="submit", n=20, queue="interop")
    assert len(set(ids)) == 20

    w = workers.start("ours", ["interop.echo"], queues=("interop",), concurrency=4)
    theirs = await asyncio.to_thread(ref_client, backend, op="wait", ids=ids)
    for task_id in ids:
        assert theirs[task_id] == {
            "status": "succeeded", "attempt": 1, "result": {"by": "ours"}, "error": None,
        }, (theirs[task_id], w.output())  # fmt: skip
    ran = starts(read_log(workers.log), "ours")
    assert sorted(ln.task_id for ln in ran) == sorted(ids)

    w.proc.send_signal(signal.SIGTERM)
    assert await wait_exit(w, 10) == 0, w.output()


@pytest.mark.interop
async def test_our_client_reference_worker(backend, workers) -> None:
    client = await connected_client(backend)
    ids = [(await client.submit("interop.echo", {"i": i}, queue="interop")).id for i in range(20)]

    ref = workers.start("ref", ["interop.echo"], queues=("interop",), concurrency=4, reference=True)
    done = await finish_all(client, ids, timeout_s=60)
    for task in done.values():
        assert (task.status, task.attempt, task.result) == ("succeeded", 1, {"by": "ref"}), (
            task, ref.output(),
        )  # fmt: skip
    ran = starts(read_log(workers.log), "ref")
    assert sorted(ln.task_id for ln in ran) == sorted(ids)
    assert {ln.pid for ln in ran} == {ref.pid}

    ref.proc.send_signal(signal.SIGTERM)
    assert await wait_exit(ref, 10) == 0, ref.output()


@pytest.mark.interop
async def test_both_sdks_workers_share_a_queue(backend, workers) -> None:
    lease_ms = 5_000
    client = await connected_client(backend)
    ours = workers.start("ours", ["shared.x"], queues=("shared",), concurrency=2, lease_ms=lease_ms)
    ref = workers.start(
        "ref", ["shared.x"], queues=("shared",), concurrency=2, lease_ms=lease_ms, reference=True
    )
    await ready(client, ours, ref, timeout_s=60)

    ids = [
        (await client.submit("shared.x", {"sleep": 0.2, "i": i}, queue="shared")).id
        for i in range(20)
    ]
    done = await finish_all(client, ids, timeout_s=60)

    lines = read_log(workers.log)
    by_task: dict[str, list[Line]] = {}
    for ln in starts(lines):
        by_task.setdefault(ln.task_id, []).append(ln)
    for task_id, task in done.items():
        assert task.status == "succeeded" and task.attempt == 1, task
        # executed exactly once: never by both while a lease was valid
        [only] = by_task[task_id]
        assert task.result == {"by": only.label}
    labels = {by_task[i][0].label for i in ids}
    assert labels == {"ours", "ref"}, labels
    assert await client.list(status="failed", queue="shared") == []
    for w in (ours, ref):
        assert max_overlap(lines, w.label) <= 2

    for w in (ours, ref):
        w.proc.send_signal(signal.SIGTERM)
    for w in (ours, ref):
        assert await wait_exit(w, 10) == 0, w.output()
