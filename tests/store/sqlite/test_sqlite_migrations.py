"""The SQLite migration runner, the connect sequence and the protocol guard."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cairnq import CairnQ, ProtocolVersionMismatch, SQLiteStore
from cairnq._sql import load_migrations

EXPECTED_LEDGER = [
    "0001_init.sql",
    "0002_purge_index.sql",
    "0004_lease_index.sql",
    "0005_clear_terminal_lease.sql",
    "0006_claim_name_index.sql",
    "0007_purge_status_index.sql",
    "0008_claim_due_index.sql",
    "0009_purge_queue_index.sql",
    "0010_drop_status_index.sql",
]


def _ledger(path: str) -> list[tuple[str, int]]:
    with sqlite3.connect(path) as conn:
        return conn.execute("select name, applied_at_ms from cairnq_migrations order by name").fetchall()


def _meta(path: str) -> dict[str, str]:
    with sqlite3.connect(path) as conn:
        return dict(conn.execute("select key, value from cairnq_meta").fetchall())


async def test_fresh_database_is_fully_migrated(sqlite_backend) -> None:
    store = sqlite_backend.store()
    await store.connect()
    ledger = _ledger(sqlite_backend.target)
    assert [name for name, _ in ledger] == EXPECTED_LEDGER
    assert all(isinstance(ms, int) and ms > 1_600_000_000_000 for _, ms in ledger)
    assert _meta(sqlite_backend.target) == {"protocol_version": "1", "schema_version": "10"}
    assert await store.protocol_version() == 1


async def test_connection_state_after_connect(sqlite_backend) -> None:
    store = sqlite_backend.store()
    await store.connect()
    conn = store._engine.conn  # the one connection the store drives
    assert conn.execute("pragma busy_timeout").fetchone()[0] == 0
    assert conn.execute("pragma journal_mode").fetchone()[0] == "wal"
    assert conn.execute("pragma foreign_keys").fetchone()[0] == 1
    assert conn.execute("pragma synchronous").fetchone()[0] == 2  # FULL: the default durability
    with sqlite3.connect(sqlite_backend.target) as other:
        assert other.execute("pragma journal_mode").fetchone()[0] == "wal"  # a file property


async def test_relaxed_durability_is_opt_in(sqlite_backend) -> None:
    store = sqlite_backend.store(synchronous="normal")
    await store.connect()
    assert store._engine.conn.execute("pragma synchronous").fetchone()[0] == 1
    with pytest.raises(ValueError):
        SQLiteStore(sqlite_backend.target, synchronous="off")


async def test_reconnect_applies_nothing(sqlite_backend) -> None:
    store = sqlite_backend.store()
    await store.connect()
    before = _ledger(sqlite_backend.target)
    await store.close()
    await sqlite_backend.store().connect()
    assert _ledger(sqlite_backend.target) == before


async def test_partially_migrated_database_gets_the_rest_in_order(sqlite_backend) -> None:
    # An older SDK's database: only the first three files applied.
    path = sqlite_backend.target
    with sqlite3.connect(path, isolation_level=None) as conn:
        conn.execute("create table cairnq_migrations (name text primary key, applied_at_ms integer not null)")
        for migration in load_migrations("sqlite")[:3]:
            for stmt in migration.statements():
                conn.execute(stmt)
            conn.execute("insert into cairnq_migrations values (?, 1)", (migration.name,))
        conn.execute(
            "insert into cairnq_tasks (id, name, queue, status, payload, run_at_ms, created_at_ms,"
            " updated_at_ms, completed_at_ms, lease_until_ms) values"
            " ('task_old', 'n', 'default', 'succeeded', '{}', 1, 1, 1, 5, 99)"
        )
    assert _meta(path)["schema_version"] == "4"
    q = sqlite_backend.client()
    await q.connect()
    ledger = _ledger(path)
    assert [n for n, _ in ledger] == EXPECTED_LEDGER
    assert [ms for _, ms in ledger[:3]] == [1, 1, 1]  # the old rows are untouched
    assert _meta(path)["schema_version"] == "10"
    # 0005 repaired the legacy lease on a terminal row.
    task = await q.get("task_old")
    assert task is not None and task.lease_until_ms is None


async def test_newer_schema_and_unknown_ledger_rows_are_accepted(sqlite_backend) -> None:
    await sqlite_backend.store().connect()
    with sqlite3.connect(sqlite_backend.target) as conn:
        conn.execute("update cairnq_meta set value = '11' where key = 'schema_version'")
        conn.execute("insert into cairnq_migrations values ('0011_future.sql', 1)")
    q = sqlite_backend.client()
    task = await q.submit("still.works")
    assert (await q.get(task.id)) == task
    assert _meta(sqlite_backend.target)["schema_version"] == "11"


@pytest.mark.parametrize("version", ["2", "0"])
async def test_protocol_major_mismatch_refuses_every_operation(sqlite_backend, version: str) -> None:
    await sqlite_backend.store().connect()
    with sqlite3.connect(sqlite_backend.target) as conn:
        conn.execute("update cairnq_meta set value = ? where key = 'protocol_version'", (version,))
    q = sqlite_backend.client()
    for _ in range(2):  # not just the first call: nothing is published on failure
        with pytest.raises(ProtocolVersionMismatch) as err:
            await q.submit("x")
        assert str(err.value) == f"storage protocol_version={version}, SDK supports 1"
    with sqlite3.connect(sqlite_backend.target) as conn:
        assert conn.execute("select count(*) from cairnq_tasks").fetchone()[0] == 0


async def test_missing_protocol_row_reads_as_zero(sqlite_backend) -> None:
    await sqlite_backend.store().connect()
    with sqlite3.connect(sqlite_backend.target) as conn:
        conn.execute("delete from cairnq_meta where key = 'protocol_version'")
        conn.execute("insert into cairnq_migrations values ('0012_x.sql', 1)")
    # 0001 is already in the ledger, so nothing re-inserts the row.
    with pytest.raises(ProtocolVersionMismatch, match="protocol_version=0"):
        await sqlite_backend.client().connect()


def test_two_processes_cold_starting_together(tmp_path: Path) -> None:
    """Both race to migrate one new file; each migration runs exactly once."""
    path = tmp_path / "race.db"
    script = textwrap.dedent(
        f"""
        import asyncio, sys, time
        from cairnq import CairnQ
        async def main():
            start = float(sys.argv[1])
            while time.time() < start:
                await asyncio.sleep(0.001)
            async with CairnQ.sqlite({str(path)!r}) as q:
                await q.submit("hello")
        asyncio.run(main())
        """
    )
    import time

    start = time.time() + 1.0
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(start)], stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    ledger = _ledger(str(path))
    assert [n for n, _ in ledger] == EXPECTED_LEDGER  # a primary key: no duplicates possible,
    with sqlite3.connect(path) as conn:  # and every process's submit landed
        assert conn.execute("select count(*) from cairnq_tasks").fetchone()[0] == 4
        names = {r[0] for r in conn.execute("select name from sqlite_master where type = 'index'")}
    assert "cairnq_tasks_status_idx" not in names


async def test_parent_directory_is_created(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "tasks.db"
    async with CairnQ.sqlite(str(path)) as q:
        await q.submit("x")
    assert path.exists()


async def test_planner_statistics_are_bootstrapped(sqlite_backend) -> None:
    q = sqlite_backend.client()
    await q.submit("x")
    await q.close()
    await q.connect()  # the open path ANALYZEs once the table has rows
    with sqlite3.connect(sqlite_backend.target) as conn:
        rows = conn.execute("select count(*) from sqlite_stat1 where tbl = 'cairnq_tasks'").fetchone()
    assert rows[0] > 0


async def test_a_failing_migration_rolls_back_and_fails_connect(tmp_path: Path, monkeypatch) -> None:
    import shutil

    from cairnq import _sql

    root = tmp_path / "protocol"
    shutil.copytree(_sql.find_protocol_root(), root, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    (root / "migrations" / "sqlite" / "0011_broken.sql").write_text(
        "create table half_done (x integer);\nthis is not sql;\n"
    )
    monkeypatch.setenv("CAIRNQ_PROTOCOL_DIR", str(root))
    path = str(tmp_path / "broken.db")
    with pytest.raises(sqlite3.OperationalError):
        await CairnQ.sqlite(path).connect()
    with sqlite3.connect(path) as conn:
        tables = {r[0] for r in conn.execute("select name from sqlite_master where type = 'table'")}
        ledger = [r[0] for r in conn.execute("select name from cairnq_migrations")]
    assert "half_done" not in tables  # the whole file rolled back
    assert "0011_broken.sql" not in ledger
    assert len(ledger) == len(EXPECTED_LEDGER)  # the good ones before it stay applied


def test_migration_files_split_into_statements() -> None:
    for migration in load_migrations("sqlite"):
        statements = migration.statements()
        assert statements, migration.name
        for stmt in statements:
            assert sqlite3.complete_statement(stmt + ";")
            assert not stmt.rstrip().endswith(";;")


async def test_unused_connect_is_cheap_to_close(sqlite_backend) -> None:
    store = sqlite_backend.store()
    await store.close()  # never connected: nothing to do
    await asyncio.gather(store.connect(), store.connect())  # concurrent connects share one open
    assert store._engine is not None
