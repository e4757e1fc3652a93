"""Crashes, on both dialects: workers and producers killed with SIGKILL.

1. Workers killed repeatedly during a drain (``CAIRNQ_CRASH_KILLS`` kills,
   ~1 s apart, a fresh worker started after each): nothing is lost (every task
   ends succeeded), and the duplicate executions are exactly the calls the
   killed workers had not settled -- so at most concurrency x kills -- each
   redelivered only once the dead worker's lease could have run out.

2. Producers killed mid-submit (a producer process submitting unkeyed and
   keyed tasks in a loop, SIGKILLed at random points, ``CAIRNQ_CRASH_ROUNDS``
   times) while a worker drains: afterwards every row is valid (SCHEMA.md §7:
   status, lease iff running, completed_at iff terminal, strict JSON), no key
   row dangles (each points at an existing task that was submitted under that
   key), no keyed task lost its key half-way, every submit that returned is
   there, and no transaction of a dead producer is left open. Checked with raw
   SQL on both dialects.

Sizes: ``CAIRNQ_SOAK_TASKS`` (tasks in the drain, default 160),
``CAIRNQ_CRASH_KILLS`` (3), ``CAIRNQ_CRASH_ROUNDS`` (6 producer kills).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from processes import Procs, procs, read_jsonl, until  # noqa: F401 (procs: a fixture)


N_TASKS = int(os.environ.get("CAIRNQ_SOAK_TASKS", "160"))
KILLS = int(os.environ.get("CAIRNQ_CRASH_KILLS", "3"))
ROUNDS = int(os.environ.get("CAIRNQ_CRASH_ROUNDS", "6"))
CONCURRENCY = 4
LEASE_MS = 1_500
HEARTBEAT_MS = max(50, LEASE_MS // 3)  # the worker's default beat interval

WORKER_SCRIPT = r'''
from cairnq import Worker

LABEL = ARGS["label"]


def record(ctx, event):
    append(ARGS["log"], {"task": ctx.task_id, "attempt": ctx.attempt, "event": event,
                         "t": time.time(), "label": LABEL, "pid": os.getpid()})


def on_error(exc, info):
    append(ARGS["errors"], {"who": LABEL, "phase": info.get("phase"), "task": info.get("task_id"),
                            "type": type(exc).__name__, "message": str(exc)})


async def work(ctx, payload):
    record(ctx, "start")
    await asyncio.sleep(payload.get("sleep", 0))
    record(ctx, "end")
    return {"by": LABEL}


factory = Worker.sqlite if ARGS["dialect"] == "sqlite" else Worker.postgres
worker = factory(ARGS["target"], queues=ARGS["queues"], concurrency=ARGS["concurrency"],
                 lease_ms=ARGS["lease_ms"], poll_interval_ms=50, retry_backoff_ms=0,
                 on_error=on_error)
worker.register("work", work)
worker.serve()
'''

PRODUCER_SCRIPT = r'''
import random

from cairnq import CairnQ

LABEL = ARGS["label"]
rng = random.Random(ARGS["seed"])


async def main():
    q = CairnQ.sqlite(ARGS["target"]) if ARGS["dialect"] == "sqlite" else CairnQ.postgres(ARGS["target"])
    await q.connect()
    append(ARGS["log"], {"event": "ready", "label": LABEL})
    i = 0
    while True:
        i += 1
        style = ("plain", "unique", "shared-replace", "shared-reuse")[i % 4]
        key, conflict = None, "reuse"
        if style == "unique":
            key, conflict = f"u-{LABEL}-{i}", "reject"
        elif style.startswith("shared"):
            key, conflict = f"s-{i % 5}", style.split("-")[1]
        payload = {"style": style, "key": key, "label": LABEL, "i": i, "pad": "x" * rng.randint(0, 2000)}
        append(ARGS["log"], {"event": "begin", "label": LABEL, "i": i})
        burst = rng.random() < 0.3
        if burst:  # several at once: group commit, concurrent keyed transactions
            reqs = [dict(payload, i=f"{i}.{j}", style="plain", key=None) for j in range(rng.randint(2, 6))]
            tasks = await asyncio.gather(*(q.submit("work", p, queue="crash") for p in reqs))
            for p, t in zip(reqs, tasks):
                append(ARGS["log"], {"event": "done", "label": LABEL, "i": p["i"], "id": t.id, "key": None})
        else:
            t = await q.submit("work", payload, key=key, conflict=conflict, queue="crash")
            append(ARGS["log"], {"event": "done", "label": LABEL, "i": i, "id": t.id, "key": key})
        if i % 7 == 0:
            await asyncio.sleep(0)

asyncio.run(main())
'''


def kill9(proc: subprocess.Popen[Any]) -> float:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    return time.time()


class Raw:
    """Plain SQL on the test database, behind the SDK's back."""

    def __init__(self, backend: Any) -> None:
        self.dialect = backend.dialect
        if self.dialect == "sqlite":
            import sqlite3

            self.conn: Any = sqlite3.connect(backend.target, isolation_level=None)
            self.conn.execute("pragma busy_timeout = 10000")
        else:
            import psycopg

            self.conn = psycopg.connect(backend.target, autocommit=True)
        self.database = backend.database

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self.dialect == "postgres":
            sql = sql.replace("?", "%s")
        return list(self.conn.execute(sql, params).fetchall())

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def raw(backend: Any) -> Any:
    r = Raw(backend)
    try:
        yield r
    finally:
        r.close()


# -- 1. kill -9 workers during a drain ------------------------------------------------------------


async def test_kill_9_workers_repeatedly_during_a_drain(backend: Any, procs: Procs, tmp_path: Path, raw: Raw) -> None:
    log, errors = tmp_path / "executions.jsonl", tmp_path / "errors.jsonl"
    client = backend.client()
    rng = random.Random(11)
    ids = []
    for i in range(N_TASKS):
        task = await client.submit("work", {"i": i, "sleep": round(rng.uniform(0.05, 0.3), 3)},
                                   queue="drain", max_attempts=KILLS + 5)  # fmt: skip
        ids.append(task.id)

    serial = 0

    def start_worker() -> tuple[str, subprocess.Popen[Any]]:
        nonlocal serial
        serial += 1
        label = f"W{serial}"
        args = {"dialect": backend.dialect, "target": backend.target, "queues": ["drain"],
                "label": label, "log": str(log), "errors": str(errors),
                "concurrency": CONCURRENCY, "lease_ms": LEASE_MS}  # fmt: skip
        return label, procs.start(label, WORKER_SCRIPT, args)

    live = [start_worker(), start_worker()]
    kills: list[dict[str, Any]] = []
    await until(lambda: len(read_jsonl(log)) >= 2 * CONCURRENCY, 30, "both workers to start calls")
    for k in range(KILLS):
        await asyncio.sleep(1.0 if k else 0.3)
        label, proc = live.pop(0)
        killed_at = kill9(proc)
        lines = [ln for ln in read_jsonl(log) if ln["label"] == label]
        started = {(ln["task"], ln["attempt"]) for ln in lines if ln["event"] == "start"}
        ended = {(ln["task"], ln["attempt"]) for ln in lines if ln["event"] == "end"}
        kills.append({"label": label, "at": killed_at, "mid_handler": started - ended, "started": started})
        live.append(start_worker())

    done = {}
    for task_id in ids:
        done[task_id] = await client.wait(task_id, timeout_ms=60_000, poll_ms=20, max_poll_ms=200)
    for _, proc in live:
        proc.send_signal(signal.SIGTERM)
    for _, proc in live:
        await until(lambda: proc.poll() is not None, 20, "a worker to drain and exit")
        assert proc.returncode == 0, procs.outputs()

    # -- none lost ----------------------------------------------------------------------------
    lost = {i: (t.status, t.error) for i, t in done.items() if t.status != "succeeded"}
    assert not lost, lost
    (total,) = raw.rows("select count(*) from cairnq_tasks where queue = 'drain'")[0]
    assert total == N_TASKS

    # -- duplicates: exactly the killed workers' unsettled calls, redelivered after their lease ---------
    # Whatever a killed worker held unsettled is run again: calls cut short
    # mid-handler (at most ``concurrency`` of them: the worker never runs more),
    # calls whose handler had returned but whose settlement had not committed
    # yet, and claims whose handler had not started.
    calls: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for ln in read_jsonl(log):
        if ln["event"] == "start":
            calls[ln["task"]].append(ln)
    ended = {(ln["task"], ln["attempt"]) for ln in read_jsonl(log) if ln["event"] == "end"}
    killed_labels = {k["label"]: k for k in kills}
    duplicates = redeliveries = settled_too_late = unstarted = 0
    problems = []
    for task_id, task in done.items():
        runs = sorted(calls[task_id], key=lambda ln: ln["t"])
        assert runs, f"{task_id} succeeded without a handler call"
        attempts = [r["attempt"] for r in runs]
        # each attempt ran at most once; one may be missing (claimed by a worker
        # killed before its handler started), the last is the one that succeeded
        if not (attempts == sorted(set(attempts)) and attempts[-1] == task.attempt):
            problems.append(("attempts", task_id, runs))
        duplicates += len(runs) - 1
        redeliveries += task.attempt - 1
        unstarted += task.attempt - len(runs)
        for first, second in zip(runs, runs[1:]):
            # only a killed worker's call is ever run again ...
            kill = killed_labels.get(first["label"])
            if kill is None:
                problems.append(("re-run although its worker was never killed", task_id, runs))
                continue
            if (task_id, first["attempt"]) in ended:
                settled_too_late += 1
            # ... and only once its lease (renewed every HEARTBEAT_MS) could have run out
            if second["t"] < kill["at"] + (LEASE_MS - HEARTBEAT_MS) / 1000 - 0.1:
                problems.append(("re-run while the lease was valid", task_id, runs, kill["at"]))
        if task.result != {"by": runs[-1]["label"]}:
            problems.append(("result", task_id, task.result, runs))
    for kill in kills:  # every call cut short mid-handler was redelivered
        for task_id, attempt in kill["mid_handler"]:
            if done[task_id].attempt <= attempt:
                problems.append(("not redelivered", task_id, kill["label"]))
    mid_handler = [len(k["mid_handler"]) for k in kills]

    surfaced = read_jsonl(errors)
    print(
        f"\n[reliability] {backend.dialect} kill -9 workers: {N_TASKS} tasks, {KILLS} kills "
        f"(concurrency {CONCURRENCY}, lease {LEASE_MS} ms), mid-handler at the kills: {mid_handler} -- "
        f"lost: {len(lost)}, duplicates: {duplicates} (bound concurrency x kills = {CONCURRENCY * KILLS}; "
        f"of them settled too late: {settled_too_late}; claims never started: {unstarted}), "
        f"errors surfaced: {len(surfaced)} {dict(Counter((e['phase'], e['type']) for e in surfaced))}"
    )
    assert not problems, problems[:5]
    assert sum(mid_handler) >= 1, "no kill caught a handler mid-call; the test proved nothing"
    assert all(n <= CONCURRENCY for n in mid_handler), mid_handler
    assert duplicates == sum(mid_handler) + settled_too_late
    assert duplicates - settled_too_late <= CONCURRENCY * KILLS
    await client.close()


# -- 2. producers killed mid-submit ---------------------------------------------------------------------

INVARIANT_QUERIES = {
    # every row valid (SCHEMA.md §7)
    "bad status": "select id from cairnq_tasks where status not in "
    "('queued', 'running', 'succeeded', 'failed', 'canceled')",
    "lease without running": "select id from cairnq_tasks where (lease_until_ms is not null) "
    "<> (status = 'running')",
    "completed_at without terminal": "select id from cairnq_tasks where (completed_at_ms is not null) "
    "<> (status in ('succeeded', 'failed', 'canceled'))",
    "missing fields": "select id from cairnq_tasks where name is null or queue is null or payload is null "
    "or metadata is null or run_at_ms is null or created_at_ms is null or updated_at_ms is null "
    "or attempt is null or max_attempts is null or priority is null",
    "root_id": "select id from cairnq_tasks where root_id is null or root_id <> id",
    "attempts": "select id from cairnq_tasks where attempt < 0 or attempt > max_attempts",
    # every key row points at an existing task ...
    "dangling key": "select k.key from cairnq_task_keys k left join cairnq_tasks t on t.id = k.task_id "
    "where t.id is null",
}
SQLITE_QUERIES = {
    "invalid json": "select id from cairnq_tasks where not json_valid(payload) or not json_valid(metadata) "
    "or (result is not null and not json_valid(result)) or (error is not null and not json_valid(error))",
    # ... and at a task submitted under that very key
    "key points at a foreign task": "select k.key from cairnq_task_keys k join cairnq_tasks t on t.id = k.task_id "
    "where json_extract(t.payload, '$.key') is not k.key",
    # a task submitted under a unique key lost it: a keyed submit written half-way
    "unique-key task without its key": "select t.id from cairnq_tasks t left join cairnq_task_keys k "
    "on k.key = json_extract(t.payload, '$.key') where json_extract(t.payload, '$.style') = 'unique' "
    "and (k.task_id is null or k.task_id <> t.id)",
}
POSTGRES_QUERIES = {
    "key points at a foreign task": "select k.key from cairnq_task_keys k join cairnq_tasks t on t.id = k.task_id "
    "where t.payload ->> 'key' is distinct from k.key",
    "unique-key task without its key": "select t.id from cairnq_tasks t left join cairnq_task_keys k "
    "on k.key = t.payload ->> 'key' where t.payload ->> 'style' = 'unique' "
    "and (k.task_id is null or k.task_id <> t.id)",
}


def check_invariants(raw: Raw) -> dict[str, list[Any]]:
    queries = dict(INVARIANT_QUERIES)
    queries.update(SQLITE_QUERIES if raw.dialect == "sqlite" else POSTGRES_QUERIES)
    return {what: found for what, sql in queries.items() if (found := raw.rows(sql))}


async def _until_ready(proc: subprocess.Popen[Any], label: str, log: Path, procs: Procs, raw: Raw) -> None:
    """Until the producer ``label`` logs that it has connected. If it dies
    first or takes too long, the failure carries every process's output and,
    on PostgreSQL, what each session of the database is doing (a connect
    stuck behind a lock shows there)."""

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"producer {label} exited ({proc.returncode}) before it connected")
        return any(e["event"] == "ready" and e["label"] == label for e in read_jsonl(log))

    try:
        await until(ready, 30, f"producer {label} to connect")
    except AssertionError as exc:
        sessions = (
            raw.rows(
                "select pid, application_name, state, wait_event_type, wait_event, left(query, 120)"
                " from pg_stat_activity where datname = ?",
                (raw.database,),
            )
            if raw.dialect == "postgres"
            else []
        )
        listed = "\n".join(map(repr, sessions))
        raise AssertionError(f"{exc}\n{procs.outputs()}\nsessions:\n{listed}") from None


async def test_producers_killed_mid_submit_leave_nothing_half_written(
    backend: Any, procs: Procs, tmp_path: Path, raw: Raw
) -> None:
    log, errors = tmp_path / "producers.jsonl", tmp_path / "errors.jsonl"
    client = backend.client()
    await client.connect()  # schema first
    worker = procs.start(
        "drainer",
        WORKER_SCRIPT,
        {"dialect": backend.dialect, "target": backend.target, "queues": ["crash"], "label": "D",
         "log": str(tmp_path / "executions.jsonl"), "errors": str(errors), "concurrency": 4,
         "lease_ms": 5_000},
    )  # fmt: skip
    rng = random.Random(23)
    begun = 0
    for r in range(ROUNDS):
        label = f"P{r}"
        proc = procs.start(label, PRODUCER_SCRIPT,
                           {"dialect": backend.dialect, "target": backend.target, "label": label,
                            "log": str(log), "seed": r})  # fmt: skip
        await _until_ready(proc, label, log, procs, raw)
        await asyncio.sleep(rng.uniform(0.2, 0.8))
        assert proc.poll() is None, procs.outputs()
        kill9(proc)
        begun += sum(1 for e in read_jsonl(log) if e["event"] == "begin" and e["label"] == label)

    events = read_jsonl(log)
    returned = [e for e in events if e["event"] == "done"]
    assert len(returned) >= ROUNDS, "the producers submitted (almost) nothing before being killed"

    # no transaction of a dead producer stays open (its connection is gone, so is its lock)
    if backend.dialect == "postgres":
        await until(
            lambda: not raw.rows(
                "select pid from pg_stat_activity where datname = ? and state in ('idle in transaction', 'idle in transaction (aborted)')",
                (raw.database,),
            ),
            10, "dead producers' transactions to end",
        )  # fmt: skip
    else:
        raw.rows("begin immediate")  # would fail (busy) while a dead writer's lock were held
        raw.rows("rollback")

    broken = check_invariants(raw)
    assert not broken, broken
    if backend.dialect == "sqlite":
        assert raw.rows("pragma integrity_check") == [("ok",)]
        assert raw.rows("pragma foreign_key_check") == []

    # every submit that returned is there, with its key where it asked for a unique one
    present = {r[0] for r in raw.rows("select id from cairnq_tasks")}
    missing = [e for e in returned if e["id"] not in present]
    assert not missing, missing[:5]
    keys = dict(raw.rows("select key, task_id from cairnq_task_keys"))
    for e in returned:
        if e["key"] and e["key"].startswith("u-"):
            assert keys.get(e["key"]) == e["id"], e
    # and what exists beyond them was cut short between the write and its log line
    returned_ids = {e["id"] for e in returned}
    extra = len(present) - len(returned_ids)
    assert 0 <= extra <= ROUNDS * 6, extra  # at most one call (or one burst) per kill

    # the store is still fully usable: a new task with a reused key, and the drain finishes
    fresh = await client.submit("work", {"style": "after", "key": "s-0"}, key="s-0", conflict="replace",
                                queue="crash")  # fmt: skip
    assert (await client.get_by_key("s-0")).id == fresh.id
    await until(
        lambda: not raw.rows("select id from cairnq_tasks where queue = 'crash' and status in ('queued', 'running')"),
        60, "the drainer to finish every task",
    )  # fmt: skip
    broken = check_invariants(raw)
    assert not broken, broken
    statuses = dict(raw.rows("select status, count(*) from cairnq_tasks group by status"))
    assert set(statuses) <= {"succeeded", "canceled"}, statuses  # replace cancels; nothing failed

    worker.send_signal(signal.SIGTERM)
    await until(lambda: worker.poll() is not None, 20, "the drainer to exit")
    assert worker.returncode == 0, procs.outputs()
    surfaced = read_jsonl(errors)
    print(
        f"\n[reliability] {backend.dialect} kill -9 producers: {ROUNDS} kills, {begun} submit calls begun, "
        f"{len(returned_ids)} tasks returned, {extra} written but unlogged, final {statuses} -- lost: "
        f"{len(missing)}, duplicates: 0, errors surfaced: {len(surfaced)}, half-written rows: 0, "
        f"dangling keys: 0"
    )
    await client.close()
