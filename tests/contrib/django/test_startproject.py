"""The promise of the docs, end to end: a project made by ``django-admin
startproject``, plus the three settings lines, the task, the views and the
URLs of docs/django.md (read from the page), enqueues a task from a view
served by ``runserver``, and ``manage.py cairnq_worker`` runs it; the result
comes back through get_result() in another view."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import WAIT_S, wait_for

DOCS = Path(__file__).resolve().parents[3] / "docs" / "django.md"
# The page's code blocks titled with a file of the project: the settings and
# URLconf lines are appended to startproject's files, the others written anew.
BLOCK = re.compile(r'^```python title="(mysite/[\w.]+)"\n(.*?)^```$', re.MULTILINE | re.DOTALL)
APPENDED = {"mysite/settings.py", "mysite/urls.py"}


def docs_files() -> dict[str, str]:
    files = dict(BLOCK.findall(DOCS.read_text()))
    assert set(files) == {
        "mysite/settings.py",
        "mysite/tasks.py",
        "mysite/views.py",
        "mysite/urls.py",
    }
    settings = [line for line in files["mysite/settings.py"].splitlines() if line.strip()]
    assert len(settings) == 3  # the page's promise: three lines of settings
    return files


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(WAIT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=WAIT_S) as response:
        return json.load(response)


def test_startproject_enqueue_from_a_view_and_a_worker_runs_it(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    root = tmp_path / "site"
    root.mkdir()
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("DJANGO_SETTINGS_MODULE", None)  # the new project's manage.py sets its own
    subprocess.run(
        [sys.executable, "-m", "django", "startproject", "mysite", str(root)], check=True, env=env
    )
    for name, code in docs_files().items():
        with (root / name).open("a" if name in APPENDED else "w") as file:
            file.write("\n" + code)

    port = free_port()
    log = (tmp_path / "runserver.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    processes.append(server)

    def enqueued() -> Any:
        assert server.poll() is None, (tmp_path / "runserver.log").read_text()
        try:
            return get_json(f"http://127.0.0.1:{port}/greet/ada/")
        except OSError:  # not listening yet
            return None

    task_id = wait_for(enqueued, "runserver to answer")["id"]
    assert get_json(f"http://127.0.0.1:{port}/result/{task_id}/") == {
        "status": "READY",
        "value": None,
    }

    worker = subprocess.Popen(
        [sys.executable, "manage.py", "cairnq_worker"],
        cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    processes.append(worker)

    def done() -> Any:
        assert worker.poll() is None, "the worker ended"
        answer = get_json(f"http://127.0.0.1:{port}/result/{task_id}/")
        return answer if answer["status"] != "READY" and answer["status"] != "RUNNING" else None

    assert wait_for(done, "the worker to run the task") == {
        "status": "SUCCESSFUL",
        "value": "hello, ada",
    }
