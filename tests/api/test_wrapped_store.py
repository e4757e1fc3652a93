"""A store whose methods are wrapped or replaced is used through them, as by
0.15.1's worker (issue 11 item 8).

Users wrap store methods for instrumentation and fault injection, on the
instance or in a subclass. The worker claims, settles and beats over private
fast paths (cairnq/worker/store_port.py); each is taken only while the
public method it stands for is cairnq's own. Here: a replacement that raises
reaches ``on_error`` and its task is recovered as 0.15.1 recovers it (lease
expiry, another attempt); a pass-through wrapper sees every claim,
settlement and beat; an unwrapped store still takes the fast paths.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, Awaitable, Callable

import pytest

from cairnq import CairnQ, PostgresStore, SQLiteStore, TaskError, Worker

FAST = {"poll_interval_ms": 20, "retry_backoff_ms": 0}
HOW = ("instance", "subclass")

Around = Callable[..., Awaitable[Any]]  # around(call, **kwargs): call(**kwargs) is the original


def driver(backend: Any) -> type:
    return SQLiteStore if backend.dialect == "sqlite" else PostgresStore


def wrapped_store(backend: Any, how: str, arounds: dict[str, Around]) -> Any:
    """A store of the backend's dialect whose methods ``arounds`` names run
    through their wrapper: replaced on the instance, or overridden in a
    subclass (calling the driver's method)."""
    base = driver(backend)
    if how == "instance":
        store = backend.store()
        for name, around in arounds.items():
            setattr(store, name, functools.partial(around, getattr(store, name)))
        return store

    def override(name: str, around: Around) -> Callable[..., Awaitable[Any]]:
        async def method(self: Any, **kwargs: Any) -> Any:
            return await around(functools.partial(getattr(base, name), self), **kwargs)

        return method

    subclass = type("Instrumented", (base,), {n: override(n, a) for n, a in arounds.items()})
    store = subclass(backend.target)
    backend._stores.append(store)  # closed with the backend
    return store


def raise_once(exc: BaseException) -> tuple[Around, dict[str, int]]:
    seen = {"calls": 0}

    async def around(call: Callable[..., Awaitable[Any]], **kwargs: Any) -> Any:
        seen["calls"] += 1
        if seen["calls"] == 1:
            raise exc
        return await call(**kwargs)

    return around, seen


def counting(into: list[dict[str, Any]]) -> Around:
    async def around(call: Callable[..., Awaitable[Any]], **kwargs: Any) -> Any:
        into.append(kwargs)
        return await call(**kwargs)

    return around


def spy(store: Any, name: str) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Record calls of a private method, replaced on the instance (which leaves
    the public methods cairnq's own)."""
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    original = getattr(store, name)

    async def recording(*args: Any, **kwargs: Any) -> Any:
        calls.append((args, kwargs))
        return await original(*args, **kwargs)

    setattr(store, name, recording)
    return calls


async def finish(q: CairnQ, task_id: str) -> Any:
    return await q.wait(task_id, timeout_ms=10_000, poll_ms=10, max_poll_ms=50)


async def eventually(predicate: Callable[[], bool]) -> None:
    for _ in range(1000):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not met in time")


def reporting(errors: list[tuple[BaseException, dict[str, Any]]]) -> Callable[[BaseException, dict[str, Any]], None]:
    return lambda exc, info: errors.append((exc, info))


# -- a replaced settlement that raises: on_error, then lease recovery --------------------------


@pytest.mark.parametrize("delivery", ["single", "batch"])
@pytest.mark.parametrize("how", HOW)
async def test_a_raising_complete_reaches_on_error_and_its_task_is_recovered(
    backend: Any, how: str, delivery: str
) -> None:
    boom = RuntimeError("complete boom")
    around, seen = raise_once(boom)
    store = wrapped_store(backend, how, {"complete": around})
    q = CairnQ(store)
    errors: list[tuple[BaseException, dict[str, Any]]] = []
    w = Worker(store, ["default"], lease_ms=300, on_error=reporting(errors), **FAST)
    attempts: list[tuple[str, int]] = []

    if delivery == "batch":

        @w.task("job", batch=3)
        async def batch(contexts: list[Any]) -> dict[str, Any]:
            attempts.extend((c.task_id, c.attempt) for c in contexts)
            return {c.task_id: c.attempt for c in contexts}

    else:

        @w.task("job")
        async def single(ctx: Any) -> int:
            attempts.append((ctx.task_id, ctx.attempt))
            return ctx.attempt

    tasks = [await q.submit("job") for _ in range(3 if delivery == "batch" else 1)]
    async with w.background():
        done = [await finish(q, t.id) for t in tasks]
    assert len(errors) == 1 and errors[0][0] is boom
    (failed_id,) = [task_id for task_id, attempt in attempts if attempt == 2]
    assert errors[0][1] == {"phase": "execute", "task_id": failed_id}
    # every settlement went through the wrapper: the first attempts and the retry
    assert seen["calls"] == len(tasks) + 1
    assert sorted((t.status, t.result, t.attempt) for t in done) == sorted(
        ("succeeded", 2 if t.id == failed_id else 1, 2 if t.id == failed_id else 1) for t in done
    )


async def test_a_complete_patched_on_the_driver_class_is_used(backend: Any, monkeypatch: Any) -> None:
    base = driver(backend)
    original = base.complete
    seen: list[str] = []

    async def complete(self: Any, **kwargs: Any) -> Any:
        seen.append(kwargs["task_id"])
        return await original(self, **kwargs)

    monkeypatch.setattr(base, "complete", complete)
    q = backend.client()
    w = backend.worker(**FAST)

    @w.task("job")
    async def job(ctx: Any) -> str:
        return "ok"

    tasks = [await q.submit("job") for _ in range(3)]
    async with w.background():
        done = [await finish(q, t.id) for t in tasks]
    assert [t.status for t in done] == ["succeeded"] * 3
    assert sorted(seen) == sorted(t.id for t in tasks)


@pytest.mark.parametrize("how", HOW)
async def test_a_raising_fail_reaches_on_error_and_its_task_is_recovered(backend: Any, how: str) -> None:
    boom = RuntimeError("fail boom")
    around, seen = raise_once(boom)
    store = wrapped_store(backend, how, {"fail": around})
    q = CairnQ(store)
    errors: list[tuple[BaseException, dict[str, Any]]] = []
    w = Worker(store, ["default"], lease_ms=300, on_error=reporting(errors), **FAST)

    @w.task("job")
    async def job(ctx: Any) -> int:
        if ctx.attempt == 1:
            raise ValueError("first attempt fails")
        return ctx.attempt

    task = await q.submit("job")
    async with w.background():
        done = await finish(q, task.id)
    assert errors == [(boom, {"phase": "execute", "task_id": task.id})]
    assert seen["calls"] == 1  # nothing was written for attempt 1: its lease ran out
    assert (done.status, done.result, done.attempt, done.error) == ("succeeded", 2, 2, None)


@pytest.mark.parametrize("how", HOW)
async def test_a_raising_heartbeat_batch_reaches_on_error(backend: Any, how: str) -> None:
    boom = RuntimeError("beat boom")
    around, seen = raise_once(boom)
    store = wrapped_store(backend, how, {"heartbeat_batch": around})
    q = CairnQ(store)
    errors: list[tuple[BaseException, dict[str, Any]]] = []
    w = Worker(store, ["default"], lease_ms=2_000, heartbeat_interval_ms=20, on_error=reporting(errors), **FAST)

    @w.task("job")
    async def job(ctx: Any) -> str:
        await eventually(lambda: seen["calls"] >= 3)  # the wrapper keeps beating after it raised
        return "ok"

    task = await q.submit("job")
    async with w.background():
        done = await finish(q, task.id)
    assert (done.status, done.result) == ("succeeded", "ok")
    assert errors == [(boom, {"phase": "execute", "task_id": task.id})]


@pytest.mark.parametrize("how", HOW)
async def test_a_raising_claim_session_reaches_on_error(backend: Any, how: str) -> None:
    boom = RuntimeError("claim boom")
    around, seen = raise_once(boom)
    store = wrapped_store(backend, how, {"claim_session": around})
    q = CairnQ(store)
    errors: list[tuple[BaseException, dict[str, Any]]] = []
    w = Worker(store, ["default"], on_error=reporting(errors), **FAST)

    @w.task("job")
    async def job(ctx: Any) -> str:
        return "ok"

    task = await q.submit("job")
    async with w.background():
        done = await finish(q, task.id)
    assert (done.status, done.result) == ("succeeded", "ok")
    assert errors[0] == (boom, {"phase": "claim"}) and seen["calls"] >= 2


# -- pass-through wrappers see everything ---------------------------------------------------------


@pytest.mark.parametrize("how", HOW)
async def test_a_pass_through_wrapper_sees_every_claim_settlement_and_beat(backend: Any, how: str) -> None:
    seen: dict[str, list[dict[str, Any]]] = {n: [] for n in ("claim_session", "complete", "fail", "heartbeat_batch")}
    store = wrapped_store(backend, how, {name: counting(calls) for name, calls in seen.items()})
    fast = {name: spy(store, name) for name in ("_complete_many_json", "_complete_each_json", "_heartbeat_batch")}
    q = CairnQ(store)
    w = Worker(store, ["default"], concurrency=8, heartbeat_interval_ms=20, lease_ms=2_000, **FAST)

    @w.task("ok")
    async def ok(ctx: Any, payload: dict[str, int]) -> int:
        return payload["i"]

    @w.task("bad")
    async def bad(ctx: Any) -> None:
        raise TaskError("no", retryable=False)

    @w.task("slow")
    async def slow(ctx: Any) -> str:
        await eventually(lambda: len(seen["heartbeat_batch"]) >= 2)
        return "late"

    tasks = [await q.submit("ok", {"i": i}) for i in range(4)]
    tasks += [await q.submit("bad") for _ in range(2)]
    tasks.append(await q.submit("slow"))
    async with w.background():
        done = {t.id: await finish(q, t.id) for t in tasks}
    succeeded = sorted(i for i, t in done.items() if t.status == "succeeded")
    failed = sorted(i for i, t in done.items() if t.status == "failed")
    assert len(succeeded) == 5 and len(failed) == 2
    assert sorted(c["task_id"] for c in seen["complete"]) == succeeded
    assert sorted(c["task_id"] for c in seen["fail"]) == failed
    assert all(set(c) == {"task_id", "worker_id", "error", "retryable", "delay_ms"} for c in seen["fail"])
    assert len(seen["heartbeat_batch"]) >= 2
    assert all(set(c) == {"task_ids", "worker_id", "lease_ms"} for c in seen["heartbeat_batch"])
    assert all(set(c) == {"queues", "worker_id", "lease_ms", "names", "plan"} for c in seen["claim_session"])
    # ... and no settlement or beat went around them
    assert fast["_complete_many_json"] == [] and fast["_complete_each_json"] == []
    assert all(not kwargs.get("deferred") for _, kwargs in fast["_heartbeat_batch"])


# -- an unwrapped store keeps its fast paths; a later replacement is honoured ---------------------


async def test_an_unwrapped_store_takes_the_fast_paths_until_a_method_is_replaced(backend: Any) -> None:
    store = backend.store()
    q = CairnQ(store)
    claims = spy(store, "_claim_session")
    coalesced = spy(store, "_complete_many_json")
    beats = spy(store, "_heartbeat_batch")
    owned = spy(store, "_owned")  # what the public complete() writes through
    w = Worker(store, ["default"], concurrency=4, heartbeat_interval_ms=20, lease_ms=2_000, **FAST)

    @w.task("job")
    async def job(ctx: Any, payload: dict[str, Any]) -> None:
        if payload.get("slow"):
            await eventually(lambda: len(beats) >= 1)

    first = [await q.submit("job", {"slow": i == 0}) for i in range(4)]
    replaced: list[str] = []
    async with w.background():
        for t in first:
            assert (await finish(q, t.id)).status == "succeeded"
        assert claims and coalesced and beats
        assert all(kwargs["deferred"] for _, kwargs in beats)
        assert sum(len(args[0]) for args, _ in coalesced) == 4  # one statement per poll's completions
        assert [args for args, _ in owned if args[1] == "complete"] == []
        settled_fast = len(coalesced)

        original = store.complete

        async def complete(**kwargs: Any) -> Any:
            replaced.append(kwargs["task_id"])
            return await original(**kwargs)

        store.complete = complete  # while the worker runs
        later = await q.submit("job")
        assert (await finish(q, later.id)).status == "succeeded"
    assert replaced == [later.id]
    assert len(coalesced) == settled_fast
