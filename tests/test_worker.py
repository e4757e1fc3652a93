"""The worker runtime: registration, calling convention, outcomes, batches,
context writes, retries, max_run_ms, on_error, sources/resources, lifecycle and
the additive knobs (API.md §5, §6, §14; OPERATIONS.md §5, §6, §1.5).

Conventions: short leases and poll intervals, events/counters for
synchronisation, ``q.wait`` for terminal outcomes. Spies wrap store methods on
the *instance* the worker uses (the worker calls them through that instance).
"""

from __future__ import annotations

import asyncio
import inspect
import sqlite3
import threading
import time
from typing import Any, Callable

import pytest

from cairnq import (
    CairnQ,
    LostLease,
    ProtocolVersionMismatch,
    TaskContext,
    TaskDef,
    TaskError,
    Worker,
)
from cairnq._ids import now_ms

FAST = {"poll_interval_ms": 20, "retry_backoff_ms": 0}


# -- helpers -------------------------------------------------------------------


def make(backend, **kwargs: Any) -> Worker:
    opts = dict(FAST)
    opts.update(kwargs)
    queues = opts.pop("queues", ("default",))
    return backend.worker(queues=queues, **opts)


async def finish(q: CairnQ, task_id: str, timeout_ms: int = 8_000):
    return await q.wait(task_id, timeout_ms=timeout_ms, poll_ms=10, max_poll_ms=50)


async def eventually(pred: Callable[[], Any], timeout: float = 5.0, interval: float = 0.01) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(interval)


class Gauge:
    """Counts what is inside right now, and the most that ever was."""

    def __init__(self) -> None:
        self.now = 0
        self.max = 0

    def __enter__(self) -> "Gauge":
        self.now += 1
        self.max = max(self.max, self.now)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.now -= 1


def spy_fail(store) -> list[tuple[dict[str, Any], Any]]:
    """Record every ``fail`` write: (its keywords, the returned row)."""
    seen: list[tuple[dict[str, Any], Any]] = []
    orig = store.fail

    async def fail(**kwargs: Any):
        row = await orig(**kwargs)
        seen.append((kwargs, row))
        return row

    store.fail = fail
    return seen


def spy_draws(store) -> list[tuple[Any, int]]:
    """Record every draw of every claim session: (names, limit)."""
    draws: list[tuple[Any, int]] = []
    orig = store.claim_session

    async def claim_session(**kwargs: Any):
        plan = kwargs["plan"]

        async def wrapped(draw):
            async def recording(names, limit):
                draws.append((None if names is None else tuple(names), limit))
                return await draw(names, limit)

            return await plan(recording)

        kwargs["plan"] = wrapped
        return await orig(**kwargs)

    store.claim_session = claim_session
    return draws


def envelope(type_: str, code: str, message: str, retryable: bool, details: Any = None) -> dict:
    return {
        "type": type_,
        "code": code,
        "message": message,
        "retryable": retryable,
        "details": {} if details is None else details,
    }


# -- 1. registration -------------------------------------------------------------


async def test_registration_forms_return_the_function_and_all_run(backend) -> None:
    q = backend.client()
    w = make(backend, resources={"gpu": 1}, concurrency=4)

    async def bare(ctx):
        return "bare"

    async def dotted(ctx):
        return "dotted"

    async def by_def(ctx):
        return "by_def"

    async def empty_parens(ctx):
        return "empty_parens"

    async def batched(contexts):
        assert isinstance(contexts, list)
        return {c.task_id: "batched" for c in contexts}

    async def gpu_job(ctx):
        return "gpu"

    assert w.task(bare) is bare
    assert w.task("my.dotted.name")(dotted) is dotted
    assert w.task(TaskDef("x"))(by_def) is by_def
    assert w.task()(empty_parens) is empty_parens
    assert w.task(batch=4)(batched) is batched
    assert w.task("n", resource="gpu")(gpu_job) is gpu_job
    lam = lambda ctx: "lam"  # noqa: E731
    assert w.task("lam")(lam) is lam  # a lambda with an explicit name is fine

    ids = {}
    for name in ("bare", "my.dotted.name", "x", "empty_parens", "batched", "n", "lam"):
        ids[name] = (await q.submit(name)).id
    async with w.background():
        done = {name: await finish(q, tid) for name, tid in ids.items()}
    assert {n: (t.status, t.result) for n, t in done.items()} == {
        "bare": ("succeeded", "bare"),
        "my.dotted.name": ("succeeded", "dotted"),
        "x": ("succeeded", "by_def"),
        "empty_parens": ("succeeded", "empty_parens"),
        "batched": ("succeeded", "batched"),
        "n": ("succeeded", "gpu"),
        "lam": ("succeeded", "lam"),
    }


async def test_registration_validation(backend) -> None:
    w = make(backend)
    with pytest.raises(ValueError):
        w.task(lambda ctx: 1)
    with pytest.raises(ValueError):
        w.task()(lambda ctx: 1)

    async def h(ctx):
        return 1

    with pytest.raises(ValueError):
        w.register("b0", h, batch=0)
    with pytest.raises(ValueError):
        w.task(batch=0)(h)

    with pytest.raises(ValueError) as err:
        w.register("r", h, resource="gpu")
    assert "none" in str(err.value)

    w2 = make(backend, resources={"gpu": 1, "disk": 2})
    with pytest.raises(ValueError) as err:
        w2.register("r", h, resource="tpu")
    assert "gpu" in str(err.value) and "disk" in str(err.value)
    with pytest.raises(ValueError):
        w2.task("r", resource="tpu")(h)

    store = backend.store()
    with pytest.raises(ValueError):
        Worker(store, ["default"], max_run_ms=0)
    with pytest.raises(ValueError):
        Worker(store, ["default"], max_run_ms=-5)
    with pytest.raises(ValueError):
        Worker(store, ["default"], resources={"gpu": 0})
    # max_run_ms is validated first
    with pytest.raises(ValueError) as err:
        Worker(store, ["default"], max_run_ms=0, resources={"gpu": 0})
    assert "max_run_ms" in str(err.value)


async def test_reregistering_replaces_the_handler(backend) -> None:
    q = backend.client()
    w = make(backend)

    async def first(ctx):
        return "first"

    async def second(ctx):
        return "second"

    w.register("r", first)
    w.register("r", second)
    task = await q.submit("r")
    async with w.background():
        done = await finish(q, task.id)
    assert (done.status, done.result) == ("succeeded", "second")


async def test_register_while_running(backend) -> None:
    q = backend.client()
    w = make(backend)

    @w.task
    async def early(ctx):
        return "early"

    late_task = await q.submit("late")
    async with w.background():
        done_early = await finish(q, (await q.submit("early")).id)
        assert done_early.status == "succeeded"

        async def late(ctx):
            return "late"

        w.register("late", late)
        done = await finish(q, late_task.id)
    assert (done.status, done.result) == ("succeeded", "late")


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


# -- 3. outcomes (single task) -------------------------------------------------------------


async def test_return_value_succeeds(backend) -> None:
    q = backend.client()
    w = make(backend)

    @w.task
    async def ok(ctx, payload):
        return {"echo": payload, "list": [1, 2]}

    task = await q.submit("ok", {"a": 1})
    async with w.background():
        done = await finish(q, task.id)
    assert done.status == "succeeded"
    assert done.result == {"echo": {"a": 1}, "list": [1, 2]}
    assert done.progress == 1.0
    assert done.error is None
    assert done.attempt == 1
    assert done.lease_until_ms is None
    assert done.completed_at_ms is not None


async def test_ordinary_exception_retries_then_fails(backend) -> None:
    q = backend.client()
    w = make(backend)
    attempts: list[int] = []

    @w.task
    async def boom(ctx):
        attempts.append(ctx.attempt)
        raise ValueError("x")

    task = await q.submit("boom", max_attempts=3)
    async with w.background():
        done = await finish(q, task.id)
    assert attempts == [1, 2, 3]
    assert done.status == "failed"
    assert done.attempt == 3
    assert done.error == envelope("ValueError", "handler_error", "x", True)
    if backend.dialect == "sqlite":  # stored as the SDK wrote it (jsonb reorders keys)
        assert list(done.error) == ["type", "code", "message", "retryable", "details"]


async def test_ordinary_exception_requeues_with_envelope(backend) -> None:
    q = backend.client()
    w = make(backend)
    fails = spy_fail(w.store)

    @w.task
    async def boom(ctx):
        raise ValueError("x")

    task = await q.submit("boom", max_attempts=2)
    async with w.background():
        done = await finish(q, task.id)
    assert [(kw["retryable"], row.status, row.attempt) for kw, row in fails] == [
        (True, "queued", 1),
        (True, "failed", 2),
    ]
    first = fails[0][1]
    assert first.error == envelope("ValueError", "handler_error", "x", True)
    assert first.worker_id is None and first.lease_until_ms is None
    assert done.status == "failed"


async def test_task_error_fails_immediately(backend) -> None:
    q = backend.client()
    w = make(backend)
    calls: list[int] = []

    @w.task
    async def nope(ctx):
        calls.append(ctx.attempt)
        raise TaskError("nope", code="c", details={"a": 1})

    task = await q.submit("nope", max_attempts=3)
    async with w.background():
        done = await finish(q, task.id)
    assert calls == [1]
    assert done.status == "failed"
    assert done.attempt == 1
    assert done.error == envelope("TaskError", "c", "nope", False, {"a": 1})


async def test_task_error_custom_type_and_retryable(backend) -> None:
    q = backend.client()
    w = make(backend)
    calls: list[int] = []

    @w.task
    async def flaky(ctx):
        calls.append(ctx.attempt)
        raise TaskError("again", code="busy", retryable=True, type="Busy")

    task = await q.submit("flaky", max_attempts=3)
    async with w.background():
        done = await finish(q, task.id)
    assert calls == [1, 2, 3]
    assert done.status == "failed"
    assert done.error == envelope("Busy", "busy", "again", True)


async def test_unserializable_result_fails_permanently(backend) -> None:
    q = backend.client()
    w = make(backend)
    calls: list[int] = []

    @w.task
    async def bad(ctx):
        calls.append(ctx.attempt)
        return {1, 2}

    task = await q.submit("bad", max_attempts=3)
    async with w.background():
        done = await finish(q, task.id)
    assert calls == [1]
    assert done.status == "failed"
    assert done.result is None
    err = dict(done.error)
    message = err.pop("message")
    assert err == {
        "type": "SerializationError",
        "code": "unserializable_result",
        "retryable": False,
        "details": {},
    }
    assert message.startswith("handler result is not JSON-serializable: ")


async def test_nan_result_is_unserializable(backend) -> None:
    q = backend.client()
    w = make(backend)

    @w.task
    async def nan(ctx):
        return {"x": float("nan")}

    task = await q.submit("nan")
    async with w.background():
        done = await finish(q, task.id)
    assert done.status == "failed" and done.error["code"] == "unserializable_result"


async def test_lost_lease_raised_writes_nothing(backend) -> None:
    q = backend.client()
    w = make(backend, lease_ms=300)
    raised = asyncio.Event()
    attempts: list[int] = []

    @w.task
    async def gives_up(ctx):
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raised.set()
            raise LostLease(ctx.task_id)
        return "second"

    task = await q.submit("gives_up", max_attempts=3)
    async with w.background():
        await asyncio.wait_for(raised.wait(), 5)
        await asyncio.sleep(0.05)
        row = await q.get(task.id)
        assert row.status == "running"
        assert row.worker_id == w.worker_id
        assert row.error is None and row.result is None and row.completed_at_ms is None
        done = await finish(q, task.id)
    assert attempts == [1, 2]
    assert (done.status, done.result, done.attempt, done.error) == ("succeeded", "second", 2, None)


# -- 4. batches -------------------------------------------------------------


async def test_batch_sizes_and_result_dict(backend) -> None:
    q = backend.client()
    w = make(backend, concurrency=1)
    sizes: list[int] = []

    @w.task(batch=4)
    async def items(contexts):
        assert isinstance(contexts, list)
        assert all(isinstance(c, TaskContext) for c in contexts)
        assert len({c.task_id for c in contexts}) == len(contexts)
        sizes.append(len(contexts))
        out = {c.task_id: {"i": c.payload["i"]} for c in contexts if c.payload["i"] % 2 == 0}
        out["not-a-task"] = "ignored"
        return out

    tasks = [await q.submit("items", {"i": i}) for i in range(10)]
    async with w.background():
        done = [await finish(q, t.id) for t in tasks]
    assert sorted(sizes) == [2, 4, 4]
    assert all(1 <= s <= 4 for s in sizes)
    for i, t in enumerate(done):
        assert t.status == "succeeded"
        assert t.result == ({"i": i} if i % 2 == 0 else None)
        assert t.progress == 1.0


async def test_batch_single_task_is_not_padded(backend) -> None:
    q = backend.client()
    w = make(backend)
    sizes: list[int] = []

    @w.task(batch=8)
    async def lone(contexts):
        sizes.append(len(contexts))

    task = await q.submit("lone")
    async with w.background():
        done = await finish(q, task.id)
    assert sizes == [1]
    assert done.status == "succeeded" and done.result is None


async def test_batch_returning_neither_a_dict_nor_none_fails_its_tasks(backend) -> None:
    """A list (say) is a handler bug: 0.15.1 succeeded every task with result
    None, silently. The unsettled tasks fail, not retried; settled ones stand."""
    q = backend.client()
    w = make(backend)
    calls: list[int] = []

    @w.task(batch=4)
    async def items(contexts):
        calls.append(len(contexts))
        await contexts[0].succeed("kept")
        return [c.task_id for c in contexts]

    @w.task(batch=4)
    async def nothing(contexts):
        return None

    tasks = [await q.submit("items", {"i": i}, max_attempts=3) for i in range(3)]
    quiet = [await q.submit("nothing", {"i": i}) for i in range(2)]
    async with w.background():
        done = [await finish(q, t.id) for t in tasks]
        fine = [await finish(q, t.id) for t in quiet]
    assert calls == [3]
    assert (done[0].status, done[0].result) == ("succeeded", "kept")
    expected = envelope(
        "TypeError",
        "handler_error",
        "batch handler for 'items' returned list; expected a dict of task id -> result, or None",
        False,
    )
    assert [(t.status, t.result, t.error, t.attempt) for t in done[1:]] == [("failed", None, expected, 1)] * 2
    assert [(t.status, t.result) for t in fine] == [("succeeded", None)] * 2


async def test_batch_raise_fails_each_with_its_own_attempts(backend) -> None:
    q = backend.client()
    w = make(backend, concurrency=1)
    sizes: list[int] = []

    @w.task(batch=4)
    async def items(contexts):
        sizes.append(len(contexts))
        raise RuntimeError("boom")

    a = await q.submit("items", {"n": "a"}, max_attempts=1)
    b = await q.submit("items", {"n": "b"}, max_attempts=2)
    c = await q.submit("items", {"n": "c"}, max_attempts=3)
    async with w.background():
        done = [await finish(q, t.id) for t in (a, b, c)]
    # first call: all three; later calls: whatever was requeued by then
    assert sizes[0] == 3 and sum(sizes) == 6
    assert [(t.status, t.attempt) for t in done] == [("failed", 1), ("failed", 2), ("failed", 3)]
    for t in done:
        assert t.error == envelope("RuntimeError", "handler_error", "boom", True)


async def test_batch_raise_applies_each_tasks_own_backoff(backend) -> None:
    q = backend.client()
    other = backend.store()
    w = make(backend, retry_backoff_ms=200, retry_backoff_max_ms=1000)
    fails = spy_fail(w.store)
    seen: list[dict[str, int]] = []

    @w.task(batch=4)
    async def items(contexts):
        seen.append({c.payload["n"]: c.attempt for c in contexts})
        if len(seen) == 1:
            raise RuntimeError("boom")

    # b has already used one attempt (failed by someone else), a is fresh.
    b = await q.submit("items", {"n": "b"}, max_attempts=5)
    claimed = await other.claim(queues=["default"], worker_id="pre", limit=1)
    assert [t.id for t in claimed] == [b.id]
    await other.fail(
        task_id=b.id, worker_id="pre", error=envelope("X", "x", "x", True), retryable=True, delay_ms=0
    )
    a = await q.submit("items", {"n": "a"}, max_attempts=5)

    async with w.background():
        done = [await finish(q, t.id) for t in (a, b)]
    assert seen[0] == {"a": 1, "b": 2}
    assert [t.status for t in done] == ["succeeded", "succeeded"]
    first_fails = {row.id: (kw, row) for kw, row in fails[:2]}
    assert set(first_fails) == {a.id, b.id}
    kw_a, row_a = first_fails[a.id]
    kw_b, row_b = first_fails[b.id]
    assert row_a.status == row_b.status == "queued"
    assert 100 <= kw_a["delay_ms"] < 200
    assert 200 <= kw_b["delay_ms"] < 400
    assert row_a.run_at_ms - row_a.updated_at_ms == kw_a["delay_ms"]
    assert row_b.run_at_ms - row_b.updated_at_ms == kw_b["delay_ms"]


async def test_batch_task_error_not_retryable_is_permanent_for_all(backend) -> None:
    q = backend.client()
    w = make(backend)
    calls: list[int] = []

    @w.task(batch=4)
    async def items(contexts):
        calls.append(len(contexts))
        raise TaskError("all bad", code="bad_batch")

    tasks = [await q.submit("items", {"i": i}, max_attempts=3) for i in range(3)]
    async with w.background():
        done = [await finish(q, t.id) for t in tasks]
    assert calls == [3]
    for t in done:
        assert (t.status, t.attempt) == ("failed", 1)
        assert t.error == envelope("TaskError", "bad_batch", "all bad", False)


async def test_batch_items_settled_early_keep_their_outcome(backend) -> None:
    q = backend.client()
    w = make(backend)
    checks: dict[str, Any] = {}

    @w.task(batch=4)
    async def items(contexts):
        by = {c.payload["n"]: c for c in contexts}
        first = await by["s"].succeed({"early": True})
        checks["first_status"] = first.status
        checks["again"] = await by["s"].succeed({"twice": True})
        checks["fail_after_succeed"] = await by["s"].fail("late")
        failed = await by["f"].fail("bad", retryable=False)
        checks["failed_status"] = failed.status
        checks["fail_twice"] = await by["f"].fail("worse")
        checks["settled"] = {n: c.settled for n, c in by.items()}
        return {c.task_id: "from-return" for c in contexts}

    s = await q.submit("items", {"n": "s"})
    f = await q.submit("items", {"n": "f"}, max_attempts=3)
    r = await q.submit("items", {"n": "r"})
    async with w.background():
        ds, df, dr = [await finish(q, t.id) for t in (s, f, r)]
    assert checks == {
        "first_status": "succeeded",
        "again": None,
        "fail_after_succeed": None,
        "failed_status": "failed",
        "fail_twice": None,
        "settled": {"s": True, "f": True, "r": False},
    }
    assert (ds.status, ds.result) == ("succeeded", {"early": True})
    assert (df.status, df.attempt) == ("failed", 1)
    assert df.error == envelope("TaskError", "task_error", "bad", False)
    assert (dr.status, dr.result) == ("succeeded", "from-return")


async def test_batch_raise_after_early_settlement(backend) -> None:
    q = backend.client()
    w = make(backend)

    @w.task(batch=4)
    async def items(contexts):
        for c in contexts:
            if c.payload["n"] == "s":
                await c.succeed(1)
        raise RuntimeError("rest failed")

    s = await q.submit("items", {"n": "s"}, max_attempts=1)
    o = await q.submit("items", {"n": "o"}, max_attempts=1)
    async with w.background():
        ds, do = [await finish(q, t.id) for t in (s, o)]
    assert (ds.status, ds.result, ds.error) == ("succeeded", 1, None)
    assert do.status == "failed"
    assert do.error == envelope("RuntimeError", "handler_error", "rest failed", True)


async def test_concurrency_counts_calls_not_tasks(backend) -> None:
    q = backend.client()
    w = make(backend, concurrency=1)
    gauge = Gauge()
    sizes: list[int] = []

    @w.task(batch=8)
    async def items(contexts):
        with gauge:
            sizes.append(len(contexts))
            await asyncio.sleep(0.03)

    tasks = [await q.submit("items", {"i": i}) for i in range(24)]
    async with w.background():
        done = [await finish(q, t.id) for t in tasks]
    assert all(t.status == "succeeded" for t in done)
    assert sizes == [8, 8, 8]
    assert gauge.max == 1


# -- 5. context writes -------------------------------------------------------------


async def test_progress_and_message_are_recorded(backend) -> None:
    q = backend.client()
    w = make(backend)
    stage = asyncio.Event()
    go_on = asyncio.Event()
    stage2 = asyncio.Event()
    go_on2 = asyncio.Event()
    returned: dict[str, Any] = {}

    @w.task
    async def work(ctx):
        row = await ctx.progress(0.5, "half")
        returned["first"] = (row.progress, row.message, row.status)
        stage.set()
        await go_on.wait()
        await ctx.progress(None, "still going")
        stage2.set()
        await go_on2.wait()
        return "done"

    task = await q.submit("work")
    async with w.background():
        await asyncio.wait_for(stage.wait(), 5)
        row = await q.get(task.id)
        assert (row.progress, row.message) == (0.5, "half")
        go_on.set()
        await asyncio.wait_for(stage2.wait(), 5)
        row = await q.get(task.id)
        assert (row.progress, row.message) == (0.5, "still going")
        go_on2.set()
        done = await finish(q, task.id)
    assert returned["first"] == (0.5, "half", "running")
    assert (done.status, done.progress, done.message, done.result) == (
        "succeeded",
        1.0,
        "still going",
        "done",
    )


async def test_ctx_heartbeat_extends_the_lease(backend) -> None:
    q = backend.client()
    w = make(backend, lease_ms=1_000, heartbeat_interval_ms=60_000)
    out: dict[str, Any] = {}

    @w.task
    async def beat(ctx):
        out["before"] = (await q.get(ctx.task_id)).lease_until_ms
        await asyncio.sleep(0.05)
        t0 = now_ms()
        row = await ctx.heartbeat()
        t1 = now_ms()
        out.update(after=row.lease_until_ms, t0=t0, t1=t1, status=row.status, worker=row.worker_id)
        out["stored"] = (await q.get(ctx.task_id)).lease_until_ms

    task = await q.submit("beat")
    async with w.background():
        done = await finish(q, task.id)
    assert done.status == "succeeded"
    slack = 0 if backend.dialect == "sqlite" else 50
    assert out["status"] == "running" and out["worker"] == w.worker_id
    assert out["after"] > out["before"]
    assert out["t0"] + 1_000 - slack <= out["after"] <= out["t1"] + 1_000 + slack
    assert out["stored"] == out["after"]


async def test_canceled_read_without_heartbeat(backend) -> None:
    q = backend.client()
    w = make(backend, lease_ms=30_000, heartbeat_interval_ms=60_000)
    started = asyncio.Event()
    canceled = asyncio.Event()
    seen: list[bool] = []

    @w.task
    async def job(ctx):
        seen.append(await ctx.canceled())
        started.set()
        await canceled.wait()
        seen.append(ctx._cancel_seen)  # nothing observed it yet: no beat, no write
        seen.append(await ctx.canceled())  # reads the row
        seen.append(await ctx.canceled())  # cached
        return "ignored"

    task = await q.submit("job")
    async with w.background():
        await asyncio.wait_for(started.wait(), 5)
        await q.cancel(task.id)
        canceled.set()
        done = await finish(q, task.id)
    assert seen == [False, False, True, True]
    assert (done.status, done.result) == ("canceled", None)


@pytest.mark.parametrize("outcome", ["return", "raise", "task_error", "succeed", "fail"])
async def test_cancel_is_seen_by_the_heartbeat_and_wins(backend, outcome: str) -> None:
    q = backend.client()
    w = make(backend, lease_ms=2_000, heartbeat_interval_ms=50)
    started = asyncio.Event()
    seen: dict[str, Any] = {}

    @w.task
    async def job(ctx):
        started.set()
        deadline = time.monotonic() + 5
        while not ctx._cancel_seen and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        seen["by_heartbeat"] = ctx._cancel_seen
        seen["canceled"] = await ctx.canceled()
        if outcome == "raise":
            raise ValueError("after cancel")
        if outcome == "task_error":
            raise TaskError("after cancel")
        if outcome == "succeed":
            row = await ctx.succeed({"x": 1})
            seen["row"] = row.status
        if outcome == "fail":
            row = await ctx.fail("after cancel", retryable=False)
            seen["row"] = row.status
        return {"result": "dropped"}

    task = await q.submit("job", max_attempts=3)
    async with w.background():
        await asyncio.wait_for(started.wait(), 5)
        await q.cancel(task.id)
        done = await finish(q, task.id)
    assert seen["by_heartbeat"] is True
    assert seen["canceled"] is True
    if outcome in ("succeed", "fail"):
        assert seen["row"] == "canceled"
    assert done.status == "canceled"
    assert done.result is None
    assert done.attempt == 1


async def test_lease_loss_gates_writes_and_discards_the_result(backend) -> None:
    q = backend.client()
    other = backend.store()
    # The beat comes long after the lease expired: somebody else takes over.
    w = make(backend, lease_ms=200, heartbeat_interval_ms=1_000, concurrency=1)
    started = asyncio.Event()
    finished = asyncio.Event()
    seen: dict[str, Any] = {}

    @w.task
    async def job(ctx):
        started.set()
        try:
            try:
                await asyncio.wait_for(ctx.lease_lost.wait(), 5)
            except asyncio.TimeoutError:
                seen["timeout"] = True
                return {"mine": True}
            seen["lost_lease"] = ctx.lost_lease
            ops = {
                "progress": lambda: ctx.progress(0.5, "m"),
                "heartbeat": ctx.heartbeat,
                "succeed": lambda: ctx.succeed("x"),
                "fail": lambda: ctx.fail("x"),
                "submit": lambda: ctx.submit("child"),
            }
            for name, op in ops.items():
                try:
                    await op()
                    seen[name] = "written"
                except LostLease as exc:
                    seen[name] = ("LostLease", exc.task_id)
            return {"mine": True}
        finally:
            finished.set()

    task = await q.submit("job", max_attempts=3)
    async with w.background():
        await asyncio.wait_for(started.wait(), 5)

        async def take_over():
            got = await other.claim(queues=["default"], worker_id="other", lease_ms=30_000)
            return got

        got = await eventually(take_over, timeout=3, interval=0.02)
        assert [t.id for t in got] == [task.id]
        assert got[0].attempt == 2
        await asyncio.wait_for(finished.wait(), 5)
        await asyncio.sleep(0.05)
        row = await q.get(task.id)
    assert "timeout" not in seen
    assert seen["lost_lease"] is True
    for name in ("progress", "heartbeat", "succeed", "fail", "submit"):
        assert seen[name] == ("LostLease", task.id), name
    assert (row.status, row.worker_id, row.attempt) == ("running", "other", 2)
    assert row.result is None and row.progress is None and row.message is None
    assert await q.list(name="child") == []
    await other.complete(task_id=task.id, worker_id="other", result={"other": True})
    final = await q.get(task.id)
    assert (final.status, final.result) == ("succeeded", {"other": True})


async def test_ctx_submit_wires_ids_and_wait_waits(backend) -> None:
    q = backend.client()
    store = backend.store()
    # two parents wait for their children at once: room for both and a child
    w = make(backend, queues=("work", "default"), concurrency=4)
    children: dict[str, Any] = {}

    @w.task
    async def parent(ctx):
        child = await ctx.submit("child", {"x": 2})
        other = await ctx.submit(TaskDef("child"), {"x": 3}, queue="work", priority=5)
        children[ctx.task_id] = {"child": child, "other": other}
        done = await ctx.wait(child.id, timeout_ms=5_000, poll_ms=20)
        return {"child": done.result, "status": done.status}

    @w.task
    async def child(ctx, payload):
        return payload["x"] * 10

    root = await store.submit(name="parent", queue="work", correlation_id="corr-1")
    nested = await store.submit(name="parent", queue="work", root_id="root-x")
    async with w.background():
        done = await finish(q, root.id)
        done_nested = await finish(q, nested.id)
    assert (done.status, done.result) == ("succeeded", {"child": 20, "status": "succeeded"})
    child_task = children[root.id]["child"]
    assert child_task.parent_id == root.id
    assert child_task.root_id == root.id
    assert child_task.correlation_id == "corr-1"
    assert child_task.queue == "default"
    assert child_task.name == "child"
    other = children[root.id]["other"]
    assert (other.queue, other.priority, other.parent_id, other.name) == ("work", 5, root.id, "child")
    assert done_nested.status == "succeeded"
    assert done_nested.result == {"child": 20, "status": "succeeded"}
    nested_child = children[nested.id]["child"]
    assert nested_child.root_id == "root-x"
    assert nested_child.parent_id == nested.id
    assert nested_child.correlation_id is None


async def test_ctx_after_settling(backend) -> None:
    q = backend.client()
    w = make(backend)
    seen: dict[str, Any] = {}

    @w.task
    async def job(ctx):
        row = await ctx.succeed({"ok": 1})
        seen["row"] = row.status
        seen["settled"] = ctx.settled
        seen["succeed_again"] = await ctx.succeed(2)
        seen["fail_after"] = await ctx.fail("nope")
        for name, op in (("progress", lambda: ctx.progress(0.3)), ("heartbeat", ctx.heartbeat)):
            try:
                await op()
                seen[name] = "written"
            except LostLease:
                seen[name] = "LostLease"
        kid = await ctx.submit("kid", {"n": 1})
        seen["kid"] = (kid.parent_id, kid.status)
        return "ignored"

    task = await q.submit("job")
    async with w.background():
        done = await finish(q, task.id)
    assert seen == {
        "row": "succeeded",
        "settled": True,
        "succeed_again": None,
        "fail_after": None,
        "progress": "LostLease",
        "heartbeat": "LostLease",
        "kid": (task.id, "queued"),
    }
    assert (done.status, done.result) == ("succeeded", {"ok": 1})


async def test_ctx_fail_forms(backend) -> None:
    q = backend.client()
    w = make(backend, concurrency=4)

    @w.task
    async def as_string(ctx):
        await ctx.fail("reason", retryable=False)

    @w.task
    async def as_exception(ctx):
        await ctx.fail(KeyError("k"), retryable=False)

    @w.task
    async def as_task_error(ctx):
        await ctx.fail(TaskError("te", code="tc", details={"d": 1}))

    @w.task
    async def as_dict(ctx):
        await ctx.fail({"type": "Custom", "code": "custom", "message": "m", "retryable": False, "details": {}}, retryable=False)

    ids = {n: (await q.submit(n, max_attempts=1)).id for n in ("as_string", "as_exception", "as_task_error", "as_dict")}
    async with w.background():
        done = {n: await finish(q, i) for n, i in ids.items()}
    assert all(t.status == "failed" for t in done.values())
    assert done["as_string"].error == envelope("TaskError", "task_error", "reason", False)
    assert done["as_exception"].error == envelope("KeyError", "handler_error", "'k'", False)
    assert done["as_task_error"].error == envelope("TaskError", "tc", "te", False, {"d": 1})
    assert done["as_dict"].error == envelope("Custom", "custom", "m", False)


# -- 6. retries and backoff -------------------------------------------------------------


async def test_retry_backoff_windows(backend) -> None:
    q = backend.client()
    w = make(backend, retry_backoff_ms=200, retry_backoff_max_ms=1_000)
    fails = spy_fail(w.store)
    starts: list[float] = []

    @w.task
    async def flaky(ctx):
        starts.append(time.monotonic())
        raise RuntimeError("again")

    task = await q.submit("flaky", max_attempts=3)
    async with w.background():
        done = await finish(q, task.id)
    assert done.status == "failed" and done.attempt == 3
    assert [(kw["retryable"], row.status, row.attempt) for kw, row in fails] == [
        (True, "queued", 1),
        (True, "queued", 2),
        (True, "failed", 3),
    ]
    (kw1, row1), (kw2, row2), _ = fails
    assert 100 <= row1.run_at_ms - row1.updated_at_ms < 200
    assert 200 <= row2.run_at_ms - row2.updated_at_ms < 400
    assert row1.run_at_ms - row1.updated_at_ms == kw1["delay_ms"]
    assert row2.run_at_ms - row2.updated_at_ms == kw2["delay_ms"]
    # redelivery honoured the delay
    assert starts[1] - starts[0] >= 0.09
    assert starts[2] - starts[1] >= 0.19


async def test_retry_backoff_is_capped(backend) -> None:
    q = backend.client()
    w = make(backend, retry_backoff_ms=100, retry_backoff_max_ms=150)
    fails = spy_fail(w.store)

    @w.task
    async def flaky(ctx):
        raise RuntimeError("again")

    task = await q.submit("flaky", max_attempts=3)
    async with w.background():
        await finish(q, task.id)
    delays = [kw["delay_ms"] for kw, _ in fails]
    assert [row.status for _, row in fails] == ["queued", "queued", "failed"]
    assert 50 <= delays[0] < 100  # window 100
    assert 75 <= delays[1] < 150  # window min(150, 200) = 150
    assert 75 <= delays[2] < 150  # window min(150, 400) = 150


async def test_zero_backoff_is_immediate_and_max_attempts_respected(backend) -> None:
    q = backend.client()
    w = make(backend, retry_backoff_ms=0)
    fails = spy_fail(w.store)
    calls: list[int] = []

    @w.task
    async def flaky(ctx):
        calls.append(ctx.attempt)
        raise RuntimeError("again")

    task = await q.submit("flaky", max_attempts=4)
    async with w.background():
        done = await finish(q, task.id)
    assert calls == [1, 2, 3, 4]
    assert done.status == "failed" and done.attempt == 4
    assert [kw["delay_ms"] for kw, _ in fails] == [0, 0, 0, 0]
    for _, row in fails[:3]:
        assert row.status == "queued" and row.run_at_ms == row.updated_at_ms


async def test_permanent_failures_use_no_delay(backend) -> None:
    q = backend.client()
    w = make(backend, retry_backoff_ms=5_000)
    fails = spy_fail(w.store)

    @w.task
    async def perm(ctx):
        raise TaskError("no")

    task = await q.submit("perm", max_attempts=3)
    async with w.background():
        done = await finish(q, task.id)
    assert done.status == "failed"
    assert [(kw["delay_ms"], kw["retryable"]) for kw, _ in fails] == [(0, False)]


# -- 7. max_run_ms -------------------------------------------------------------


async def test_max_run_ms_abandons_async_handler(backend) -> None:
    q = backend.client()
    w = make(backend, max_run_ms=100)
    fails = spy_fail(w.store)
    seen: list[Any] = []

    @w.task
    async def slow(ctx):
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            seen.append((ctx.attempt, ctx.lost_lease, ctx.lease_lost.is_set()))
            try:
                await ctx.progress(0.9)
                seen.append("written")
            except LostLease:
                seen.append("LostLease")
            raise
        return "never"

    task = await q.submit("slow", max_attempts=2)
    started = time.monotonic()
    async with w.background():
        done = await finish(q, task.id)
        await eventually(lambda: len(seen) == 4, timeout=2)
    elapsed = time.monotonic() - started
    expected = envelope(
        "HandlerTimeout",
        "handler_timeout",
        "handler for 'slow' exceeded max_run_ms=100ms; the attempt was abandoned",
        True,
    )
    assert [(kw["retryable"], row.status, row.attempt) for kw, row in fails] == [
        (True, "queued", 1),
        (True, "failed", 2),
    ]
    assert fails[0][1].error == expected
    assert fails[0][0]["error"] == expected
    assert (done.status, done.attempt, done.result) == ("failed", 2, None)
    assert done.error == expected
    assert seen == [(1, True, True), "LostLease", (2, True, True), "LostLease"]
    assert elapsed < 3


async def test_max_run_ms_abandons_sync_handler(backend) -> None:
    q = backend.client()
    w = make(backend, max_run_ms=100)
    finished: list[str] = []

    @w.task
    def sleepy(ctx):
        time.sleep(0.4)
        finished.append("thread done")
        return "late"

    task = await q.submit("sleepy", max_attempts=1)
    async with w.background():
        done = await finish(q, task.id)
        assert finished == []  # failed while the thread was still sleeping
        await eventually(lambda: finished, timeout=3)
        await asyncio.sleep(0.05)
    assert done.status == "failed"
    assert done.error == envelope(
        "HandlerTimeout",
        "handler_timeout",
        "handler for 'sleepy' exceeded max_run_ms=100ms; the attempt was abandoned",
        True,
    )
    row = await q.get(task.id)
    assert (row.status, row.result) == ("failed", None)


async def test_max_run_ms_bounds_a_whole_batch(backend) -> None:
    q = backend.client()
    w = make(backend, max_run_ms=100)

    @w.task(batch=4)
    async def slow_batch(contexts):
        await contexts[0].succeed("first")
        await asyncio.sleep(5)

    tasks = [await q.submit("slow_batch", {"i": i}, max_attempts=1) for i in range(3)]
    async with w.background():
        done = [await finish(q, t.id) for t in tasks]
    statuses = sorted(t.status for t in done)
    assert statuses == ["failed", "failed", "succeeded"]
    for t in done:
        if t.status == "failed":
            assert t.error["code"] == "handler_timeout" and t.error["retryable"] is True
        else:
            assert t.result == "first"


# -- 8. on_error -------------------------------------------------------------


async def test_on_error_claim_phase_and_loop_continues(backend) -> None:
    q = backend.client()
    errors: list[tuple[BaseException, dict]] = []
    w = make(backend, on_error=lambda exc, info: errors.append((exc, info)))
    boom = RuntimeError("claim boom")
    orig = w.store.claim_session
    calls = {"n": 0}

    async def claim_session(**kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise boom
        return await orig(**kwargs)

    w.store.claim_session = claim_session

    @w.task
    async def job(ctx):
        return "ok"

    task = await q.submit("job")
    async with w.background():
        done = await finish(q, task.id)
    assert (done.status, done.result) == ("succeeded", "ok")
    assert errors[0] == (boom, {"phase": "claim"})
    assert errors[0][0] is boom


def _break_once(store, names: tuple[str, ...], exc: BaseException) -> dict[str, bool]:
    """Make the first call to any of ``names`` on ``store`` raise ``exc``."""
    state = {"armed": True}
    for name in names:
        if not hasattr(store, name):
            continue
        orig = getattr(store, name)

        def wrap(orig):
            async def broken(*args, **kwargs):
                if state["armed"]:
                    state["armed"] = False
                    raise exc
                return await orig(*args, **kwargs)

            return broken

        setattr(store, name, wrap(orig))
    return state


# The worker's success settlement may go through ``complete`` or a coalescing
# internal (``_complete_many_json``, ``_complete_each_json``); failures through ``fail``.
@pytest.mark.parametrize("write", ["complete", "fail"])
async def test_on_error_execute_phase_for_settlement_write(backend, write: str) -> None:
    q = backend.client()
    errors: list[tuple[BaseException, dict]] = []
    w = make(backend, lease_ms=300, on_error=lambda exc, info: errors.append((exc, info)))
    boom = RuntimeError("write boom")
    names = ("complete", "_complete_many_json", "_complete_each_json") if write == "complete" else ("fail",)
    state = _break_once(w.store, names, boom)
    attempts: list[int] = []

    @w.task
    async def job(ctx):
        attempts.append(ctx.attempt)
        if write == "fail" and ctx.attempt == 1:
            raise ValueError("first attempt fails")
        return ctx.attempt

    task = await q.submit("job")
    async with w.background():
        done = await finish(q, task.id)
    assert state["armed"] is False
    assert errors[0][0] is boom
    assert errors[0][1] == {"phase": "execute", "task_id": task.id}
    # nothing was written for the first attempt: the lease expired and it ran again
    assert attempts == [1, 2]
    assert (done.status, done.result, done.attempt, done.error) == ("succeeded", 2, 2, None)


async def test_on_error_heartbeat_failure(backend) -> None:
    q = backend.client()
    errors: list[tuple[BaseException, dict]] = []
    w = make(
        backend,
        lease_ms=2_000,
        heartbeat_interval_ms=30,
        on_error=lambda exc, info: errors.append((exc, info)),
    )
    boom = RuntimeError("beat boom")
    orig = w.store._heartbeat_batch  # what the worker's beat calls
    calls = {"n": 0}

    async def heartbeat_batch(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise boom
        return await orig(*args, **kwargs)

    w.store._heartbeat_batch = heartbeat_batch

    @w.task
    async def job(ctx):
        await eventually(lambda: calls["n"] >= 2, timeout=3)
        return "ok"

    task = await q.submit("job")
    async with w.background():
        done = await finish(q, task.id)
    assert (done.status, done.result) == ("succeeded", "ok")
    assert errors == [(boom, {"phase": "execute", "task_id": task.id})]


async def test_on_error_exceptions_are_swallowed(backend) -> None:
    q = backend.client()
    hook_calls: list[dict] = []

    def hook(exc, info):
        hook_calls.append(info)
        raise RuntimeError("hook itself fails")

    w = make(backend, on_error=hook)
    orig = w.store.claim_session
    calls = {"n": 0}

    async def claim_session(**kwargs):
        calls["n"] += 1
        if calls["n"] <= 2:
            raise RuntimeError("claim boom")
        return await orig(**kwargs)

    w.store.claim_session = claim_session

    @w.task
    async def job(ctx):
        return "ok"

    task = await q.submit("job")
    async with w.background():
        done = await finish(q, task.id)
    assert done.status == "succeeded"
    assert hook_calls[:2] == [{"phase": "claim"}, {"phase": "claim"}]


# -- 9. sources and resources -------------------------------------------------------------


async def test_resource_capacity_one_serialises_calls(backend) -> None:
    q = backend.client()
    w = make(backend, concurrency=8, resources={"gpu": 1})
    gpu = Gauge()
    cpu = Gauge()

    @w.task("g", resource="gpu")
    async def g(ctx):
        with gpu:
            await asyncio.sleep(0.03)

    @w.task
    async def c(ctx):
        with cpu:
            await asyncio.sleep(0.08)

    tasks = [await q.submit("g") for _ in range(6)] + [await q.submit("c") for _ in range(6)]
    async with w.background():
        done = [await finish(q, t.id) for t in tasks]
    assert all(t.status == "succeeded" for t in done)
    assert gpu.max == 1
    assert cpu.max >= 2


async def test_resource_capacity_two_with_batches(backend) -> None:
    q = backend.client()
    w = make(backend, concurrency=8, resources={"pool": 2})
    gauge = Gauge()
    sizes: list[int] = []

    @w.task("b", batch=3, resource="pool")
    async def b(contexts):
        with gauge:
            sizes.append(len(contexts))
            await asyncio.sleep(0.05)

    tasks = [await q.submit("b", {"i": i}) for i in range(12)]
    async with w.background():
        done = [await finish(q, t.id) for t in tasks]
    assert all(t.status == "succeeded" for t in done)
    assert gauge.max == 2
    assert sum(sizes) == 12 and all(1 <= s <= 3 for s in sizes)


async def test_sources_unbatched_names_share_one_draw(backend) -> None:
    q = backend.client()
    w = make(backend, concurrency=4, resources={"gpu": 1})
    draws = spy_draws(w.store)

    async def h(ctx):
        return ctx.name

    async def hb(contexts):
        return {c.task_id: c.name for c in contexts}

    w.register("a", h)
    w.register("b", h)
    w.register("c", hb, batch=2)
    w.register("g", h, resource="gpu")
    tasks = [await q.submit(n) for n in ("a", "b", "c", "c", "c", "g", "g", "a", "b")]
    async with w.background():
        done = [await finish(q, t.id) for t in tasks]
    assert [(t.status, t.result) for t in done] == [("succeeded", t.name) for t in tasks]
    names_seen = {names for names, _ in draws}
    assert names_seen <= {("a", "b"), ("c",), ("g",)}
    assert ("a", "b") in names_seen
    for names, limit in draws:
        if names == ("c",):
            assert limit % 2 == 0 and 2 <= limit <= 8
        if names == ("g",):
            assert limit == 1
        if names == ("a", "b"):
            assert 1 <= limit <= 4


async def test_two_workers_with_different_handlers_share_a_queue(backend) -> None:
    q = backend.client()
    wa = make(backend, concurrency=4)
    wb = make(backend, concurrency=4)

    @wa.task
    async def a(ctx):
        return {"by": "A"}

    @wb.task
    async def b(ctx):
        return {"by": "B"}

    tasks = []
    for _ in range(50):
        tasks.append(await q.submit("a"))
        tasks.append(await q.submit("b"))
    async with wa.background(), wb.background():
        done = [await finish(q, t.id, timeout_ms=20_000) for t in tasks]
    for t in done:
        expected = {"a": ("A", wa.worker_id), "b": ("B", wb.worker_id)}[t.name]
        assert (t.status, t.attempt, t.result, t.worker_id) == (
            "succeeded",
            1,
            {"by": expected[0]},
            expected[1],
        )


async def test_claimed_name_without_handler_fails_with_no_handler(backend) -> None:
    q = backend.client()
    w = make(backend)
    ran: list[str] = []

    @w.task
    async def gone(ctx):
        ran.append("gone")

    @w.task
    async def kept(ctx):
        return "kept"

    # Simulate an unregistration mid-run: the name is still drawn, its handler is gone.
    del w._registry.by_name["gone"]
    task = await q.submit("gone", max_attempts=3)
    other = await q.submit("kept")
    async with w.background():
        done = await finish(q, task.id)
        done_other = await finish(q, other.id)
    assert ran == []
    assert (done.status, done.attempt) == ("failed", 1)
    assert done.error == envelope("NoHandler", "no_handler", "no handler registered for 'gone'", False)
    assert (done_other.status, done_other.result) == ("succeeded", "kept")


async def test_worker_only_claims_its_queues_and_names(backend) -> None:
    q = backend.client()
    w = make(backend, queues=("q1",))

    @w.task
    async def job(ctx):
        return ctx.queue

    mine = await q.submit("job", queue="q1")
    elsewhere = await q.submit("job", queue="q2")
    unknown = await q.submit("unknown", queue="q1")
    async with w.background():
        done = await finish(q, mine.id)
        await asyncio.sleep(0.15)
    assert (done.status, done.result) == ("succeeded", "q1")
    assert (await q.get(elsewhere.id)).status == "queued"
    assert (await q.get(unknown.id)).status == "queued"


# -- 10. lifecycle -------------------------------------------------------------


async def test_run_returns_after_stop_and_drains_in_flight_calls(backend) -> None:
    q = backend.client()
    w = make(backend)
    started = asyncio.Event()

    @w.task
    async def slow(ctx):
        started.set()
        await asyncio.sleep(0.3)
        return "slow-ok"

    task = await q.submit("slow")
    run = asyncio.ensure_future(w.run())
    await asyncio.wait_for(started.wait(), 5)
    w.stop()
    await asyncio.sleep(0.05)
    assert not run.done()  # waiting for the call in flight; it is not cancelled
    await asyncio.wait_for(run, 5)
    row = await q.get(task.id)
    assert (row.status, row.result) == ("succeeded", "slow-ok")
    # run() does not close the store: it is still usable
    assert (await w.store.get(task.id)).status == "succeeded"


async def test_stop_then_no_more_claims(backend) -> None:
    q = backend.client()
    w = make(backend)

    @w.task
    async def job(ctx):
        return "ok"

    first = await q.submit("job")
    run = asyncio.ensure_future(w.run())
    assert (await finish(q, first.id)).status == "succeeded"
    w.stop()
    await asyncio.wait_for(run, 5)
    second = await q.submit("job")
    await asyncio.sleep(0.1)
    assert (await q.get(second.id)).status == "queued"


async def test_run_concurrency_override(backend) -> None:
    q = backend.client()
    w = make(backend, concurrency=1)
    gauge = Gauge()

    @w.task
    async def job(ctx):
        with gauge:
            await asyncio.sleep(0.1)

    tasks = [await q.submit("job") for _ in range(3)]
    async with w.background(concurrency=3):
        for t in tasks:
            assert (await finish(q, t.id)).status == "succeeded"
    assert gauge.max == 3


async def test_background_with_an_empty_body_returns(backend) -> None:
    """stop() issued before run() got going must still stop it (API §5.2)."""
    w = make(backend)

    @w.task
    async def job(ctx):
        return 1

    async def body():
        async with w.background():
            pass

    runner = asyncio.ensure_future(body())
    done, _ = await asyncio.wait({runner}, timeout=1.5)
    if not done:
        w.stop()  # unstick the run so the test can end
        await asyncio.wait_for(runner, 5)
    assert done, "background() with an empty body never returned"


async def test_background_raises_run_failure(backend) -> None:
    if backend.dialect != "sqlite":
        pytest.skip("bumps protocol_version with sqlite3")
    q = backend.client()
    await q.connect()
    await q.close()
    with sqlite3.connect(backend.target) as conn:
        conn.execute("update cairnq_meta set value = '2' where key = 'protocol_version'")

    w = make(backend)
    with pytest.raises(ProtocolVersionMismatch) as err:
        async with w.background():
            await asyncio.sleep(0.1)
    assert str(err.value) == "storage protocol_version=2, SDK supports 1"

    w2 = make(backend)
    with pytest.raises(KeyError) as body_err:
        async with w2.background():
            await asyncio.sleep(0.1)
            raise KeyError("body")
    assert isinstance(body_err.value.__cause__, ProtocolVersionMismatch)

    w3 = make(backend)
    original = ValueError("original cause")
    with pytest.raises(KeyError) as body_err:
        async with w3.background():
            await asyncio.sleep(0.1)
            raise KeyError("body") from original
    assert body_err.value.__cause__ is original


def _count_closes(store) -> list[int]:
    closes: list[int] = []
    orig = store.close

    async def close():
        closes.append(1)
        await orig()

    store.close = close
    return closes


async def test_factory_worker_owns_its_store(backend) -> None:
    if backend.dialect != "sqlite":
        pytest.skip("Worker.sqlite")
    q = backend.client()
    w = Worker.sqlite(backend.target, **FAST)
    closes = _count_closes(w.store)

    @w.task
    async def job(ctx):
        return "owned"

    task = await q.submit("job")
    async with w.background() as running:
        assert running is w
        assert (await finish(q, task.id)).result == "owned"
        assert closes == []
    assert closes == [1]


async def test_constructed_worker_does_not_own_its_store(backend) -> None:
    q = backend.client()
    store = backend.store()
    w = Worker(store, ["default"], **FAST)
    closes = _count_closes(store)

    @w.task
    async def job(ctx):
        return "shared"

    task = await q.submit("job")
    async with w.background():
        assert (await finish(q, task.id)).result == "shared"
    assert closes == []
    assert (await store.get(task.id)).status == "succeeded"
    await w.close()  # close() closes it, owned or not
    assert closes == [1]


async def test_worker_id_and_serve_inside_a_loop(backend) -> None:
    w = make(backend)
    other = make(backend)
    assert w.worker_id.startswith("worker_")
    assert len(w.worker_id) == len("worker_") + 26
    assert w.worker_id != other.worker_id
    with pytest.raises(RuntimeError):
        w.serve()


def test_serve_runs_until_stop_and_closes_an_owned_store(sqlite_backend) -> None:
    path = sqlite_backend.target

    async def submit() -> str:
        async with CairnQ.sqlite(path) as q:
            return (await q.submit("job")).id

    task_id = asyncio.run(submit())
    w = Worker.sqlite(path, **FAST)
    closes = _count_closes(w.store)

    @w.task
    async def job(ctx):
        w.stop()
        await asyncio.sleep(0.05)  # in flight when stop() is called: drained
        return "served"

    w.serve()
    assert closes == [1]

    async def read():
        async with CairnQ.sqlite(path) as q:
            return await q.get(task_id)

    row = asyncio.run(read())
    assert (row.status, row.result) == ("succeeded", "served")


# -- 11. additions -------------------------------------------------------------


async def test_max_in_flight_bytes_stops_claiming(backend) -> None:
    q = backend.client()
    w = make(backend, concurrency=8, max_in_flight_bytes=1_500)
    gauge = Gauge()
    started = {i: asyncio.Event() for i in range(3)}
    release = asyncio.Event()

    @w.task
    async def big(ctx, payload):
        with gauge:
            started[payload["i"]].set()
            await release.wait()

    blob = "x" * 990
    async with w.background():
        t0 = await q.submit("big", {"i": 0, "data": blob})
        await asyncio.wait_for(started[0].wait(), 5)
        t1 = await q.submit("big", {"i": 1, "data": blob})
        await asyncio.wait_for(started[1].wait(), 5)  # 1000 bytes < 1500: still claiming
        t2 = await q.submit("big", {"i": 2, "data": blob})
        await asyncio.sleep(0.3)  # 2000 bytes >= 1500: not claiming
        assert not started[2].is_set()
        assert (await q.get(t2.id)).status == "queued"
        release.set()
        done = [await finish(q, t.id, timeout_ms=3_000) for t in (t0, t1, t2)]
    assert all(t.status == "succeeded" for t in done)
    assert gauge.max == 2


async def test_max_in_flight_bytes_with_presubmitted_tasks(backend) -> None:
    q = backend.client()
    w = make(backend, concurrency=8, max_in_flight_bytes=1_500, claim_batch=1)
    gauge = Gauge()

    @w.task
    async def big(ctx, payload):
        with gauge:
            await asyncio.sleep(0.15)

    blob = "x" * 990
    tasks = [await q.submit("big", {"i": i, "data": blob}) for i in range(3)]
    async with w.background():
        done = [await finish(q, t.id, timeout_ms=3_000) for t in tasks]
    assert all(t.status == "succeeded" for t in done)
    assert gauge.max == 2


async def test_claim_batch_caps_calls_per_draw(backend) -> None:
    q = backend.client()
    w = make(backend, concurrency=8, claim_batch=2)
    draws = spy_draws(w.store)

    @w.task
    async def u(ctx):
        await asyncio.sleep(0.02)

    @w.task(batch=4)
    async def b4(contexts):
        await asyncio.sleep(0.02)

    tasks = [await q.submit("u") for _ in range(6)] + [await q.submit("b4") for _ in range(8)]
    async with w.background():
        done = [await finish(q, t.id) for t in tasks]
    assert all(t.status == "succeeded" for t in done)
    u_limits = [limit for names, limit in draws if names == ("u",)]
    b_limits = [limit for names, limit in draws if names == ("b4",)]
    assert u_limits and max(u_limits) == 2 and all(1 <= x <= 2 for x in u_limits)
    # max(1, claim_batch // batch) = 1 call of 4 per poll
    assert b_limits and all(x == 4 for x in b_limits)


async def test_claim_batch_larger_than_batch(backend) -> None:
    q = backend.client()
    w = make(backend, concurrency=8, claim_batch=10)
    draws = spy_draws(w.store)

    @w.task(batch=4)
    async def b4(contexts):
        return None

    tasks = [await q.submit("b4") for _ in range(8)]
    async with w.background():
        done = [await finish(q, t.id) for t in tasks]
    assert all(t.status == "succeeded" for t in done)
    assert draws[0] == (("b4",), 8)  # max(1, 10 // 4) = 2 calls of 4
    assert all(limit <= 8 for _, limit in draws)


async def test_per_name_concurrency_cap(backend) -> None:
    q = backend.client()
    w = make(backend, concurrency=8)
    capped = Gauge()
    free = Gauge()

    @w.task("capped", concurrency=2)
    async def capped_h(ctx):
        with capped:
            await asyncio.sleep(0.05)

    @w.task
    async def free_h(ctx):
        with free:
            await asyncio.sleep(0.08)

    with pytest.raises(ValueError):
        w.register("bad", capped_h, concurrency=0)

    tasks = [await q.submit("capped") for _ in range(8)] + [await q.submit("free_h") for _ in range(4)]
    async with w.background():
        done = [await finish(q, t.id) for t in tasks]
    assert all(t.status == "succeeded" for t in done)
    assert capped.max == 2
    assert free.max >= 2


async def test_heartbeat_interval_keeps_short_lease_alive(backend) -> None:
    q = backend.client()
    w = make(backend, lease_ms=200, heartbeat_interval_ms=50, concurrency=2)
    attempts: list[int] = []

    @w.task(batch=2)
    async def long(contexts):
        attempts.extend(c.attempt for c in contexts)
        await asyncio.sleep(0.6)  # three leases long; the worker's beats renew all
        return {c.task_id: "kept" for c in contexts}

    tasks = [await q.submit("long") for _ in range(2)]
    async with w.background():
        done = [await finish(q, t.id) for t in tasks]
    assert attempts == [1, 1]
    assert [(t.status, t.result, t.attempt) for t in done] == [("succeeded", "kept", 1)] * 2


async def test_heartbeat_reply_about_an_ended_attempt_spares_the_next_one(backend) -> None:
    """A beat sent while attempt 1 was live, answered after it failed and the
    same worker claimed attempt 2: the missing id is attempt 1's news, not a
    lost lease for attempt 2 (whose outcome would otherwise be discarded)."""
    from cairnq.context import TaskContext
    from cairnq.worker.heartbeat import Heartbeats
    from cairnq.worker.store_port import StorePort

    store = backend.store()
    worker_id = "worker_01HEARTBEATRACE00000000000"
    await store.submit(name="race", queue="hb")
    (first,) = await store.claim(queues=["hb"], worker_id=worker_id)
    ctx1 = TaskContext(store, first, worker_id, 30_000)
    errors: list[BaseException] = []
    beats = Heartbeats(StorePort(store, worker_id, 30_000), 10_000, lambda exc, info: errors.append(exc))
    beats.hold([ctx1])
    # Attempt 1 fails (retryably, due at once); its release has not run yet.
    await store.fail(task_id=first.id, worker_id=worker_id, error={"message": "boom"}, delay_ms=0)
    contexts: list[TaskContext] = []
    original = store._heartbeat_batch

    async def beat_then_reclaim(*args: Any, **kwargs: Any) -> dict[str, bool]:
        reply = await original(*args, **kwargs)  # sent while attempt 1 was held: it is missing
        (second,) = await store.claim(queues=["hb"], worker_id=worker_id)
        contexts.append(TaskContext(store, second, worker_id, 30_000))
        beats.hold(contexts)  # attempt 2, held before the reply is read
        beats.release(ctx1)  # attempt 1's late release must not drop attempt 2
        return reply

    store._heartbeat_batch = beat_then_reclaim
    await beats.renew_now()
    store._heartbeat_batch = original
    (ctx2,) = contexts
    assert ctx2.attempt == 2 and not ctx2.lost_lease and not errors
    assert len(beats) == 1  # attempt 2 is still held and beaten
    await beats.renew_now()
    assert not ctx2.lost_lease
    done = await store.complete(task_id=ctx2.task_id, worker_id=worker_id, result={"ok": True})
    assert done.status == "succeeded" and done.attempt == 2
    await beats.stop()


async def test_distinct_results_of_one_poll_settle_in_one_statement(backend) -> None:
    """Handlers finishing together with different results: one complete_each,
    each task with its own result; all-equal results: one complete_many."""
    q = backend.client()
    tasks = [await q.submit("square", {"n": n}) for n in range(16)]
    tasks += [await q.submit("nothing", {"n": n}) for n in range(16)]
    w = make(backend, concurrency=32)
    calls: dict[str, list[int]] = {"_complete_each_json": [], "_complete_many_json": []}
    for name, seen in calls.items():
        original = getattr(w.store, name)

        def counting(ids, *args, _original=original, _seen=seen, **kwargs):
            _seen.append(len(ids))
            return _original(ids, *args, **kwargs)

        setattr(w.store, name, counting)
    release = asyncio.Event()

    @w.task
    async def square(ctx, payload):
        await release.wait()  # all 16 return in the same turn of the loop
        return {"square": payload["n"] ** 2}

    @w.task
    async def nothing(ctx, payload):
        await release.wait()
        return None

    async with w.background():
        await eventually(lambda: w._running == 32)
        release.set()
        done = [await finish(q, t.id) for t in tasks]
    assert [t.result for t in done[:16]] == [{"square": n * n} for n in range(16)]
    assert all(t.status == "succeeded" and t.result is None for t in done[16:])
    assert sum(calls["_complete_each_json"]) + sum(calls["_complete_many_json"]) == 32
    assert len(calls["_complete_each_json"]) + len(calls["_complete_many_json"]) <= 2


# -- the claim loop after a short claim ------------------------------------------------------------


async def test_an_empty_source_does_not_slow_a_busy_one(backend) -> None:
    """A second source (here a batch handler) with nothing queued comes back
    short on every claim; the loop must keep claiming for the source that has
    work rather than sleep until the poll interval."""
    q = backend.client()
    for i in range(60):
        await q.submit("a", {"i": i})
    w = make(backend, concurrency=4, poll_interval_ms=2_000)
    done = 0

    @w.task("a")
    async def a(ctx, payload):
        nonlocal done
        await asyncio.sleep(0.002)
        done += 1

    @w.task("b", batch=10)
    async def b(ctxs):
        return None

    started = time.monotonic()
    async with w.background():
        await eventually(lambda: done == 60, timeout=10)
    assert time.monotonic() - started < 1.5  # one poll interval per claim would take minutes


async def test_claim_batch_ramps_up_at_once_beside_an_empty_source(backend) -> None:
    q = backend.client()
    for i in range(8):
        await q.submit("a", {"i": i})
    w = make(backend, concurrency=8, poll_interval_ms=2_000, claim_batch=1)
    started: list[float] = []
    release = asyncio.Event()
    t0 = time.monotonic()

    @w.task("a")
    async def a(ctx, payload):
        started.append(time.monotonic() - t0)
        await release.wait()

    @w.task("b", batch=10)
    async def b(ctxs):
        return None

    async with w.background():
        await eventually(lambda: len(started) == 8, timeout=10)
        release.set()
    assert started[-1] < 1.0  # one claim per poll interval would take 14 s
