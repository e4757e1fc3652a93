"""The dashboard's data layer (cairnq/dashboard/queries.py over the store's
browse statements): keyset pages in every order walk every matching task
exactly once, filters narrow, bad input is a FilterError with a message, and
the overview's aggregates match the rows. Both dialects."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("starlette")  # the dashboard extra; queries.py itself needs none of it

from cairnq import CairnQ, Task  # noqa: E402
from cairnq.dashboard.queries import (  # noqa: E402
    FilterError,
    TaskFilter,
    overview,
    task_page,
)

ENVELOPE = {"type": "Boom", "message": "it broke", "retryable": False}


async def _seed(q: CairnQ) -> dict[str, list[Task]]:
    """Tasks across two queues and every status; some share a correlation id."""
    store = q.store
    made: dict[str, list[Task]] = {"all": []}
    for i in range(7):
        made["all"].append(
            await store.submit(name="mail.send", payload={"i": i}, queue="mail", correlation_id="c1")
        )
    for i in range(5):
        made["all"].append(await q.submit("img.resize", {"i": i}, queue="img"))
        await asyncio.sleep(0.002)  # spread creation over milliseconds
    claimed = await store.claim(queues=["img"], worker_id="w-img", lease_ms=30_000, limit=4, names=None)
    for t in claimed[:2]:
        await store.complete(task_id=t.id, worker_id="w-img", result={"ok": t.id})
        await asyncio.sleep(0.002)
    await store.fail(task_id=claimed[2].id, worker_id="w-img", error=ENVELOPE, retryable=False, delay_ms=0)
    await q.cancel(made["all"][0].id)
    made["all"].append(await q.submit("later", queue="mail", delay_ms=3_600_000))
    return made


async def _walk(q: CairnQ, flt: TaskFilter, sort: str, limit: int) -> list[Task]:
    seen: list[Task] = []
    cursor = None
    for _ in range(100):
        page = await task_page(q, flt, sort=sort, cursor=cursor, limit=limit)
        assert len(page.tasks) <= limit
        seen.extend(page.tasks)
        if page.next_cursor is None:
            return seen
        cursor = page.next_cursor
    raise AssertionError("pagination did not end")


async def test_pages_walk_every_task_once_in_order(backend: Any) -> None:
    q = backend.client()
    made = await _seed(q)
    everything = [await q.get(t.id) for t in made["all"]]
    by_created = sorted(everything, key=lambda t: t.id)  # ULID ids: creation order
    newest = await _walk(q, TaskFilter(), "newest", 3)
    assert [t.id for t in newest] == [t.id for t in reversed(by_created)]
    oldest = await _walk(q, TaskFilter(), "oldest", 4)
    assert [t.id for t in oldest] == [t.id for t in by_created]
    finished = sorted(
        (t for t in everything if t.completed_at_ms is not None), key=lambda t: (t.completed_at_ms, t.id)
    )
    assert len(finished) == 4  # 2 succeeded, 1 failed, 1 canceled
    walked = await _walk(q, TaskFilter(), "finished_newest", 1)
    assert [t.id for t in walked] == [t.id for t in reversed(finished)]
    walked = await _walk(q, TaskFilter(), "finished_oldest", 3)
    assert [t.id for t in walked] == [t.id for t in finished]
    # the same page twice is the same rows; a page size equal to the total ends at once
    first = await task_page(q, TaskFilter(), limit=len(everything))
    assert first.next_cursor is None and len(first.tasks) == len(everything)


async def test_filters_narrow(backend: Any) -> None:
    q = backend.client()
    made = await _seed(q)
    ids = lambda tasks: sorted(t.id for t in tasks)  # noqa: E731
    mail = await _walk(q, TaskFilter(queue="mail"), "newest", 2)
    assert ids(mail) == ids(t for t in made["all"] if t.queue == "mail")
    failed = await _walk(q, TaskFilter(status="failed"), "newest", 5)
    assert [t.status for t in failed] == ["failed"] and failed[0].error["message"] == "it broke"
    img_done = await _walk(q, TaskFilter(queue="img", status="succeeded"), "finished_newest", 1)
    assert len(img_done) == 2 and {t.queue for t in img_done} == {"img"}
    corr = await _walk(q, TaskFilter(correlation_id="c1", name="mail.send"), "oldest", 3)
    assert len(corr) == 7
    assert await _walk(q, TaskFilter(name="nobody"), "newest", 5) == []
    # hostile text is a value, never SQL
    for text in ("' or 1=1 --", '"; drop table cairnq_tasks; --', "%", "_", "\\"):
        assert await _walk(q, TaskFilter(queue=text), "newest", 5) == []
    assert len(await _walk(q, TaskFilter(), "newest", 50)) == len(made["all"])


async def test_key_and_time_range(backend: Any) -> None:
    q = backend.client()
    before = await q.submit("old")
    await asyncio.sleep(0.01)
    keyed = await q.submit("keyed", key="order-42", queue="k")
    await asyncio.sleep(0.01)
    after = await q.submit("new")
    page = await task_page(q, TaskFilter(key="order-42"))
    assert [t.id for t in page.tasks] == [keyed.id] and page.next_cursor is None
    assert (await task_page(q, TaskFilter(key="order-42", queue="other"))).tasks == []
    assert (await task_page(q, TaskFilter(key="no-such-key"))).tasks == []
    flt = TaskFilter(created_from_ms=keyed.created_at_ms, created_to_ms=after.created_at_ms)
    assert [t.id for t in (await task_page(q, flt)).tasks] == [keyed.id]
    flt = TaskFilter(created_from_ms=before.created_at_ms)
    assert len((await task_page(q, flt, sort="oldest")).tasks) == 3
    flt = TaskFilter(created_to_ms=before.created_at_ms)
    assert (await task_page(q, flt)).tasks == []


@pytest.mark.parametrize(
    "query, message",
    [
        ({"status": "done"}, "status must be one of"),
        ({"created_from": "yesterday"}, "is not a time"),
        ({"created_from": "2026-12-02", "created_to": "2026-12-01"}, "must be before"),
        ({"created_to": "99999999999999999"}, "out of range"),
        ({"queue": "x" * 2000}, "too long"),
    ],
)
def test_bad_filters_say_why(query: dict[str, str], message: str) -> None:
    with pytest.raises(FilterError, match=message):
        TaskFilter.from_query(query)


def test_filters_parse_and_round_trip() -> None:
    flt = TaskFilter.from_query(
        {"queue": " mail ", "status": "failed", "name": "", "created_from": "2026-12-01T10:00Z"}
    )
    assert flt == TaskFilter(status="failed", queue="mail", created_from_ms=1_796_119_200_000)
    assert TaskFilter.from_query(flt.query()) == flt
    assert TaskFilter.from_query({}).empty
    # a naive time is UTC; an offset is honoured
    a = TaskFilter.from_query({"created_from": "2026-12-01T10:00"}).created_from_ms
    b = TaskFilter.from_query({"created_from": "2026-12-01T11:00+01:00"}).created_from_ms
    assert a == b == 1_796_119_200_000


async def test_bad_pages_say_why(backend: Any) -> None:
    q = backend.client()
    await q.submit("x")
    for kwargs, message in (
        ({"sort": "random"}, "sort must be one of"),
        ({"cursor": "!!!"}, "cursor is not valid"),
        ({"cursor": "bm9wZQ"}, "cursor is not valid"),  # "nope": no separator
        ({"limit": 0}, "page size"),
        ({"limit": 100_000}, "page size"),
    ):
        with pytest.raises(FilterError, match=message):
            await task_page(q, TaskFilter(), **kwargs)
    with pytest.raises(FilterError, match="has not finished"):
        await task_page(q, TaskFilter(status="queued"), sort="finished_newest")
    # a creation-order cursor handed to a finished order is refused, not misread
    page = await task_page(q, TaskFilter(), limit=1)
    await q.submit("y")
    page = await task_page(q, TaskFilter(), limit=1)
    assert page.next_cursor is not None
    with pytest.raises(FilterError, match="cursor is not valid"):
        await task_page(q, TaskFilter(), sort="finished_newest", cursor=page.next_cursor)


async def test_overview_matches_the_rows(backend: Any) -> None:
    q = backend.client()
    await _seed(q)
    view = await overview(q)
    queues = {row.queue: row for row in view.queues}
    assert set(queues) == {"img", "mail"}
    assert queues["img"].counts == {
        "queued": 1, "running": 1, "succeeded": 2, "failed": 1, "canceled": 0,
    }  # fmt: skip
    assert queues["mail"].counts["queued"] == 7 and queues["mail"].counts["canceled"] == 1
    assert queues["mail"].scheduled == 1  # the delayed one is not due
    age = queues["mail"].oldest_due_age_ms
    assert age is not None and 0 <= age < 60_000
    assert view.totals["succeeded"] == 2 and sum(view.totals.values()) == 13
    assert len(view.throughput) == 60
    assert sum(b.succeeded for b in view.throughput) == 2
    assert sum(b.failed for b in view.throughput) == 1
    assert sum(b.canceled for b in view.throughput) == 1
    assert [(r.worker_id, r.queue) for r in view.running] == [("w-img", "img")]
    workers = {w.worker_id: w for w in view.workers}
    assert workers["w-img"].running == 1 and workers["w-img"].finished_recently == 3
    data = view.to_json()
    assert data["queues"][0]["queue"] == "img" and data["running"][0]["worker_id"] == "w-img"


async def test_overview_of_an_empty_database(backend: Any) -> None:
    view = await overview(backend.client())
    assert view.queues == [] and view.workers == [] and view.running == []
    assert all(b.finished == 0 and b.failure_rate is None for b in view.throughput)
