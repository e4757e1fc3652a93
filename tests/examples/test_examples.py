"""Every example in examples/ runs for real: as its header says to run it
(real processes: a uvicorn server and a worker beside it), and, where a test
can say more, its handlers under ``cairnq.testing``'s ``drain``."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator

import pytest

from cairnq import CairnQ, Worker
from cairnq.testing import drain

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DEADLINE_S = 60.0  # what a hung example gets before the test gives up on it


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, *args], cwd=cwd, env={**os.environ, **(env or {})},
        capture_output=True, text=True, timeout=DEADLINE_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_every_example_is_tested_and_says_how_to_run_it() -> None:
    names = sorted(p.name for p in EXAMPLES.iterdir() if p.suffix in (".py", ".md"))
    assert names == ["batch_embeddings.py", "fastapi_app.py", "mixed_fleet.md", "periodic_job.py"]
    for path in EXAMPLES.glob("*.py"):
        assert f"examples/{path.name}" in path.read_text().split('"""')[1], path.name


# -- batch embeddings -------------------------------------------------------------------------


def test_batch_embeddings_runs_as_a_script(tmp_path: Path) -> None:
    out = _run([str(EXAMPLES / "batch_embeddings.py"), str(tmp_path / "e.db"), "100"], tmp_path)
    assert out.startswith("embedded 100 texts in ") and out.endswith("(largest batch 32)\n")


async def test_batch_embeddings_handler_under_drain(cairnq_client: CairnQ, cairnq_db: str) -> None:
    example = _load("batch_embeddings")
    calls: list[int] = []
    worker: Worker = example.build_worker(cairnq_db, calls)
    texts = [f"text {i}" for i in range(70)]
    text_of = {}
    for text in texts:
        text_of[(await cairnq_client.submit("embed", {"text": text})).id] = text
    try:
        outcomes = await drain(worker)
    finally:
        await worker.close()
    assert sorted(o.id for o in outcomes) == sorted(text_of)
    assert {o.status for o in outcomes} == {"succeeded"}
    assert [o.result for o in outcomes] == example.embed_texts([text_of[o.id] for o in outcomes])
    assert sum(calls) == 70 and max(calls) <= example.BATCH


# -- periodic job -----------------------------------------------------------------------------


def test_periodic_job_fires_on_its_schedule(tmp_path: Path) -> None:
    out = _run(
        [str(EXAMPLES / "periodic_job.py"), str(tmp_path / "p.db"), "--fires", "2"], tmp_path
    )
    lines = out.splitlines()
    assert [line.split(" for ")[0] for line in lines] == ["cleanup #1", "cleanup #2"]
    first, second = (line.rsplit(" ", 1)[1] for line in lines)
    assert first < second  # two distinct fire instants, in order


# -- FastAPI: a real uvicorn server and a real worker process ----------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []

    def start(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, *args], cwd=tmp_path, env={**os.environ, **env},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def _until_serving(httpx: Any, base: str, server: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    async with httpx.AsyncClient() as http:
        while True:
            assert server.poll() is None, server.communicate()[0]
            try:
                await http.get(f"{base}/tasks/none")
                return
            except httpx.TransportError:
                assert time.monotonic() < deadline, "uvicorn did not start"
                await asyncio.sleep(0.1)


async def test_fastapi_app_with_a_worker_process(backend: Any, spawn: Any) -> None:
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("fastapi")
    env = {"CAIRNQ_DB": backend.target}
    worker = spawn([str(EXAMPLES / "fastapi_app.py"), "worker"], env)
    port = _free_port()
    server = spawn(
        ["-m", "uvicorn", "--app-dir", str(EXAMPLES), "fastapi_app:app", "--port", str(port)], env
    )
    base = f"http://127.0.0.1:{port}"
    await _until_serving(httpx, base, server)
    async with httpx.AsyncClient(base_url=base, timeout=DEADLINE_S) as http:
        submitted = await http.post("/reports", json={"customer": "acme", "months": 3})
        assert submitted.status_code == 202
        task_id = submitted.json()["id"]

        now = await http.post("/reports/now", json={"customer": "acme", "months": 2})
        assert now.status_code == 200 and now.json() == {"customer": "acme", "total": 801}

        deadline = time.monotonic() + DEADLINE_S
        while (status := (await http.get(f"/tasks/{task_id}")).json())["status"] != "succeeded":
            assert status["status"] in ("queued", "running") and time.monotonic() < deadline, status
            await asyncio.sleep(0.05)
        assert status["result"] == {"customer": "acme", "total": 1203}

        refused = await http.post("/reports/now", json={"customer": "acme", "months": 0})
        assert refused.status_code == 422 and "months must be at least 1" in refused.text
    for proc in (server, worker):
        proc.send_signal(signal.SIGTERM)  # uvicorn shuts the lifespan down; the worker drains
    served = server.communicate(timeout=DEADLINE_S)[0]
    # uvicorn re-raises the signal it shut down on, once the lifespan closed the client.
    assert server.returncode in (0, -signal.SIGTERM) and "Application shutdown complete" in served
    assert worker.wait(timeout=DEADLINE_S) == 0, worker.communicate()[0]
