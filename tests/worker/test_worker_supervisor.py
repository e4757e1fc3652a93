"""``cairnq worker TARGET --processes N``: a supervisor and its worker processes,
all real processes on a real database (both dialects where it matters).

The supervisor runs with ``-v`` into a log file; its lines ``worker process K
started (pid P)`` tell the test which children exist. Every handler call
appends ``<task_id> <pid> <attempt> start|end`` to ``executions.log``.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import pytest
from processes import die_with_parent, until, wait_exit

from cairnq.cli.main import main
from cairnq.cli.worker import MAX_PROCESSES, processes_count, usable_cores

APP = """
import asyncio, os


def record(ctx, event):
    with open("executions.log", "a") as f:
        f.write(f"{ctx.task_id} {os.getpid()} {ctx.attempt} {event}\\n")


async def nap(ctx, payload):
    record(ctx, "start")
    await asyncio.sleep(payload["sleep"])
    record(ctx, "end")
    return os.getpid()


def setup(worker):
    worker.register("nap", nap)
"""

_STARTED = re.compile(r"worker process (\d+) started \(pid (\d+)\)")


class Supervisor:
    """One ``cairnq worker --processes`` run in the test's directory."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.log_path = tmp_path / "supervisor.log"
        self.proc: subprocess.Popen[Any] | None = None

    def start(
        self, db: str, *flags: str, target: str = "app:setup", app: str = APP
    ) -> subprocess.Popen[Any]:
        (self.tmp_path / "app.py").write_text(app)
        with open(self.log_path, "w") as sink:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cairnq", "--db", db, "-v", "worker", target, *flags],
                cwd=self.tmp_path,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env={k: v for k, v in os.environ.items() if k != "CAIRNQ_DB"},
                start_new_session=True,  # a process group of its own, as a shell job has
                preexec_fn=die_with_parent,  # a test run killed outright takes it along
            )
        return self.proc

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def children(self) -> list[int]:
        """Every child pid the supervisor started, in order."""
        return [int(pid) for _, pid in _STARTED.findall(self.log())]

    def live_children(self) -> list[int]:
        return [pid for pid in self.children() if alive(pid)]

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    async def exit_code(self, timeout: float) -> int:
        assert self.proc is not None
        return await wait_exit(self.proc, timeout, "the supervisor", self.log)

    def cleanup(self) -> None:
        """Kill whatever is left, by pid: the supervisor and every child it logged."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        for pid in self.children():
            if alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


@pytest.fixture
def supervisor(tmp_path: Path) -> Iterator[Supervisor]:
    s = Supervisor(tmp_path)
    try:
        yield s
    finally:
        s.cleanup()


def alive(pid: int) -> bool:
    """Running (a zombie counts as gone: it has ended, only its status is left)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def submit_naps(q: Any, n: int, sleep: float, **options: Any) -> list[str]:
    ids = []
    for _ in range(n):
        ids.append((await q.submit("nap", {"sleep": sleep}, **options)).id)
    return ids


async def count(q: Any, status: str) -> int:
    stats = await q.stats()
    return sum(by_status.get(status, 0) for by_status in stats.values())


def executions(tmp_path: Path) -> list[list[str]]:
    path = tmp_path / "executions.log"
    if not path.exists():
        return []
    return [line.split() for line in path.read_text().splitlines() if len(line.split()) == 4]


# -- flags -----------------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "-3", "many", "2.5", "", str(MAX_PROCESSES + 1)])
def test_processes_must_be_a_count_or_auto(
    value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["--db", str(tmp_path / "t.db"), "worker", "app:setup", "--processes", value])
    assert code == 2
    assert "--processes" in capsys.readouterr().err
    assert not (tmp_path / "t.db").exists()


def test_processes_auto_is_the_usable_cores() -> None:
    assert processes_count("auto") == processes_count(" AUTO ") == min(usable_cores(), MAX_PROCESSES)
    assert usable_cores() >= 1
    if hasattr(os, "sched_getaffinity"):
        assert usable_cores() == len(os.sched_getaffinity(0))
    assert processes_count("3") == 3


def test_grace_ms_must_be_positive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--db", str(tmp_path / "t.db"), "worker", "app:setup", "--grace-ms", "0"])
    assert code == 2 and "--grace-ms" in capsys.readouterr().err


@pytest.mark.parametrize("fd", ["999", "-1"])
def test_a_lifeline_that_is_not_an_open_pipe_is_refused(
    fd: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["--db", str(tmp_path / "t.db"), "worker", "app:setup", "--supervisor-fd", fd])
    assert code == 2 and "--supervisor-fd" in capsys.readouterr().err


def test_help_documents_processes_and_grace(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["worker", "--help"]) == 0
    text = capsys.readouterr().out
    for words in ("--processes N|auto", "--grace-ms", "restarts a worker process", "exit 5"):
        assert words in text


# -- exit statuses of a supervisor that gives up ----------------------------------------


async def test_a_usage_error_in_the_children_ends_the_supervisor(
    supervisor: Supervisor, tmp_path: Path
) -> None:
    supervisor.start(str(tmp_path / "t.db"), "--processes", "2", target="surely_no_module:setup")
    assert await supervisor.exit_code(60) == 2
    log = supervisor.log()
    assert "cannot import 'surely_no_module'" in log and "a usage error; stopping" in log
    assert "restarting" not in log


async def test_a_child_that_keeps_failing_at_start_ends_with_exit_5(
    supervisor: Supervisor, tmp_path: Path
) -> None:
    (tmp_path / "crashing.py").write_text("raise SystemExit(7)\n")
    supervisor.start(str(tmp_path / "t.db"), "--processes", "2", target="crashing:setup")
    assert await supervisor.exit_code(90) == 5
    log = supervisor.log()
    assert "exited with status 7" in log
    for delay in ("0.5", "1.0", "2.0", "4.0"):
        assert f"restarting in {delay} s" in log
    assert "5 times in a row: giving up" in log
    assert not supervisor.live_children()


# -- restarts, drains, interrupts, kills -------------------------------------------------


async def test_a_killed_child_is_restarted_and_the_log_says_why(
    backend: Any, supervisor: Supervisor
) -> None:
    supervisor.start(backend.target, "--processes", "2")
    first = await until(lambda: len(supervisor.children()) == 2 and supervisor.children(), 60, "2 children")
    os.kill(first[0], signal.SIGKILL)
    third = await until(lambda: supervisor.children()[2:], 30, "a replacement child")
    assert third[0] not in first
    assert f"(pid {first[0]}) was killed by SIGKILL" in supervisor.log()
    assert "restarting in 0.5 s" in supervisor.log()
    await until(lambda: alive(third[0]) and "serving" in supervisor.log(), 30, "the new child")
    q = backend.client()
    await q.connect()
    ids = await submit_naps(q, 6, 0.05)
    for task_id in ids:
        await _until_async(lambda: _status_is(q, task_id, "succeeded"), 60, "the tasks to succeed")
    supervisor.signal(signal.SIGTERM)
    assert await supervisor.exit_code(60) == 0
    assert not supervisor.live_children()


async def test_a_stop_while_a_child_waits_for_its_restart_is_a_clean_drain(
    sqlite_backend: Any, supervisor: Supervisor
) -> None:
    supervisor.start(sqlite_backend.target, "--processes", "2")
    first = await until(lambda: len(supervisor.children()) == 2 and supervisor.children(), 60, "2 children")
    await until(lambda: supervisor.log().count("serving") == 2, 60, "both serving")
    os.kill(first[0], signal.SIGKILL)
    await until(lambda: "restarting in 0.5 s" in supervisor.log(), 30, "the restart plan")
    supervisor.signal(signal.SIGTERM)
    assert await supervisor.exit_code(60) == 0, supervisor.log()
    assert not supervisor.live_children()


@pytest.mark.parametrize("how", ["sigterm", "ctrl-c"])
async def test_the_first_signal_drains_the_calls_in_flight(
    backend: Any, supervisor: Supervisor, tmp_path: Path, how: str
) -> None:
    q = backend.client()
    await q.connect()
    supervisor.start(backend.target, "--processes", "2", "--concurrency", "2")
    ids = await submit_naps(q, 4, 2.0)
    await _until_async(lambda: _count_is(q, "running", 4), 60, "4 tasks running")
    if how == "sigterm":
        supervisor.signal(signal.SIGTERM)
    else:  # a terminal's Ctrl-C reaches the whole foreground process group
        assert supervisor.proc is not None
        os.killpg(supervisor.proc.pid, signal.SIGINT)
    assert await supervisor.exit_code(60) == 0, supervisor.log()
    log = supervisor.log()
    assert "draining 2 worker process(es)" in log
    assert "interrupting" not in log and "restarting" not in log
    assert log.count("received SIGTERM" if how == "sigterm" else "received SIGINT") == 2
    for task_id in ids:
        task = await q.get(task_id)
        assert task is not None and task.status == "succeeded" and task.attempt == 1
    assert not supervisor.live_children()


async def test_a_second_signal_interrupts_and_leaves_tasks_to_their_leases(
    backend: Any, supervisor: Supervisor
) -> None:
    q = backend.client()
    await q.connect()
    supervisor.start(backend.target, "--processes", "2", "--lease-ms", "60000")
    ids = await submit_naps(q, 2, 120.0)
    await _until_async(lambda: _count_is(q, "running", 2), 60, "2 tasks running")
    supervisor.signal(signal.SIGTERM)
    await until(lambda: supervisor.log().count("draining in-flight calls") == 2, 30, "the drain")
    supervisor.signal(signal.SIGINT)
    assert await supervisor.exit_code(30) == 130, supervisor.log()
    assert "interrupting the worker processes" in supervisor.log()
    assert not supervisor.live_children()
    for task_id in ids:  # nobody finished them: they wait for their leases
        task = await q.get(task_id)
        assert task is not None and task.status == "running"


async def test_workers_still_draining_after_grace_are_killed(
    sqlite_backend: Any, supervisor: Supervisor
) -> None:
    q = sqlite_backend.client()
    await q.connect()
    supervisor.start(sqlite_backend.target, "--processes", "2", "--grace-ms", "1500")
    await submit_naps(q, 2, 120.0)
    await _until_async(lambda: _count_is(q, "running", 2), 60, "2 tasks running")
    supervisor.signal(signal.SIGTERM)
    assert await supervisor.exit_code(30) == 4, supervisor.log()
    assert "still running 1.5 s after the stop: killing 2" in supervisor.log()
    assert "was killed by SIGKILL" in supervisor.log()
    assert not supervisor.live_children()


async def test_a_killed_supervisor_leaves_no_orphans(
    backend: Any, supervisor: Supervisor, tmp_path: Path
) -> None:
    lease_s = 5
    q = backend.client()
    await q.connect()
    supervisor.start(
        backend.target, "--processes", "2", "--concurrency", "2", "--lease-ms", str(lease_s * 1000)
    )
    ids = await submit_naps(q, 4, 1.5)
    await _until_async(lambda: _count_is(q, "running", 4), 60, "4 tasks running")
    children = supervisor.live_children()
    assert len(children) == 2
    supervisor.signal(signal.SIGKILL)
    await until(lambda: not any(alive(pid) for pid in children), lease_s + 5, "the orphans to exit")
    assert supervisor.log().count("the supervisor is gone: draining") == 2
    for task_id in ids:  # drained, not abandoned
        task = await q.get(task_id)
        assert task is not None and task.status == "succeeded" and task.attempt == 1


async def test_no_task_is_lost_when_children_are_killed_repeatedly(
    backend: Any, supervisor: Supervisor, tmp_path: Path
) -> None:
    n, lease_ms = 300, 1500
    q = backend.client()
    await q.connect()
    ids = await submit_naps(q, n, 0.3, max_attempts=50)
    supervisor.start(
        backend.target, "--processes", "3", "--concurrency", "4", "--lease-ms", str(lease_ms),
        "--poll-interval-ms", "100",
    )  # fmt: skip
    kills = 0
    deadline = time.monotonic() + 120
    while kills < 8 and time.monotonic() < deadline:
        await asyncio.sleep(0.7)
        live = supervisor.live_children()
        if len(live) >= 2 and "serving" in supervisor.log():
            os.kill(live[kills % len(live)], signal.SIGKILL)
            kills += 1
    assert kills == 8
    assert await count(q, "succeeded") < n  # the kills came while there was work
    await until(lambda: supervisor.log().count("restarting in") == kills, 30, "every kill noted")
    await _until_async(lambda: _count_is(q, "succeeded", n), 120, f"{n} tasks to succeed")
    supervisor.signal(signal.SIGTERM)
    assert await supervisor.exit_code(60) == 0, supervisor.log()
    assert supervisor.log().count("was killed by SIGKILL") == kills

    tasks = {task_id: await q.get(task_id) for task_id in ids}
    assert all(t is not None and t.status == "succeeded" for t in tasks.values())
    assert await count(q, "running") == 0 and await count(q, "queued") == 0
    ended = {(row[0], int(row[2])) for row in executions(tmp_path) if row[3] == "end"}
    for task_id, task in tasks.items():
        assert task is not None and (task_id, task.attempt) in ended
    assert any(t is not None and t.attempt > 1 for t in tasks.values())  # some were killed
    assert not supervisor.live_children()


# -- helpers -------------------------------------------------------------------------


async def _until_async(pred: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)


async def _count_is(q: Any, status: str, n: int) -> bool:
    return await count(q, status) >= n


async def _status_is(q: Any, task_id: str, status: str) -> bool:
    task = await q.get(task_id)
    return task is not None and task.status == status


PERIODIC_APP = """
from datetime import timedelta


async def tick(ctx, payload):
    return None


def setup(worker):
    worker.register("tick", tick)
    worker.periodic(timedelta(seconds=1), "tick", {"from": "schedule"})
"""


async def test_processes_enqueue_each_periodic_fire_once(
    backend: Any, supervisor: Supervisor
) -> None:
    """Three processes each run the schedule (no leader): one task per
    second, none doubled, none missing."""
    from cairnq.periodic import parse_instant

    q = backend.client()
    await q.connect()
    supervisor.start(
        backend.target, "--processes", "3", "--poll-interval-ms", "100", app=PERIODIC_APP
    )
    await until(lambda: len(supervisor.live_children()) == 3, 60, "three children")
    await asyncio.sleep(6)
    supervisor.signal(signal.SIGTERM)
    assert await supervisor.exit_code(60) == 0, supervisor.log()
    tasks = await q.list(name="tick", limit=10_000)
    fires = Counter(t.metadata["cairnq.periodic"]["fire_at"] for t in tasks)
    assert not {f: n for f, n in fires.items() if n > 1}, fires
    instants = sorted(parse_instant(f) for f in fires)
    assert len(instants) >= 4, (instants, supervisor.log())
    assert [b - a for a, b in zip(instants, instants[1:])] == [1000] * (len(instants) - 1)
