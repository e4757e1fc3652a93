"""Coalesced completions: every queued completion is written once, whatever
the timing of the settlements around it."""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from cairnq.worker.store_port import StorePort

WORKER = "w-completions"


async def _claimed(backend: Any, n: int) -> tuple[Any, StorePort, list[Any]]:
    q = backend.client()
    for i in range(n):
        await q.submit("job", {"i": i})
    tasks = await q.store.claim(queues=["default"], worker_id=WORKER, limit=n)
    assert len(tasks) == n
    return q, StorePort(q.store, WORKER, 30_000), tasks


def _recorder(log: list[tuple[str, Optional[str], Optional[BaseException]]], task_id: str) -> Any:
    return lambda status, exc: log.append((task_id, status, exc))


async def test_a_completion_queued_while_a_settlement_is_written_is_written_too(backend: Any) -> None:
    q, port, tasks = await _claimed(backend, 3)
    told: list[tuple[str, Optional[str], Optional[BaseException]]] = []
    first, second, third = tasks
    port.complete_later(first.id, None, _recorder(told, first.id))
    await asyncio.sleep(0)  # the first settlement has begun: its write is on its way
    port.complete_later(second.id, {"r": 2}, _recorder(told, second.id))
    port.complete_later(third.id, None, _recorder(told, third.id))
    for _ in range(500):
        if len(told) == 3 and port.completions_idle:
            break
        await asyncio.sleep(0.01)
    assert sorted((t, s, e) for t, s, e in told) == sorted(
        (t.id, "succeeded", None) for t in tasks
    )
    for task in tasks:
        assert (await q.get(task.id)).status == "succeeded"
    assert (await q.get(second.id)).result == {"r": 2}


async def test_a_settlement_cancelled_before_it_began_tells_its_waiters_and_the_next_goes_on(
    backend: Any,
) -> None:
    q, port, tasks = await _claimed(backend, 2)
    told: list[tuple[str, Optional[str], Optional[BaseException]]] = []
    dropped, kept = tasks
    port.complete_later(dropped.id, None, _recorder(told, dropped.id))
    pending = port._completions._pending  # the settlement task, not yet begun
    assert pending is not None
    pending.cancel()  # as a loop shutting down would
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert len(told) == 1 and told[0][0] == dropped.id
    assert isinstance(told[0][2], asyncio.CancelledError)
    assert port.completions_idle  # nothing is left counted as on its way
    port.complete_later(kept.id, None, _recorder(told, kept.id))
    for _ in range(500):
        if len(told) == 2:
            break
        await asyncio.sleep(0.01)
    assert told[1] == (kept.id, "succeeded", None)
    assert (await q.get(kept.id)).status == "succeeded"
    assert (await q.get(dropped.id)).status == "running"  # nothing was written for it


async def test_waiting_for_the_queued_completions_covers_the_one_on_its_way(backend: Any) -> None:
    # The claim loop waits for what its calls left before it sleeps. A call
    # started eagerly (Python 3.12) has its completion taken by a settlement
    # already on its way when the loop gets there: that one counts too.
    q, port, tasks = await _claimed(backend, 2)
    told: list[tuple[str, Optional[str], Optional[BaseException]]] = []
    first, second = tasks
    assert port.queued_completions_written().done()  # none queued or on its way: at once
    port.complete_later(first.id, None, _recorder(told, first.id))
    await asyncio.sleep(0)  # the first settlement has begun: its write is on its way
    on_its_way = port.queued_completions_written()
    assert not on_its_way.done()
    port.complete_later(second.id, {"r": 2}, _recorder(told, second.id))
    both = port.queued_completions_written()
    await asyncio.wait_for(on_its_way, 5)
    assert first.id in {t for t, _, _ in told}
    assert (await q.get(first.id)).status == "succeeded"
    await asyncio.wait_for(both, 5)
    assert sorted(told) == sorted((t.id, "succeeded", None) for t in tasks)
    assert (await q.get(second.id)).result == {"r": 2}


async def test_a_group_is_told_once_with_the_status_of_each_task_it_settled(backend: Any) -> None:
    q, port, tasks = await _claimed(backend, 3)
    completions = port.completer()
    assert completions is not None
    told: list[tuple[str, Optional[str], Optional[BaseException]]] = []
    groups: list[tuple[Any, Optional[BaseException]]] = []
    alone, *grouped = tasks
    # One of the group's tasks is settled behind the worker's back: it is
    # missing from what the group hears (its lease is lost).
    await q.store.complete(task_id=grouped[1].id, worker_id=WORKER, result=None)
    port.complete_later(alone.id, "one", _recorder(told, alone.id))
    completions.complete_group(
        [t.id for t in grouped], [completions.encode({"g": 0}), None], lambda settled, exc: groups.append((settled, exc))
    )
    for _ in range(500):
        if told and groups and port.completions_idle:
            break
        await asyncio.sleep(0.01)
    assert told == [(alone.id, "succeeded", None)]
    assert len(groups) == 1
    settled, exc = groups[0]
    assert exc is None
    assert settled.get(grouped[0].id) == "succeeded" and grouped[1].id not in settled
    assert (await q.get(grouped[0].id)).result == {"g": 0}
    assert (await q.get(alone.id)).result == "one"


async def test_a_group_whose_settlement_was_cancelled_before_it_began_is_told_so(backend: Any) -> None:
    q, port, tasks = await _claimed(backend, 2)
    completions = port.completer()
    assert completions is not None
    groups: list[tuple[Any, Optional[BaseException]]] = []
    completions.complete_group([t.id for t in tasks], [None, None], lambda settled, exc: groups.append((settled, exc)))
    pending = completions._pending
    assert pending is not None
    pending.cancel()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert len(groups) == 1 and groups[0][0] is None and isinstance(groups[0][1], asyncio.CancelledError)
    assert port.completions_idle
    assert [(await q.get(t.id)).status for t in tasks] == ["running", "running"]
