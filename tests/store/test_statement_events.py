"""Statement events: every protocol statement a store runs is reported on the
``statement`` channel of ``cairnq.events`` (name, dialect, rows, duration,
error), on both dialects, and only while someone listens."""

from __future__ import annotations

from typing import Any

import pytest

from cairnq import events
from cairnq.events import StatementEvent


@pytest.fixture
def seen() -> Any:
    got: list[StatementEvent] = []
    stop = events.subscribe(got.append, kinds=["statement"])
    yield got
    stop()


def insert_params(task_id: str) -> dict[str, Any]:
    return {
        "id": task_id, "name": "n", "queue": "default", "payload": "{}", "metadata": "{}",
        "max_attempts": 3, "priority": 0, "delay_ms": 0, "parent_id": None, "root_id": task_id,
        "correlation_id": None,
    }  # fmt: skip


async def test_each_statement_reports_its_name_dialect_and_rows(backend: Any, seen: list[StatementEvent]) -> None:
    store = backend.store()
    await store.connect()
    seen.clear()
    task = await store.submit(name="n")
    assert await store.get(task.id) is not None
    assert await store.get("task_missing") is None
    assert len(await store.list(limit=10)) == 1
    assert [(e.kind, e.name, e.dialect, e.rows, e.error) for e in seen] == [
        ("statement", "insert_task", backend.dialect, 1, None),
        ("statement", "get", backend.dialect, 1, None),
        ("statement", "get", backend.dialect, 0, None),
        ("statement", "list", backend.dialect, 1, None),
    ]
    assert all(e.duration_s >= 0 for e in seen)


async def test_statements_in_a_transaction_are_reported_one_by_one(backend: Any, seen: list[StatementEvent]) -> None:
    store = backend.store()
    await store.connect()
    seen.clear()
    await store.submit(name="n", key="k")
    assert [e.name for e in seen] == ["lock_key", "get_key", "insert_task", "upsert_key"]
    assert [e.rows for e in seen if e.name == "insert_task"] == [1]


async def test_a_worker_claim_and_settlement_are_reported(backend: Any, seen: list[StatementEvent]) -> None:
    q = backend.client()
    w = backend.worker(poll_interval_ms=20)

    @w.task("n")
    async def handler(ctx: Any) -> str:
        return "ok"

    task = await q.submit("n")
    async with w.background():
        done = await q.wait(task.id, timeout_ms=10_000, poll_ms=10)
    assert done.status == "succeeded"
    claims = [e for e in seen if e.name.startswith("claim_")]
    assert claims and sum(e.rows for e in claims) == 1
    settled = [e for e in seen if e.name in ("complete", "complete_many", "complete_each")]
    assert [e.rows for e in settled] == [1]


async def test_a_failing_statement_reports_its_error(backend: Any, seen: list[StatementEvent]) -> None:
    store = backend.store()
    task = await store.submit(name="n")
    seen.clear()
    with pytest.raises(Exception) as raised:
        await store._fetch("insert_task", insert_params(task.id))  # the id is taken
    [event] = seen
    assert (event.name, event.dialect, event.rows) == ("insert_task", backend.dialect, 0)
    assert event.error is raised.value


async def test_unsubscribing_stops_delivery(backend: Any) -> None:
    store = backend.store()
    await store.connect()
    got: list[StatementEvent] = []
    stop = events.subscribe(got.append, kinds=["statement"])
    await store.submit(name="n")
    stop()
    assert len(got) == 1 and not events.channel("statement").on
    await store.submit(name="n")
    assert len(got) == 1
