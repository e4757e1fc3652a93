"""``CallStarter`` on its own, on a real event loop: which task each call
runs in, and what happens to calls that never start."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import warnings
from typing import Any, Optional

import pytest

from cairnq.worker import starter as starter_module
from cairnq.worker.starter import OWN_TASK_CALLS, CallStarter


class Hold:
    def __init__(self) -> None:
        self.task: Optional[asyncio.Task[None]] = None
        self.is_running = True


def _calls(*steps: Any, key: str = "k") -> tuple[list[Hold], list[Any]]:
    holds = [Hold() for _ in steps]
    return holds, [(hold, step(hold), key) for hold, step in zip(holds, steps)]


def _returns(log: list[Any], name: str):
    def step(hold: Hold):
        async def call() -> None:
            log.append((name, asyncio.current_task()))
            hold.is_running = False
            hold.task = None

        return call()

    return step


def _suspends(log: list[Any], name: str, release: asyncio.Event):
    def step(hold: Hold):
        async def call() -> None:
            first = asyncio.current_task()
            await release.wait()
            log.append((name, first, asyncio.current_task()))
            hold.is_running = False
            hold.task = None

        return call()

    return step


async def _suspend_once(starter: CallStarter, log: list[Any], key: str) -> None:
    """A claim of two calls of ``key`` (a lone call has a task of its own
    anyway) whose first suspends in the shared task, then ends; the second,
    "t", returns at once."""
    release = asyncio.Event()
    _, calls = _calls(_suspends(log, "s", release), _returns(log, "t"), key=key)
    starter.start(calls)
    await asyncio.sleep(0)
    release.set()
    await asyncio.sleep(0.01)


async def test_calls_that_return_at_once_share_one_task_and_a_suspended_one_keeps_it() -> None:
    log: list[Any] = []
    release = asyncio.Event()
    holds, calls = _calls(
        _returns(log, "a"), _suspends(log, "b", release), _returns(log, "c"), _returns(log, "d")
    )
    CallStarter(asyncio.get_running_loop()).start(calls)
    for _ in range(5):
        await asyncio.sleep(0)
    first_steps = {name: task for name, task, *_ in log}
    assert set(first_steps) == {"a", "c", "d"}
    sleeper = holds[1].task
    assert sleeper is not None and not sleeper.done()  # the call that suspended holds its task
    assert first_steps["a"] is sleeper  # ... the one the call before it ran in
    assert first_steps["c"] is not sleeper  # the calls after it moved on
    release.set()
    await sleeper
    assert log[-1] == ("b", sleeper, sleeper)


async def test_a_handler_that_suspended_starts_with_a_task_of_its_own_for_a_while() -> None:
    starter = CallStarter(asyncio.get_running_loop())
    log: list[Any] = []
    await _suspend_once(starter, log, "sleeper")
    # Its next calls, two in one claim, get one task each; another key still shares.
    _, again = _calls(_returns(log, "x"), _returns(log, "y"), key="sleeper")
    _, others = _calls(_returns(log, "p"), _returns(log, "q"), key="other")
    starter.start(again + others)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    tasks = {name: task for name, task, *_ in log}
    assert tasks["x"] is not tasks["y"]
    assert tasks["p"] is tasks["q"]
    # "t", in the claim where it was learned, had its own too, not counted
    assert starter._own_task_left["sleeper"] == OWN_TASK_CALLS - 2
    # (so the worker starts no quick call of it: each would only be promoted)
    assert "sleeper" in starter.suspending and "other" not in starter.suspending


async def test_after_its_own_task_calls_one_call_of_the_handler_probes_last_in_the_shared_task(
    monkeypatch,
) -> None:
    monkeypatch.setattr(starter_module, "OWN_TASK_CALLS", 2)
    starter = CallStarter(asyncio.get_running_loop())
    log: list[Any] = []
    await _suspend_once(starter, log, "h")
    _, own = _calls(_returns(log, "own1"), _returns(log, "own2"), key="h")
    starter.start(own)  # its two calls with a task of their own
    await asyncio.sleep(0)
    # Then: one probe (placed after the other calls of the claim), the rest own.
    holds, mixed = _calls(_returns(log, "probe"), _returns(log, "own3"), key="h")
    _, others = _calls(_returns(log, "p"), _returns(log, "q"), key="other")
    starter.start(mixed + others)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    order = [name for name, *_ in log]
    tasks = {name: task for name, task, *_ in log}
    assert tasks["own1"] is not tasks["own2"]
    assert tasks["probe"] is tasks["p"] is tasks["q"] is not tasks["own3"]
    assert order.index("probe") > order.index("q")
    # It returned at once: the handler's calls share again.
    assert "h" not in starter._own_task_left and "h" not in starter.suspending
    _, again = _calls(_returns(log, "x"), _returns(log, "y"), key="h")
    starter.start(again)
    await asyncio.sleep(0)
    tasks = {name: task for name, task, *_ in log}
    assert tasks["x"] is tasks["y"]


def test_a_shared_task_cancelled_before_it_ran_closes_its_calls_unstarted() -> None:
    """(As asyncio.run cancels what is left when its main coroutine ends.)
    The calls never started say nothing of never being awaited, and their
    holds see their task cancelled (the worker releases them)."""
    log: list[Any] = []
    holds: list[Hold] = []

    async def main() -> None:
        made, calls = _calls(_returns(log, "a"), _returns(log, "b"))
        holds.extend(made)
        CallStarter(asyncio.get_running_loop()).start(calls)
        shared = made[0].task
        if shared is None:
            pytest.skip("tasks start eagerly here: nothing is left unstarted")
        assert made[1].task is shared
        shared.cancel()
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(main())
        gc.collect()
    assert log == []
    assert all(h.task is not None and h.task.cancelled() for h in holds)
    assert not [w for w in caught if "never awaited" in str(w.message)]


_EXITS = """
import asyncio, gc
from cairnq.worker.starter import CallStarter

class Hold:
    task = None
    is_running = True

async def returns():
    print("returned", flush=True)

async def exits():
    raise SystemExit(3)

async def main():
    calls = [(Hold(), returns(), "k"), (Hold(), exits(), "k")]
    calls += [(Hold(), returns(), "k"), (Hold(), returns(), "k")]
    CallStarter(asyncio.get_running_loop()).start(calls)
    await asyncio.sleep(5)

try:
    asyncio.run(main())
finally:
    gc.collect()
"""


def test_system_exit_in_a_first_step_leaves_the_loop_and_leaves_nothing_unawaited() -> None:
    """(In a process of its own: SystemExit leaves asyncio.run as from a task
    of its own, and the calls after it are started or closed, not dropped.)"""
    done = subprocess.run(
        [sys.executable, "-W", "always", "-c", _EXITS], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout.startswith("returned")
    assert "never awaited" not in done.stderr
