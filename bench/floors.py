"""The floors: what the database itself allows, measured with no SDK.

Run by ``bench/compare.py`` through ``bench/workloads.py`` (which dispatches
by name), in the same rounds as the workloads they bound, and reported as
ours / floor:

* physical limits: bare ``sqlite3`` loops of one-row and 64-row commits, into
  a table with only a primary key and into the cairnq schema;
* the protocol's own statements (``protocol/sql/<dialect>/*.sql``) in a bare
  loop, for ``drain_c64``, ``get``, ``submit_seq`` and ``call_latency`` (one
  connection), with the same schema, durability and connection settings;
  for ``drain_c64`` also two connections at once (PostgreSQL,
  ``floor_drain_pipelined``) and each batch settled in the next claim's
  transaction, as a worker must (SQLite, ``floor_drain_riding``);
* ``floor_call_processes``: a call between two processes, a bare worker
  (stdlib ``sqlite3`` or psycopg, no cairnq) in the second.

The SDK is used only to create the schema (migrations are the only schema
source) and to fill a backlog the way a drain finds it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from sdk_client import client as _client, submit_many as _submit_many


# -- physical limits (no SDK at all) --------------------------------------------------


Row = Callable[[int, int, str], Any]  # (sequence, now in ms, task id) -> the insert's parameters


def _bare_table(conn: sqlite3.Connection) -> tuple[str, Row]:
    """A table with the columns a submit fills and no secondary index."""
    conn.execute(
        "create table if not exists cairnq_tasks (id text primary key, name text not null, queue text not null"
        " default 'default', status text not null, payload text not null, metadata text not null default '{}',"
        " max_attempts integer not null default 3, priority integer not null default 0, run_at_ms integer not null,"
        " root_id text, created_at_ms integer not null, updated_at_ms integer not null)"
    )
    sql = (
        "insert into cairnq_tasks (id, name, queue, status, payload, metadata, max_attempts, priority, run_at_ms,"
        " root_id, created_at_ms, updated_at_ms) values (?, 'noop', 'default', 'queued', ?, '{}', 3, 0, ?, ?, ?, ?)"
    )
    return sql, lambda j, now, task_id: (task_id, json.dumps({"i": j}), now, task_id, now, now)


def _cairnq_schema(conn: sqlite3.Connection) -> tuple[str, Row]:
    """The real schema (the migration files, run by bare sqlite3) and the very
    insert statement submit runs."""
    root = Path(__file__).resolve().parent.parent / "protocol"
    conn.execute("pragma foreign_keys = on")
    for migration in sorted((root / "migrations" / "sqlite").glob("*.sql")):
        conn.executescript(migration.read_text())
    sql = (root / "sql" / "sqlite" / "insert_task.sql").read_text()
    return sql, lambda j, now, task_id: {
        "id": task_id, "name": "noop", "queue": "default", "payload": json.dumps({"i": j}),
        "metadata": "{}", "max_attempts": 3, "priority": 0, "run_at_ms": now, "parent_id": None,
        "root_id": task_id, "correlation_id": None, "now_ms": now,
    }  # fmt: skip


def _limit(target: str, o: dict[str, Any], rows_per_commit: int, *, cairnq_schema: bool = False) -> dict[str, Any]:
    """A bare sqlite3 loop inserting the rows a submit writes, one or 64 per
    transaction, at the default durability (WAL, synchronous=FULL): into a
    table without secondary indexes, or into the cairnq schema (the disk's
    limit for the very rows and indexes a submit writes, without any SDK)."""
    conn = sqlite3.connect(target, isolation_level=None)
    conn.execute("pragma journal_mode = wal")
    sql, row = _cairnq_schema(conn) if cairnq_schema else _bare_table(conn)
    n = o["limit_n"] * (1 if rows_per_commit == 1 else 4)
    started = time.perf_counter()
    for i in range(0, n, rows_per_commit):
        if rows_per_commit > 1:
            conn.execute("begin")
        for j in range(i, i + rows_per_commit):
            now = int(time.time() * 1000)
            conn.execute(sql, row(j, now, f"task_{j:026d}"))
        if rows_per_commit > 1:
            conn.execute("commit")
    unit = f"rows/s ({rows_per_commit} per commit{', cairnq schema' if cairnq_schema else ''})"
    return {"value": n / (time.perf_counter() - started), "unit": unit}


def limit_commit1(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    return _limit(target, o, 1)


def limit_commit64(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    return _limit(target, o, 64)


def limit_commit1_schema(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    return _limit(target, o, 1, cairnq_schema=True)


def limit_commit64_schema(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    return _limit(target, o, 64, cairnq_schema=True)


# -- the floor: the protocol's own drain statements, no SDK -----------------------------

PROTOCOL = Path(__file__).resolve().parent.parent / "protocol"


def _statement(dialect: str, name: str) -> str:
    return (PROTOCOL / "sql" / dialect / f"{name}.sql").read_text()


def _drain_backlog(dialect: str, target: str, n: int) -> None:
    """n due "noop" tasks in "default", submitted through our SDK (which also
    migrates the schema), then closed: the floor loop finds what a drain finds."""

    async def fill() -> None:
        async with _client(dialect, target) as q:
            await _submit_many(q, n)

    asyncio.run(fill())


def _sqlite_drain_steps(
    conn: sqlite3.Connection, batch: int, claim: str | None = None
) -> tuple[Callable[[int], list[str]], Callable[[list[str], int], int]]:
    """The drain's two statements on ``conn``: claim up to ``batch`` tasks
    (their ids), and settle ids with ``complete_many`` (how many settled);
    each takes the clock (ms) its transaction reads. ``claim``: another text
    for the claim (``floor_variants.py``), its ids still in the first column."""
    claim = claim or _statement("sqlite", "claim_one_queue_one_name")
    complete = _statement("sqlite", "complete_many")

    def claim_ids(now: int) -> list[str]:
        rows = conn.execute(claim, {
            "worker_id": "floor", "lease_until_ms": now + 30_000, "now_ms": now,
            "queue": "default", "name": "noop", "limit": batch,
        }).fetchall()  # fmt: skip
        return [row[0] for row in rows]

    def settle(ids: list[str], now: int) -> int:
        params = {"ids": json.dumps(ids), "result": None, "worker_id": "floor", "now_ms": now}
        return len(conn.execute(complete, params).fetchall())

    return claim_ids, settle


def _floor_sqlite(target: str, n: int, batch: int) -> float:
    """stdlib sqlite3, one connection, WAL, synchronous=FULL (the store's
    default durability): per transaction, claim ``batch`` tasks and complete
    them with ``complete_many``, the statements a worker's drain runs."""
    conn = _sqlite_floor_conn(target)
    claim_ids, settle = _sqlite_drain_steps(conn, batch)
    done = 0
    started = time.perf_counter()
    while done < n:
        now = int(time.time() * 1000)
        conn.execute("begin immediate")
        ids = claim_ids(now)
        settled = settle(ids, now)
        conn.execute("commit")
        if not ids:
            raise RuntimeError(f"the floor loop ran dry after {done} of {n} tasks")
        done += settled
    elapsed = time.perf_counter() - started
    conn.close()
    return n / elapsed


def _floor_sqlite_riding(
    target: str,
    n: int,
    batch: int,
    wrap: Callable[[sqlite3.Connection], Any] | None = None,
    claim: str | None = None,
    work: Callable[[int], None] | None = None,
) -> float:
    """The SQLite floor a worker can reach: its claim must commit before its
    handlers see the tasks, so a batch's settlement rides in the *next*
    claim's transaction (each COMMIT carries two batches' rows, where
    ``_floor_sqlite`` claims and settles the same rows in one transaction).
    Same statements, connection and durability; the last batch settles in a
    transaction of its own. ``wrap``: what the loop runs its statements on,
    given the connection (``drain_statements.py --floor`` times them).
    ``claim`` and ``work`` (called with each batch's size once it committed)
    are ``floor_variants.py``'s."""
    conn = _sqlite_floor_conn(target)
    if wrap is not None:
        conn = wrap(conn)
    claim_ids, settle = _sqlite_drain_steps(conn, batch, claim)
    done, riding = 0, []
    started = time.perf_counter()
    while True:
        now = int(time.time() * 1000)
        conn.execute("begin immediate")
        if riding:
            done += settle(riding, now)
        riding = claim_ids(now) if done < n else []
        conn.execute("commit")
        if not riding:
            break
        if work is not None:
            work(len(riding))
    elapsed = time.perf_counter() - started
    conn.close()
    if done < n:
        raise RuntimeError(f"the riding floor loop ran dry after {done} of {n} tasks")
    return n / elapsed


def _pg_positional(name: str) -> tuple[str, tuple[str, ...]]:
    """A PostgreSQL statement with psycopg's %s placeholders (named parameters
    cut out by cairnq's literal-aware splitter; no value is ever pasted in)."""
    from cairnq._sql import split_params

    chunks, slots = split_params(_statement("postgres", name))
    return "%s".join(chunk.replace("%", "%%") for chunk in chunks), slots


async def _floor_pg_lane(target: str, n_goal: list[int], batch: int, worker: str) -> None:
    """One connection claiming and settling until the shared goal is met."""
    import psycopg

    claim, claim_slots = _pg_positional("claim_one_queue_one_name")
    complete, complete_slots = _pg_positional("complete_many")
    empty_since: float | None = None
    async with await psycopg.AsyncConnection.connect(target, autocommit=False) as conn:
        while n_goal[0] > 0:
            values = {"worker_id": worker, "lease_ms": 30_000, "queue": "default", "name": "noop", "limit": batch}
            cur = await conn.execute(claim, [values[s] for s in claim_slots], prepare=True)
            ids = [row[0] for row in await cur.fetchall()]
            if not ids:  # the last rows are locked by the other lane, about to be settled
                await conn.rollback()
                empty_since = empty_since or time.perf_counter()
                if time.perf_counter() - empty_since > 5:
                    raise RuntimeError(f"the floor loop ran dry with {n_goal[0]} tasks to go")
                await asyncio.sleep(0.001)
                continue
            empty_since = None
            settle = {"ids": ids, "result": None, "worker_id": worker}
            cur = await conn.execute(complete, [settle[s] for s in complete_slots], prepare=True)
            n_goal[0] -= len(await cur.fetchall())
            await conn.commit()


def _floor_pg(target: str, n: int, batch: int, lanes: int) -> float:
    """psycopg (its C implementation), server-side prepared statements, one
    transaction per claim + complete_many; ``lanes`` connections at once
    (two: one claims while the other commits, the floor for an SDK that
    overlaps its round trips)."""
    goal = [n]  # tasks still to settle, shared by the lanes

    async def run() -> float:
        started = time.perf_counter()
        await asyncio.gather(*(_floor_pg_lane(target, goal, batch, f"floor-{k}") for k in range(lanes)))
        return n / (time.perf_counter() - started)

    return asyncio.run(run())


def floor_drain(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    """The floor of ``drain_c64``: its claim and settlement statements in a bare
    loop, 64 tasks a transaction, same schema and durability, no SDK."""
    n = o["drain_n"]
    _drain_backlog(dialect, target, n)
    if dialect == "sqlite":
        return {"value": _floor_sqlite(target, n, 64), "unit": "tasks/s (bare loop, 64 a transaction)"}
    return {"value": _floor_pg(target, n, 64, 1), "unit": "tasks/s (bare loop, 64 a transaction)"}


def floor_drain_riding(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    """SQLite: the bare loop with each batch settled in the next claim's
    transaction, as a worker must (see ``_floor_sqlite_riding``)."""
    if dialect != "sqlite":
        raise SystemExit("floor_drain_riding is a SQLite floor")
    n = o["drain_n"]
    _drain_backlog(dialect, target, n)
    return {"value": _floor_sqlite_riding(target, n, 64), "unit": "tasks/s (bare loop, settled with the next claim)"}


def floor_drain_pipelined(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    """PostgreSQL: the bare loop on two connections at once (round trips overlapped)."""
    if dialect != "postgres":
        raise SystemExit("floor_drain_pipelined is a PostgreSQL floor")
    n = o["drain_n"]
    _drain_backlog(dialect, target, n)
    return {"value": _floor_pg(target, n, 64, 2), "unit": "tasks/s (bare loop, 2 connections)"}


# -- the client operations' floors: their own statement in a bare loop, no SDK ------------

# Calls made before a call floor's (and ``call_latency``'s) samples are taken.
# On a fresh SQLite database each commit first extends the WAL file, and a
# sync that also records the file's new size costs about twice a plain one:
# the first 40-50 calls run at 2-3 ms where the rest take 1.4-1.5 (ours; the
# floors alike). Once the WAL has reached its working size (a checkpoint, at
# 1,000 pages, starts it over from the top) a long-running process never
# pays that again, so latency is sampled after it, the same for every SDK.
CALL_WARM_UP = 100


def _fresh_schema(dialect: str, target: str) -> str | None:
    """The schema (migrated by our SDK, then closed) and one task's id."""

    async def make() -> str:
        async with _client(dialect, target) as q:
            return (await q.submit("noop", {"payload": "x" * 100})).id  # type: ignore[no-any-return]

    return asyncio.run(make())


def _sqlite_floor_conn(target: str) -> sqlite3.Connection:
    """stdlib sqlite3 at the store's durability: WAL, synchronous=FULL, autocommit;
    temporary data in memory, as the store keeps it (a transaction's statement
    journal never spills to a file)."""
    conn = sqlite3.connect(target, isolation_level=None)
    conn.execute("pragma journal_mode = wal")
    conn.execute("pragma synchronous = full")
    conn.execute("pragma temp_store = memory")
    return conn


def _json_as_text(conn: Any) -> None:
    """json/jsonb columns read as text on ``conn``, as the pool reads them."""
    from psycopg.adapt import Loader

    class JsonText(Loader):
        def load(self, data: Any) -> str:
            return bytes(data).decode("utf-8")

    conn.adapters.register_loader("jsonb", JsonText)
    conn.adapters.register_loader("json", JsonText)


async def _pg_floor_conn(target: str) -> Any:
    """psycopg (its C implementation) with the pool's connection settings:
    autocommit, statements prepared server-side at once, ``$n`` placeholders
    (raw cursor), json/jsonb read as text."""
    import psycopg

    conn = await psycopg.AsyncConnection.connect(
        target, autocommit=True, prepare_threshold=0, cursor_factory=psycopg.AsyncRawCursor
    )
    _json_as_text(conn)
    return conn


def _pg_floor_conn_sync(target: str) -> Any:
    """``_pg_floor_conn`` on psycopg's blocking API (the same settings)."""
    import psycopg

    conn = psycopg.connect(target, autocommit=True, prepare_threshold=0, cursor_factory=psycopg.RawCursor)
    _json_as_text(conn)
    return conn


def _pg_dollar(name: str) -> tuple[str, tuple[str, ...]]:
    """A PostgreSQL statement with ``$n`` placeholders (cairnq's literal-aware
    splitter; no value is ever pasted in) and the order of its parameters."""
    from cairnq.store.postgres.params import positional_statement

    return positional_statement(_statement("postgres", name))  # type: ignore[no-any-return]


def _submit_row(i: int) -> dict[str, Any]:
    task_id = f"task_{i:026d}"
    return {
        "id": task_id, "name": "noop", "queue": "default", "payload": json.dumps({"i": i}), "metadata": "{}",
        "max_attempts": 3, "priority": 0, "delay_ms": 0, "parent_id": None, "root_id": task_id,
        "correlation_id": None,
    }  # fmt: skip


async def _floor_pg_get(target: str, task_id: str, n: int) -> float:
    sql, slots = _pg_dollar("get")
    conn = await _pg_floor_conn(target)
    try:
        cur = conn.cursor()
        values = [{"id": task_id}[s] for s in slots]
        await cur.execute(sql, values, prepare=True)
        await cur.fetchall()
        started = time.perf_counter()
        for _ in range(n):
            await cur.execute(sql, values, prepare=True)
            await cur.fetchall()
        return n / (time.perf_counter() - started)
    finally:
        await conn.close()


async def _floor_pg_submit_seq(target: str, n: int) -> float:
    sql, slots = _pg_dollar("insert_task")
    conn = await _pg_floor_conn(target)
    try:
        cur = conn.cursor()
        warm = dict(_submit_row(n), name="warm")
        await cur.execute(sql, [warm[s] for s in slots], prepare=True)
        await cur.fetchall()
        started = time.perf_counter()
        for i in range(n):
            row = _submit_row(i)
            await cur.execute(sql, [row[s] for s in slots], prepare=True)
            await cur.fetchall()
        return n / (time.perf_counter() - started)
    finally:
        await conn.close()


def floor_get(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    """The floor of ``get``: the ``get`` statement by primary key, one connection, prepared."""
    task_id = _fresh_schema(dialect, target)
    n = o["get_n"]
    if dialect == "postgres":
        return {
            "value": asyncio.run(_floor_pg_get(target, task_id, n)),
            "unit": "gets/s (bare loop)",
        }
    sql = _statement("sqlite", "get")
    conn = _sqlite_floor_conn(target)
    conn.execute(sql, {"id": task_id}).fetchall()
    started = time.perf_counter()
    for _ in range(n):
        conn.execute(sql, {"id": task_id}).fetchall()
    value = n / (time.perf_counter() - started)
    conn.close()
    return {"value": value, "unit": "gets/s (bare loop)"}


def floor_submit_seq(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    """The floor of ``submit_seq``: the ``insert_task`` statement, one row per
    transaction (PostgreSQL: autocommit, prepared, the returned row fetched;
    SQLite: WAL, synchronous=FULL, the SDK's own bound values)."""
    _fresh_schema(dialect, target)
    n = o["submit_n"]
    if dialect == "postgres":
        return {
            "value": asyncio.run(_floor_pg_submit_seq(target, n)),
            "unit": "submits/s (bare loop, 1 a commit)",
        }
    sql = _statement("sqlite", "insert_task")
    conn = _sqlite_floor_conn(target)
    started = time.perf_counter()
    for i in range(n):
        now = int(time.time() * 1000)
        row = _submit_row(i)
        conn.execute(sql, dict(row, run_at_ms=now, now_ms=now))
    value = n / (time.perf_counter() - started)
    conn.close()
    return {"value": value, "unit": "submits/s (bare loop, 1 a commit)"}


async def _floor_pg_call(target: str, n: int) -> list[float]:
    """submit, claim, complete and get on one connection, each on its own
    (three commits and a read): the round trips a call cannot avoid."""
    insert, insert_slots = _pg_dollar("insert_task")
    claim, claim_slots = _pg_dollar("claim_one_queue_one_name")
    complete, complete_slots = _pg_dollar("complete")
    get_sql, get_slots = _pg_dollar("get")
    conn = await _pg_floor_conn(target)
    samples = []
    try:
        cur = conn.cursor()
        for i in range(-CALL_WARM_UP, n):
            started = time.perf_counter()
            row = dict(_submit_row(i + CALL_WARM_UP), name="echo", payload=json.dumps({"i": i}))
            await cur.execute(insert, [row[s] for s in insert_slots], prepare=True)
            await cur.fetchall()
            values = {
                "worker_id": "floor",
                "lease_ms": 30_000,
                "queue": "default",
                "name": "echo",
                "limit": 1,
            }
            await cur.execute(claim, [values[s] for s in claim_slots], prepare=True)
            (claimed,) = await cur.fetchall()
            done = {"id": claimed[0], "result": row["payload"], "worker_id": "floor"}
            await cur.execute(complete, [done[s] for s in complete_slots], prepare=True)
            await cur.fetchall()
            await cur.execute(get_sql, [{"id": claimed[0]}[s] for s in get_slots], prepare=True)
            await cur.fetchall()
            if i >= 0:
                samples.append((time.perf_counter() - started) * 1000)
    finally:
        await conn.close()
    return samples


def _floor_sqlite_call(target: str, n: int) -> list[float]:
    """SQLite: submit, claim, complete and get on one stdlib sqlite3
    connection, each write its own commit (WAL, synchronous=FULL): the
    commits and the read a call cannot avoid."""
    insert, complete = _statement("sqlite", "insert_task"), _statement("sqlite", "complete")
    claim, get_sql = _statement("sqlite", "claim_one_queue_one_name"), _statement("sqlite", "get")
    conn = _sqlite_floor_conn(target)
    samples = []
    try:
        for i in range(-CALL_WARM_UP, n):
            started = time.perf_counter()
            now = int(time.time() * 1000)
            row = dict(_submit_row(i + CALL_WARM_UP), name="echo", payload=json.dumps({"i": i}))
            conn.execute(insert, dict(row, run_at_ms=now, now_ms=now))
            now = int(time.time() * 1000)
            (claimed,) = conn.execute(claim, {
                "worker_id": "floor", "lease_until_ms": now + 30_000, "now_ms": now,
                "queue": "default", "name": "echo", "limit": 1,
            }).fetchall()  # fmt: skip
            now = int(time.time() * 1000)
            done = {"id": claimed[0], "result": row["payload"], "worker_id": "floor", "now_ms": now}
            conn.execute(complete, done).fetchall()
            conn.execute(get_sql, {"id": claimed[0]}).fetchall()
            if i >= 0:
                samples.append((time.perf_counter() - started) * 1000)
    finally:
        conn.close()
    return samples


def latency(samples: list[float], unit: str) -> dict[str, Any]:
    """Call latencies (ms) as a row: the median, and the p95 beside it."""
    ordered = sorted(samples)
    return {"value": statistics.median(ordered), "p95": ordered[int(len(ordered) * 0.95) - 1], "unit": unit}


def floor_call(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    """The floor of ``call_latency`` in one process: its three commits and
    the caller's read in a bare loop on one connection (no process hops, no
    wake-ups). Below what any cross-process call can reach: see
    ``floor_call_processes`` for that one."""
    _fresh_schema(dialect, target)
    if dialect == "postgres":
        samples = asyncio.run(_floor_pg_call(target, o["calls"]))
    else:
        samples = _floor_sqlite_call(target, o["calls"])
    return latency(samples, "ms per call (bare loop, p50)")


# The channels the protocol's trigger notifies (protocol/migrations/postgres/
# 0003_notify.sql): the queue's name on cairnq_queued when a task becomes
# claimable, the task's id on cairnq_done when it reaches a terminal state.
QUEUED_CHANNEL, DONE_CHANNEL = "cairnq_queued", "cairnq_done"
TERMINAL = ("succeeded", "failed", "canceled")

# The bare worker of floor_call_processes: its own process, stdlib sqlite3 or
# psycopg only (no cairnq), running the protocol's statements handed to it in
# argv[1] (JSON; the PostgreSQL ones already in $n form, converted by the
# parent; the one statement spelled here is the LISTEN, its channel quoted by
# psycopg.sql.Identifier as the SDK does). It echoes each "echo" task's payload
# as its result. PostgreSQL: woken by cairnq_queued, it claims (limit 1) and
# completes until nothing is left; SQLite: it spins on PRAGMA data_version and
# claims when another connection has committed. Either way it drains once at
# start (a task inserted before it listened is not lost) and exits when its
# parent is gone.
_BARE_WORKER = r"""
import json, os, sys, time

cfg = json.loads(sys.argv[1])
target, st = cfg["target"], cfg["statements"]
parent = os.getppid()

if cfg["dialect"] == "postgres":
    import psycopg
    from psycopg import sql as pgsql
    from psycopg.adapt import Loader

    class JsonText(Loader):
        def load(self, data):
            return bytes(data).decode("utf-8")

    work = psycopg.connect(target, autocommit=True, prepare_threshold=0, cursor_factory=psycopg.RawCursor)
    work.adapters.register_loader("jsonb", JsonText)
    work.adapters.register_loader("json", JsonText)
    listen = psycopg.connect(target, autocommit=True)
    listen.execute(pgsql.SQL("listen {}").format(pgsql.Identifier(cfg["channel"])))
    claim, claim_slots = st["claim_one_queue_one_name"]
    complete, complete_slots = st["complete"]
    claim_values = {"worker_id": "floor", "lease_ms": 30_000, "queue": "default", "name": "echo", "limit": 1}
    claim_args = [claim_values[s] for s in claim_slots]
    cur = work.cursor()
    # call_timeline_pg.py --floor: the round trips and notifications, timed
    # and written to cfg["log"] when the parent stops this process.
    log = [] if cfg.get("log") else None
    if log is not None:
        import atexit, signal
        atexit.register(lambda: open(cfg["log"], "w").write(json.dumps(log)))
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

    def drain():
        while True:
            started = time.monotonic()
            cur.execute(claim, claim_args, prepare=True)
            rows = cur.fetchall()
            if not rows:
                return
            if log is not None:
                log.append((started, time.monotonic(), "w", "claim_one_queue_one_name"))
            names = [c.name for c in cur.description]
            id_at, payload_at = names.index("id"), names.index("payload")
            for row in rows:
                done = {"id": row[id_at], "result": row[payload_at], "worker_id": "floor"}
                started = time.monotonic()
                cur.execute(complete, [done[s] for s in complete_slots], prepare=True)
                cur.fetchall()
                if log is not None:
                    log.append((started, time.monotonic(), "w", "complete"))

    drain()
    while os.getppid() == parent:
        for _ in listen.notifies(timeout=1.0, stop_after=1):
            if log is not None:
                now = time.monotonic()
                log.append((now, now, "w", "NOTIFY cairnq_queued"))
        drain()
else:
    import sqlite3

    conn = sqlite3.connect(target, isolation_level=None)
    conn.execute("pragma journal_mode = wal")
    conn.execute("pragma synchronous = full")
    version, probe = st["data_version"], st["claimable_probe_one_queue_one_name"]
    claim, complete = st["claim_one_queue_one_name"], st["complete"]
    last, pending, spins = None, True, 0
    while True:
        (now_version,) = conn.execute(version).fetchone()
        if now_version != last:
            last, pending = now_version, True
        if not pending:
            spins += 1
            if spins & 0xFFFF == 0 and os.getppid() != parent:
                break
            continue
        now = int(time.time() * 1000)
        cur = conn.execute(claim, {
            "worker_id": "floor", "lease_until_ms": now + 30_000, "now_ms": now,
            "queue": "default", "name": "echo", "limit": 1,
        })
        rows = cur.fetchall()
        if not rows:
            pending = False
            continue
        names = [c[0] for c in cur.description]
        id_at, payload_at = names.index("id"), names.index("payload")
        for row in rows:
            now = int(time.time() * 1000)
            done = {"id": row[id_at], "result": row[payload_at], "worker_id": "floor", "now_ms": now}
            conn.execute(complete, done).fetchall()
        # Another task queued before the version was read leaves no change to
        # wake on: a read (no write lock, so no clash with the caller's next
        # insert) says whether to claim again.
        now = int(time.time() * 1000)
        (due, _expired) = conn.execute(probe, {"queue": "default", "name": "echo", "now_ms": now}).fetchone()
        pending = bool(due)
"""


def _spawn_bare_worker(dialect: str, target: str, log: str | None = None) -> subprocess.Popen[bytes]:
    """The bare worker (``_BARE_WORKER``) in a process of its own, same
    interpreter, handed the protocol's statements it runs. ``log``
    (PostgreSQL): a file its timed round trips go to when it is terminated."""
    if dialect == "postgres":
        names = ("claim_one_queue_one_name", "complete")
        statements: dict[str, Any] = {name: list(_pg_dollar(name)) for name in names}
    else:
        names = (
            "data_version", "claim_one_queue_one_name", "complete", "claimable_probe_one_queue_one_name"
        )  # fmt: skip
        statements = {name: _statement("sqlite", name) for name in names}
    cfg = {
        "dialect": dialect, "target": target, "statements": statements, "channel": QUEUED_CHANNEL, "log": log,
    }  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-I", "-c", _BARE_WORKER, json.dumps(cfg)],
        cwd=os.path.dirname(os.path.abspath(__file__)) + "/..",
        stdin=subprocess.DEVNULL,
    )


def _alive(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        raise RuntimeError(f"the bare worker exited ({proc.returncode})")


def _floor_pg_call_processes(
    target: str, n: int, proc: subprocess.Popen[bytes], log: list[Any] | None = None
) -> list[float]:
    """The caller: one connection inserts, and reads the task back with
    ``get``; another LISTENs on cairnq_done and is woken by the trigger when
    the worker's ``complete`` commits. psycopg's sync API (no event loop in
    the way), prepared statements, autocommit. ``log``: the measured calls'
    round trips, notification and span, on ``time.monotonic()``, as
    ``call_timeline_pg.py`` logs ours."""
    import psycopg
    from psycopg import sql as pgsql

    insert, insert_slots = _pg_dollar("insert_task")
    get_sql, get_slots = _pg_dollar("get")
    conn = _pg_floor_conn_sync(target)
    listen = psycopg.connect(target, autocommit=True)
    samples = []
    try:
        listen.execute(pgsql.SQL("listen {}").format(pgsql.Identifier(DONE_CHANNEL)))
        cur = conn.cursor()
        for i in range(-CALL_WARM_UP, n):  # (the first also waits for the worker to start)
            started = time.perf_counter()
            stamps = [time.monotonic()] if log is not None else None
            row = dict(_submit_row(i + CALL_WARM_UP), name="echo", payload=json.dumps({"i": i}))
            await_until = started + 30
            cur.execute(insert, [row[s] for s in insert_slots], prepare=True)
            cur.fetchall()
            if stamps is not None:
                stamps.append(time.monotonic())
            while row["id"] not in [note.payload for note in listen.notifies(timeout=1.0, stop_after=1)]:
                _alive(proc)
                if time.perf_counter() > await_until:
                    raise RuntimeError(f"no {DONE_CHANNEL} notification for {row['id']} in 30 s")
            if stamps is not None:
                stamps.append(time.monotonic())
            cur.execute(get_sql, [{"id": row["id"]}[s] for s in get_slots], prepare=True)
            (got,) = cur.fetchall()
            if i >= 0:
                samples.append((time.perf_counter() - started) * 1000)
                if log is not None and stamps is not None:
                    begun, inserted, told = stamps
                    ended = time.monotonic()
                    log.extend((
                        (begun, inserted, "c", "insert_task"), (told, told, "c", "NOTIFY cairnq_done"),
                        (told, ended, "c", "get"), (begun, ended, "c", "CALL"),
                    ))  # fmt: skip
            names = [c.name for c in cur.description]
            assert got[names.index("status")] == "succeeded", got
            assert json.loads(got[names.index("result")]) == {"i": i}, got
    finally:
        conn.close()
        listen.close()
    return samples


def _floor_sqlite_call_processes(target: str, n: int, proc: subprocess.Popen[bytes]) -> list[float]:
    """The caller: inserts (its own commit), then spins on PRAGMA
    data_version and reads the task with ``get`` each time another
    connection has committed, until the task is terminal."""
    insert, get_sql = _statement("sqlite", "insert_task"), _statement("sqlite", "get")
    version = _statement("sqlite", "data_version")
    conn = _sqlite_floor_conn(target)
    samples = []
    try:
        (last,) = conn.execute(version).fetchone()  # own commits never move it: read once, kept
        for i in range(-CALL_WARM_UP, n):  # (the first also waits for the worker to start)
            started = time.perf_counter()
            await_until = started + 30
            now = int(time.time() * 1000)
            row = dict(_submit_row(i + CALL_WARM_UP), name="echo", payload=json.dumps({"i": i}))
            conn.execute(insert, dict(row, run_at_ms=now, now_ms=now))
            spins = 0
            while True:
                (now_version,) = conn.execute(version).fetchone()
                if now_version != last:
                    last = now_version
                    cur = conn.execute(get_sql, {"id": row["id"]})
                    (got,) = cur.fetchall()
                    names = [c[0] for c in cur.description]
                    if got[names.index("status")] in TERMINAL:
                        break
                spins += 1
                if spins & 0xFFF == 0:
                    _alive(proc)
                    if time.perf_counter() > await_until:
                        raise RuntimeError(f"{row['id']} not settled by the bare worker in 30 s")
            if i >= 0:
                samples.append((time.perf_counter() - started) * 1000)
            assert got[names.index("status")] == "succeeded", got
            assert json.loads(got[names.index("result")]) == {"i": i}, got
    finally:
        conn.close()
    return samples


def floor_call_processes(dialect: str, target: str, o: dict[str, Any]) -> dict[str, Any]:
    """The floor of ``call_latency`` across two processes, as a call really
    runs: a bare worker in a second process (``_BARE_WORKER``: stdlib sqlite3
    or psycopg, no cairnq) must be woken by the submit, and the caller woken
    back by the settlement; no SDK on either side.

    PostgreSQL: both wake-ups are the protocol trigger's notifications
    (cairnq_queued for the worker, cairnq_done for the caller, on a second
    connection), then the caller's ``get``. SQLite has no notification: both
    sides spin on PRAGMA data_version with no sleep at all, the lowest
    wake-up latency there is, bought with a core each (a floor, not a design
    to copy: on this 2-core machine the pair holds both cores while it runs).
    """
    _fresh_schema(dialect, target)
    proc = _spawn_bare_worker(dialect, target)
    try:
        if dialect == "postgres":
            samples = _floor_pg_call_processes(target, o["calls"], proc)
        else:
            samples = _floor_sqlite_call_processes(target, o["calls"], proc)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    return latency(samples, "ms per call (bare, 2 procs, p50)")
