"""The plans of the dashboard's browse statements, pinned: a page must reach
an index that gives its order (or a small set to sort), never walk the table.

A month of history (tests/bulk_tasks.py: mostly finished, a few queued and
running, skewed queues) with fresh statistics. SQLite: the index each
statement searches, from EXPLAIN QUERY PLAN. PostgreSQL: the pages each
statement touches, under both the custom and the generic plan (prepared
statements switch to the generic one), within a budget far below the
table's size. Timings at a million rows: bench/dashboard_pages.py.
"""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

import pytest

import bulk_tasks
from cairnq._sql import load_statements
from cairnq.store.ops.browse import ID_CEILING, ID_FLOOR

ROWS = 30_000
PG_PAGE_BUDGET = 60  # the table is ~900 pages; a page of 50 rows touches a few dozen

_BASE: dict[str, Any] = {
    "status": None, "queue": None, "name": None, "root_id": None, "correlation_id": None,
    "id_above": ID_FLOOR, "id_below": ID_CEILING, "created_from_ms": 0, "created_to_ms": 2**62,
    "after_id": ID_CEILING, "after_completed_ms": 2**62, "limit": 51,
}  # fmt: skip

# (statement, parameter overrides, what the SQLite plan must name)
CASES: list[tuple[str, dict[str, Any], str]] = [
    ("browse_newest", {}, "sqlite_autoindex_cairnq_tasks_1 (id>? AND id<?)"),
    ("browse_newest", {"queue": "mail"}, "sqlite_autoindex_cairnq_tasks_1"),
    ("browse_oldest", {"after_id": ID_FLOOR}, "sqlite_autoindex_cairnq_tasks_1 (id>? AND id<?)"),
    ("browse_finished_newest", {}, "cairnq_tasks_completed_idx (completed_at_ms<?)"),
    ("browse_finished_newest_one_status", {"status": "failed"}, "cairnq_tasks_status_completed_idx (status=? AND completed_at_ms<?)"),
    ("browse_finished_oldest_one_status", {"status": "canceled", "after_completed_ms": -1, "after_id": ID_FLOOR}, "cairnq_tasks_status_completed_idx (status=? AND completed_at_ms>?)"),
    ("browse_finished_newest", {"queue": "mail"}, "cairnq_tasks_queue_completed_idx (queue=? AND completed_at_ms<?)"),
    ("browse_finished_oldest", {"after_completed_ms": -1, "after_id": ID_FLOOR}, "cairnq_tasks_completed_idx (completed_at_ms>?)"),
    ("browse_unfinished_newest", {"status": "running"}, "cairnq_tasks_status_completed_idx (status=?)"),
    ("browse_unfinished_oldest", {"status": "queued", "after_id": ID_FLOOR}, "cairnq_tasks_status_completed_idx (status=?)"),
    ("browse_unfinished_newest", {"status": "queued", "queue": "mail"}, "(queue=? AND status=?)"),
    ("browse_running", {}, "cairnq_tasks_status_completed_idx (status=?)"),
    ("browse_finished_per_minute", {"since_ms": 0}, "completed_at_ms>?"),
    ("browse_recent_workers", {"since_ms": 0}, "completed_at_ms>?"),
    ("browse_queues", {"now_ms": 0}, "COVERING INDEX cairnq_tasks_claim"),
]  # fmt: skip
# Pages (not aggregates): bounded work whatever the table's size.
AGGREGATES = ("browse_finished_per_minute", "browse_recent_workers", "browse_queues")
PAGES = {name for name, _, _ in CASES if name not in AGGREGATES}


def _params(overrides: dict[str, Any], now: int) -> dict[str, Any]:
    params = dict(_BASE, **overrides)
    for key in ("since_ms", "now_ms"):
        if key in params:
            params[key] = now - 3_600_000
    return params


async def test_sqlite_browse_plans(sqlite_backend: Any) -> None:
    q = sqlite_backend.client()
    await q.connect()
    await q.close()
    now = int(time.time() * 1000)
    bulk_tasks.fill_sqlite(sqlite_backend.target, ROWS, now)
    statements = load_statements("sqlite")
    conn = sqlite3.connect(sqlite_backend.target)
    problems = []
    try:
        for name, overrides, wanted in CASES:
            params = _params(overrides, now)
            text = statements[name].specialize(params)
            plan = " | ".join(row[3] for row in conn.execute("explain query plan " + text, params))
            if wanted not in plan:
                problems.append(f"{name} {overrides}: expected {wanted!r} in: {plan}")
            if "SCAN cairnq_tasks" in plan and "COVERING INDEX" not in plan:
                problems.append(f"{name} {overrides}: walks the table: {plan}")
            full_sort = "TEMP B-TREE FOR ORDER BY" in plan
            if name in ("browse_newest", "browse_oldest") or name.startswith("browse_finished_"):
                if full_sort and "per_minute" not in name:
                    problems.append(f"{name} {overrides}: sorts the whole match: {plan}")
    finally:
        conn.close()
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("plan_mode", ["force_custom_plan", "force_generic_plan"])
async def test_postgres_browse_pages_touch_few_pages(fresh_backend: Any, plan_mode: str) -> None:
    backend = fresh_backend  # its own database: statistics of this table only
    if backend.dialect != "postgres":
        pytest.skip("PostgreSQL plans")
    import psycopg

    q = backend.client()
    await q.connect()
    now = int(time.time() * 1000)
    bulk_tasks.fill_postgres(backend.target, ROWS, now)
    store = q.store
    problems = []
    with psycopg.connect(backend.target, autocommit=True, prepare_threshold=None) as conn:
        conn.execute(f"set plan_cache_mode = {plan_mode}")
        for name, overrides, _ in CASES:
            if name not in PAGES:
                continue
            text, args = store._bind(name, _params(overrides, now))
            cur = psycopg.RawCursor(conn)
            conn.execute("begin")
            try:
                cur.execute(f"prepare browse_case as {text}")
                cur.execute(
                    "explain (analyze, buffers, format json) execute browse_case"
                    + (f"({', '.join(_literal(a) for a in args)})" if args else "")
                )
                plan = cur.fetchone()[0][0]["Plan"]
            finally:
                conn.execute("rollback")
                conn.execute("deallocate browse_case")
            pages = plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)
            if pages > PG_PAGE_BUDGET:
                problems.append(
                    f"{name} {overrides} ({plan_mode}): touched {pages} pages:\n"
                    + json.dumps(plan, indent=1)[:2500]
                )
    await q.close()
    assert not problems, "\n\n".join(problems)


def _literal(value: Any) -> str:
    from cairnq.store.postgres.params import text_literal

    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    return text_literal(str(value))
