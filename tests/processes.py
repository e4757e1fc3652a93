"""Real subprocesses for the reliability tests: scripts that log JSON lines,
a registry that kills survivors, and polling helpers.

Scripts run as ``python -c PRELUDE + script ARGS_JSON`` with the test's tmp
dir as cwd (never the repository root); the prelude gives them ``ARGS`` and
``append(path, record)``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

import pytest

PRELUDE = """
import asyncio, json, os, sys, time
ARGS = json.loads(sys.argv[1])

def append(path, record):
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\\n")
"""


def die_with_parent() -> None:
    """A ``preexec_fn``: on Linux, the child gets SIGTERM when the process
    that started it (this test run) dies, so a test run killed outright
    leaves no long-lived process behind (elsewhere: nothing)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal as signals

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signals.SIGTERM), 0, 0, 0)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The complete lines of a JSON-lines log (a line cut short by a kill, or
    still being written, is skipped)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return out


def popen_script(code: str, args: dict[str, Any], cwd: Path, sink: IO[str]) -> subprocess.Popen[Any]:
    """``python -c code ARGS_JSON`` in ``cwd``, stdout and stderr both to ``sink``."""
    return subprocess.Popen(
        [sys.executable, "-c", code, json.dumps(args)],
        cwd=str(cwd),
        stdout=sink,
        stderr=subprocess.STDOUT,
        text=True,
    )


def reap(procs: Iterable[subprocess.Popen[Any]]) -> None:
    """Kill whichever still runs, and wait for each (10 s at most)."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


class Procs:
    """Subprocesses of one test; survivors are killed by pid at the end."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.started: list[tuple[str, subprocess.Popen[Any], Path]] = []

    def start(self, label: str, script: str, args: dict[str, Any]) -> subprocess.Popen[Any]:
        out = self.tmp_path / f"{label}.out"
        with open(out, "w") as sink:
            proc = popen_script(PRELUDE + script, args, self.tmp_path, sink)
        self.started.append((label, proc, out))
        return proc

    def output_of(self) -> dict[str, str]:
        """Each process's whole output (stdout and stderr), by label."""
        return {label: out.read_text() for label, _, out in self.started if out.exists()}

    def outputs(self) -> str:
        """The tail of every process's output, for an assertion message."""
        return "\n".join(f"--- {label}\n{text[-3000:]}" for label, text in self.output_of().items())

    def cleanup(self) -> None:
        reap(proc for _, proc, _ in self.started)


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    p = Procs(tmp_path)
    try:
        yield p
    finally:
        p.cleanup()


async def until(pred: Any, timeout: float, what: str, interval: float = 0.02) -> Any:
    """Poll ``pred`` until it returns something truthy (returned), or fail."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


async def wait_exit(proc: subprocess.Popen[Any], timeout: float, what: str, outputs: Any) -> int:
    """The process's exit code, once it exits; fail with everyone's output after ``timeout``."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} still running after {timeout}s:\n{outputs()}")
        await asyncio.sleep(0.05)
    return proc.returncode
