"""The worker: on_error."""

from __future__ import annotations

import pytest
from worker_kit import eventually, finish, make

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
    names = (
        ("complete", "_complete_many_json", "_complete_each_json")
        if write == "complete"
        else ("fail",)
    )
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
