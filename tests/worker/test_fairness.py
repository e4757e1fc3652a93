"""Awaiting store calls lets the rest of the loop run, on both dialects.

SQLite statements run inline on the loop and a call that needs no I/O never
suspends: a coroutine looping over store calls must still let timers,
heartbeats and other coroutines run. A ticker that wakes at the start of every
10 ms window counts the windows in which it got to run while another coroutine
loops over ``get``, ``submit`` or ``list``: it must get at least 90 % of them
(losing a window takes a hold of the loop of about 10 ms; the engine yields
after about one).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest

WINDOW_S = 0.010
HOG_S = 0.5
KEPT = 0.9
TRIES = 3


class Ticker:
    """Wakes near the start of each window and records that it ran in it."""

    def __init__(self) -> None:
        self.windows: set[int] = set()
        self.started = 0.0

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self.started = loop.time()
        while True:
            window = int((loop.time() - self.started) / WINDOW_S)
            self.windows.add(window)
            await asyncio.sleep(self.started + (window + 1.1) * WINDOW_S - loop.time())

    def kept(self, until: float) -> float:
        """The share of whole windows up to ``until`` (loop time) it ran in."""
        total = int((until - self.started) / WINDOW_S)
        return len({w for w in self.windows if w < total}) / total


async def _hog_the_loop(call: Callable[[], Awaitable[Any]]) -> float:
    """Loop over ``call`` for HOG_S beside a ticker; the share of windows it kept."""
    loop = asyncio.get_running_loop()
    ticker = Ticker()
    ticking = asyncio.ensure_future(ticker.run())
    await asyncio.sleep(0)  # the ticker starts
    calls = 0
    while loop.time() - ticker.started < HOG_S:
        await call()
        calls += 1
    kept = ticker.kept(loop.time())
    ticking.cancel()
    await asyncio.gather(ticking, return_exceptions=True)
    assert calls > 1
    return kept


async def _best_of_tries(call: Callable[[], Awaitable[Any]]) -> float:
    """The best share kept over up to TRIES runs of ``_hog_the_loop``. A loop
    that is not shared loses windows on every run; a host that deschedules
    the whole process for a moment (other jobs on its cores) costs windows on
    one run and not the next."""
    best = 0.0
    for _ in range(TRIES):
        best = max(best, await _hog_the_loop(call))
        if best >= KEPT:
            break
    return best


@pytest.mark.parametrize("op", ["get", "submit", "list"])
async def test_a_coroutine_looping_over_store_calls_lets_a_ticker_run(
    backend: Any, op: str
) -> None:
    q = backend.client()
    tasks = [await q.submit("seed", {"i": i}) for i in range(20)]
    call: Callable[[], Awaitable[Any]] = {
        "get": lambda: q.get(tasks[0].id),
        "submit": lambda: q.submit("more", {"x": 1}),
        "list": lambda: q.list(limit=20),
    }[op]
    kept = await _best_of_tries(call)
    assert kept >= KEPT, (
        f"the ticker ran in {kept:.0%} of its windows while another coroutine awaited {op}"
    )


# A handler that submits children in a loop for several lease lengths keeps
# its lease: the heartbeat loop gets to run. (Fewer on PostgreSQL, where each
# submit is a round trip: the handler still runs for several leases.) The
# lease is short next to the handler's run, yet long enough that a machine
# pausing the whole process for a few hundred milliseconds (a loaded CI host)
# does not take it: what is tested is that the loop is shared, not how fast
# the host is. Without the yields the SQLite handler holds the loop for its
# whole run, many leases.
CHILDREN = {"sqlite": 50_000, "postgres": 10_000}
LEASE_MS = 1_000


async def test_a_handler_submitting_in_a_loop_keeps_its_lease(backend: Any) -> None:
    q = backend.client()
    # synchronous=normal: no fsync per submit, so the 50k take seconds, not minutes
    store = backend.store(synchronous="normal") if backend.dialect == "sqlite" else backend.store()
    worker = backend.worker(store=store, lease_ms=LEASE_MS, poll_interval_ms=20, retry_backoff_ms=0)
    n = CHILDREN[backend.dialect]
    lost: list[bool] = []
    raised: list[str] = []

    @worker.task("parent")
    async def parent(ctx: Any) -> int:
        if ctx.attempt > 1:
            return -1  # its lease ran out the first time: nothing to prove again
        try:
            for i in range(n):
                await ctx.submit("child", {"i": i}, queue="children")
        except BaseException as exc:
            raised.append(f"after {i} children: {exc!r}")
            raise
        lost.append(ctx.lost_lease)
        return n

    task = await q.submit("parent")
    async with worker.background():
        done = await q.wait(task.id, timeout_ms=600_000, poll_ms=50)
    assert (lost, raised) == ([False], [])
    assert (done.status, done.attempt, done.result) == ("succeeded", 1, n)
    assert (await q.stats("children"))["children"]["queued"] == n


# A slow disk. SQLite's fsync blocks the thread that commits; committed inline
# on the loop, each one would hold every timer back by its whole length. The
# engine commits inline only when no timer falls due before the commit is
# expected to be done. The disk is made slow for real: the kernel delays each
# fsync/fdatasync of the process by SLOW_SYNC_MS (strace's syscall injection;
# ``.ci/run`` installs strace).
SLOW_SYNC_MS = 15
SLOW_DISK_SCRIPT = """
import asyncio, json, os, sys
sys.path.insert(0, sys.argv[2])
from test_fairness import _best_of_tries
from cairnq import CairnQ

async def main():
    q = CairnQ.sqlite(os.path.join(sys.argv[1], "slow.db"))
    for i in range(10):
        await q.submit("seed", {"i": i})
    calls = []
    async def submit():
        calls.append(1)
        await q.submit("more", {"x": 1})
    kept = await _best_of_tries(submit)
    await q.close()
    print(json.dumps({"kept": kept, "calls": len(calls)}))

asyncio.run(main())
"""


def _strace_can_inject() -> str | None:
    """Why strace cannot slow a process down here (None: it can)."""
    if shutil.which("strace") is None:
        return "strace is not installed"
    probe = subprocess.run(
        ["strace", "-qq", "-o", "/dev/null", "-e", "trace=fsync", "-e", "inject=fsync:delay_exit=1",
         sys.executable, "-c", "import os, tempfile; f = tempfile.TemporaryFile(); os.fsync(f.fileno())"],
        capture_output=True, text=True,
    )  # fmt: skip
    return None if probe.returncode == 0 else f"strace cannot trace here: {probe.stderr.strip()}"


def test_a_slow_disk_does_not_hold_the_loop_past_a_timer(tmp_path: Path) -> None:
    why_not = _strace_can_inject()
    if why_not is not None:
        pytest.skip(why_not)
    delay_us = SLOW_SYNC_MS * 1000
    run = subprocess.run(
        ["strace", "--seccomp-bpf", "-f", "-qq", "-o", "/dev/null",
         "-e", "trace=fsync,fdatasync", "-e", f"inject=fsync,fdatasync:delay_exit={delay_us}",
         sys.executable, "-c", SLOW_DISK_SCRIPT, str(tmp_path), str(Path(__file__).parent)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    # The disk was slow indeed: each submit waited for its sync.
    assert out["calls"] < TRIES * HOG_S / (SLOW_SYNC_MS / 1000) * 1.5, out
    assert out["kept"] >= KEPT, (
        f"the ticker ran in {out['kept']:.0%} of its windows while submits waited for a slow disk"
    )
