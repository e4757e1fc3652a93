"""Reads: get / get_by_key / get_status / get_status_by_key, list, stats, queue_depth.

Spec: OPERATIONS.md §3.2-§3.5, §3.9; API.md §4, §7.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from db_clock import now_ms

from cairnq import STATUSES, CairnQ, Task, TaskRef

ENVELOPE = {
    "type": "Boom",
    "code": "boom",
    "message": "it broke",
    "retryable": False,
    "details": {},
}
ALL_STATUSES = ("queued", "running", "succeeded", "failed", "canceled")


def zeros() -> dict[str, int]:
    return dict.fromkeys(ALL_STATUSES, 0)


async def drive(store: Any, task: Task, status: str, worker: str = "w1") -> Task:
    """Move a freshly submitted task (the only queued one in its queue) to ``status``."""
    if status == "queued":
        return task
    if status == "canceled":
        done = await store.cancel(task.id)
        assert done is not None and done.status == "canceled"
        return done
    claimed = await store.claim(
        queues=[task.queue], worker_id=worker, lease_ms=30000, limit=1, names=None
    )
    assert [c.id for c in claimed] == [task.id]
    if status == "running":
        return claimed[0]
    if status == "succeeded":
        done = await store.complete(task_id=task.id, worker_id=worker, result={"r": task.id})
    else:
        done = await store.fail(
            task_id=task.id, worker_id=worker, error=ENVELOPE, retryable=False, delay_ms=0
        )
    assert done.status == status
    return done


def newest_first(tasks: list[Task]) -> list[str]:
    return [t.id for t in sorted(tasks, key=lambda t: (t.created_at_ms, t.id), reverse=True)]


# -- get / get_by_key / get_status / get_status_by_key ----------------------------


async def test_unknown_lookups_return_none(backend: Any) -> None:
    q = backend.client()
    assert await q.get("task_00000000000000000000000000") is None
    assert await q.get_by_key("nope") is None
    assert await q.get_status("task_00000000000000000000000000") is None
    assert await q.get_status_by_key("nope") is None
    # a key lookup does not match a task id, nor an id lookup a key
    t = await q.submit("x", key="k1")
    assert await q.get_by_key(t.id) is None
    assert await q.get("k1") is None
    assert await q.get_status("k1") is None
    assert await q.get_status_by_key(t.id) is None


async def test_get_returns_full_row(backend: Any) -> None:
    store = backend.store()
    q = CairnQ(store)
    t = await store.submit(
        name="full",
        payload=[1, {"a": "b"}],
        queue="qa",
        key="fk",
        max_attempts=4,
        priority=2,
        metadata={"m": [1, 2]},
        parent_id="task_parent",
        root_id="task_root",
        correlation_id="corr",
        delay_ms=5,
    )
    got = await q.get(t.id)
    assert isinstance(got, Task)
    assert got == t
    assert got.payload == [1, {"a": "b"}]
    assert got.metadata == {"m": [1, 2]}
    assert got.parent_id == "task_parent"
    assert got.root_id == "task_root"
    assert got.correlation_id == "corr"
    assert await q.get_by_key("fk") == t
    assert await store.get(t.id) == t


async def test_get_follows_row_through_lifecycle(backend: Any) -> None:
    store = backend.store()
    q = CairnQ(store)
    t = await q.submit("life", {"n": 1}, key="lk", queue="lq")
    running = await drive(store, t, "running")
    assert await q.get(t.id) == running
    assert await q.get_by_key("lk") == running
    assert running.worker_id == "w1"
    assert running.attempt == 1
    done = await store.complete(task_id=t.id, worker_id="w1", result={"out": 2})
    assert await q.get(t.id) == done
    assert await q.get_by_key("lk") == done
    assert done.result == {"out": 2}


@pytest.mark.parametrize("status", ALL_STATUSES)
async def test_get_status_and_by_key(backend: Any, status: str) -> None:
    store = backend.store()
    q = CairnQ(store)
    t = await q.submit("st", {"big": "x" * 100}, key=f"key-{status}", queue="sq")
    await drive(store, t, status)
    ref = await q.get_status(t.id)
    assert isinstance(ref, TaskRef)
    assert ref == TaskRef(t.id, status)
    assert ref.id == t.id and ref.status == status
    assert ref.is_terminal is (status in ("succeeded", "failed", "canceled"))
    by_key = await q.get_status_by_key(f"key-{status}")
    assert by_key == TaskRef(t.id, status)
    assert (await q.get_by_key(f"key-{status}")).status == status


async def test_get_status_by_key_follows_repointed_key(backend: Any) -> None:
    q = backend.client()
    t1 = await q.submit("r", key="rk")
    t2 = await q.submit("r", key="rk", conflict="replace")
    assert await q.get_status_by_key("rk") == TaskRef(t2.id, "queued")
    assert await q.get_status(t1.id) == TaskRef(t1.id, "canceled")
    assert (await q.get_by_key("rk")).id == t2.id


# -- list ------------------------------------------------------------------------

# (name, queue, root_id, correlation_id, status)
LIST_SPECS = [
    ("x", "a", "R1", "C1", "succeeded"),
    ("y", "a", "R1", "C2", "failed"),
    ("x", "b", "R2", "C1", "canceled"),
    ("y", "b", None, None, "running"),
    ("x", "c", "R1", "C1", "running"),
    ("x", "a", "R2", "C2", "queued"),
    ("y", "a", "R1", "C1", "queued"),
    ("x", "b", None, "C1", "queued"),
    ("z", "c", "R2", None, "queued"),
]


async def build_list_dataset(store: Any) -> list[Task]:
    # Tasks that get claimed are submitted (and driven) before any task that
    # stays queued, so each claim finds exactly one queued task in its queue.
    order = sorted(range(len(LIST_SPECS)), key=lambda i: LIST_SPECS[i][4] == "queued")
    for i in order:
        name, queue, root_id, corr, status = LIST_SPECS[i]
        t = await store.submit(
            name=name,
            payload={"i": i},
            queue=queue,
            root_id=root_id,
            correlation_id=corr,
        )
        await drive(store, t, status)
    everything = await store.list(limit=1000)
    assert len(everything) == len(LIST_SPECS)
    return everything


LIST_FILTERS: list[dict[str, Any]] = [
    {},
    {"status": "queued"},
    {"status": "running"},
    {"status": "succeeded"},
    {"status": "failed"},
    {"status": "canceled"},
    {"queue": "a"},
    {"queue": "b"},
    {"queue": "missing"},
    {"name": "x"},
    {"name": "z"},
    {"root_id": "R1"},
    {"root_id": "R2"},
    {"correlation_id": "C1"},
    {"correlation_id": "C2"},
    {"status": "queued", "queue": "a"},
    {"status": "queued", "name": "x"},
    {"queue": "a", "name": "x", "root_id": "R2"},
    {"name": "x", "correlation_id": "C1"},
    {"status": "running", "queue": "c", "name": "x", "root_id": "R1", "correlation_id": "C1"},
    {"status": "running", "queue": "c", "name": "y"},
    {"status": None, "queue": None, "name": None, "root_id": None, "correlation_id": None},
]


def matches(t: Task, filters: dict[str, Any]) -> bool:
    return all(v is None or getattr(t, k) == v for k, v in filters.items())


async def test_list_filters(backend: Any) -> None:
    store = backend.store()
    q = CairnQ(store)
    everything = await build_list_dataset(store)
    by_id = {t.id: t for t in everything}
    for filters in LIST_FILTERS:
        expected = newest_first([t for t in everything if matches(t, filters)])
        got = await q.list(**filters)
        assert [t.id for t in got] == expected, filters
        for t in got:
            assert t == by_id[t.id]
    # sanity: the dataset really exercises the filters
    assert len(await q.list(status="queued")) == 4
    assert len(await q.list(queue="a")) == 4
    assert len(await q.list(root_id="R1")) == 4
    assert [t.id for t in await q.list(queue="missing")] == []
    # root_id defaults to the task's own id, so it is filterable by that id
    lone = next(t for t in everything if t.root_id == t.id)
    assert [t.id for t in await q.list(root_id=lone.id)] == [lone.id]


async def test_list_order_newest_first_ties_by_id_desc(backend: Any) -> None:
    q = backend.client()
    tasks = []
    for i in range(30):
        tasks.append(await q.submit("ord", {"i": i}))
        if i % 10 == 9:
            await asyncio.sleep(0.003)
    expected = newest_first(tasks)
    got = await q.list()
    assert [t.id for t in got] == expected
    # several tasks share a millisecond: ties are broken by id, descending
    created = [t.created_at_ms for t in got]
    assert created == sorted(created, reverse=True)
    for a, b in zip(got, got[1:]):
        if a.created_at_ms == b.created_at_ms:
            assert a.id > b.id


async def test_list_limit_offset(backend: Any) -> None:
    q = backend.client()
    tasks = [await q.submit("page", {"i": i}) for i in range(12)]
    ordered = newest_first(tasks)
    assert [t.id for t in await q.list(limit=5)] == ordered[:5]
    assert [t.id for t in await q.list(limit=5, offset=5)] == ordered[5:10]
    assert [t.id for t in await q.list(limit=5, offset=10)] == ordered[10:]
    assert [t.id for t in await q.list(offset=3)] == ordered[3:]
    assert await q.list(limit=5, offset=12) == []
    assert await q.list(limit=5, offset=100) == []
    assert await q.list(limit=0) == []
    assert [t.id for t in await q.list(limit=1, offset=11)] == ordered[11:]
    assert [t.id for t in await q.list(limit=100)] == ordered


async def test_list_default_limit_is_100(backend: Any) -> None:
    q = backend.client()
    tasks = [await q.submit("many", {"i": i}) for i in range(103)]
    ordered = newest_first(tasks)
    got = await q.list()
    assert [t.id for t in got] == ordered[:100]
    assert [t.id for t in await q.list(offset=100)] == ordered[100:]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"status": "bogus"},
        {"status": "QUEUED"},
        {"status": ""},
        {"limit": -1},
        {"offset": -1},
        {"limit": -5, "offset": 0},
    ],
    ids=repr,
)
async def test_list_validation(backend: Any, kwargs: dict[str, Any]) -> None:
    q = backend.client()
    await q.submit("v")
    with pytest.raises(ValueError):
        await q.list(**kwargs)
    with pytest.raises(ValueError):
        await q.store.list(**kwargs)


# -- stats -------------------------------------------------------------------------


async def test_stats_empty(backend: Any) -> None:
    q = backend.client()
    assert await q.stats() == {}
    got = await q.stats("nothing-here")
    assert got == {"nothing-here": zeros()}
    assert list(got["nothing-here"]) == list(ALL_STATUSES)


async def test_stats_counts_zero_filled_in_order(backend: Any) -> None:
    store = backend.store()
    q = CairnQ(store)
    everything = await build_list_dataset(store)
    expected: dict[str, dict[str, int]] = {}
    for t in everything:
        expected.setdefault(t.queue, zeros())[t.status] += 1
    assert expected == {
        "a": {"queued": 2, "running": 0, "succeeded": 1, "failed": 1, "canceled": 0},
        "b": {"queued": 1, "running": 1, "succeeded": 0, "failed": 0, "canceled": 1},
        "c": {"queued": 1, "running": 1, "succeeded": 0, "failed": 0, "canceled": 0},
    }
    got = await q.stats()
    assert got == expected
    for counts in got.values():
        assert list(counts) == list(ALL_STATUSES) == list(STATUSES)
        assert all(type(n) is int for n in counts.values())

    one = await q.stats("b")
    assert one == {"b": expected["b"]}
    assert list(one["b"]) == list(ALL_STATUSES)
    assert await q.stats(queue="c") == {"c": expected["c"]}
    # a filter queue with no rows is present (all zeros) even with other queues populated
    assert await q.stats("zzz") == {"zzz": zeros()}


async def test_stats_absent_queue_after_purge(backend: Any) -> None:
    store = backend.store()
    q = CairnQ(store)
    t = await q.submit("s", queue="gone")
    await drive(store, t, "succeeded")
    u = await q.submit("s", queue="stay")
    assert await q.stats() == {
        "gone": {**zeros(), "succeeded": 1},
        "stay": {**zeros(), "queued": 1},
    }
    await asyncio.sleep(0.003)
    assert await q.purge() == [t.id]
    assert await q.stats() == {"stay": {**zeros(), "queued": 1}}
    assert await q.stats("gone") == {"gone": zeros()}
    assert u.status == "queued"


# -- queue_depth ---------------------------------------------------------------------


async def test_queue_depth_empty(backend: Any) -> None:
    q = backend.client()
    assert await q.queue_depth("q", 5) == 5
    assert await q.queue_depth("q", 1) == 1
    assert await q.queue_depth("q", 0) == 0
    assert type(await q.queue_depth("q", 5)) is int


async def test_queue_depth_headroom(backend: Any) -> None:
    store = backend.store()
    q = CairnQ(store)
    # not counted: running, terminal, and other queues
    for status in ("running", "succeeded", "failed", "canceled"):
        t = await q.submit("d", queue="dq")
        await drive(store, t, status)
    await q.submit("d", queue="other")
    await q.submit("d", queue="other")
    assert await q.queue_depth("dq", 10) == 10
    # counted: queued, delayed ones included
    await q.submit("d", queue="dq")
    await q.submit("d", queue="dq", delay_ms=3_600_000)
    await q.submit("d", queue="dq", priority=9, delay_ms=60_000)
    assert await q.queue_depth("dq", 10) == 7
    assert await q.queue_depth("dq", 4) == 1
    assert await q.queue_depth("dq", 3) == 0
    assert await q.queue_depth("dq", 2) == 0  # saturates, never negative
    assert await q.queue_depth("dq", 1) == 0
    assert await q.queue_depth("dq", 0) == 0
    assert await q.queue_depth("other", 3) == 1
    assert await q.queue_depth("other", 1) == 0
    assert await store.queue_depth("dq", 100) == 97


async def test_queue_depth_changes_with_claims(backend: Any) -> None:
    store = backend.store()
    q = CairnQ(store)
    for _ in range(3):
        await q.submit("d", queue="cq")
    assert await q.queue_depth("cq", 5) == 2
    claimed = await store.claim(queues=["cq"], worker_id="w1", lease_ms=30000, limit=2, names=None)
    assert len(claimed) == 2
    assert await q.queue_depth("cq", 5) == 4  # running tasks are excluded
    await q.cancel(claimed[0].id)  # flagged only: still running, still not counted
    assert await q.queue_depth("cq", 5) == 4


@pytest.mark.parametrize("max_depth", [-1, -100])
async def test_queue_depth_validation(backend: Any, max_depth: int) -> None:
    q = backend.client()
    with pytest.raises(ValueError):
        await q.queue_depth("q", max_depth)
    with pytest.raises(ValueError):
        await q.store.queue_depth("q", max_depth)


async def test_reads_write_nothing(backend: Any) -> None:
    store = backend.store()
    q = CairnQ(store)
    t = await q.submit("ro", key="rok")
    snapshot = await q.get(t.id)
    for _ in range(2):
        await q.get(t.id)
        await q.get_by_key("rok")
        await q.get_status(t.id)
        await q.get_status_by_key("rok")
        await q.list()
        await q.stats()
        await q.queue_depth("default", 3)
    assert await q.get(t.id) == snapshot
    assert [x.id for x in await q.list()] == [t.id]
