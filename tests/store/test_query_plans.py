"""The query plans the statements rely on, pinned with EXPLAIN.

A claim or a probe that falls back to walking the backlog still returns the
right rows, so only its plan shows the regression. These tests build a skewed
table (a deep backlog of one name in one queue, a few running tasks, finished
ones) with fresh planner statistics, and assert which index each hot
statement reads. On PostgreSQL both a custom and a generic plan are checked:
prepared statements switch to the generic one after a few executions.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import time
from typing import Any

import pytest

import bulk_tasks
from cairnq import CairnQ
from cairnq._sql import load_statements
from cairnq.store.postgres.params import text_literal
from cairnq.store.sqlite.opening import SEEDED_ROWS, STATISTICS_MIN_ROWS

BACKLOG = 3_000
PG_BACKLOG = 20_000  # Postgres plans depend on table size; make it look like production

# statement -> index it must search (SQLite EXPLAIN QUERY PLAN detail text).
SQLITE_EXPECT: dict[str, list[str]] = {
    "claim_one_queue_one_name": ["cairnq_tasks_claim_name_idx (queue=? AND status=? AND name=?)"],
    "claim_one_queue_any_name": ["cairnq_tasks_claim_idx (queue=? AND status=?)"],
    "claim_one_queue": ["cairnq_tasks_claim_name_idx (queue=? AND status=? AND name=?)"],
    "claim_one_name": ["cairnq_tasks_claim_name_idx (queue=? AND status=? AND name=?)"],
    "claim": ["cairnq_tasks_claim_name_idx (queue=? AND status=? AND name=?)"],
    "claim_any_name": ["(queue=? AND status=?)"],
    "claimable_probe": ["cairnq_tasks_claim_name_idx (queue=? AND status=? AND name=?)", "cairnq_tasks_lease_idx"],
    "claimable_probe_any_name": ["(queue=? AND status=?)", "cairnq_tasks_lease_idx"],
    "claimable_probe_one_queue_one_name": ["cairnq_tasks_claim_name_idx (queue=? AND status=? AND name=?)", "cairnq_tasks_lease_idx"],
    "recover_leases": ["cairnq_tasks_lease_idx"],
    "heartbeat_batch": ["sqlite_autoindex_cairnq_tasks_1 (id=?)"],
    "complete_many": ["sqlite_autoindex_cairnq_tasks_1 (id=?)"],
    "complete_each": ["sqlite_autoindex_cairnq_tasks_1 (id=?)"],
    "heartbeat": ["sqlite_autoindex_cairnq_tasks_1 (id=?)"],
    "complete": ["sqlite_autoindex_cairnq_tasks_1 (id=?)"],
    "fail": ["sqlite_autoindex_cairnq_tasks_1 (id=?)"],
    "get": ["sqlite_autoindex_cairnq_tasks_1 (id=?)"],
    "get_status": ["sqlite_autoindex_cairnq_tasks_1 (id=?)"],
    "queue_depth": ["(queue=? AND status=?)"],
}  # fmt: skip

# Postgres: statements the store plans per call, run for names and queues with
# nothing due against a deep backlog of another name: each must touch a
# handful of pages, not walk the backlog (which is hundreds of pages).
PG_IDLE = [
    "claim_one_queue_one_name", "claim_one_queue", "claim_one_name", "claim",
    "claim_any_name", "claimable_probe", "claimable_probe_any_name",
    "claimable_probe_one_queue_one_name", "recover_leases",
]  # fmt: skip
PG_PAGE_BUDGET = 40


def _params(now: int) -> dict[str, Any]:
    return {
        "queues": ["default", "other"], "queue": "default", "names": ["busy", "idle"], "name": "idle",
        "worker_id": "w", "lease_ms": 30_000, "lease_until_ms": now + 30_000, "now_ms": now,
        "limit": 64, "ids": ["task_a", "task_b"], "id": "task_a", "result": None, "message": None,
        "progress": None, "error": "{}", "retryable": True, "delay_ms": 0, "max_depth": 100,
        "lease_expired_error": "{}", "results": [None, '{"r":1}'],
    }  # fmt: skip


def _pg_idle_cases() -> list[tuple[str, str, str, dict[str, Any]]]:
    """(plan_cache_mode, statement, label, parameter overrides)."""
    cases = []
    for plan_mode in ("force_generic_plan", "force_custom_plan"):
        for name in PG_IDLE:
            cases.append((plan_mode, name, "empty queue", {}))
            if "any_name" in name or name == "recover_leases":  # these take any name
                continue
            cases.append((plan_mode, name, "idle name", {"queues": ["default"], "queue": "default"}))
            # Quotes, backslashes and parameter-like text are written in as
            # literals too (escaped): planned for their values like any name.
            odd = {"queues": ["default"], "queue": "default", "names": ["it's", "c:\\idle"], "name": "c:\\ :limit"}
            cases.append((plan_mode, name, "odd idle name", odd))
    return cases


def _pg_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, list):
        return "array[" + ", ".join(_pg_literal(v) for v in value) + "]::text[]"
    return text_literal(str(value))


async def _fill(q: CairnQ) -> None:
    for start in range(0, BACKLOG, 500):
        await asyncio.gather(*(q.submit("busy", {"i": i}) for i in range(start, start + 500)))
    store = q.store
    running = await store.claim(queues=["default"], worker_id="w", limit=20, names=["busy"])
    for task in running[:10]:
        await store.complete(task_id=task.id, worker_id="w", result=None)


# A table scan in a SQLite plan: "SCAN <table or alias>" (a json_each virtual
# table, a subquery or a constant row is no table).
_SQLITE_TABLE_SCAN = re.compile(r"\bSCAN (?!CONSTANT ROW)(\w+)\b(?! VIRTUAL TABLE)")


@pytest.mark.parametrize("statistics", ["seeded", "measured", "stale-tiny"])
async def test_sqlite_plans(sqlite_backend, statistics: str) -> None:
    """seeded: the table is small, so the store records statistics of a large
    one; measured: the table outgrew them and was ANALYZEd; stale-tiny: another
    process ANALYZEd the table while it held one row (statistics that say "one
    row per anything", which made multi-name claims walk the table) and the
    table grew since: the store's next open seeds again."""
    q = sqlite_backend.client()
    if statistics == "stale-tiny":
        await q.submit("busy")
        with sqlite3.connect(sqlite_backend.target) as conn:
            conn.execute("analyze cairnq_tasks")
    await _fill(q)
    await q.close()
    if statistics == "measured":
        # Past the store, so that its next open finds the table outgrown.
        bulk_tasks.fill_sqlite(sqlite_backend.target, STATISTICS_MIN_ROWS, int(time.time() * 1000), analyze=False)
    await q.connect()  # reopening refreshes the planner statistics
    await q.close()
    statements = load_statements("sqlite")
    conn = sqlite3.connect(sqlite_backend.target)
    recorded = conn.execute(statements["statistics_rows"].text).fetchone()[0]
    assert (recorded == SEEDED_ROWS) == (statistics != "measured"), recorded
    params = _params(int(time.time() * 1000))
    for key in ("queues", "names", "ids", "results"):
        params[key] = json.dumps(params[key])
    problems = []
    for name, wanted in SQLITE_EXPECT.items():
        plan = [row[3] for row in conn.execute("explain query plan " + statements[name].text, params)]
        text = " | ".join(plan)
        for needle in wanted:
            if needle not in text:
                problems.append(f"{name}: expected {needle!r} in plan: {text}")
        if _SQLITE_TABLE_SCAN.search(text) or "ANY(queue)" in text:
            problems.append(f"{name}: walks the table: {text}")
        if name.startswith(("claim_one_queue_one_name", "claim_one_queue_any_name")) and "TEMP B-TREE" in text:
            problems.append(f"{name}: sorts instead of reading in claim order: {text}")
    conn.close()
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("statistics", ["analyzed", "before-analyze"])
async def test_postgres_idle_draws_do_not_walk_the_backlog(fresh_backend, statistics: str) -> None:
    backend = fresh_backend  # a new database: no statistics left over from other tests
    if backend.dialect != "postgres":
        pytest.skip("PostgreSQL plans")
    import psycopg

    q = backend.client()
    await _fill(q)
    params = _params(0)
    params.update(queues=["empty", "other"], queue="empty", names=["idle", "idle2"], name="idle")
    problems = []
    with psycopg.connect(backend.target, autocommit=True, prepare_threshold=None) as conn:
        conn.execute(  # the rest of the backlog, quickly: same queue, three busy names in all
            # (with a single name in the whole table, the planner costs a
            # multi-name draw's two candidate plans the same, and the choice
            # flipped between runs: noted as a limit of the claim statement)
            "insert into cairnq_tasks (id, name, queue, status, payload, run_at_ms, created_at_ms, updated_at_ms)"
            " select 'task_bulk_' || g, 'busy' || (g %% 2), 'default', 'queued', '{}', 1, 1, 1"
            " from generate_series(1, %s) as g",
            [PG_BACKLOG - BACKLOG],
        )
        # Right after a bulk load the table has no statistics yet (autovacuum
        # analyzes it later): the plans must hold up either way.
        conn.execute("analyze cairnq_tasks" if statistics == "analyzed" else "select 1")
        store = q.store
        # Both plans a prepared statement may run: the custom ones of its first
        # executions and the generic one it may settle on. The store's own
        # binding (queue and name values written in) is what gets planned.
        for plan_mode, name, label, overrides in _pg_idle_cases():
            conn.execute(f"set plan_cache_mode = {plan_mode}")
            values = dict(params, **overrides)
            text, args = store._bind(name, values)
            cur = psycopg.RawCursor(conn)
            conn.execute("begin")
            prepared = "plan_case"
            try:
                cur.execute(f"prepare {prepared} as {text}")
                placeholders = ", ".join(_pg_literal(a) for a in args)
                cur.execute(
                    f"explain (analyze, buffers, format json) execute {prepared}"
                    + (f"({placeholders})" if args else "")
                )
                plan = cur.fetchone()[0][0]["Plan"]
            finally:
                conn.execute("rollback")
                conn.execute(f"deallocate {prepared}")
            pages = plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)
            if pages > PG_PAGE_BUDGET:
                problems.append(
                    f"{name} ({label}, {plan_mode}): touched {pages} pages:\n{json.dumps(plan, indent=1)[:3000]}"
                )
    assert not problems, "\n\n".join(problems)


# Postgres: complete_each (a batch of completions with results of their own)
# must reach its rows by id, however many tasks other workers hold and
# whatever the statistics say: through the lease index it walks every task
# claimed within a lease's time, every worker's. The store sends it unprepared
# (postgres/test_pg_unprepared_statements.py), so it runs with a plan made for
# its values: what EXPLAIN of the statement with those values shows.
PG_RUNNING_ELSEWHERE = 20_000
# Pages a settlement may touch: each row's heap page and every index it is
# written into (about 30 a row measured), with room for page splits. A walk
# of the lease index adds hundreds (and is caught by name below in any case).
PG_PAGES_PER_ROW = 40
PG_PAGES_SLACK = 40


def _tasks_reads(plan: dict[str, Any]) -> set[str]:
    """How the plan reads cairnq_tasks: the indexes it searches, "Seq Scan" for a scan."""
    found = set()
    if "Index Name" in plan:
        found.add(plan["Index Name"])
    elif plan["Node Type"] == "Seq Scan":
        found.add("Seq Scan")
    for child in plan.get("Plans", []):
        found |= _tasks_reads(child)
    return found


@pytest.mark.parametrize("statistics", ["analyzed", "before-analyze", "taken-small"])
async def test_postgres_complete_each_reaches_its_rows_by_id(fresh_backend, statistics: str) -> None:
    backend = fresh_backend
    if backend.dialect != "postgres":
        pytest.skip("PostgreSQL plans (SQLite's are pinned in test_sqlite_plans)")
    import psycopg

    q = backend.client()
    await asyncio.gather(*(q.submit("busy", {"i": i}) for i in range(100)))
    problems = []
    with psycopg.connect(backend.target, autocommit=True, prepare_threshold=None) as conn:
        # Only the statistics this test sets up: no ANALYZE by autovacuum meanwhile.
        conn.execute("alter table cairnq_tasks set (autovacuum_enabled = off)")
        held = [t.id for t in await q.store.claim(queues=["default"], worker_id="w", limit=64, names=["busy"])]
        if statistics == "taken-small":  # measured when the table was small, most of it held
            conn.execute("analyze cairnq_tasks")
        far = int(time.time() * 1000) + 3_600_000
        conn.execute(  # a fleet's worth of tasks other workers hold
            "insert into cairnq_tasks (id, name, queue, status, payload, worker_id, lease_until_ms, attempt,"
            " run_at_ms, created_at_ms, updated_at_ms)"
            " select 'task_elsewhere_' || g, 'busy', 'default', 'running', '{}', 'other_' || (g %% 50), %s, 1,"
            " 1, 1, 1 from generate_series(1, %s) as g",
            [far, PG_RUNNING_ELSEWHERE],
        )
        if statistics == "analyzed":
            conn.execute("analyze cairnq_tasks")
        for n in (2, 8, 64):
            ids = held[:n]
            params = dict(_params(0), ids=ids, worker_id="w", results=['{"r":1}', None] * (n // 2))
            text, args = q.store._bind("complete_each", params)
            cur = psycopg.RawCursor(conn)
            conn.execute("begin")
            try:
                cur.execute(f"explain (analyze, buffers, format json) {text}", args)
                plan = cur.fetchone()[0][0]["Plan"]
            finally:
                conn.execute("rollback")
            pages = plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)
            reads = _tasks_reads(plan)
            too_many = pages > PG_PAGES_PER_ROW * n + PG_PAGES_SLACK
            if plan.get("Actual Rows") != n or too_many or reads != {"cairnq_tasks_pkey"}:
                problems.append(f"{n} ids: {plan.get('Actual Rows')} rows, {pages} pages, read by {reads}")
    await q.close()
    assert not problems, "\n".join(problems)


# SQLite keeps temporary data in memory (cairnq/store/sqlite/opening.py), the
# sorter's included, which then never spills to disk: every sort must be over
# a bounded set. A statement that sorts or groups either has a LIMIT, or its
# groups are bounded whatever the table's size, for the reason given here.
_SQLITE_BOUNDED_GROUPS = {
    "applied_migrations": "one row a migration",
    "browse_queues": "one group a queue and status",
    "stats": "one group a queue and status",
    "browse_finished_per_minute": "one group a minute and status of its window",
    "browse_recent_workers": "one group a worker that finished a task in its window",
    "periodic_latest": "one group a periodic schedule",
}
_SORTS = re.compile(r"\border\s+by\b|\bgroup\s+by\b|\bdistinct\b|\bunion\b")
_LIMIT = re.compile(r"\blimit\b")


def test_every_sqlite_sort_is_over_a_bounded_set() -> None:
    problems = []
    for name, statement in sorted(load_statements("sqlite").items()):
        text = statement.text.lower()  # (the loader has taken the comments out)
        if _SORTS.search(text) and not _LIMIT.search(text) and name not in _SQLITE_BOUNDED_GROUPS:
            problems.append(f"{name}: sorts or groups without a LIMIT and is not a known bounded grouping")
    assert not problems, "\n".join(problems)
