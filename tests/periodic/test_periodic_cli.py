"""``cairnq schedules``: the schedules read back from their tasks, as a
table and as JSON, on both dialects."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from typing import Any

import pytest

from cairnq import CairnQ
from cairnq.cli import main
from cairnq.periodic import Scheduler, declare, instant_text, parse_instant


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _seed(backend: Any) -> None:
    """Two schedules, each fired twice (the newer fire of the cron one canceled)."""

    async def seed() -> None:
        client = backend.client()
        await client.connect()
        scheduler = Scheduler(client.store, lambda exc, info: None)
        nightly = declare("30 2 * * *", "report.nightly", timezone="Europe/Berlin")
        tick = declare(timedelta(seconds=5), "tick", queue="fast", id="tick:5s", catch_up="none")
        for fire in ("2026-10-24T00:30:00.000Z", "2026-10-25T00:30:00.000Z"):
            assert await scheduler.submit(nightly, parse_instant(fire))
        for fire in ("2026-10-25T00:30:05.000Z", "2026-10-25T00:30:10.000Z"):
            assert await scheduler.submit(tick, parse_instant(fire))
        await client.submit("report.nightly", {"by": "hand"})  # no schedule: not listed
        assert await client.cancel_by_key("cairnq.periodic:report.nightly:2026-10-25T00:30:00.000Z")
        await client.close()

    asyncio.run(seed())


def test_schedules_json(backend: Any, capsys: Any) -> None:
    _seed(backend)
    code, out, err = cli(capsys, "schedules", "--db", backend.target, "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert [r["schedule"] for r in rows] == ["report.nightly", "tick:5s"]
    nightly, tick = rows
    assert nightly["task"] == "report.nightly" and nightly["queue"] == "default"
    assert nightly["cron"] == "30 2 * * *" and nightly["timezone"] == "Europe/Berlin"
    assert nightly["last_fire"] == "2026-10-25T00:30:00.000Z"
    assert nightly["last_status"] == "canceled"
    # next fire: 02:30 Berlin time, in the future, as UTC text
    next_fire = parse_instant(nightly["next_fire"])
    assert next_fire % 1000 == 0 and instant_text(next_fire)[14:16] == "30"
    assert tick == {
        "schedule": "tick:5s", "task": "tick", "queue": "fast", "cron": "every 5s",
        "timezone": "UTC", "catch_up": "none", "next_fire": tick["next_fire"],
        "last_fire": "2026-10-25T00:30:10.000Z", "last_status": "queued",
        "last_task_id": tick["last_task_id"],
    }  # fmt: skip
    assert parse_instant(tick["next_fire"]) % 5000 == 0


def test_schedules_table(backend: Any, capsys: Any) -> None:
    _seed(backend)
    code, out, err = cli(capsys, "--db", backend.target, "schedules")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == [
        "SCHEDULE", "TASK", "QUEUE", "CRON", "TIMEZONE", "NEXT", "FIRE", "LAST", "FIRE", "STATUS",
    ]  # fmt: skip
    assert lines[1].startswith("report.nightly  report.nightly  default  30 2 * * *  Europe/Berlin")
    # the last fire in the schedule's zone: the first 02:30 of the long day
    assert "2026-10-25 02:30:00 +0200" in lines[1] and lines[1].endswith("canceled")
    assert lines[2].split()[:6] == ["tick:5s", "tick", "fast", "every", "5s", "UTC"]
    assert "2026-10-25 00:30:10 +0000" in lines[2] and lines[2].endswith("queued")


def test_schedules_empty_and_missing_file(tmp_path: Any, capsys: Any) -> None:
    db = str(tmp_path / "q.db")

    async def make() -> None:
        async with CairnQ.sqlite(db) as client:
            await client.submit("plain")

    asyncio.run(make())
    assert cli(capsys, "schedules", "--db", db) == (0, "no schedules (none has fired yet)\n", "")
    code, out, _ = cli(capsys, "schedules", "--db", db, "--json")
    assert (code, json.loads(out)) == (0, [])
    code, out, err = cli(capsys, "schedules", "--db", str(tmp_path / "absent.db"))
    assert code == 3 and "no such file" in err


SETUP = """
from datetime import timedelta

async def beat(ctx, payload):
    return payload

def setup(worker):
    worker.register("beat", beat, periodic=timedelta(milliseconds=500))
"""


def _cairnq(tmp_path: Any, *argv: str, wait: bool = True) -> Any:
    env = {k: v for k, v in os.environ.items() if k != "CAIRNQ_DB"}
    command = [sys.executable, "-m", "cairnq", *argv]
    if wait:
        return subprocess.run(
            command, cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env
        )
    return subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def test_the_worker_command_runs_schedules(backend: Any, tmp_path: Any) -> None:
    """`cairnq worker module:setup` runs the schedules the setup declares,
    and `cairnq schedules` (a separate process) shows them."""
    (tmp_path / "app.py").write_text(SETUP)
    db = backend.target
    assert _cairnq(tmp_path, "--db", db, "migrate").returncode == 0
    proc = _cairnq(
        tmp_path, "--db", db, "worker", "app:setup", "--poll-interval-ms", "50", wait=False
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            listed = _cairnq(tmp_path, "--db", db, "schedules", "--json")
            assert listed.returncode == 0, listed.stderr
            rows = json.loads(listed.stdout)
            if rows and rows[0]["last_status"] == "succeeded":
                break
            assert time.monotonic() < deadline and proc.poll() is None, (rows, proc.poll())
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    [row] = rows
    assert (row["schedule"], row["task"], row["cron"], row["timezone"]) == (
        "beat",
        "beat",
        "every 500ms",
        "UTC",
    )
    assert parse_instant(row["next_fire"]) % 500 == 0
