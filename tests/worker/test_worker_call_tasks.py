"""The asyncio task a handler runs in (``cairnq/worker/starter.py``): the
calls of one claim share a task until one suspends, and whatever a handler
can act on through its task stays its own."""

from __future__ import annotations

import asyncio
import contextvars
import sys

import pytest
from worker_kit import finish, make

needs_timeout = pytest.mark.skipif(
    sys.version_info < (3, 11), reason="asyncio.timeout and TaskGroup are Python 3.11+"
)


async def _queue(backend, n: int, name: str = "a") -> tuple[object, list[str]]:
    """n tasks queued before the worker starts, so that one claim takes them all."""
    q = backend.client()
    ids = [(await q.submit(name, {"i": i})).id for i in range(n)]
    return q, ids


async def test_a_call_that_suspends_keeps_the_task_it_started_in_and_has_it_to_itself(
    backend,
) -> None:
    q, ids = await _queue(backend, 8)
    w = make(backend, concurrency=8)
    seen: dict[int, tuple[object, object]] = {}
    suspended: set[int] = set()

    @w.task("a")
    async def a(ctx, payload):
        first = asyncio.current_task()
        if payload["i"] % 2:
            suspended.add(payload["i"])
            await asyncio.sleep(0.05)  # every odd call is suspended at once here
        seen[payload["i"]] = (first, asyncio.current_task())

    async with w.background():
        for task_id in ids:
            assert (await finish(q, task_id)).status == "succeeded"
    assert all(first is last for first, last in seen.values())
    sleepers = [seen[i][0] for i in sorted(suspended)]
    assert len(set(map(id, sleepers))) == len(sleepers), "two suspended calls shared a task"


@needs_timeout
async def test_a_timeout_set_in_a_first_step_cancels_its_own_call_only(backend) -> None:
    q, ids = await _queue(backend, 6)
    w = make(backend, concurrency=6)

    @w.task("a")
    async def a(ctx, payload):
        if payload["i"] == 2:  # the calls before it in the claim returned at once
            async with asyncio.timeout(0.05):
                await asyncio.sleep(30)
        if payload["i"] > 2:
            await asyncio.sleep(0.2)  # still running when the timeout fires
        return payload["i"]

    async with w.background():
        outcomes = {i: await finish(q, task_id) for i, task_id in enumerate(ids)}
    assert outcomes[2].status in ("queued", "failed")  # retried or failed: TimeoutError
    assert outcomes[2].error is not None and outcomes[2].error["type"] == "TimeoutError"
    for i in (0, 1, 3, 4, 5):
        assert outcomes[i].status == "succeeded" and outcomes[i].result == i


@needs_timeout
async def test_a_task_group_in_a_handler_runs_its_children_and_waits_for_them(backend) -> None:
    q, ids = await _queue(backend, 4)
    w = make(backend, concurrency=4)

    @w.task("a")
    async def a(ctx, payload):
        async def child(k: int) -> int:
            await asyncio.sleep(0.01)
            return k

        async with asyncio.TaskGroup() as group:
            parts = [group.create_task(child(k)) for k in range(3)]
        return payload["i"] * 10 + sum(p.result() for p in parts)

    async with w.background():
        results = [(await finish(q, task_id)).result for task_id in ids]
    assert results == [i * 10 + 3 for i in range(4)]


_MARK: contextvars.ContextVar[str] = contextvars.ContextVar("mark", default="unset")


async def test_what_one_handler_sets_in_its_context_the_next_does_not_see(backend) -> None:
    q, ids = await _queue(backend, 6)
    w = make(backend, concurrency=6)
    read: list[str] = []

    @w.task("a")
    async def a(ctx, payload):
        read.append(_MARK.get())
        _MARK.set(f"call {payload['i']}")
        if payload["i"] == 3:
            await asyncio.sleep(0.01)
            read.append(_MARK.get())  # its own value, after a suspension

    async with w.background():
        for task_id in ids:
            assert (await finish(q, task_id)).status == "succeeded"
    assert sorted(read) == ["call 3"] + ["unset"] * 6


async def test_a_handler_that_cancels_its_own_task_does_not_cancel_the_calls_after_it(
    backend,
) -> None:
    q, ids = await _queue(backend, 4)
    w = make(backend, concurrency=4)

    @w.task("a")
    async def a(ctx, payload):
        if payload["i"] == 0:
            task = asyncio.current_task()
            assert task is not None
            task.cancel()  # lands when its task next yields or ends
            return "first"
        await asyncio.sleep(0.01)  # the cancel would land here, were this its task
        return payload["i"]

    async with w.background():
        results = [(await finish(q, task_id)).result for task_id in ids]
    assert results == ["first", 1, 2, 3]


async def test_a_call_whose_handler_raises_leaves_the_claims_other_calls_in_its_task(backend) -> None:
    """A failed call's write goes on apart from it: the handler never
    suspended, so the calls after it (of the same handler, too) run on in
    the task they shared."""
    q = backend.client()
    ids = [(await q.submit("a", {"i": 0}, priority=10, max_attempts=1)).id]  # first in the claim
    ids += [(await q.submit("a", {"i": i})).id for i in range(1, 8)]
    w = make(backend, concurrency=8)
    ran_in: dict[int, object] = {}

    @w.task("a")
    async def a(ctx, payload):
        ran_in[payload["i"]] = asyncio.current_task()
        if payload["i"] == 0:
            raise RuntimeError("this one fails")

    async with w.background():
        outcomes = [await finish(q, task_id) for task_id in ids]
    assert outcomes[0].status == "failed" and outcomes[0].error["message"] == "this one fails"
    assert [t.status for t in outcomes[1:]] == ["succeeded"] * 7
    assert len(set(map(id, ran_in.values()))) == 1, "the claim's calls were split across tasks"
