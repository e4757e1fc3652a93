"""Planner statistics upkeep (``opening.refresh_statistics``).

While cairnq_tasks is small the store records statistics of a large table
(``protocol/sql/sqlite/seed_statistics.sql``); once it outgrows them it is
measured. Statistics ANALYZE takes of a tiny table ("one row per anything")
made multi-name claims walk the whole table per candidate; these tests hold
that such statistics never stay, whoever wrote them, and that every open
connection to the file replans when they are replaced. The plans themselves
are pinned in ``tests/store/test_query_plans.py``.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from typing import Any, Callable

import pytest

from bulk_tasks import fill_sqlite
from cairnq._sql import load_statements
from cairnq.store.sqlite import store as sqlite_store_module
from cairnq.store.sqlite.opening import SEEDED_ROWS, STATISTICS_MIN_ROWS

STATEMENTS = load_statements("sqlite")


def recorded_rows(path: str) -> Any:
    """The row count the recorded statistics describe (SEEDED_ROWS: seeded)."""
    return recorded(path)[0]


def recorded(path: str) -> tuple[Any, bool]:
    """(rows described, whether every index's statistics are the seeded ones)."""
    with sqlite3.connect(path) as conn:
        rows, indexes, seeded = conn.execute(STATEMENTS["statistics_rows"].text).fetchone()
    return rows, bool(indexes) and seeded == indexes


def schema_version(path: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("pragma schema_version").fetchone()[0])


def claim_plan(conn: sqlite3.Connection) -> str:
    """The multi-name claim's plan as ``conn`` would run it now. The text is
    new each time: sqlite3's statement cache would otherwise hand back a plan
    prepared before the statistics changed (a real statement replans itself;
    EXPLAIN does not)."""
    claim_plan.calls = getattr(claim_plan, "calls", 0) + 1  # type: ignore[attr-defined]
    sql = "explain query plan " + STATEMENTS["claim_one_queue"].text + f" -- {claim_plan.calls}"  # type: ignore[attr-defined]
    params = {
        "worker_id": "w", "queue": "default", "limit": 64, "lease_until_ms": 2, "now_ms": 1,
        "names": json.dumps(["busy", "idle"]),
    }  # fmt: skip
    return " | ".join(row[3] for row in conn.execute(sql, params))


def walks_the_table(plan: str) -> bool:
    return "SCAN t " in plan or plan.endswith("SCAN t")


def analyze_tiny(path: str) -> None:
    """What any process's ANALYZE of a one-row table records."""
    with sqlite3.connect(path) as conn:
        conn.execute("analyze cairnq_tasks")
        stat = conn.execute(
            "select stat from sqlite_stat1 where idx = 'cairnq_tasks_claim_name_idx'"
        ).fetchone()[0]
    assert stat.startswith("1 "), stat


async def young_file(backend: Any, *, tiny_statistics: bool = False) -> Any:
    """A file with one task, its client closed; with ``tiny_statistics``, as
    another process's ANALYZE of that one row left it."""
    q = backend.client()
    await q.submit("busy")
    await q.close()
    if tiny_statistics:
        analyze_tiny(backend.target)
    return q


async def keep_using(q: Any, until: Callable[[], bool]) -> None:
    """Run reads through ``q`` (each may start the periodic upkeep) until
    ``until()``, within 10 s."""

    async def reads() -> None:
        while not until():
            await q.get("task_none")
            await asyncio.sleep(0.01)

    await asyncio.wait_for(reads(), 10)


async def test_an_empty_table_gets_seeded_statistics_for_every_index(sqlite_backend) -> None:
    q = sqlite_backend.client()
    await q.connect()
    await q.close()
    with sqlite3.connect(sqlite_backend.target) as conn:
        indexes = {
            r[0] for r in conn.execute(
                "select name from sqlite_master where type = 'index' and tbl_name = 'cairnq_tasks'"
            )
        }  # fmt: skip
        seeded = {r[0]: r[1] for r in conn.execute("select idx, stat from sqlite_stat1 where tbl = 'cairnq_tasks'")}
        views = [r[0] for r in conn.execute("select name from sqlite_master where type = 'view'")]
    # A new index without a seeded row would be planned from SQLite's guesses.
    assert set(seeded) == indexes
    assert int(seeded["sqlite_autoindex_cairnq_tasks_1"].split()[0]) == SEEDED_ROWS
    assert recorded(sqlite_backend.target) == (SEEDED_ROWS, True)
    assert views == []  # the mark that makes others replan lives inside its transaction


async def test_tiny_statistics_from_another_process_are_replaced_at_open(sqlite_backend) -> None:
    q = await young_file(sqlite_backend, tiny_statistics=True)
    with sqlite3.connect(sqlite_backend.target) as conn:
        assert walks_the_table(claim_plan(conn))  # what they do to the claim
    await q.connect()
    await q.close()
    assert recorded_rows(sqlite_backend.target) == SEEDED_ROWS
    with sqlite3.connect(sqlite_backend.target) as conn:
        assert not walks_the_table(claim_plan(conn))


async def test_a_connection_already_open_replans_when_the_statistics_are_replaced(sqlite_backend) -> None:
    q = await young_file(sqlite_backend, tiny_statistics=True)
    other = sqlite3.connect(sqlite_backend.target, isolation_level=None)  # another process, say
    try:
        other.execute("select count(*) from cairnq_tasks").fetchall()  # its schema and statistics loaded
        assert walks_the_table(claim_plan(other))
        await q.connect()  # seeds, and marks the change
        await q.close()
        other.execute("select count(*) from cairnq_tasks").fetchall()  # its next statement
        assert not walks_the_table(claim_plan(other))
    finally:
        other.close()


async def test_the_upkeep_seeds_again_after_another_process_analyzes(sqlite_backend, monkeypatch) -> None:
    monkeypatch.setattr(sqlite_store_module, "STATISTICS_INTERVAL_S", 0.0)  # every operation checks
    q = sqlite_backend.client()
    await q.submit("busy")
    assert recorded_rows(sqlite_backend.target) == SEEDED_ROWS
    analyze_tiny(sqlite_backend.target)
    try:
        await keep_using(q, lambda: recorded_rows(sqlite_backend.target) == SEEDED_ROWS)
    finally:
        await q.close()


async def test_a_table_that_outgrows_the_seed_is_measured(sqlite_backend, monkeypatch) -> None:
    monkeypatch.setattr(sqlite_store_module, "STATISTICS_INTERVAL_S", 0.0)
    q = sqlite_backend.client()
    await q.submit("busy")
    assert recorded_rows(sqlite_backend.target) == SEEDED_ROWS
    # A bulk load past the store.
    fill_sqlite(sqlite_backend.target, STATISTICS_MIN_ROWS, int(time.time() * 1000), analyze=False)
    try:
        await keep_using(q, lambda: recorded_rows(sqlite_backend.target) != SEEDED_ROWS)
    finally:
        await q.close()
    rows = recorded_rows(sqlite_backend.target)
    # Measured (with analysis_limit the count is an estimate), not seeded.
    assert STATISTICS_MIN_ROWS / 2 <= rows <= STATISTICS_MIN_ROWS * 2
    assert recorded(sqlite_backend.target)[1] is False
    await q.connect()  # measured and large: left to PRAGMA optimize from here
    await q.close()
    assert recorded_rows(sqlite_backend.target) == rows


async def test_a_read_only_file_opens_without_statistics(sqlite_backend, tmp_path) -> None:
    """Seeding is best effort: a file this process cannot write still opens."""
    q = sqlite_backend.client()
    await q.submit("busy")
    await q.close()
    with sqlite3.connect(sqlite_backend.target) as conn:
        conn.execute("delete from sqlite_stat1")
    uri = f"file:{sqlite_backend.target}?mode=ro"
    from cairnq import CairnQ

    ro = CairnQ.sqlite(uri)
    try:
        assert await ro.get("task_none") is None
    except Exception as exc:  # pragma: no cover - shows what went wrong
        pytest.fail(f"a read-only open failed: {exc!r}")
    finally:
        await ro.close()


async def test_seeded_statistics_plan_every_statement_as_a_measured_large_table(tmp_path) -> None:
    """The seed stands in for measuring a large table: every protocol
    statement must get the plan an ANALYZE of realistic rows gives it (a
    changed index or a new statement that plans differently shows here)."""
    from cairnq import CairnQ

    seeded, measured = str(tmp_path / "seeded.db"), str(tmp_path / "measured.db")
    for path in (seeded, measured):
        async with CairnQ.sqlite(path) as q:
            await q.submit("x")
    fill_sqlite(measured, 2 * STATISTICS_MIN_ROWS, 1_700_000_000_000)  # and ANALYZE
    async with CairnQ.sqlite(measured) as q:  # large: left as measured
        await q.get("task_none")
    assert recorded_rows(seeded) == SEEDED_ROWS
    assert recorded_rows(measured) != SEEDED_ROWS

    class AnyParams(dict):  # plans do not depend on these values
        def __missing__(self, key: str) -> None:
            return None

    differ = []
    with sqlite3.connect(seeded) as a, sqlite3.connect(measured) as b:
        for name, statement in sorted(STATEMENTS.items()):
            if not statement.text.lstrip().lower().startswith(("select", "update", "delete", "insert", "with")):
                continue
            plans = [
                " | ".join(row[3] for row in conn.execute("explain query plan " + statement.text, AnyParams()))
                for conn in (a, b)
            ]
            if plans[0] != plans[1]:
                differ.append(f"{name}:\n  seeded:   {plans[0]}\n  measured: {plans[1]}")
    assert not differ, "\n".join(differ)


async def test_a_second_open_leaves_seeded_statistics_alone(sqlite_backend) -> None:
    """No rewrite (and no replanning for every connection) when nothing changed."""
    q = await young_file(sqlite_backend)
    version = schema_version(sqlite_backend.target)
    other = sqlite_backend.client()  # another process opening the same file
    await other.connect()
    await other.close()
    await q.connect()
    await q.close()
    assert schema_version(sqlite_backend.target) == version
    assert recorded(sqlite_backend.target) == (SEEDED_ROWS, True)


async def test_one_index_analyzed_by_another_process_is_seeded_again(sqlite_backend) -> None:
    q = await young_file(sqlite_backend)
    with sqlite3.connect(sqlite_backend.target) as conn:
        conn.execute("analyze cairnq_tasks_claim_name_idx")  # one index, at one row
    assert recorded(sqlite_backend.target) == (SEEDED_ROWS, False)
    await q.connect()
    await q.close()
    assert recorded(sqlite_backend.target) == (SEEDED_ROWS, True)


async def test_a_leftover_view_of_the_marks_name_does_not_stop_seeding(sqlite_backend) -> None:
    q = await young_file(sqlite_backend, tiny_statistics=True)
    with sqlite3.connect(sqlite_backend.target) as conn:
        conn.execute("create view cairnq_statistics_changed as select 2 as left_behind")
    await q.connect()
    await q.close()
    assert recorded(sqlite_backend.target) == (SEEDED_ROWS, True)


async def test_a_refresh_that_meets_another_writer_retries_and_the_store_replans(sqlite_backend, monkeypatch) -> None:
    """The periodic refresh does not wait for the write lock (it runs on the
    event loop): held by another process, it is tried again a second later,
    and then the store's own connection plans with the seeded statistics."""
    q = sqlite_backend.client()
    await q.submit("busy")
    analyze_tiny(sqlite_backend.target)
    writer = sqlite3.connect(sqlite_backend.target, isolation_level=None)
    try:
        writer.execute("begin immediate")  # another process, mid-transaction
        monkeypatch.setattr(sqlite_store_module, "STATISTICS_BUSY_RETRY_S", 0.2)
        store = q.store
        store._statistics_due = 0.0  # due now; the next one a minute later, or on retry
        await q.get("task_none")  # schedules the refresh, which meets the lock
        await asyncio.sleep(0.1)
        assert recorded(sqlite_backend.target) == (1, False)  # still the tiny ones
        writer.execute("rollback")

        await keep_using(q, lambda: recorded(sqlite_backend.target) == (SEEDED_ROWS, True))
        async with store._engine.exclusive() as conn:  # the store's own connection
            assert not walks_the_table(claim_plan(conn))
    finally:
        writer.close()
        await q.close()
