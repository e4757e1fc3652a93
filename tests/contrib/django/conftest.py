"""The Django suite's fixtures.

The test project (``project/``: settings, an app with tasks, a view) is
copied to a scratch directory and set up once in this process. ``site`` is
one place tasks are stored, per dialect: a SQLite file, a throwaway
PostgreSQL database named by DSN, and Django's own default database on
PostgreSQL (no ``db`` option: cairnq's schema "cairnq" in it). The test
process applies that site's settings; ``worker`` starts ``manage.py
cairnq_worker`` on it as a real process.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from backends import DIALECTS, create_database, drop_database, dsn_for

PROJECT = Path(tempfile.mkdtemp(prefix="cairnq-django-"))
atexit.register(shutil.rmtree, PROJECT, True)
shutil.copytree(Path(__file__).parent / "project", PROJECT, dirs_exist_ok=True)
sys.path.insert(0, str(PROJECT))
os.environ["DJANGO_SETTINGS_MODULE"] = "tasksite.settings"

import django

django.setup()

from django.test.utils import override_settings
from tasksite.settings import configure

SITES = ["sqlite"] + (["postgres", "django-postgres"] if "postgres" in DIALECTS else [])
WAIT_S = 60.0  # how long a test waits for a worker before it gives up (not a speed bound)


@dataclass
class Site:
    kind: str
    env: dict[str, str]
    workers: list[subprocess.Popen[str]] = field(default_factory=list)
    output: dict[int, list[str]] = field(default_factory=dict)
    readers: dict[int, threading.Thread] = field(default_factory=dict)

    def worker_env(self) -> dict[str, str]:
        return {**os.environ, **self.env, "PYTHONDONTWRITEBYTECODE": "1"}

    def start_worker(
        self, *flags: str, ready: str = "Django task(s) found"
    ) -> subprocess.Popen[str]:
        """``manage.py cairnq_worker`` as a real process, once it says it serves."""
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "cairnq_worker", "--poll-interval-ms", "50", *flags],
            cwd=PROJECT,
            env=self.worker_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.workers.append(proc)
        lines: list[str] = []
        self.output[proc.pid] = lines
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if ready in line:
                # Keep reading, so a chatty worker never blocks on a full pipe.
                reader = threading.Thread(target=lines.extend, args=(proc.stdout,), daemon=True)
                reader.start()
                self.readers[proc.pid] = reader
                return proc
        raise AssertionError(f"the worker ended before serving:\n{''.join(lines)}")

    def stop_workers(self) -> list[str]:
        """SIGTERM each worker (a graceful drain) and return what each printed after."""
        outputs = []
        for proc in self.workers:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=WAIT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            reader = self.readers.pop(proc.pid, None)
            if reader is not None:
                reader.join(WAIT_S)  # it ends at the pipe's end of file
            outputs.append("".join(self.output.pop(proc.pid, [])))
        self.workers.clear()
        return outputs


def _env(kind: str, tmp_path: Path, database: str | None) -> dict[str, str]:
    if kind == "sqlite":
        return {"TASKSITE_QUEUE_DB": str(tmp_path / "queue.sqlite3")}
    assert database is not None
    if kind == "postgres":
        return {"TASKSITE_QUEUE_DB": dsn_for(database)}
    return {"TASKSITE_PG_DSN": dsn_for(database)}


@pytest.fixture(params=SITES)
def site(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Site]:
    database = create_database() if request.param != "sqlite" else None
    env = _env(request.param, tmp_path, database)
    made = Site(request.param, env)
    try:
        with override_settings(**configure(env)):
            yield made
    finally:
        made.stop_workers()
        _close_portals()
        if database is not None:
            drop_database(database)


def _close_portals() -> None:
    """Each test's store is its own: close this process's clients of it."""
    from cairnq.contrib.django import portal

    portal._close_all()


def wait_for(check: Callable[[], Any], what: str) -> Any:
    """Poll ``check()`` until it returns something truthy."""
    deadline = time.monotonic() + WAIT_S
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The tests point DATABASES at each site's database for the backend to
    # read; Django's own connections are not used, which is what it warns of.
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.filterwarnings("ignore:Overriding setting DATABASES"))
