"""Quick calls (``cairnq/worker/quick.py``): a claim's async one-task
handlers start without the general call around them, and whatever a handler
does on its first step other than return (suspend, raise, return what
cannot be stored, settle its task itself) hands the call on to the general
path in the same task and context. Each test claims many tasks at once (the
worker starts with the backlog in place, concurrency above it) so handlers
that return and handlers that do not share one claim."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import pytest
from worker_kit import envelope, eventually, finish, make

from cairnq import LostLease, TaskError
from cairnq.worker.quick import RETURNED, QuickCall
from cairnq.worker.registry import Registration
from cairnq.worker.starter import CallStarter

N = 24


async def _backlog(q: Any, name: str, n: int = N, **kwargs: Any) -> list[Any]:
    return [await q.submit(name, {"i": i}, **kwargs) for i in range(n)]


async def _drained(q: Any, w: Any, tasks: list[Any]) -> list[Any]:
    async with w.background(concurrency=N + 8):
        return [await finish(q, task.id) for task in tasks]


async def test_a_handler_that_suspends_on_its_first_step_goes_on_in_the_same_task_and_context(backend) -> None:
    q = backend.client()
    w = make(backend)
    seen = contextvars.ContextVar("seen", default=None)
    record: dict[int, tuple[Any, Any, Any]] = {}

    @w.task
    async def maybe_sleeps(ctx, payload):
        i = payload["i"]
        before = asyncio.current_task()
        seen.set(i)
        if i % 3 == 0:
            await asyncio.sleep(0.01)
            await asyncio.sleep(0)  # a bare yield: the task gets None, not a future
        record[i] = (before, asyncio.current_task(), seen.get())
        return {"i": i}

    done = await _drained(q, w, await _backlog(q, "maybe_sleeps"))
    assert [t.status for t in done] == ["succeeded"] * N
    assert [t.result for t in done] == [{"i": i} for i in range(N)]
    for i, (before, after, value) in record.items():
        assert before is after, i  # asyncio.current_task() never changed under the handler
        assert value == i  # its own context all along (no other call's value)
    assert w.load().calls_in_flight == 0


async def test_each_call_runs_in_a_context_of_its_own(backend) -> None:
    q = backend.client()
    w = make(backend)
    var = contextvars.ContextVar("var", default="unset")
    found: list[str] = []

    @w.task
    async def leaves_a_value(ctx, payload):
        found.append(var.get())
        var.set(f"set by {payload['i']}")

    done = await _drained(q, w, await _backlog(q, "leaves_a_value"))
    assert [t.status for t in done] == ["succeeded"] * N
    assert found == ["unset"] * N


async def test_raising_on_the_first_step_fails_that_task_alone(backend) -> None:
    q = backend.client()
    w = make(backend)

    @w.task
    async def some_raise(ctx, payload):
        if payload["i"] % 4 == 1:
            raise ValueError(f"no {payload['i']}")
        if payload["i"] % 4 == 2:
            raise TaskError("for good", retryable=False)
        return payload["i"]

    done = await _drained(q, w, await _backlog(q, "some_raise", max_attempts=1))
    for i, task in enumerate(done):
        if i % 4 == 1:
            assert (task.status, task.error) == ("failed", envelope("ValueError", "handler_error", f"no {i}", True))
        elif i % 4 == 2:
            assert task.status == "failed" and task.error["message"] == "for good", task.error
            assert task.error["retryable"] is False
        else:
            assert (task.status, task.result) == ("succeeded", i)
    assert w.load().calls_in_flight == 0


async def test_raising_after_a_suspension_fails_that_task_alone(backend) -> None:
    q = backend.client()
    w = make(backend)

    @w.task
    async def raises_later(ctx, payload):
        if payload["i"] % 2:
            await asyncio.sleep(0.005)
            raise RuntimeError("late")
        return "ok"

    done = await _drained(q, w, await _backlog(q, "raises_later", max_attempts=1))
    assert [t.status for t in done] == ["succeeded", "failed"] * (N // 2)
    assert done[1].error == envelope("RuntimeError", "handler_error", "late", True)


async def test_a_result_that_cannot_be_stored_fails_its_task_and_no_other(backend) -> None:
    q = backend.client()
    w = make(backend)

    @w.task
    async def odd_result(ctx, payload):
        return object() if payload["i"] == 5 else payload["i"]

    done = await _drained(q, w, await _backlog(q, "odd_result"))
    for i, task in enumerate(done):
        if i == 5:
            assert task.status == "failed" and task.attempt == 1  # not retried
            assert task.error["code"] == "unserializable_result"
        else:
            assert (task.status, task.result) == ("succeeded", i)


async def test_a_task_the_handler_settled_itself_is_not_written_again(backend) -> None:
    q = backend.client()
    w = make(backend)

    contexts = []

    @w.task
    async def settles_itself(ctx, payload):
        contexts.append(ctx)
        if payload["i"] % 2:
            await ctx.fail(TaskError("mine", retryable=False))
            return "ignored"
        await ctx.succeed({"by": "handler"})
        return "ignored too"

    done = await _drained(q, w, await _backlog(q, "settles_itself"))
    for i, task in enumerate(done):
        if i % 2:
            assert task.status == "failed" and task.error["message"] == "mine"
        else:
            assert (task.status, task.result) == ("succeeded", {"by": "handler"})
    # Nothing more was written for them: a second completion would have been
    # refused, and the context told it lost its lease.
    assert len(contexts) == N and not any(ctx.lost_lease for ctx in contexts)


async def test_lost_lease_on_the_first_step_writes_nothing(backend) -> None:
    q = backend.client()
    w = make(backend, lease_ms=400, heartbeat_interval_ms=100)
    calls: dict[int, int] = {}

    @w.task
    async def gives_up_once(ctx, payload):
        i = payload["i"]
        calls[i] = calls.get(i, 0) + 1
        if i == 3 and calls[i] == 1:
            raise LostLease(ctx.task_id)  # the worker writes nothing: the lease runs out
        return i

    done = await _drained(q, w, await _backlog(q, "gives_up_once"))
    assert [t.status for t in done] == ["succeeded"] * N
    assert calls[3] == 2 and done[3].attempt == 2  # taken again once its lease expired
    assert all(calls[i] == 1 for i in range(N) if i != 3)


async def test_a_wrapped_complete_sees_every_completion(backend) -> None:
    """A store whose ``complete`` the user wrapped: calls do not start quick
    (their completions would bypass the wrapper)."""
    q = backend.client()
    w = make(backend)
    seen: list[str] = []
    original = w.store.complete

    async def complete(*, task_id, **kwargs):
        seen.append(task_id)
        return await original(task_id=task_id, **kwargs)

    w.store.complete = complete

    @w.task
    async def plain(ctx):
        return None

    tasks = await _backlog(q, "plain")
    done = await _drained(q, w, tasks)
    assert [t.status for t in done] == ["succeeded"] * N
    assert sorted(seen) == sorted(t.id for t in tasks)


async def test_a_stop_waits_for_suspended_calls_of_a_quick_claim(backend) -> None:
    q = backend.client()
    w = make(backend)
    release = asyncio.Event()
    returned: list[int] = []

    @w.task
    async def some_wait(ctx, payload):
        if payload["i"] < 2:
            await release.wait()
        returned.append(payload["i"])
        return payload["i"]

    tasks = await _backlog(q, "some_wait")
    async with w.background(concurrency=N + 8):
        for task in tasks[2:]:
            assert (await finish(q, task.id)).status == "succeeded"
        assert w.load().calls_in_flight == 2
        w.stop()
        await asyncio.sleep(0.05)
        release.set()
    assert sorted(returned) == list(range(N))
    assert [(await q.get(t.id)).status for t in tasks[:2]] == ["succeeded"] * 2


# -- QuickCall and the starter, without a worker ------------------------------------------


class Group:
    """A ``QuickGroup`` that records what its calls tell it."""

    def __init__(self) -> None:
        self.task: Any = None
        self.is_running = True
        self.settings: Any = None
        self.told: list[tuple[str, Any]] = []

    def returned(self, call: QuickCall, value: Any) -> bool:
        self.told.append(("returned", call.task))
        return True

    def promoted(self, call: QuickCall) -> Any:
        raise AssertionError("not in these tests")

    def dropped(self, call: QuickCall) -> None:
        self.told.append(("dropped", call.task))

    def flush(self) -> None:
        self.told.append(("flush", None))


def _quick_calls(group: Group, n: int) -> list[Any]:
    async def handler(ctx: Any) -> None:
        return None

    reg = Registration("h", handler, None, None, None, "ctx", True)
    return [(group, QuickCall.of(group, reg, i, None), "h") for i in range(n)]


def test_quick_calls_cancelled_before_they_ran_are_dropped_each_once() -> None:
    async def main() -> Group:
        group = Group()
        loop = asyncio.get_running_loop()
        loop.set_task_factory(lambda loop, coro: asyncio.Task(coro, loop=loop))  # (never eager)
        starter = CallStarter(loop)
        starter.start(_quick_calls(group, 3))  # one shared task
        starter.start(_quick_calls(group, 1)[:1])  # a lone call: a task of its own
        for task in asyncio.all_tasks() - {asyncio.current_task()}:
            task.cancel()
        await asyncio.sleep(0)
        return group

    group = asyncio.run(main())
    assert sorted(group.told) == [("dropped", 0), ("dropped", 0), ("dropped", 1), ("dropped", 2)]


async def test_a_quick_call_that_returned_drops_nothing_when_closed() -> None:
    group = Group()
    (_, call, _), = _quick_calls(group, 1)
    assert call.first_step() is RETURNED
    call.close()
    with pytest.raises(RuntimeError):
        call.send(None)  # as for any coroutine that is over
    assert group.told == [("returned", 0)]


async def test_the_calls_that_return_in_one_step_are_flushed_once_at_its_end() -> None:
    group = Group()
    loop = asyncio.get_running_loop()
    starter = CallStarter(loop)
    starter.start(_quick_calls(group, 3))  # one shared task
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert group.told == [("returned", 0), ("returned", 1), ("returned", 2), ("flush", None)]
    group.told.clear()
    starter.start(_quick_calls(group, 1))  # a lone call: a task of its own
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert group.told == [("returned", 0), ("flush", None)]


# -- QuickHold: a claim's quick calls on a real store -----------------------------------


async def test_a_flush_frees_the_slots_and_writes_the_completions_of_the_calls_that_returned(backend) -> None:
    """Calls that returned hold their slots until the flush; then their
    completions go out together, each context hears its own outcome (a task
    settled elsewhere meanwhile: its lease lost), and every lease is let go."""
    from cairnq.context import new_contexts
    from cairnq.worker.book import CallBook, QuickHold
    from cairnq.worker.execution import CallSettings
    from cairnq.worker.heartbeat import Heartbeats
    from cairnq.worker.signals import Signal
    from cairnq.worker.store_port import StorePort

    worker_id = "w-quick-hold"
    q = backend.client()
    for i in range(4):
        await q.submit("job", {"i": i})
    tasks = await q.store.claim(queues=["default"], worker_id=worker_id, limit=4)
    assert len(tasks) == 4
    port = StorePort(q.store, worker_id, 30_000)
    reported: list[BaseException] = []
    settings = CallSettings(port, 0, 0, None, lambda exc, info: reported.append(exc))
    book = CallBook()
    book.call_done = Signal()
    book.heartbeats = Heartbeats(port, 60_000, settings.report)
    contexts = new_contexts(q.store, tasks, worker_id, 30_000, 0, 0)
    book.heartbeats.hold(contexts)
    completions = port.completer()
    assert completions is not None
    hold = QuickHold(book, settings, completions, port.writes_ride_claims)
    book.calls[hold] = None

    async def handler(ctx: Any) -> None:
        return None

    reg = Registration("job", handler, None, None, None, "ctx", True)
    calls = [QuickCall.of(hold, reg, task, ctx) for task, ctx in zip(tasks, contexts)]
    hold.expect(len(calls))
    book.running += len(calls)
    # Task 2 is settled behind the worker's back: its write will find it gone.
    await q.store.complete(task_id=tasks[2].id, worker_id=worker_id, result="elsewhere")
    results = [None, {"r": 1}, "late", [3]]
    for call, result in zip(calls, results):
        assert hold.returned(call, result) is True
    assert book.running == 4 and not book.call_done.is_set()  # nothing let go before the flush
    hold.flush()
    assert book.running == 0 and book.call_done.is_set()
    await eventually(lambda: port.completions_idle and not book.calls)
    assert [ctx.settled for ctx in contexts] == [True, True, False, True]
    assert [ctx.lost_lease for ctx in contexts] == [False, False, True, False]
    assert len(book.heartbeats) == 0
    assert reported == []
    got = [await q.get(task.id) for task in tasks]
    assert [t.status for t in got] == ["succeeded"] * 4
    assert [t.result for t in got] == [None, {"r": 1}, "elsewhere", [3]]
    hold.flush()  # nothing left: no second write
    assert port.completions_idle
