"""The worker: calling convention."""

from __future__ import annotations

import threading
from typing import Any

from worker_kit import finish, make

from cairnq import (
    TaskContext,
)

# -- 2. calling convention -------------------------------------------------------------


async def test_calling_convention_and_threads(backend) -> None:
    q = backend.client()
    w = make(backend, concurrency=4)
    loop_thread = threading.get_ident()
    seen: dict[str, Any] = {}

    @w.task
    async def only_ctx(ctx):
        seen["only_ctx"] = (isinstance(ctx, TaskContext), threading.get_ident() == loop_thread)
        return "ctx"

    @w.task
    async def ctx_payload(ctx, payload):
        seen["ctx_payload"] = threading.get_ident() == loop_thread
        return {"got": payload}

    @w.task
    async def star(*args):
        return [len(args), args[1]]

    @w.task
    async def keyword_only(ctx, *, payload=None):  # one positional parameter: handler(ctx)
        return payload

    @w.task
    def sync_handler(ctx, payload):
        seen["sync"] = (
            threading.current_thread() is not threading.main_thread(),
            threading.get_ident() != loop_thread,
        )
        return {"sync": payload["v"]}

    @w.task
    def sync_returns_awaitable(ctx):
        async def later():
            seen["awaited_on_loop"] = threading.get_ident() == loop_thread
            return "awaited"

        return later()

    class Callable_:
        async def __call__(self, ctx, payload):
            seen["callable"] = threading.get_ident() == loop_thread
            return {"obj": payload["v"]}

    obj = Callable_()
    assert w.task("obj")(obj) is obj

    ids = {
        "only_ctx": (await q.submit("only_ctx", {"v": 0})).id,
        "ctx_payload": (await q.submit("ctx_payload", {"v": 1})).id,
        "star": (await q.submit("star", {"v": 2})).id,
        "keyword_only": (await q.submit("keyword_only", {"v": 3})).id,
        "sync_handler": (await q.submit("sync_handler", {"v": 4})).id,
        "sync_returns_awaitable": (await q.submit("sync_returns_awaitable")).id,
        "obj": (await q.submit("obj", {"v": 5})).id,
    }
    async with w.background():
        results = {n: (await finish(q, i)) for n, i in ids.items()}
    assert {n: t.status for n, t in results.items()} == {n: "succeeded" for n in ids}
    assert results["only_ctx"].result == "ctx"
    assert results["ctx_payload"].result == {"got": {"v": 1}}
    assert results["star"].result == [2, {"v": 2}]
    assert results["keyword_only"].result is None
    assert results["sync_handler"].result == {"sync": 4}
    assert results["sync_returns_awaitable"].result == "awaited"
    assert results["obj"].result == {"obj": 5}
    assert seen == {
        "only_ctx": (True, True),
        "ctx_payload": True,
        "sync": (True, True),
        "awaited_on_loop": True,
        "callable": True,
    }


async def test_context_properties(backend) -> None:
    q = backend.client()
    store = backend.store()
    w = make(backend, queues=("work",))
    parent = await store.submit(
        name="props", payload=[1, "two"], queue="work", metadata={"m": 1}, correlation_id="corr"
    )
    seen: dict[str, Any] = {}

    @w.task
    async def props(ctx):
        seen.update(
            task_id=ctx.task_id,
            name=ctx.name,
            queue=ctx.queue,
            attempt=ctx.attempt,
            worker_id=ctx.worker_id,
            metadata=ctx.metadata,
            root_id=ctx.root_id,
            correlation_id=ctx.correlation_id,
            payload=ctx.payload,
            settled=ctx.settled,
            lost_lease=ctx.lost_lease,
            event=ctx.lease_lost.is_set(),
        )

    async with w.background():
        done = await finish(q, parent.id)
    assert done.status == "succeeded" and done.result is None and done.progress == 1.0
    assert seen == {
        "task_id": parent.id,
        "name": "props",
        "queue": "work",
        "attempt": 1,
        "worker_id": w.worker_id,
        "metadata": {"m": 1},
        "root_id": parent.id,
        "correlation_id": "corr",
        "payload": [1, "two"],
        "settled": False,
        "lost_lease": False,
        "event": False,
    }
    assert done.worker_id == w.worker_id
