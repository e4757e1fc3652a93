"""``cairnq worker --metrics-port`` and ``--log-format json`` in a real worker
process: the endpoint answers on 127.0.0.1, its counters follow the tasks
run, and every stderr line is a JSON object, the handler's own lines with the
task's fields.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from cairnq.cli import main

TIMEOUT_S = 30

HANDLERS = textwrap.dedent(
    """
    import logging

    log = logging.getLogger("app.handlers")

    async def hello(ctx, payload):
        log.info("saying hello to %s", payload["who"])
        return "hi"

    def setup(worker):
        worker.register("hello", hello)
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def until(pred: Any, what: str, timeout: float = TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = pred()
        except OSError:
            result = None
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not in time")
        time.sleep(0.05)


def env() -> dict[str, str]:
    out = dict(os.environ)
    out.pop("CAIRNQ_DB", None)
    return out


def test_worker_serves_metrics_and_writes_json_logs(backend: Any, tmp_path: Path) -> None:
    (tmp_path / "handlers.py").write_text(HANDLERS)
    db = backend.target
    assert main(["--db", db, "migrate"]) == 0
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "cairnq", "--db", db,
            "worker", "handlers:setup", "--log-format", "json", "--poll-interval-ms", "50",
            "--metrics-port", str(port), "--metrics-interval-ms", "200",
        ],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        until(lambda: get(url + "/healthz") == (200, "ok\n"), "healthy")
        for who in ("ada", "bob", "cy"):
            code = main(["--db", db, "submit", "hello", json.dumps({"who": who})])
            assert code == 0
        def three_done() -> bool:
            text = get(url + "/metrics")[1]
            for family in text_string_to_metric_families(text):
                for s in family.samples:
                    if s.name == "cairnq_tasks_succeeded_total" and s.labels.get(
                        "cairnq_task_name"
                    ) == "hello":
                        return s.value == 3
            return False

        until(three_done, "three successes counted")
        # Bound to this machine only (the default host).
        listening = _listening_addresses(proc.pid, port)
        assert listening and all(addr.startswith("127.0.0.1") for addr in listening), listening
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    assert proc.returncode == 0, err
    lines = [json.loads(line) for line in err.splitlines() if line.strip()]  # every line parses
    for line in lines:
        assert {"time", "level", "logger", "message"} <= set(line)
    hellos = [line for line in lines if line["logger"] == "app.handlers"]
    assert sorted(line["message"] for line in hellos) == [
        "saying hello to ada", "saying hello to bob", "saying hello to cy",
    ]  # fmt: skip
    for line in hellos:
        assert line["task_name"] == "hello" and line["queue"] == "default"
        assert line["attempt"] == 1 and line["task_id"].startswith("task_")
        assert line["worker_id"].startswith("worker_")
        assert line["level"] == "INFO"
    assert len({line["task_id"] for line in hellos}) == 3
    assert any("metrics on http://127.0.0.1:" in line["message"] for line in lines)


def _listening_addresses(pid: int, port: int) -> list[str]:
    """Local addresses of listening TCP sockets on ``port`` (from /proc)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port:
                if len(address) == 8:
                    octets = bytes.fromhex(address)[::-1]
                    found.append(".".join(str(b) for b in octets))
                else:
                    found.append("v6:" + address)
    return found


def test_supervisor_serves_one_endpoint_for_its_processes(backend: Any, tmp_path: Path) -> None:
    """--processes 2 --metrics-port P: one endpoint, the children's counters
    summed; /healthz 200 once both serve."""
    (tmp_path / "handlers.py").write_text(HANDLERS)
    db = backend.target
    assert main(["--db", db, "migrate"]) == 0
    for who in range(40):
        assert main(["--db", db, "submit", "hello", json.dumps({"who": who})]) == 0
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "cairnq", "--db", db, "worker", "handlers:setup",
            "--processes", "2", "--poll-interval-ms", "50", "--concurrency", "2",
            "--metrics-port", str(port), "--metrics-interval-ms", "200",
        ],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        until(lambda: get(url + "/healthz") == (200, "ok\n"), "both processes healthy")

        def all_counted() -> dict[str, float] | None:
            text = get(url + "/metrics")[1]
            found: dict[str, float] = {}
            for family in text_string_to_metric_families(text):
                for s in family.samples:
                    if s.labels.get("cairnq_task_name") == "hello" and s.name.endswith("_total"):
                        found[s.name] = s.value
            return found if found.get("cairnq_tasks_succeeded_total") == 40 else None

        found = until(all_counted, "40 successes across the processes")
        assert found["cairnq_tasks_claimed_total"] == 40
        assert found["cairnq_tasks_failed_total"] == 0
        text = get(url + "/metrics")[1]
        slots = [
            s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == "cairnq_worker_slots_free"
        ]  # fmt: skip
        assert slots == [4.0]  # 2 processes x concurrency 2, summed
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    assert proc.returncode == 0, err
