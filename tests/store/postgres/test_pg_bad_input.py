"""PostgreSQL: bad input specific to PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from backends import DIALECTS

if "postgres" not in DIALECTS:
    pytest.skip("PostgreSQL is not available", allow_module_level=True)

import psycopg  # noqa: E402
from pg_kit import fetch, pg, until  # noqa: F401 (fixtures)

# ---------------------------------------------------------------------------
# 8. bad input specific to PostgreSQL


@pytest.mark.parametrize(
    "payload, metadata",
    [
        ({"s": "a\u0000b"}, None),
        (["ok", ["deep \u0000"]], None),
        ("\u0000", None),
        ({"k\u0000ey": 1}, None),
        ({"fine": 1}, {"m": "nul \u0000 here"}),
    ],
)
async def test_nul_character_is_refused_by_the_server(pg, payload, metadata):
    """OPERATIONS.md §1.2: jsonb rejects \u0000 (a server error, not a
    SerializationError; no SDK pre-check). Nothing is written."""
    store = pg.store()
    await store.connect()
    with pytest.raises(psycopg.errors.UntranslatableCharacter):
        await store.submit(name="nul", payload=payload, metadata=metadata)
    with pytest.raises(psycopg.errors.UntranslatableCharacter):
        await store.submit(name="nul", payload=payload, metadata=metadata, key="nul-key")
    assert fetch(pg.target, "select count(*) from cairnq_tasks") == [(0,)]
    assert fetch(pg.target, "select count(*) from cairnq_task_keys") == [(0,)]


async def test_nul_in_result_is_refused_by_the_server(pg):
    store = pg.store()
    await store.connect()
    task = await store.submit(name="nul.result")
    [c] = await store.claim(queues=["default"], worker_id="w_nul")
    with pytest.raises(psycopg.errors.UntranslatableCharacter):
        await store.complete(task_id=c.id, worker_id="w_nul", result={"r": ["\u0000"]})
    with pytest.raises(psycopg.errors.UntranslatableCharacter):
        await store.succeed(task_id=c.id, worker_id="w_nul", result="\u0000")
    got = await store.get(task.id)
    assert got.status == "running" and got.result is None  # nothing written
    done = await store.complete(task_id=c.id, worker_id="w_nul", result={"r": "fine"})
    assert done.status == "succeeded" and done.result == {"r": "fine"}


async def test_literal_backslash_u0000_text_is_not_nul(pg):
    """The six characters ``\\u0000`` (a backslash, then u0000) are ordinary text
    for jsonb; only a real NUL character is refused."""
    store = pg.store()
    await store.connect()
    text = "C:\\u0000dir"
    assert len(text) == 11 and "\x00" not in text
    task = await store.submit(name="bs", payload={"p": text}, metadata={"m": text}, key=text)
    got = await store.get(task.id)
    assert got.payload == {"p": text} and got.metadata == {"m": text}
    [c] = await store.claim(queues=["default"], worker_id="w_bs")
    done = await store.complete(task_id=c.id, worker_id="w_bs", result=[text])
    assert done.result == [text]
    failed_env = {"type": "X", "code": "x", "message": text, "retryable": False, "details": {}}
    t2 = await store.submit(name="bs")
    [c2] = await store.claim(queues=["default"], worker_id="w_bs")
    failed = await store.fail(task_id=c2.id, worker_id="w_bs", error=failed_env, retryable=False)
    assert failed.error == failed_env and c2.id == t2.id


async def test_worker_result_with_nul_is_reported_and_left_to_lease_recovery(pg):
    """A handler result jsonb refuses: the server's error goes to on_error and
    nothing is written, so the task stays running until its lease expires and
    recovery takes it (as 0.15.1: no SDK pre-check, OPERATIONS.md §1.2)."""
    client = pg.client()
    errors: list[tuple[BaseException, dict[str, Any]]] = []
    worker = pg.worker(
        ("default",),
        poll_interval_ms=50,
        lease_ms=300,
        on_error=lambda exc, info: errors.append((exc, info)),
    )

    @worker.task("nul.result")
    async def handler(ctx, payload):
        return {"bad": "\u0000"}

    task = await client.submit("nul.result", {}, max_attempts=2)
    async with worker.background():
        await until(lambda: errors, 3, "the refused settlement reported")
        assert (await client.get(task.id)).status == "running"
        done = await client.wait(task.id, timeout_ms=5_000)
    assert isinstance(errors[0][0], psycopg.errors.UntranslatableCharacter)
    assert errors[0][1]["phase"] == "execute" and errors[0][1]["task_id"] == task.id
    assert (done.status, done.attempt, done.error["code"]) == ("failed", 2, "lease_expired")
