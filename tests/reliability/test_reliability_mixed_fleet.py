"""A mixed fleet under load: the reference SDK (``cairnq==0.15.1``, in its own
virtualenv, via ``refsdk.spawn``/``refsdk.run``) and ours, all at once, on one
SQLite file and on one PostgreSQL database.

Running together: a producer process of each SDK, a worker process of each
SDK, and this test process submitting keyed tasks with every conflict
strategy. Checked:

* every load task completes exactly once as its payload prescribes (ok /
  fatal / flaky-once), each attempt executed exactly once (executions log),
  never on both SDKs' workers at once, and both workers took part;
* keyed submits resolve the same way whichever SDK submitted first: for each
  strategy and each state of the existing task (queued, succeeded, failed,
  canceled), SDK A submits first and SDK B second, in both orders; the outcome
  (the existing task, a new one, or AlreadyExists) is identical in both orders
  and is the one OPERATIONS.md §3.1 prescribes, and the key points where the
  outcome says (a replaced live task is canceled).

Sizes: ``CAIRNQ_MIXED_TASKS`` (tasks per producer, default 150).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from processes import Procs, popen_script, read_jsonl, until

import refsdk

pytestmark = pytest.mark.interop

LOAD_TASKS = int(os.environ.get("CAIRNQ_MIXED_TASKS", "150"))
LEASE_MS = 10_000
CONCURRENCY = 4
STRATEGIES = ("reuse", "reuse-succeeded", "reject", "replace")
STATES = ("queued", "succeeded", "failed", "canceled")
SDKS = ("ours", "ref")

# OPERATIONS.md §3.1: what a keyed submit does, by strategy and existing state.
EXPECTED = {
    ("reuse", "queued"): "existing",
    ("reuse", "succeeded"): "new",
    ("reuse", "failed"): "new",
    ("reuse", "canceled"): "new",
    ("reuse-succeeded", "queued"): "existing",
    ("reuse-succeeded", "succeeded"): "existing",
    ("reuse-succeeded", "failed"): "new",
    ("reuse-succeeded", "canceled"): "new",
    ("reject", "queued"): "rejected",
    ("reject", "succeeded"): "rejected",
    ("reject", "failed"): "rejected",
    ("reject", "canceled"): "rejected",
    ("replace", "queued"): "new",
    ("replace", "succeeded"): "new",
    ("replace", "failed"): "new",
    ("replace", "canceled"): "new",
}

# Both SDKs run the very same scripts (the APIs are identical). The reference
# prelude (refsdk) defines ARGS and emit; ours defines them the same way.
_OUR_PRELUDE = """
import asyncio, json, sys
ARGS = json.loads(sys.argv[1])
def emit(value):
    sys.stdout.write("\\n@@RESULT@@" + json.dumps(value, default=repr))
"""

_COMMON = r'''
import os, time
from cairnq import AlreadyExists, CairnQ, TaskError, Worker


def append(path, record):
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def client():
    if ARGS["dialect"] == "sqlite":
        return CairnQ.sqlite(ARGS["target"])
    return CairnQ.postgres(ARGS["target"])
'''

WORKER_SCRIPT = _COMMON + r'''
LABEL = ARGS["label"]


def record(ctx, event):
    append(ARGS["log"], {"task": ctx.task_id, "attempt": ctx.attempt, "event": event,
                         "t": time.time(), "label": LABEL, "pid": os.getpid()})


def on_error(exc, info):
    append(ARGS["errors"], {"who": LABEL, "phase": info.get("phase"), "type": type(exc).__name__,
                            "message": str(exc)})


async def work(ctx, payload):
    record(ctx, "start")
    try:
        await asyncio.sleep(payload.get("sleep", 0))
        kind = payload.get("kind", "ok")
        if kind == "fatal":
            raise TaskError("permanent failure", code="fatal")
        if kind == "flaky" and ctx.attempt == 1:
            raise RuntimeError("first attempt fails")
        return {"by": LABEL, "seq": payload.get("seq")}
    finally:
        record(ctx, "end")


factory = Worker.sqlite if ARGS["dialect"] == "sqlite" else Worker.postgres
worker = factory(ARGS["target"], queues=["mixed"], concurrency=ARGS["concurrency"],
                 lease_ms=ARGS["lease_ms"], poll_interval_ms=50, retry_backoff_ms=20,
                 retry_backoff_max_ms=100, on_error=on_error)
worker.register("work", work)
worker.serve()
'''

PRODUCER_SCRIPT = _COMMON + r'''
import random

LABEL = ARGS["label"]
rng = random.Random(ARGS["seed"])


async def main():
    q = client()
    for seq in range(ARGS["n"]):
        kind = rng.choices(["ok", "fatal", "flaky"], weights=[6, 1, 2])[0]
        payload = {"kind": kind, "seq": f"{LABEL}-{seq}", "sleep": round(rng.uniform(0, 0.02), 3)}
        key = f"load-{LABEL}-{seq}" if seq % 3 == 0 else None
        try:
            t = await q.submit("work", payload, key=key, queue="mixed", max_attempts=3)
        except Exception as exc:
            append(ARGS["errors"], {"who": LABEL, "phase": "submit", "type": type(exc).__name__,
                                    "message": str(exc)})
            continue
        append(ARGS["ids"], {"id": t.id, "payload": payload, "key": key, "sdk": LABEL})
        if seq % 10 == 0:
            await asyncio.sleep(0.01)
    await q.close()
    emit("done")

asyncio.run(main())
'''

# Conflict matrix, either side. "first": create the existing task under each
# key and bring it to its state (queued: a name nobody handles, in a queue no
# worker polls; canceled: the same, then cancel_by_key). "second": the keyed
# submit with the strategy under test, outcome reported.
CONFLICT_SCRIPT = _COMMON + r'''
async def main():
    q = client()
    out = {}
    try:
        for spec in ARGS["specs"]:
            key = spec["key"]
            if ARGS["phase"] == "first":
                state = spec["state"]
                if state in ("queued", "canceled"):
                    t = await q.submit("hold", {"state": state}, key=key, queue="mixed-hold")
                    if state == "canceled":
                        await q.cancel_by_key(key)
                else:
                    kind = "ok" if state == "succeeded" else "fatal"
                    t = await q.submit("work", {"kind": kind, "seq": key}, key=key, queue="mixed")
                out[key] = t.id
            else:
                try:
                    t = await q.submit("hold", {"second": True}, key=key, queue="mixed-hold",
                                       conflict=spec["strategy"])
                    out[key] = t.id
                except AlreadyExists:
                    out[key] = "rejected"
    finally:
        await q.close()
    emit(out)

asyncio.run(main())
'''


class Fleet(Procs):
    """Processes of either SDK; survivors are killed by pid at the end."""

    def __init__(self, tmp_path: Path, backend: Any) -> None:
        super().__init__(tmp_path)
        self.backend = backend

    def args(self, **extra: Any) -> dict[str, Any]:
        return {"dialect": self.backend.dialect, "target": self.backend.target, **extra}

    def spawn(self, name: str, script: str, sdk: str, **extra: Any) -> subprocess.Popen[Any]:
        out = self.tmp_path / f"{name}.out"
        with open(out, "w") as sink:
            if sdk == "ref":
                proc = refsdk.spawn(script, self.args(**extra), stdout=sink, stderr=subprocess.STDOUT)
            else:
                proc = popen_script(_OUR_PRELUDE + script, self.args(**extra), self.tmp_path, sink)
        self.started.append((name, proc, out))
        return proc

    def run(self, script: str, sdk: str, **extra: Any) -> Any:
        """Run a script to completion and return what it emitted."""
        if sdk == "ref":
            return refsdk.run(script, self.args(**extra))
        done = subprocess.run(
            [sys.executable, "-c", _OUR_PRELUDE + script, json.dumps(self.args(**extra))],
            cwd=str(self.tmp_path), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.rpartition("@@RESULT@@")[2])



@pytest.fixture
def fleet(tmp_path: Path, backend: Any) -> Any:
    f = Fleet(tmp_path, backend)
    try:
        yield f
    finally:
        f.cleanup()


def expected_load(payload: dict[str, Any]) -> tuple[str, int]:
    return {"ok": ("succeeded", 1), "fatal": ("failed", 1), "flaky": ("succeeded", 2)}[payload["kind"]]


async def conflict_matrix(fleet: Fleet, client: Any) -> dict[tuple[str, str, str], dict[str, Any]]:
    """For each (first SDK, strategy, state): the outcome of the second SDK's submit."""
    specs = {
        first: [
            {"key": f"cf-{first}-{strategy}-{state}", "strategy": strategy, "state": state}
            for strategy in STRATEGIES
            for state in STATES
        ]
        for first in SDKS
    }
    # 1. each SDK creates its existing tasks
    firsts = await asyncio.gather(
        *(asyncio.to_thread(fleet.run, CONFLICT_SCRIPT, sdk, phase="first", specs=specs[sdk]) for sdk in SDKS)
    )
    first_ids = {**firsts[0], **firsts[1]}
    # 2. wait until each existing task is in its state
    for sdk in SDKS:
        for spec in specs[sdk]:
            task = await client.get_by_key(spec["key"])
            if spec["state"] in ("succeeded", "failed"):
                task = await client.wait(first_ids[spec["key"]], timeout_ms=60_000, poll_ms=20)
            assert task.id == first_ids[spec["key"]]
            assert task.status == spec["state"], (spec, task.status)
    # 3. the other SDK submits under the same keys
    seconds = await asyncio.gather(
        asyncio.to_thread(fleet.run, CONFLICT_SCRIPT, "ref", phase="second", specs=specs["ours"]),
        asyncio.to_thread(fleet.run, CONFLICT_SCRIPT, "ours", phase="second", specs=specs["ref"]),
    )
    second_ids = {**seconds[0], **seconds[1]}
    outcomes = {}
    for first in SDKS:
        for spec in specs[first]:
            key, old, new = spec["key"], first_ids[spec["key"]], second_ids[spec["key"]]
            outcome = "rejected" if new == "rejected" else ("existing" if new == old else "new")
            now = await client.get_by_key(key)
            previous = await client.get(old)
            outcomes[(first, spec["strategy"], spec["state"])] = {
                "outcome": outcome,
                "key_points_at": "first" if now.id == old else ("second" if now.id == new else now.id),
                "previous_status": previous.status,
            }
    return outcomes


async def test_mixed_fleet_under_load(backend: Any, fleet: Fleet, tmp_path: Path) -> None:
    log, errors = tmp_path / "executions.jsonl", tmp_path / "errors.jsonl"
    client = backend.client()
    await client.connect()  # the schema exists before anyone else opens the database
    for sdk in SDKS:
        fleet.spawn(f"worker-{sdk}", WORKER_SCRIPT, sdk, label=sdk, log=str(log), errors=str(errors),
                    concurrency=CONCURRENCY, lease_ms=LEASE_MS)  # fmt: skip
    producers = [
        fleet.spawn(f"producer-{sdk}", PRODUCER_SCRIPT, sdk, label=sdk, n=LOAD_TASKS,
                    ids=str(tmp_path / f"ids-{sdk}.jsonl"), errors=str(errors), seed=i)  # fmt: skip
        for i, sdk in enumerate(SDKS)
    ]
    t0 = time.monotonic()
    outcomes = await conflict_matrix(fleet, client)  # while the load runs
    for p in producers:
        await until(lambda: p.poll() is not None, 120, "a producer to finish")
        assert p.returncode == 0, fleet.outputs()

    submitted = {}
    for sdk in SDKS:
        for rec in read_jsonl(tmp_path / f"ids-{sdk}.jsonl"):
            submitted[rec["id"]] = rec
    assert len(submitted) == 2 * LOAD_TASKS, fleet.outputs()
    done = {}
    for task_id in submitted:
        done[task_id] = await client.wait(task_id, timeout_ms=90_000, poll_ms=20, max_poll_ms=200)
    elapsed = time.monotonic() - t0

    for label, proc, _ in fleet.started:
        if label.startswith("worker-"):
            proc.send_signal(signal.SIGTERM)
    for label, proc, _ in fleet.started:
        if label.startswith("worker-"):
            await until(lambda: proc.poll() is not None, 20, f"{label} to exit")
            assert proc.returncode == 0, fleet.outputs()

    # -- the load: exactly once, as prescribed ------------------------------------------------------
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for ev in read_jsonl(log):
        runs[ev["task"]].append(ev)
    wrong, duplicates, overlaps = {}, 0, 0
    by_worker: Counter[str] = Counter()
    for task_id, rec in submitted.items():
        task = done[task_id]
        want = expected_load(rec["payload"])
        if (task.status, task.attempt) != want:
            wrong[task_id] = (rec, task.status, task.attempt, task.error)
        starts = sorted((e for e in runs[task_id] if e["event"] == "start"), key=lambda e: e["t"])
        ends = {(e["attempt"], e["label"]): e["t"] for e in runs[task_id] if e["event"] == "end"}
        attempts = [e["attempt"] for e in starts]
        duplicates += len(attempts) - len(set(attempts))
        assert attempts == list(range(1, task.attempt + 1)), (task_id, runs[task_id])
        for a, b in zip(starts, starts[1:]):  # the next attempt starts after the previous ended
            if b["t"] < ends.get((a["attempt"], a["label"]), float("inf")):
                overlaps += 1
        by_worker.update(e["label"] for e in starts)
        if task.status == "succeeded":
            assert task.result == {"by": starts[-1]["label"], "seq": rec["payload"]["seq"]}
        else:
            assert task.error["code"] == "fatal"
    assert not wrong, dict(list(wrong.items())[:5])
    assert duplicates == 0 and overlaps == 0
    assert set(by_worker) == {"ours", "ref"}, by_worker
    surfaced = read_jsonl(errors)
    assert not surfaced, surfaced[:5]

    # -- keyed submits: the same whichever SDK came first, as specified ------------------------------------
    mismatches = {}
    for strategy in STRATEGIES:
        for state in STATES:
            a, b = outcomes[("ours", strategy, state)], outcomes[("ref", strategy, state)]
            want = EXPECTED[(strategy, state)]
            if a != b or a["outcome"] != want:
                mismatches[(strategy, state)] = {"ours first": a, "ref first": b, "spec": want}
            expect_points = "second" if want == "new" else "first"
            expect_previous = "canceled" if (strategy, state) == ("replace", "queued") else state
            for first in SDKS:
                got = outcomes[(first, strategy, state)]
                if (got["key_points_at"], got["previous_status"]) != (expect_points, expect_previous):
                    mismatches[(strategy, state, first)] = got
    assert not mismatches, mismatches

    kinds = Counter(r["payload"]["kind"] for r in submitted.values())
    print(
        f"\n[reliability] {backend.dialect} mixed fleet (reference 0.15.1 + ours: 2 producers x "
        f"{LOAD_TASKS}, 2 workers x {CONCURRENCY}) in {elapsed:.1f}s: {len(submitted)} tasks "
        f"{dict(kinds)}, calls by worker {dict(by_worker)}; conflict matrix 4 strategies x 4 states "
        f"x 2 orders agree -- lost: 0, duplicates: {duplicates}, errors surfaced: {len(surfaced)}"
    )
    await client.close()
