"""One rule for text and JSON on both dialects, and clear errors for bad input.

Names, queues, keys and ids: valid Unicode (no lone surrogates), no NUL, at
most ``MAX_TEXT_BYTES`` bytes of UTF-8; a progress message: valid Unicode
without NUL. JSON values: no lone surrogates. Each is refused up front with an
error naming the argument, the same way on SQLite and PostgreSQL, and nothing
is written. Before these rules a lone surrogate hung a SQLite caller forever
(the driver failed to encode it inside the engine's flush), and PostgreSQL
answered with raw driver errors.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from cairnq import SerializationError, TaskContext, TaskTimeout
from cairnq.errors import DatabaseReplaced
from cairnq.store.validation import MAX_TEXT_BYTES

# Bounds every call below: a caller left hanging fails the test instead of the run.
CALL_TIMEOUT_S = 10
SURROGATE = "report-\udc80.txt"  # what os.listdir gives for a non-UTF-8 file name


async def bounded(awaitable: Any) -> Any:
    return await asyncio.wait_for(awaitable, CALL_TIMEOUT_S)


async def task_count(client: Any) -> int:
    stats = await client.stats()
    return sum(sum(by_status.values()) for by_status in stats.values())


BAD_TEXT = {
    "lone surrogate": (SURROGATE, "lone surrogate"),
    "NUL": ("bad\x00text", "NUL"),
    "too long": ("q" * (MAX_TEXT_BYTES + 1), f"at most {MAX_TEXT_BYTES} bytes"),
    "too long in UTF-8": ("é" * (MAX_TEXT_BYTES // 2 + 1), f"at most {MAX_TEXT_BYTES} bytes"),
}


@pytest.mark.parametrize("bad", list(BAD_TEXT), ids=list(BAD_TEXT))
@pytest.mark.parametrize(
    "field", ["name", "queue", "key", "parent_id", "root_id", "correlation_id"]
)
async def test_submit_refuses_bad_text(backend: Any, field: str, bad: str) -> None:
    client = backend.client()
    await client.connect()
    value, why = BAD_TEXT[bad]
    kwargs: dict[str, Any] = {"payload": {"n": 1}}
    name = value if field == "name" else "ok.name"
    if field != "name":
        kwargs[field] = value
    with pytest.raises(ValueError, match=why) as err:
        await bounded(client.store.submit(name=name, **kwargs))
    assert field in str(err.value)
    assert await task_count(client) == 0
    # The store is still fine afterwards.
    assert (await bounded(client.submit("ok.name", {"n": 2}))).status == "queued"


async def test_every_entry_point_refuses_a_lone_surrogate(backend: Any) -> None:
    """Reads, filters, keyed operations, claims and worker writes: each names
    the argument, none hangs, none reaches the driver."""
    client = backend.client()
    store = client.store
    task = await client.submit("ok", {})
    [claimed] = await store.claim(queues=["default"], worker_id="w1")
    calls = {
        "task_id": [
            store.get(SURROGATE), store.get_status(SURROGATE), store.cancel(SURROGATE),
            store.retry(SURROGATE),
        ],
        "key": [
            store.get_by_key(SURROGATE), store.get_status_by_key(SURROGATE),
            store.cancel_by_key(SURROGATE), store.retry_by_key(SURROGATE),
        ],
        "queue": [
            store.list(queue=SURROGATE), store.stats(SURROGATE), store.queue_depth(SURROGATE, 5),
            store.purge(queue=SURROGATE),
        ],
        "name": [store.list(name=SURROGATE), store.purge(name=SURROGATE)],
        "root_id": [store.list(root_id=SURROGATE)],
        "correlation_id": [store.list(correlation_id=SURROGATE)],
        "queues": [store.claim(queues=[SURROGATE], worker_id="w2")],
        "names": [store.claim(queues=["default"], names=[SURROGATE], worker_id="w2")],
        "worker_id": [
            store.claim(queues=["default"], worker_id=SURROGATE),
            store.heartbeat(task_id=claimed.id, worker_id=SURROGATE),
            store.complete(task_id=claimed.id, worker_id=SURROGATE, result=None),
        ],
        "message": [
            store.progress(task_id=claimed.id, worker_id="w1", progress=0.5, message=SURROGATE),
            store.progress(task_id=claimed.id, worker_id="w1", progress=None, message="a\x00b"),
        ],
    }  # fmt: skip
    for argument, awaitables in calls.items():
        for awaitable in awaitables:
            with pytest.raises(ValueError) as err:
                await bounded(awaitable)
            assert argument in str(err.value), (argument, err.value)
    after = await store.get(task.id)
    assert after is not None and after.status == "running" and after.message is None


async def test_lookups_of_a_non_str_id_are_a_type_error(backend: Any) -> None:
    store = backend.store()
    for call in (store.get(5), store.get_status(5), store.cancel(None), store.retry(b"id")):
        with pytest.raises(TypeError, match="task_id must be a str"):
            await bounded(call)
    with pytest.raises(TypeError, match="key must be a str"):
        await bounded(store.get_by_key(7))


async def test_longest_allowed_names_work_on_both_dialects(backend: Any) -> None:
    """The limit is in UTF-8 bytes, and everything at the limit is stored,
    indexed and claimed alike (a PostgreSQL btree entry must still fit)."""
    client = backend.client()
    queue = "é" * (MAX_TEXT_BYTES // 2)
    name = "n" * MAX_TEXT_BYTES
    key = "🔑" * (MAX_TEXT_BYTES // 4)
    task = await client.store.submit(
        name=name, payload={"x": 1}, queue=queue, key=key, correlation_id="c" * MAX_TEXT_BYTES
    )
    assert (await client.get_by_key(key)).id == task.id
    [claimed] = await client.store.claim(queues=[queue], names=[name], worker_id="w" * MAX_TEXT_BYTES)
    assert claimed.id == task.id and claimed.queue == queue


# -- JSON values -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [{"file": SURROGATE}, [SURROGATE], SURROGATE, {SURROGATE: 1}, {"pair?": "\ud83d"}],
    ids=["value", "list", "string", "key", "high-half"],
)
async def test_json_with_a_lone_surrogate_is_a_serialization_error(backend: Any, payload: Any) -> None:
    client = backend.client()
    await client.connect()
    with pytest.raises(SerializationError, match="lone surrogate"):
        await bounded(client.submit("json.bad", payload))
    with pytest.raises(SerializationError, match="lone surrogate"):
        await bounded(client.submit("json.bad", {}, metadata={"m": payload}))
    assert await task_count(client) == 0


async def test_astral_characters_and_escaped_backslash_u_are_fine(backend: Any) -> None:
    client = backend.client()
    payload = {"emoji": "😀", "pair-as-two-code-points": "\ud83d\ude00", "text": "\\ud800 is not one"}
    task = await client.submit("json.ok", payload)
    got = (await client.get(task.id)).payload
    assert got["emoji"] == "😀" == got["pair-as-two-code-points"]
    assert got["text"] == "\\ud800 is not one"


async def test_worker_handler_errors_and_results_with_surrogates(backend: Any) -> None:
    """A handler whose progress message, exception text or result carries an
    undecodable file name: the handler sees a clear error, and every task is
    settled (none left running with its lease renewed forever)."""
    client = backend.client()
    worker = backend.worker(concurrency=3, lease_ms=2_000)
    seen: dict[str, BaseException] = {}

    @worker.task("progress")
    async def progress(ctx: TaskContext, payload: Any) -> None:
        try:
            await ctx.progress(0.5, f"processing {SURROGATE}")
        except ValueError as exc:
            seen["progress"] = exc
            raise

    @worker.task("raises")
    async def raises(ctx: TaskContext, payload: Any) -> None:
        raise RuntimeError(f"cannot read {SURROGATE}")

    @worker.task("returns")
    async def returns(ctx: TaskContext, payload: Any) -> Any:
        return {"file": SURROGATE}

    tasks = [await client.submit(n, {}, max_attempts=1) for n in ("progress", "raises", "returns")]
    async with worker.background():
        done = [await client.wait(t.id, timeout_ms=15_000) for t in tasks]
    assert [t.status for t in done] == ["failed", "failed", "failed"]
    assert "message" in str(seen["progress"]) and "lone surrogate" in str(seen["progress"])
    assert done[0].error["code"] == "handler_error" and "lone surrogate" in done[0].error["message"]
    assert done[1].error["type"] == "RuntimeError"
    assert "report-\ufffd.txt" in done[1].error["message"]  # kept, made valid
    assert done[2].error["code"] == "unserializable_result"


# -- PostgreSQL schema names and connections ------------------------------------------------


@pytest.mark.parametrize(
    "schema, why",
    [
        ("s" * 64, "at most 63"),
        ("information_schema", "reserved"),
        ("pg_catalog", "reserved"),
        ("pg_mine", "reserved"),
        ("PG_Upper", "reserved"),
    ],
)
async def test_bad_schema_names_are_refused_before_anything_is_created(
    schema: str, why: str
) -> None:
    from backends import DIALECTS, create_database, drop_database, dsn_for

    if "postgres" not in DIALECTS:
        pytest.skip("PostgreSQL schemas")
    import psycopg

    from cairnq import CairnQ

    database = create_database()
    try:
        with pytest.raises(ValueError, match=why):
            CairnQ.postgres(dsn_for(database), schema=schema)
        with psycopg.connect(dsn_for(database)) as conn:
            names = [r[0] for r in conn.execute("select nspname from pg_namespace")]
        assert not [n for n in names if n.startswith("sss") or n == "pg_mine" or n.lower() == "pg_upper"]
    finally:
        drop_database(database)


async def test_postgres_connections_do_not_leak_classes(backend: Any) -> None:
    """Every pooled connection registers a JSON loader; opening and closing a
    client over and over must not leave a class behind each time."""
    if backend.dialect != "postgres":
        pytest.skip("PostgreSQL connections")

    def loader_classes() -> int:
        gc.collect()
        return sum(1 for o in gc.get_objects() if isinstance(o, type) and o.__name__ == "JsonAsText")

    async def cycle() -> None:
        store = backend.store(min_size=1, max_size=2)
        await store.get("task_missing")
        await store.close()

    await cycle()
    before = loader_classes()
    for _ in range(20):
        await cycle()
    assert loader_classes() == before <= 1


# -- SQLite: the file under the path ------------------------------------------------------


async def test_sqlite_file_replaced_under_a_running_worker(tmp_path: Path) -> None:
    """An operator restores the queue file from a copy (or a test fixture
    recreates it) while a worker runs: the worker notices while idle, reports
    it through on_error, reopens the path and runs what the new file holds."""
    from cairnq import CairnQ, Worker

    path = tmp_path / "queue.db"
    errors: list[BaseException] = []
    worker = Worker.sqlite(str(path), concurrency=2, poll_interval_ms=50, on_error=lambda e, i: errors.append(e))
    ran: list[str] = []

    @worker.task("job")
    async def job(ctx: TaskContext, payload: Any) -> None:
        ran.append(payload["n"])

    async with worker.background():
        async with CairnQ.sqlite(str(path)) as first:
            await first.wait((await first.submit("job", {"n": "before"})).id, timeout_ms=10_000)
        # A new database file at the same path, as a restore would leave it.
        replacement = tmp_path / "restored.db"
        async with CairnQ.sqlite(str(replacement)) as other:
            pending = await other.submit("job", {"n": "after"})
        for suffix in ("-wal", "-shm"):
            with_suffix = Path(str(path) + suffix)
            if with_suffix.exists():
                with_suffix.unlink()
        os.replace(replacement, path)
        async with CairnQ.sqlite(str(path)) as second:
            done = await second.wait(pending.id, timeout_ms=15_000)
    assert done.status == "succeeded"
    assert ran == ["before", "after"]
    assert any(isinstance(e, DatabaseReplaced) and "replaced" in str(e) for e in errors), errors


async def test_sqlite_file_deleted_under_a_client(tmp_path: Path) -> None:
    """A deleted file is reopened anew on the next statement after an idle
    wait noticed it, as a fresh start would create it."""
    from cairnq import CairnQ

    path = tmp_path / "gone.db"
    async with CairnQ.sqlite(str(path)) as client:
        store = client.store
        noticed: list[BaseException] = []
        store._subscribe_survived(noticed.append)
        task = await client.submit("t", {})
        for suffix in ("", "-wal", "-shm"):
            if Path(str(path) + suffix).exists():
                os.unlink(str(path) + suffix)
        with pytest.raises(TaskTimeout):  # the task lived in the deleted file
            await client.wait(task.id, timeout_ms=1_500)
        assert any(isinstance(e, DatabaseReplaced) and "deleted" in str(e) for e in noticed)
        again = await client.submit("t", {})
        assert (await client.get(again.id)) is not None
    assert sqlite3.connect(path).execute("select count(*) from cairnq_tasks").fetchone()[0] == 1
