"""``drain`` and ``run_once`` on each dialect (through the ``backend``
fixture), and the plugin's fixtures inside this suite's own async runner."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

import pytest

from cairnq import CairnQ, TaskContext, TaskError, Worker
from cairnq.store.validation import INT32_MAX
from cairnq.testing import DrainTimeout, Outcome, drain, run_once


async def test_drain_reports_each_task_as_it_finished(backend: Any) -> None:
    client = backend.client()
    worker = backend.worker(poll_interval_ms=50)  # default backoff: a retry is not due at once

    @worker.task
    async def ok(ctx: TaskContext, n: int) -> int:
        return n + 1

    @worker.task
    async def broken(ctx: TaskContext, n: int) -> None:
        raise TaskError("no", code="bad_input", retryable=False)

    @worker.task
    async def flaky(ctx: TaskContext, n: int) -> None:
        raise RuntimeError("try again later")

    submitted = [
        await client.submit("ok", 1),
        await client.submit("broken", 2),
        await client.submit("flaky", 3, max_attempts=3),
        await client.submit("ok", 4, delay_ms=3_600_000),  # not due: left alone
    ]
    outcomes = await drain(worker)
    by_id = {o.id: o for o in outcomes}
    assert set(by_id) == {t.id for t in submitted[:3]}
    ok_, broken_, flaky_ = (by_id[t.id] for t in submitted[:3])
    assert (ok_.status, ok_.result, ok_.succeeded) == ("succeeded", 2, True)
    assert (broken_.status, broken_.error["code"]) == ("failed", "bad_input")
    assert (flaky_.status, flaky_.attempt) == ("queued", 1)  # its retry waits out its backoff
    assert "try again later" in flaky_.error["message"]
    assert not worker.load().running
    assert (await client.get(submitted[3].id)).status == "queued"


async def test_drain_runs_what_handlers_enqueue_until_nothing_is_due(backend: Any) -> None:
    client = backend.client()
    worker = backend.worker(poll_interval_ms=50, retry_backoff_ms=0)

    @worker.task
    async def countdown(ctx: TaskContext, n: int) -> int:
        if n:
            await ctx.submit("countdown", n - 1)
        return n

    await client.submit("countdown", 5)
    outcomes = await drain(worker)
    assert [(o.result, o.status) for o in outcomes] == [(n, "succeeded") for n in range(5, -1, -1)]
    assert len({o.task.root_id or o.id for o in outcomes}) == 1
    assert await drain(worker) == []  # nothing due: a second drain returns at once, empty


async def test_drain_gives_up_after_its_timeout_and_stops_the_worker(backend: Any) -> None:
    client = backend.client()
    worker = backend.worker(poll_interval_ms=50)

    started, release = asyncio.Event(), asyncio.Event()

    @worker.task
    async def slow(ctx: TaskContext) -> str:
        started.set()
        await release.wait()
        return "late"

    async def release_after_the_timeout() -> None:
        await started.wait()  # the drain began before: its timeout is up before this sleep
        await asyncio.sleep(0.5)
        release.set()

    task = await client.submit("slow")
    releasing = asyncio.ensure_future(release_after_the_timeout())
    with pytest.raises(DrainTimeout) as caught:
        await drain(worker, timeout_s=0.5)
    releasing.cancel()  # (done by now, unless the handler never started: failed below)
    assert [o.id for o in caught.value.outcomes] == [task.id]  # the call in flight finished
    assert caught.value.outcomes[0].result == "late"
    assert not worker.load().running


async def test_drain_refuses_a_running_worker(backend: Any) -> None:
    worker = backend.worker(poll_interval_ms=50)
    async with worker.background():
        while not worker.load().running:  # background() returns before run() connects
            await asyncio.sleep(0.01)
        with pytest.raises(RuntimeError, match="runs the worker itself"):
            await drain(worker)


async def test_run_once_settles_as_a_worker_would(backend: Any) -> None:
    client = backend.client()

    async def final(ctx: TaskContext, payload: Any) -> None:
        raise TaskError("bad payload", code="invalid", retryable=False)

    async def transient(ctx: TaskContext, payload: Any) -> None:
        raise ConnectionError("upstream down")

    async def settles_itself(ctx: TaskContext) -> str:
        await ctx.succeed({"early": True})
        return "ignored: already settled"

    failed = await run_once(final, {"x": 1}, on=client, max_attempts=3)
    assert (failed.status, failed.error["code"], failed.attempt) == ("failed", "invalid", 1)
    assert isinstance(failed.exception, TaskError)
    retry = await run_once(transient, None, on=client, max_attempts=3, name="fetch")
    assert (retry.status, retry.name, type(retry.exception)) == ("queued", "fetch", ConnectionError)
    early = await run_once(settles_itself, on=client.store)
    assert (early.status, early.result, early.exception) == ("succeeded", {"early": True}, None)


async def test_run_once_calls_a_batch_handler_with_a_batch_of_one(backend: Any) -> None:
    worker = backend.worker()
    seen: list[int] = []

    @worker.task(batch=16)
    async def index(contexts: list[TaskContext]) -> dict[str, Any]:
        seen.append(len(contexts))
        return {ctx.task_id: ctx.payload.upper() for ctx in contexts}

    outcome = await run_once(index, "doc", on=worker, batch=True)
    assert (outcome.status, outcome.result, seen) == ("succeeded", "DOC", [1])


async def test_run_once_refuses_to_run_a_task_other_than_its_own(backend: Any) -> None:
    client = backend.client()
    await client.submit("job", "someone else's", priority=INT32_MAX)

    async def job(ctx: TaskContext, payload: Any) -> None:
        raise AssertionError("must not run")

    with pytest.raises(RuntimeError, match="instead of"):
        await run_once(job, "mine", on=client)


# -- the plugin's fixtures, under tests/conftest.py's runner --------------------------------


async def test_the_fixtures_in_this_suite(
    cairnq_client: CairnQ, cairnq_worker: Callable[..., Worker], cairnq_db: str
) -> None:
    worker = cairnq_worker(["mail"], concurrency=4)
    sent: list[str] = []

    @worker.task("mail.send")
    def send(ctx: TaskContext, to: str) -> str:  # a plain def: run in a thread
        sent.append(to)
        return f"sent to {to}"

    for to in ("ada", "grace"):
        await cairnq_client.submit("mail.send", to, queue="mail")
    outcomes = await drain(worker)
    assert sorted(o.result for o in outcomes) == ["sent to ada", "sent to grace"]
    assert sorted(sent) == ["ada", "grace"]
    assert worker.store is not cairnq_client.store and cairnq_db.endswith("cairnq.db")


def test_outcome_is_exported_for_annotations() -> None:
    assert Outcome.__module__ == "cairnq.testing.outcome"
