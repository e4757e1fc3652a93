"""Every code sample of README.md and docs/**/*.md runs, for real.

A ```python block runs as a script in a subprocess, from a scratch directory
(so its ``tasks.db`` is a throwaway SQLite file); a ``postgresql://`` DSN in it
is replaced by a throwaway database's (tests/backends.py). A ```bash or
```console line that is a ``cairnq`` command is parsed by the real command
line parser, and run as well when it ends on its own (the commands in
``RUNNABLE``, without ``--wait``), in a scratch directory shared by its block
whose ``tasks.db`` holds one task (``SEED``).

A comment right before a fence changes that, always with a reason:

* ``<!-- sample: not-run (why) -->``: a fragment or a sample that needs an
  outside service; collected, never run.
* ``<!-- sample: continues -->``: joined to the previous python block of the
  page (which then runs as their concatenation).
* ``<!-- sample: serves -->``: runs until told to stop (``worker.serve()``):
  once its database file exists the test sends SIGTERM and expects a clean
  exit (a first signal drains).

A failure names the file and line of the sample.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from backends import DIALECTS, create_database, drop_database, dsn_for

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]
MARKER = re.compile(r"<!--\s*sample:\s*(not-run|continues|serves)\b\s*(.*?)\s*-->")
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
DSN = re.compile(r"postgresql://[^\s\"'`]*")
# Commands that end on their own (worker, top and dashboard run until stopped).
RUNNABLE = {"submit", "list", "get", "stats", "cancel", "retry", "purge", "migrate", "schedules",
            "demo"}  # fmt: skip
# Environment a sample may read (secrets come from the environment, never the code).
SAMPLE_ENV = {"OPS_PASSWORD": "sample-password", "OPS_TOKEN": "sample-token"}
TIMEOUT_S = 60.0
SEED = """
import asyncio
from cairnq import CairnQ

async def seed():
    async with CairnQ.sqlite("tasks.db") as tasks:
        await tasks.submit("email.send", {"to": "a@example.com"}, key="welcome:42")

asyncio.run(seed())
"""


@dataclass
class Sample:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    marker: str | None = None
    reason: str = ""
    parts: list[int] = field(default_factory=list)  # lines of the blocks joined into it

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def read_samples(page: Path) -> Iterator[Sample]:
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening or not opening.group(2):
            i += 1
            continue
        indent, lang = opening.groups()
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i].removeprefix(indent))
            i += 1
        i += 1
        previous = next((ln for ln in reversed(lines[:start]) if ln.strip()), "")
        mark = MARKER.search(previous)
        yield Sample(
            page,
            start + 1,
            lang,
            "\n".join(body) + "\n",
            mark.group(1) if mark else None,
            mark.group(2) if mark else "",
            [start + 1],
        )


def python_samples() -> list[Sample]:
    samples: list[Sample] = []
    for page in PAGES:
        for sample in read_samples(page):
            if sample.lang != "python":
                continue
            if sample.marker == "continues":
                assert samples and samples[-1].page == page, f"{sample.where}: nothing to continue"
                joined = samples[-1]
                joined.code += sample.code
                joined.parts.append(sample.line)
                continue
            samples.append(sample)
    return samples


def command_samples() -> list[Sample]:
    return [s for page in PAGES for s in read_samples(page)
            if s.lang in ("bash", "console") and commands(s)]  # fmt: skip


def commands(sample: Sample) -> list[list[str]]:
    """The ``cairnq`` command lines of a shell block, as argument lists (no program name)."""
    found = []
    for raw in sample.code.splitlines():
        line = raw.strip().removeprefix("$ ")
        if not line.startswith("cairnq "):
            continue
        found.append(shlex.split(line, comments=True)[1:])
    return found


def _id(sample: Sample) -> str:
    return sample.where


PYTHON = python_samples()
COMMANDS = command_samples()


@pytest.fixture
def pg_dsn() -> Iterator[str]:
    if "postgres" not in DIALECTS:
        pytest.skip("PostgreSQL is not available (or not asked for)")
    name = create_database()
    try:
        yield dsn_for(name)
    finally:
        drop_database(name)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRNQ_DB")}
    return {**env, **SAMPLE_ENV}


def _fail(sample: Sample, what: str, out: str) -> None:
    pytest.fail(f"{sample.where}: {what}\n--- sample (lines {sample.parts}) ---\n"
                f"{sample.code}--- output ---\n{out}", pytrace=False)  # fmt: skip


@pytest.mark.parametrize("sample", PYTHON, ids=_id)
def test_python_sample_runs(sample: Sample, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if sample.marker == "not-run":
        assert sample.reason.startswith("("), f"{sample.where}: a not-run marker needs a (reason)"
        pytest.skip(f"not run: {sample.reason}")
    code = sample.code
    if DSN.search(code):
        code = DSN.sub(request.getfixturevalue("pg_dsn"), code)
    script = tmp_path / "sample.py"
    script.write_text(code)
    process = subprocess.Popen(
        [sys.executable, str(script)], cwd=tmp_path, env=_env(),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    if sample.marker == "serves":
        _stop_once_serving(sample, process, tmp_path)
    try:
        out, _ = process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate()
        _fail(sample, f"still running after {TIMEOUT_S:.0f} s", out)
    if process.returncode != 0:
        _fail(sample, f"exit status {process.returncode}", out)


def _stop_once_serving(sample: Sample, process: subprocess.Popen[str], cwd: Path) -> None:
    # The worker installs its signal handlers before it opens (and so creates) the database.
    deadline = time.monotonic() + TIMEOUT_S
    while not list(cwd.glob("*.db")):
        if process.poll() is not None or time.monotonic() > deadline:
            out = process.communicate()[0] if process.poll() is not None else ""
            _fail(sample, "ended (or never opened its database) before serving", out)
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)


@pytest.mark.parametrize("sample", COMMANDS, ids=_id)
def test_cairnq_commands_parse_and_run(
    sample: Sample, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from cairnq.cli.main import build_parser

    runnable = []
    for argv in commands(sample):
        try:
            parsed = build_parser().parse_args(argv)
        except SystemExit as exit_:
            if exit_.code == 0:  # --version and --help answer and exit 0
                continue
            _fail(sample, f"the command line parser refuses: cairnq {shlex.join(argv)}", "")
        if parsed.command in RUNNABLE and not getattr(parsed, "wait", False):
            runnable.append(argv)
    if sample.marker == "not-run":
        pytest.skip(f"not run: {sample.reason}")
    if runnable:  # the pages' commands work on an existing database: tasks.db, one task in it
        subprocess.run([sys.executable, "-c", SEED], cwd=tmp_path, env=_env(), check=True)
    for argv in runnable:
        if any(DSN.match(a) for a in argv):
            argv = [DSN.sub(request.getfixturevalue("pg_dsn"), a) for a in argv]
        done = subprocess.run(
            [sys.executable, "-m", "cairnq", *argv], check=False, cwd=tmp_path, env=_env(),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT_S,
        )  # fmt: skip
        # 1 is an operation that failed as such (a task id from the page that is not here).
        if done.returncode not in (0, 1):
            _fail(sample, f"cairnq {shlex.join(argv)}: exit status {done.returncode}", done.stdout)


def test_markers_are_read_from_the_line_before_the_fence(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Text.\n\n```python\nx = 1\n```\n\n<!-- sample: continues -->\n```python\nprint(x)\n```\n"
        "<!-- sample: not-run (needs a mail server) -->\n\n```python\nsend()\n```\n"
        "```bash\ncairnq --db tasks.db stats   # counts\n```\n"
    )
    found = list(read_samples(page))
    assert [(s.line, s.lang, s.marker) for s in found] == [
        (3, "python", None), (8, "python", "continues"), (13, "python", "not-run"),
        (16, "bash", None),
    ]  # fmt: skip
    assert found[2].reason == "(needs a mail server)"
    assert commands(found[3]) == [["--db", "tasks.db", "stats"]]
