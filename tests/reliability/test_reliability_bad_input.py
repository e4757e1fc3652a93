"""Bad input and hostile storage: every case gives a clear, documented error
and writes nothing partial (no task row, no key row, foreign data untouched).

What each case raises (the observed contract, asserted below):

| input / storage                                  | error                                                    |
|--------------------------------------------------|----------------------------------------------------------|
| non-JSON value (set, bytes, datetime, Decimal,   | cairnq.SerializationError (nothing written)              |
|   UUID, object, complex), NaN/±Infinity, nesting |                                                          |
|   deeper than the encoder's recursion limit      |                                                          |
| 20 MB payload (``CAIRNQ_HUGE_MB``)               | works (round-trips, claimable, completes)                |
| NUL in a JSON string, Postgres                   | the server refuses it: psycopg UntranslatableCharacter   |
|                                                  |   (a DataError; OPERATIONS.md §1.2: no SDK pre-check);   |
|                                                  |   nothing written, a refused result leaves the lease     |
| NUL in a JSON string, SQLite                     | accepted, round-trips                                    |
| NUL, a lone surrogate or more than 1,024 bytes   | ValueError naming the argument, on both dialects         |
|   in a name/queue/key/id (tests/api/test_input_rules) |   (nothing written)                                      |
| lone surrogate in a JSON value                   | cairnq.SerializationError on both dialects               |
| bad name/queue/key/metadata types                | TypeError; empty name/queue: ValueError (a key of "" is  |
|                                                  |   a key like any other, as in 0.15.1)                    |
| bad priority/delay_ms/max_attempts               | TypeError (type) / ValueError (range)                    |
| unknown conflict strategy                        | ValueError                                               |
| read-only SQLite file                            | writes: sqlite3.OperationalError (SQLITE_READONLY,       |
|                                                  |   "attempt to write a readonly database"); reads work    |
| read-only directory (file writable)              | sqlite3.OperationalError (SQLITE_CANTOPEN, "unable to    |
|                                                  |   open database file") for reads and writes alike: WAL   |
|                                                  |   needs to create -wal/-shm beside the file              |
| garbage bytes as the SQLite file                 | sqlite3.DatabaseError "file is not a database"; the file |
|                                                  |   is left byte-for-byte as it was                        |
| a truncated cairnq database                      | sqlite3.DatabaseError "database disk image is malformed" |
| a foreign ``cairnq_tasks`` of another shape      | the driver's "no such column" error at connect           |
|                                                  |   (sqlite3.OperationalError / psycopg UndefinedColumn);  |
|                                                  |   migration 0001 rolls back, foreign rows untouched. Side|
|                                                  |   effects: the ``cairnq_migrations`` ledger is created   |
|                                                  |   and (SQLite) the file is switched to WAL               |
| unrelated foreign tables                         | cairnq installs beside them; they are untouched          |
| protocol_version 2 in cairnq_meta                | cairnq.ProtocolVersionMismatch, for clients and workers  |
| installations in two schemas, search_path elsewhere | cairnq.SchemaMismatch before anything is created      |
| full disk (tmpfs of 2 MB; root only)             | sqlite3.OperationalError (SQLITE_FULL, "database or disk |
|                                                  |   is full"); every returned submit is intact and the same|
|                                                  |   store works again once space is freed                  |
"""

from __future__ import annotations

import asyncio
import datetime
import decimal
import json
import math
import os
import shutil
import sqlite3
import subprocess
import uuid
from pathlib import Path
from typing import Any, Optional

import pytest

from cairnq import (
    CairnQ,
    LostLease,
    ProtocolVersionMismatch,
    SchemaMismatch,
    SerializationError,
    SQLiteStore,
    Worker,
)

HUGE_MB = int(os.environ.get("CAIRNQ_HUGE_MB", "20"))


# -- helpers ---------------------------------------------------------------------------------


def raw_rows(backend: Any, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Plain SQL, behind the SDK's back (one short-lived connection)."""
    if backend.dialect == "sqlite":
        conn = sqlite3.connect(backend.target)
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(backend.target, autocommit=True) as conn:
        return conn.execute(sql.replace("?", "%s"), params).fetchall()


def counts(backend: Any) -> tuple[int, int]:
    [(tasks,)] = raw_rows(backend, "select count(*) from cairnq_tasks")
    [(keys,)] = raw_rows(backend, "select count(*) from cairnq_task_keys")
    return tasks, keys


async def connected(backend: Any) -> CairnQ:
    client = backend.client()
    await client.connect()
    return client


async def expect_nothing_written(backend: Any, client: CairnQ, exc: Any, **submit: Any) -> BaseException:
    """``submit(**submit)`` raises ``exc`` (with and without a key) and no row appears."""
    before = counts(backend)
    with pytest.raises(exc) as caught:
        await client.submit(**submit)
    if "key" not in submit:
        with pytest.raises(exc):
            await client.submit(**submit, key="bad-input-key")
    assert counts(backend) == before, f"something was written for {submit!r}"
    return caught.value


# -- JSON values ---------------------------------------------------------------------------------


def _deep(levels: int) -> Any:
    value: Any = []
    for _ in range(levels):
        value = [value]
    return value


NON_JSON = {
    "set": {1, 2},
    "bytes": b"raw",
    "datetime": datetime.datetime(2024, 1, 1),
    "decimal": decimal.Decimal("1.5"),
    "uuid": uuid.UUID(int=7),
    "object": object(),
    "complex": 1j,
    "nested set": {"a": [1, {"b": {3}}]},
    "nan": math.nan,
    "+inf": math.inf,
    "-inf": -math.inf,
    "nested nan": {"a": [1.0, {"b": math.nan}]},
    "too deep": _deep(5_000),
}


@pytest.mark.parametrize("value", list(NON_JSON.values()), ids=list(NON_JSON))
async def test_non_json_values_raise_serialization_error(backend: Any, value: Any) -> None:
    client = await connected(backend)
    err = await expect_nothing_written(backend, client, SerializationError, name="bad", payload=value)
    assert "JSON" in str(err)
    await expect_nothing_written(backend, client, SerializationError, name="bad", metadata={"m": value})
    # a worker's result: the store refuses it and the lease is untouched
    task = await client.submit("ok", {})
    [claimed] = await client.store.claim(queues=["default"], worker_id="worker_x", lease_ms=60_000)
    with pytest.raises(SerializationError):
        await client.store.complete(task_id=task.id, worker_id="worker_x", result={"r": value})
    still = await client.get(task.id)
    assert (still.status, still.result, still.worker_id) == ("running", None, "worker_x")
    await client.store.complete(task_id=task.id, worker_id="worker_x", result={"r": 1})


async def test_unserializable_result_fails_the_task_not_the_worker(backend: Any) -> None:
    client = await connected(backend)
    errors: list[Any] = []
    worker = backend.worker(poll_interval_ms=20, on_error=lambda e, i: errors.append((e, i)))

    @worker.task("returns.nan")
    async def returns_nan(ctx: Any) -> Any:
        return {"x": math.nan}

    async with worker.background():
        task = await client.submit("returns.nan", {})
        done = await client.wait(task.id, timeout_ms=10_000, poll_ms=10)
    assert done.status == "failed" and done.attempt == 1
    assert done.error["code"] == "unserializable_result" and done.error["retryable"] is False
    assert done.result is None
    assert errors == []


async def test_huge_payload_round_trips_or_raises_cleanly(backend: Any) -> None:
    client = await connected(backend)
    big = {"blob": "x" * (HUGE_MB * 1024 * 1024), "tail": [1, 2, 3]}
    before = counts(backend)
    try:
        task = await client.submit("huge", big, key="huge")
    except Exception as exc:  # allowed, if it is a clean error and nothing was written
        assert isinstance(exc, (SerializationError, ValueError)), repr(exc)[:300]
        assert counts(backend) == before
        return
    got = await client.get(task.id)
    assert got is not None and got.payload == big
    [claimed] = await client.store.claim(queues=["default"], worker_id="worker_h", lease_ms=60_000)
    assert claimed.id == task.id and claimed.payload == big
    done = await client.store.complete(task_id=task.id, worker_id="worker_h", result={"size": len(big["blob"])})
    assert done.status == "succeeded"
    assert (await client.get_by_key("huge")).result == {"size": HUGE_MB * 1024 * 1024}


async def test_nul_in_json_strings(backend: Any) -> None:
    client = await connected(backend)
    payloads = [{"x": "a\x00b"}, {"a\x00": 1}, ["\x00"], "\x00"]
    if backend.dialect == "postgres":  # jsonb cannot hold NUL: the server refuses it (no SDK pre-check)
        from psycopg.errors import UntranslatableCharacter

        for payload in payloads:
            err = await expect_nothing_written(backend, client, UntranslatableCharacter, name="nul", payload=payload)
            assert not isinstance(err, SerializationError) and "\\u0000" in str(err)
        await expect_nothing_written(backend, client, UntranslatableCharacter, name="nul", metadata={"m": "\x00"})
        # text that merely looks like an escape is fine
        task = await client.submit("nul", {"x": "\\u0000", "y": "\\\\u0000"})
        assert (await client.get(task.id)).payload == {"x": "\\u0000", "y": "\\\\u0000"}
        # a worker's result or error with NUL: refused, nothing written, the lease untouched
        [claimed] = await client.store.claim(queues=["default"], worker_id="worker_n", lease_ms=60_000)
        with pytest.raises(UntranslatableCharacter):
            await client.store.complete(task_id=claimed.id, worker_id="worker_n", result="\x00")
        with pytest.raises(UntranslatableCharacter):
            await client.store.fail(
                task_id=claimed.id, worker_id="worker_n", error={"code": "c", "details": {"d": "\x00"}}, retryable=False
            )
        assert (await client.get(claimed.id)).status == "running"
    else:  # SQLite stores the escape and gives the string back
        for payload in payloads:
            task = await client.submit("nul", payload)
            assert (await client.get(task.id)).payload == payload


@pytest.mark.parametrize("field", ["name", "queue", "key"])
async def test_nul_in_text_columns(backend: Any, field: str) -> None:
    """PostgreSQL text cannot hold NUL; the same rule on both dialects, before
    the driver sees it."""
    client = await connected(backend)
    args: dict[str, Any] = {"name": "n", "payload": {}}
    args[field] = "bad\x00text"
    before = counts(backend)
    with pytest.raises(ValueError, match=f"{field} must not contain NUL"):
        await client.submit(**args)
    assert counts(backend) == before


# -- argument validation ----------------------------------------------------------------------------

INVALID_SUBMITS = [
    ("name empty", {"name": ""}, ValueError),
    ("name None", {"name": None}, TypeError),
    ("name int", {"name": 5}, TypeError),
    ("queue empty", {"queue": ""}, ValueError),
    ("queue None", {"queue": None}, TypeError),
    ("queue list", {"queue": ["a"]}, TypeError),
    ("priority float", {"priority": 1.5}, TypeError),
    ("priority bool", {"priority": True}, TypeError),
    ("priority str", {"priority": "1"}, TypeError),
    ("priority above int4", {"priority": 2**31}, ValueError),
    ("priority below int4", {"priority": -(2**31) - 1}, ValueError),
    ("delay negative", {"delay_ms": -1}, ValueError),
    ("delay float", {"delay_ms": 1.5}, TypeError),
    ("delay bool", {"delay_ms": True}, TypeError),
    ("delay beyond int8", {"delay_ms": 2**63}, ValueError),
    ("max_attempts 0", {"max_attempts": 0}, ValueError),
    ("max_attempts negative", {"max_attempts": -3}, ValueError),
    ("max_attempts bool", {"max_attempts": True}, TypeError),
    ("max_attempts float", {"max_attempts": 2.0}, TypeError),
    ("max_attempts above int4", {"max_attempts": 2**31}, ValueError),
    ("conflict unknown", {"conflict": "bogus", "key": "k"}, ValueError),
    ("conflict wrong case", {"conflict": "REUSE", "key": "k"}, ValueError),
    ("conflict None", {"conflict": None, "key": "k"}, ValueError),
    ("conflict unknown, no key", {"conflict": "overwrite"}, ValueError),
    ("key int", {"key": 5}, TypeError),
    ("metadata list", {"metadata": [1]}, TypeError),
]


@pytest.mark.parametrize(
    "args,exc", [(a, e) for _, a, e in INVALID_SUBMITS], ids=[i for i, _, _ in INVALID_SUBMITS]
)
async def test_invalid_submit_arguments(backend: Any, args: dict[str, Any], exc: type) -> None:
    client = await connected(backend)
    submit = {"name": "valid.name", "payload": {"x": 1}, **args}
    before = counts(backend)
    with pytest.raises(exc):
        await client.submit(**submit)
    assert counts(backend) == before


async def test_invalid_arguments_elsewhere(backend: Any) -> None:
    client = await connected(backend)
    with pytest.raises(ValueError):
        await client.list(status="bogus")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        await client.list(limit=-1)
    with pytest.raises(ValueError):
        await client.purge(status="queued")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        await client.purge(limit=0)
    with pytest.raises(ValueError):
        await client.purge(older_than_ms=-1)
    with pytest.raises(ValueError):
        await client.queue_depth("default", -1)
    store = backend.store()
    for kwargs in ({"concurrency": 0}, {"lease_ms": 0}, {"max_run_ms": 0}, {"poll_interval_ms": -5},
                   {"resources": {"gpu": 0}}):  # fmt: skip
        with pytest.raises(ValueError):
            Worker(store, ["default"], **kwargs)
    with pytest.raises(TypeError):
        Worker(store, "default")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Worker(store, [])
    assert counts(backend) == (0, 0)


# -- hostile SQLite files ------------------------------------------------------------------------------


def _lock_down(path: Path) -> Optional[Path]:
    """chmod is what a user would do; root ignores it, so as root the
    immutable attribute enforces it as well. Returns what to unlock, or skips."""
    if os.geteuid() != 0:
        return None
    if shutil.which("chattr") is None:
        pytest.skip("running as root and chattr is unavailable: cannot make a path read-only")
    done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"running as root and chattr +i failed: {done.stderr.strip()}")
    return path


def _unlock(path: Optional[Path]) -> None:
    if path is not None:
        subprocess.run(["chattr", "-i", str(path)], check=False)


async def _seeded(db: Path) -> str:
    client = CairnQ.sqlite(str(db))
    task = await client.submit("seed", {"n": 1}, key="seed")
    await client.close()
    assert not Path(f"{db}-wal").exists()  # closed cleanly: a single file
    return task.id


async def test_read_only_sqlite_file(tmp_path: Path) -> None:
    db = tmp_path / "tasks.db"
    seed_id = await _seeded(db)
    before = db.read_bytes()
    os.chmod(db, 0o444)
    locked = _lock_down(db)
    client = CairnQ.sqlite(str(db))
    try:
        # reads keep working
        assert (await client.get(seed_id)).payload == {"n": 1}
        assert (await client.get_by_key("seed")).id == seed_id
        assert (await client.stats())["default"]["queued"] == 1
        assert [t.id for t in await client.list()] == [seed_id]
        # every write is refused with SQLite's own error
        for write in (
            lambda: client.submit("x", {}),
            lambda: client.submit("x", {}, key="k"),
            lambda: client.cancel(seed_id),
            lambda: client.purge(),
        ):
            with pytest.raises(sqlite3.OperationalError, match="readonly"):
                await write()
        # a worker survives it: the claim error goes to on_error
        errors: list[Any] = []
        worker = Worker(client.store, ["default"], poll_interval_ms=20, on_error=lambda e, i: errors.append((e, i)))
        worker.register("seed", lambda ctx: None)
        async with worker.background():
            for _ in range(100):
                if errors:
                    break
                await asyncio.sleep(0.02)
        assert errors and all(isinstance(e, sqlite3.OperationalError) for e, _ in errors), errors
        assert {i["phase"] for _, i in errors} == {"claim"}
    finally:
        await client.close()
        _unlock(locked)
        os.chmod(db, 0o644)
    assert db.read_bytes() == before


async def test_read_only_directory(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "tasks.db"
    await _seeded(db)
    before = db.read_bytes()
    os.chmod(folder, 0o555)
    locked = _lock_down(folder)
    client = CairnQ.sqlite(str(db))
    try:
        for op in (client.connect, lambda: client.get("task_x"), lambda: client.submit("x", {})):
            with pytest.raises(sqlite3.OperationalError, match="unable to open database file"):
                await op()
    finally:
        await client.close()
        _unlock(locked)
        os.chmod(folder, 0o755)
    assert db.read_bytes() == before
    assert sorted(p.name for p in folder.iterdir()) == ["tasks.db"]


async def test_garbage_file_is_refused_and_left_alone(tmp_path: Path) -> None:
    db = tmp_path / "tasks.db"
    garbage = bytes(range(256)) * 64
    db.write_bytes(garbage)
    client = CairnQ.sqlite(str(db))
    try:
        for op in (client.connect, lambda: client.submit("x", {}), lambda: client.get("task_x")):
            with pytest.raises(sqlite3.DatabaseError, match="file is not a database"):
                await op()
        worker = Worker.sqlite(str(db))
        worker.register("x", lambda ctx: None)
        with pytest.raises(sqlite3.DatabaseError):
            async with worker.background():
                await asyncio.sleep(0.2)
    finally:
        await client.close()
    assert db.read_bytes() == garbage
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tasks.db"]


async def test_truncated_database_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "tasks.db"
    client = CairnQ.sqlite(str(db))
    for i in range(300):
        await client.submit("x", {"i": i, "pad": "p" * 500})
    await client.close()
    with open(db, "r+b") as f:
        f.truncate(db.stat().st_size // 2)
    cut = db.read_bytes()
    client = CairnQ.sqlite(str(db))
    try:
        with pytest.raises(sqlite3.DatabaseError, match="malformed"):
            await client.connect()
        with pytest.raises(sqlite3.DatabaseError, match="malformed"):
            await client.submit("x", {})
    finally:
        await client.close()
    assert db.read_bytes() == cut


def _foreign_sqlite(db: Path, *, clash: bool) -> list[Any]:
    conn = sqlite3.connect(db)
    if clash:
        conn.execute("create table cairnq_tasks (id integer primary key, title text not null)")
        conn.execute("insert into cairnq_tasks (title) values ('keep me'), ('me too')")
    conn.execute("create table users (id integer primary key, name text unique)")
    conn.execute("create index users_name on users (name)")
    conn.executemany("insert into users (name) values (?)", [("alice",), ("bob",)])
    conn.commit()
    conn.close()
    return _foreign_state(db)


def _foreign_state(db: Path) -> list[Any]:
    conn = sqlite3.connect(db)
    try:
        schema = conn.execute(
            "select type, name, sql from sqlite_master where name in ('users', 'users_name')"
            " or (name = 'cairnq_tasks' and sql like '%title%') order by name"
        ).fetchall()
        users = conn.execute("select * from users order by id").fetchall()
        titles = conn.execute("select * from cairnq_tasks").fetchall() if any(
            s[1] == "cairnq_tasks" for s in schema
        ) else []
        return [schema, users, titles]
    finally:
        conn.close()


async def test_foreign_cairnq_tasks_table_is_refused_untouched(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    before = _foreign_sqlite(db, clash=True)
    client = CairnQ.sqlite(str(db))
    try:
        with pytest.raises(sqlite3.OperationalError, match="no such column"):
            await client.connect()
        with pytest.raises(sqlite3.OperationalError, match="no such column"):
            await client.submit("x", {})
    finally:
        await client.close()
    assert _foreign_state(db) == before
    conn = sqlite3.connect(db)
    try:
        names = {r[0] for r in conn.execute("select name from sqlite_master where type = 'table'")}
        # migration 0001 rolled back whole: no cairnq_meta / cairnq_task_keys; only the ledger
        # (created before any migration) is left behind
        assert names == {"cairnq_tasks", "users", "cairnq_migrations"}, names
        assert conn.execute("select count(*) from cairnq_migrations").fetchone() == (0,)
        assert conn.execute("pragma integrity_check").fetchall() == [("ok",)]
        assert conn.execute("pragma journal_mode").fetchone() == ("wal",)  # a side effect
    finally:
        conn.close()


async def test_unrelated_sqlite_tables_are_left_alone(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    before = _foreign_sqlite(db, clash=False)
    client = CairnQ.sqlite(str(db))
    worker = Worker.sqlite(str(db), poll_interval_ms=20)
    worker.register("x", lambda ctx, payload: payload)
    async with worker.background():
        task = await client.submit("x", {"v": 1}, key="k")
        done = await client.wait(task.id, timeout_ms=10_000, poll_ms=10)
    await client.purge()
    await client.close()
    assert done.status == "succeeded" and done.result == {"v": 1}
    assert _foreign_state(db) == before
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("pragma integrity_check").fetchall() == [("ok",)]
        assert conn.execute("pragma foreign_key_check").fetchall() == []
    finally:
        conn.close()


# -- Postgres: foreign tables, protocol, schemas ----------------------------------------------------------


async def test_foreign_postgres_tables(fresh_backend: Any) -> None:
    backend = fresh_backend
    if backend.dialect != "postgres":
        pytest.skip("the SQLite variants are above")
    import psycopg

    with psycopg.connect(backend.target, autocommit=True) as conn:
        conn.execute("create table cairnq_tasks (id serial primary key, title text not null)")
        conn.execute("insert into cairnq_tasks (title) values ('keep me')")
        conn.execute("create table users (id serial primary key, name text)")
        conn.execute("insert into users (name) values ('alice')")
    client = backend.client()
    with pytest.raises(psycopg.errors.UndefinedColumn):
        await client.connect()
    with pytest.raises(psycopg.errors.UndefinedColumn):
        await client.submit("x", {})
    await client.close()
    with psycopg.connect(backend.target, autocommit=True) as conn:
        assert conn.execute("select * from cairnq_tasks").fetchall() == [(1, "keep me")]
        assert conn.execute("select * from users").fetchall() == [(1, "alice")]
        tables = {r[0] for r in conn.execute(
            "select table_name from information_schema.tables where table_schema = 'public'")}  # fmt: skip
        assert tables == {"cairnq_tasks", "users", "cairnq_migrations"}, tables
        # unrelated tables only: cairnq installs beside them
        conn.execute("drop table cairnq_tasks")
        conn.execute("drop table cairnq_migrations")
    client = backend.client()
    task = await client.submit("x", {"v": 1})
    assert (await client.get(task.id)).payload == {"v": 1}
    await client.close()
    with psycopg.connect(backend.target, autocommit=True) as conn:
        assert conn.execute("select * from users").fetchall() == [(1, "alice")]


async def test_newer_protocol_major_is_refused(backend: Any) -> None:
    client = await connected(backend)
    await client.submit("x", {})
    await client.close()
    raw_write = "update cairnq_meta set value = '2' where key = 'protocol_version'"
    if backend.dialect == "sqlite":
        conn = sqlite3.connect(backend.target)
        conn.execute(raw_write)
        conn.commit()
        conn.close()
    else:
        import psycopg

        with psycopg.connect(backend.target, autocommit=True) as conn:
            conn.execute(raw_write)
    before = counts(backend)
    client = backend.client()
    for op in (client.connect, lambda: client.submit("x", {}), lambda: client.get("task_x")):
        with pytest.raises(ProtocolVersionMismatch, match="protocol_version=2, SDK supports 1"):
            await op()
    await client.close()
    worker = backend.worker()
    worker.register("x", lambda ctx: None)
    with pytest.raises(ProtocolVersionMismatch):
        async with worker.background():
            await asyncio.sleep(0.2)
    assert counts(backend) == before
    assert raw_rows(backend, "select value from cairnq_meta where key = 'protocol_version'") == [("2",)]


async def test_schema_split_raises_schema_mismatch(fresh_backend: Any) -> None:
    backend = fresh_backend
    if backend.dialect != "postgres":
        pytest.skip("schemas are a PostgreSQL matter")
    import psycopg

    from cairnq import PostgresStore

    for schema in ("alpha", "beta"):
        client = CairnQ(PostgresStore(backend.target, schema=schema))
        await client.submit("x", {"schema": schema})
        await client.close()
    with psycopg.connect(backend.target, autocommit=True) as conn:
        conn.execute("create schema elsewhere")

    def installed() -> list[Any]:
        with psycopg.connect(backend.target, autocommit=True) as conn:
            return conn.execute(
                "select table_schema, table_name from information_schema.tables"
                " where table_name like 'cairnq%' order by 1, 2"
            ).fetchall()

    tables = installed()
    for dsn in (f"{backend.target}?options=-csearch_path%3Delsewhere", backend.target):  # elsewhere, public
        client = CairnQ(PostgresStore(dsn))
        for op in (client.connect, lambda: client.submit("x", {})):
            with pytest.raises(SchemaMismatch) as err:
                await op()
            assert "'alpha'" in str(err.value) and "'beta'" in str(err.value)
        await client.close()
        worker = Worker(PostgresStore(dsn), ["default"])
        worker.register("x", lambda ctx: None)
        with pytest.raises(SchemaMismatch):
            async with worker.background():
                await asyncio.sleep(0.2)
        await worker.close()
    assert installed() == tables  # nothing was created anywhere
    # the installations themselves still work when asked for by name
    client = CairnQ(PostgresStore(backend.target, schema="beta"))
    assert [t.payload for t in await client.list()] == [{"schema": "beta"}]
    await client.close()


# -- full disk ---------------------------------------------------------------------------------------


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Any:
    """A 2 MB tmpfs, if this process may mount one (root); always unmounted."""
    mountpoint = tmp_path / "tiny"
    mountpoint.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mountpoint)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)


async def test_full_disk(tiny_disk: Path) -> None:
    db = tiny_disk / "tasks.db"
    client = CairnQ.sqlite(str(db))
    await client.connect()
    filler = tiny_disk / "filler"
    filler.write_bytes(b"\0" * 1_200_000)
    returned: dict[str, Optional[str]] = {}
    failures: list[BaseException] = []
    for i in range(400):
        batch = [
            client.submit("fill", {"i": i, "j": j, "pad": "y" * 8_000}, key=f"k-{i}-{j}" if j == 0 else None)
            for j in range(4)
        ]
        for j, outcome in enumerate(await asyncio.gather(*batch, return_exceptions=True)):
            if isinstance(outcome, BaseException):
                failures.append(outcome)
            else:
                returned[outcome.id] = f"k-{i}-{j}" if j == 0 else None
        if failures:
            break
    assert failures, "the disk never filled up"
    for exc in failures:
        assert isinstance(exc, sqlite3.OperationalError) and "full" in str(exc), repr(exc)
    with pytest.raises(sqlite3.OperationalError, match="full"):
        await client.submit("fill", {"pad": "z" * 8_000}, key="after-full")

    # nothing partial: every returned submit is there with its key, nothing else is
    for task_id, key in returned.items():
        assert (await client.get(task_id)) is not None
        if key is not None:
            assert (await client.get_by_key(key)).id == task_id
    assert await client.get_by_key("after-full") is None
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("pragma integrity_check").fetchall() == [("ok",)]
        assert conn.execute("select count(*) from cairnq_tasks").fetchone() == (len(returned),)
    finally:
        conn.close()

    # room again: the same store writes again, without being recreated
    filler.unlink()
    task = await client.submit("fill", {"after": True}, key="after-full")
    assert (await client.get_by_key("after-full")).id == task.id
    await client.close()
