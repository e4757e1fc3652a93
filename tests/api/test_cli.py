"""The ``cairnq`` command line: every command on both dialects, JSON output,
``top --once``, exit codes (0 ok, 1 failed, 2 usage, 3 database), and real
worker processes started with ``cairnq worker`` and stopped with SIGTERM.

Most runs are in-process (``cairnq.cli.main(argv)`` with capsys); the
subprocess runs use ``sys.executable -m cairnq`` with ``cwd=tmp_path`` (the
repository root would shadow the installed package).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from cairnq.cli import main
from cairnq.cli.common import progress_bar, table

SUBPROCESS_TIMEOUT_S = 30


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = cli(capsys, *argv)
    assert code == 0, err
    return json.loads(out)


def run_cli(
    tmp_path: Path, *argv: str, timeout: float = SUBPROCESS_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cairnq", *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=_env(),
    )


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("CAIRNQ_DB", None)
    return env


def _mismatched_sqlite(path: Path) -> str:
    """A migrated SQLite file claiming protocol_version 2."""
    assert main(["--db", str(path), "migrate"]) == 0
    conn = sqlite3.connect(path)
    conn.execute("update cairnq_meta set value = '2' where key = 'protocol_version'")
    conn.commit()
    conn.close()
    return str(path)


# -- migrate --------------------------------------------------------------------------


def test_migrate_reports_versions_and_ledger(backend: Any, capsys: Any) -> None:
    db = backend.target
    doc = cli_json(capsys, "--db", db, "migrate", "--json")
    assert doc["dialect"] == backend.dialect
    assert doc["protocol_version"] == 1
    assert doc["schema_version"] == 10
    names = [m["name"] for m in doc["migrations"]]
    assert names[0] == "0001_init.sql" and names[-1] == "0010_drop_status_index.sql"
    assert ("0003_notify.sql" in names) == (backend.dialect == "postgres")
    assert all(isinstance(m["applied_at_ms"], int) for m in doc["migrations"])
    if backend.dialect == "sqlite":  # a new file: everything applied by this run
        assert doc["applied"] == names

    again = cli_json(capsys, "migrate", "--db", db, "--json")  # options after the command
    assert again["applied"] == [] and again["migrations"] == doc["migrations"]

    code, out, _ = cli(capsys, "--db", db, "migrate")
    assert code == 0
    assert "protocol_version  1" in out and "schema_version    10" in out
    assert "0001_init.sql" in out and "nothing (up to date)" in out


# -- submit / get / list / stats ------------------------------------------------------


def test_submit_get_list_stats(backend: Any, capsys: Any) -> None:
    db = backend.target
    code, out, err = cli(capsys, "--db", db, "submit", "mail.send", '{"to": "a@example.com"}')
    assert code == 0, err
    first_id = out.strip()
    assert first_id.startswith("task_") and "\n" not in first_id

    task = cli_json(
        capsys,
        "--db", db, "--json", "submit", "report.build", '[1, 2, 3]',
        "--key", "report:7", "--queue", "reports", "--priority", "-5",
        "--delay-ms", "60000", "--max-attempts", "7", "--metadata", '{"by": "cli"}',
    )  # fmt: skip
    assert task["name"] == "report.build" and task["queue"] == "reports"
    assert task["payload"] == [1, 2, 3] and task["metadata"] == {"by": "cli"}
    assert task["priority"] == -5 and task["max_attempts"] == 7 and task["status"] == "queued"
    assert task["run_at_ms"] >= task["created_at_ms"] + 59_000

    # Every field of the dataclass, by id and by key.
    assert cli_json(capsys, "--db", db, "get", task["id"], "--json") == task
    assert cli_json(capsys, "--db", db, "get", "--key", "report:7", "--json") == task
    code, out, _ = cli(capsys, "--db", db, "get", task["id"])
    assert code == 0
    assert f"id                      {task['id']}" in out
    assert "payload                 [1,2,3]" in out and "queue                   reports" in out

    listed = cli_json(capsys, "--db", db, "--json", "list")
    assert [t["id"] for t in listed] == [task["id"], first_id]  # newest first
    assert cli_json(capsys, "--db", db, "--json", "list", "--queue", "reports") == [task]
    assert [
        t["id"] for t in cli_json(capsys, "--db", db, "--json", "list", "--name", "mail.send")
    ] == [first_id]
    assert cli_json(capsys, "--db", db, "--json", "list", "--status", "running") == []
    assert [
        t["id"]
        for t in cli_json(capsys, "--db", db, "--json", "list", "--limit", "1", "--offset", "1")
    ] == [first_id]
    code, out, _ = cli(capsys, "--db", db, "list")
    lines = out.splitlines()
    assert lines[0].split() == ["ID", "NAME", "QUEUE", "STATUS", "ATTEMPT", "PRIORITY", "CREATED"]
    assert lines[1].startswith(task["id"]) and "reports" in lines[1] and "0/7" in lines[1]
    assert lines[0].index("QUEUE") == lines[1].index(" reports ") + 1  # aligned columns
    code, out, _ = cli(capsys, "--db", db, "list", "--status", "failed")
    assert (code, out) == (0, "no tasks\n")

    stats = cli_json(capsys, "--db", db, "--json", "stats")
    assert stats == {
        "default": {"queued": 1, "running": 0, "succeeded": 0, "failed": 0, "canceled": 0},
        "reports": {"queued": 1, "running": 0, "succeeded": 0, "failed": 0, "canceled": 0},
    }
    assert list(cli_json(capsys, "--db", db, "--json", "stats", "--queue", "reports")) == [
        "reports"
    ]
    code, out, _ = cli(capsys, "--db", db, "stats")
    assert out.splitlines() == [
        "QUEUE    QUEUED  RUNNING  SUCCEEDED  FAILED  CANCELED  TOTAL",
        "default       1        0          0       0         0      1",
        "reports       1        0          0       0         0      1",
    ]


def test_submit_key_conflicts(backend: Any, capsys: Any) -> None:
    db = backend.target
    first = cli_json(capsys, "--db", db, "--json", "submit", "job", "1", "--key", "k")
    reused = cli_json(capsys, "--db", db, "--json", "submit", "job", "2", "--key", "k")
    assert reused["id"] == first["id"] and reused["payload"] == 1
    code, out, err = cli(
        capsys, "--db", db, "submit", "job", "3", "--key", "k", "--conflict", "reject"
    )
    assert code == 1 and out == ""
    assert "already exists" in err and err.count("\n") == 1
    replaced = cli_json(
        capsys, "--db", db, "--json", "submit", "job", "4", "--key", "k", "--conflict", "replace"
    )
    assert replaced["id"] != first["id"] and replaced["payload"] == 4
    assert cli_json(capsys, "--db", db, "--json", "get", first["id"])["status"] == "canceled"


def test_submit_wait_without_worker_times_out(backend: Any, capsys: Any) -> None:
    db = backend.target
    code, out, err = cli(
        capsys, "--db", db, "submit", "nobody.home", "--wait", "--timeout-ms", "150"
    )
    assert code == 1
    assert out.strip().startswith("task_")
    assert "did not finish within 150ms" in err and "never claimed" in err
    code, out, err = cli(
        capsys, "--db", db, "--json", "submit", "nobody.home", "--wait", "--timeout-ms", "0"
    )
    assert code == 1
    snapshot = json.loads(out)  # still one JSON document: the task as last seen
    assert snapshot["status"] == "queued" and snapshot["name"] == "nobody.home"


# -- cancel / retry / purge --------------------------------------------------------------


def test_cancel_and_retry(backend: Any, capsys: Any) -> None:
    db = backend.target
    tid = cli_json(capsys, "--db", db, "--json", "submit", "job", "--key", "job:1")["id"]

    code, out, _ = cli(capsys, "--db", db, "cancel", tid)
    assert (code, out) == (0, f"{tid} canceled\n")
    code, out, err = cli(capsys, "--db", db, "cancel", "--key", "job:1")
    assert code == 1 and out == ""
    assert "is canceled; only queued or running tasks can be canceled" in err

    retried = cli_json(capsys, "--db", db, "--json", "retry", "--key", "job:1", "--reset-attempt")
    assert retried["id"] == tid and retried["status"] == "queued" and retried["attempt"] == 0
    code, out, err = cli(capsys, "--db", db, "retry", tid)
    assert code == 1 and "only failed or canceled tasks can be retried" in err

    canceled = cli_json(capsys, "--db", db, "--json", "cancel", "--key", "job:1")
    assert canceled["status"] == "canceled"
    code, out, _ = cli(capsys, "--db", db, "retry", tid)
    assert (code, out) == (0, f"{tid} queued\n")

    for argv in (["cancel", "task_missing"], ["retry", "task_missing"], ["get", "task_missing"]):
        code, out, err = cli(capsys, "--db", db, *argv)
        assert code == 1 and out == ""
        assert err == f"cairnq {argv[0]}: task task_missing not found\n"
    code, _, err = cli(capsys, "--db", db, "get", "--key", "nope")
    assert code == 1 and "no task with key 'nope'" in err


def test_cancel_running_task_only_flags_it(backend: Any, capsys: Any) -> None:
    db = backend.target
    tid = cli_json(capsys, "--db", db, "--json", "submit", "slow", "--queue", "q")["id"]
    asyncio.run(_claim(backend, "q", None))
    code, out, _ = cli(capsys, "--db", db, "cancel", tid)
    assert (code, out) == (0, f"{tid} running (cancel requested)\n")


def test_purge(backend: Any, capsys: Any) -> None:
    db = backend.target
    ids = [
        cli_json(capsys, "--db", db, "--json", "submit", "p", str(i), "--queue", "pq")["id"]
        for i in range(5)
    ]
    keep = cli_json(capsys, "--db", db, "--json", "submit", "p", "99", "--queue", "other")["id"]
    for tid in ids + [keep]:
        assert cli(capsys, "--db", db, "cancel", tid)[0] == 0

    code, out, _ = cli(capsys, "--db", db, "purge", "--queue", "pq", "--limit", "2")
    assert (code, out) == (0, "2\n")
    code, out, _ = cli(capsys, "--db", db, "purge", "--older-than-ms", "3600000", "--queue", "pq")
    assert (code, out) == (0, "0\n")  # nothing finished an hour ago
    assert cli_json(
        capsys, "--db", db, "--json", "purge", "--queue", "pq", "--status", "failed"
    ) == {"purged": 0}
    doc = cli_json(
        capsys, "--db", db, "--json", "purge", "--queue", "pq", "--status", "canceled",
        "--name", "p", "--limit", "1", "--all",
    )  # fmt: skip
    assert doc == {"purged": 3}
    remaining = cli_json(capsys, "--db", db, "--json", "list")
    assert [t["id"] for t in remaining] == [keep]
    assert cli(capsys, "--db", db, "purge", "--all")[1] == "1\n"


# -- top ---------------------------------------------------------------------------------


async def _claim(backend: Any, queue: str, progress: Any) -> Any:
    store = backend.store()
    try:
        (task,) = await store.claim(queues=[queue], worker_id="worker_cli_test", lease_ms=60_000)
        if progress is not None:
            task = await store.progress(
                task_id=task.id,
                worker_id="worker_cli_test",
                progress=progress[0],
                message=progress[1],
            )
        return task
    finally:
        await store.close()


def test_top_once(backend: Any, capsys: Any) -> None:
    db = backend.target
    for _ in range(2):
        cli(capsys, "--db", db, "submit", "render.video", "--queue", "alpha")
    cli(capsys, "--db", db, "submit", "send.mail", "--queue", "beta")
    running = asyncio.run(_claim(backend, "alpha", (0.5, "halfway there")))

    code, out, err = cli(capsys, "--db", db, "top", "--once")
    assert code == 0, err
    assert "\x1b[" not in out  # --once: a plain frame, no terminal codes
    lines = out.splitlines()
    assert lines[0].startswith("cairnq top")
    assert any(line.split()[:3] == ["alpha", "1", "1"] for line in lines)  # queued, running
    assert any(line.split()[:2] == ["beta", "1"] for line in lines)
    row = next(line for line in lines if running.id in line)
    assert "render.video" in row and "1/3" in row and "[#####.....] 50% halfway there" in row
    assert "running: 1" in out

    frame = cli_json(capsys, "--db", db, "--json", "top", "--once", "--interval-ms", "200")
    assert set(frame["queues"]) == {"alpha", "beta"}
    assert frame["queues"]["alpha"]["counts"]["running"] == 1
    assert frame["queues"]["alpha"]["throughput_per_s"] is None  # no previous frame
    assert [t["id"] for t in frame["running"]] == [running.id]
    assert frame["running"][0]["progress"] == 0.5

    beta = cli_json(capsys, "--db", db, "--json", "top", "--once", "--queue", "beta")
    assert list(beta["queues"]) == ["beta"] and beta["running"] == []


def test_progress_bar_and_table() -> None:
    assert progress_bar(0.5, "halfway") == "[#####.....] 50% halfway"
    assert progress_bar(0, None) == "[..........] 0%"
    assert progress_bar(1.7, "done") == "[##########] 100% done"
    assert progress_bar(None, "only a message") == "only a message"
    assert table(("A", "NUM"), [("xx", 1), ("y", 100)], right=(1,)) == [
        "A   NUM",
        "xx    1",
        "y   100",
    ]


# -- global options, logging, env ---------------------------------------------------------


def test_db_from_environment(backend: Any, capsys: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("CAIRNQ_DB", backend.target)
    tid = cli_json(capsys, "submit", "env.task", "--json")["id"]
    assert cli_json(capsys, "get", tid, "--json")["name"] == "env.task"
    monkeypatch.delenv("CAIRNQ_DB")
    code, _, err = cli(capsys, "get", tid)
    assert code == 2 and "no database" in err


def test_log_level_routes_cairnq_logs_to_stderr(tmp_path: Path, capsys: Any) -> None:
    logger = logging.getLogger("cairnq")
    before = (list(logger.handlers), logger.level, logger.propagate)
    code, out, err = cli(capsys, "--db", str(tmp_path / "l.db"), "--log-level", "info", "migrate")
    assert code == 0
    assert "INFO cairnq.store: applied migrations: 0001_init.sql" in err
    assert "applied migrations" not in out
    assert (list(logger.handlers), logger.level, logger.propagate) == before  # restored
    code, out, err = cli(capsys, "--db", str(tmp_path / "l.db"), "-vv", "stats")
    assert code == 0 and "DEBUG cairnq.cli: opening sqlite" in err
    code, out, err = cli(capsys, "--db", str(tmp_path / "l.db"), "stats")
    assert err == ""


def test_demo_still_works(capsys: Any) -> None:
    code, out, _ = cli(capsys, "demo", "--tasks", "20", "--concurrency", "2")
    assert code == 0
    assert "drained   20 tasks" in out and "'succeeded': 20" in out


# -- exit codes -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--bogus", "stats"],
        ["list", "--limit", "-1"],
        ["list", "--status", "sleeping"],
        ["submit"],
        ["submit", "x", "{not json"],
        ["submit", "x", "--metadata", "[1]"],
        ["submit", "x", "--timeout-ms", "5"],
        ["submit", "x", "--conflict", "maybe"],
        ["get"],
        ["get", "task_x", "--key", "k"],
        ["purge", "--status", "queued"],
        ["top", "--interval-ms", "0"],
        ["worker", "no_colon_here"],
        ["worker", "surely_not_a_module_xyz:thing"],
        # numbers past what the store takes, text that is not UTF-8, JSON too deep
        ["list", "--limit", str(2**64)],
        ["list", "--offset", str(2**63)],
        ["purge", "--limit", str(2**64)],
        ["purge", "--older-than-ms", str(2**63)],
        ["submit", "x", "--priority", str(2**31)],
        ["submit", "x", "--priority", "1" * 5_000],
        ["submit", "x", "--delay-ms", str(2**63)],
        ["submit", "x", "--max-attempts", str(2**31)],
        ["submit", "x", "--wait", "--timeout-ms", str(2**63)],
        ["submit", "x", "[" * 10_000 + "]" * 10_000],
        ["submit", "x", "--metadata", '{"a":' * 10_000 + "1" + "}" * 10_000],
        ["submit", "x", '{"a": NaN}'],
        ["submit", "x", "--queue", ""],
        ["get", "\udcff"],
        ["stats", "--queue", "\udcff"],
        ["cancel", "--key", "\udcff"],
        ["top", "--interval-ms", str(2**63)],
        ["worker", "json:loads", "--lease-ms", str(2**63)],
        ["worker", "json:loads", "--poll-interval-ms", str(2**70)],
    ],
    ids=lambda argv: " ".join(argv)[:60],
)
def test_usage_errors_exit_2(argv: list[str], tmp_path: Path, capsys: Any) -> None:
    code, out, err = cli(capsys, "--db", str(tmp_path / "u.db"), *argv)
    assert code == 2, (out, err)
    assert out == "" and err and "Traceback" not in err


@pytest.mark.parametrize(
    "source,says",
    [
        ("raise RuntimeError('boom at import')\n", "cannot import '{mod}': RuntimeError: boom at import"),
        ("def setup(w):\n    x = (\n", "cannot import '{mod}': SyntaxError: '(' was never closed"),
        ("def setup(w):\n    raise RuntimeError('boom in setup')\n", "{mod}:setup raised RuntimeError: boom in setup"),
        ("def __getattr__(name):\n    raise KeyError(name)\n", "cannot read {mod}:setup: KeyError: 'setup'"),
    ],
    ids=["import raises", "does not compile", "setup raises", "attribute raises"],
)
def test_a_worker_target_that_raises_exits_2_with_the_cause(
    source: str, says: str, tmp_path: Path, capsys: Any, monkeypatch: Any
) -> None:
    mod = f"cli_target_{os.urandom(4).hex()}"
    (tmp_path / f"{mod}.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the command puts the cwd first
    try:
        code, out, err = cli(capsys, "--db", str(tmp_path / "w.db"), "worker", f"{mod}:setup")
    finally:
        sys.modules.pop(mod, None)
    assert code == 2 and out == ""
    assert err.startswith("cairnq worker: " + says.format(mod=mod)) and err.count("\n") == 1


def test_database_errors_exit_3(tmp_path: Path, capsys: Any) -> None:
    mismatched = _mismatched_sqlite(tmp_path / "mismatch.db")
    for argv in (
        ["list"],
        ["submit", "x"],
        ["get", "task_x"],
        ["top", "--once"],
        ["migrate"],
        ["stats", "--json"],
    ):
        code, out, err = cli(capsys, "--db", mismatched, *argv)
        assert code == 3, argv
        assert out == "" and err.count("\n") == 1
        assert "protocol_version=2" in err
    # Read commands refuse a SQLite file that does not exist (a typo makes no queue).
    missing = str(tmp_path / "missing.db")
    code, _, err = cli(capsys, "--db", missing, "list")
    assert code == 3 and "no such file" in err and not os.path.exists(missing)
    garbage = tmp_path / "garbage.db"
    garbage.write_text("not a database, just text " * 100)
    code, _, err = cli(capsys, "--db", str(garbage), "stats")
    assert code == 3 and err.count("\n") == 1
    (tmp_path / "plainfile").write_text("")
    code, _, err = cli(capsys, "--db", str(tmp_path / "plainfile" / "x.db"), "submit", "x")
    assert code == 3 and err.count("\n") == 1


def test_exit_codes_in_a_subprocess(tmp_path: Path) -> None:
    db = str(tmp_path / "codes.db")
    ok = run_cli(tmp_path, "--db", db, "submit", "x")
    assert ok.returncode == 0 and ok.stdout.startswith("task_"), ok.stderr
    missing = run_cli(tmp_path, "--db", db, "get", "task_nope")
    assert missing.returncode == 1 and "not found" in missing.stderr and missing.stdout == ""
    usage = run_cli(tmp_path, "--db", db, "list", "--limit", "many")
    assert usage.returncode == 2 and "usage:" in usage.stderr
    bad = run_cli(tmp_path, "--db", _mismatched_sqlite(tmp_path / "mm.db"), "stats")
    assert (
        bad.returncode == 3
        and bad.stderr.count("\n") == 1
        and "ProtocolVersionMismatch" in bad.stderr
    )


# -- worker -------------------------------------------------------------------------------------

HANDLERS = textwrap.dedent(
    """
    import asyncio
    from cairnq import TaskError

    async def square(ctx, payload):
        await ctx.progress(0.5, "halfway")
        await asyncio.sleep(payload.get("sleep", 0))
        return {"square": payload["n"] ** 2}

    def refuse(ctx, payload):
        raise TaskError("refused", code="no_way")

    def setup(worker):
        worker.register("math.square", square)
        worker.register("refuse", refuse)
    """
)

INSTANCE = textwrap.dedent(
    """
    from cairnq import Worker

    worker = Worker.sqlite({path!r}, queues=["inst"], concurrency=2)

    @worker.task("greet")
    def greet(ctx, payload):
        return "hello " + payload
    """
)


def _stop(proc: subprocess.Popen[str]) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=SUBPROCESS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return proc.returncode, err


def _start_worker(tmp_path: Path, *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "cairnq", *argv],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )


def test_worker_process_runs_registered_handlers(backend: Any, tmp_path: Path, capsys: Any) -> None:
    (tmp_path / "handlers.py").write_text(HANDLERS)
    db = backend.target
    assert run_cli(tmp_path, "--db", db, "migrate").returncode == 0
    proc = _start_worker(
        tmp_path, "--db", db, "-v", "worker", "handlers:setup", "--queues", "default,extra",
        "--concurrency", "2", "--lease-ms", "10000", "--poll-interval-ms", "100",
    )  # fmt: skip
    try:
        done = run_cli(
            tmp_path,
            "--db",
            db,
            "submit",
            "math.square",
            '{"n": 7}',
            "--wait",
            "--timeout-ms",
            "20000",
        )
        assert done.returncode == 0, (done.stderr, proc.poll())
        _, status = done.stdout.splitlines()
        assert status == 'succeeded {"square":49}'

        extra = run_cli(
            tmp_path, "--db", db, "--json", "submit", "math.square", '{"n": 3}', "--queue", "extra",
            "--wait", "--timeout-ms", "20000",
        )  # fmt: skip
        assert extra.returncode == 0 and json.loads(extra.stdout)["result"] == {"square": 9}

        failed = run_cli(
            tmp_path, "--db", db, "submit", "refuse", "--wait", "--timeout-ms", "20000"
        )
        assert failed.returncode == 1
        assert failed.stdout.splitlines()[1] == "failed"
        assert "failed: no_way: refused" in failed.stderr

        # SIGTERM while a call is in flight: the call finishes, then exit 0.
        slow = run_cli(
            tmp_path, "--db", db, "submit", "math.square", '{"n": 2, "sleep": 1.5}'
        ).stdout.strip()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            got = cli_json(capsys, "--db", db, "--json", "get", slow)  # in-process: quick
            if got["status"] == "running":
                break
            time.sleep(0.05)
        assert got["status"] == "running"
    finally:
        code, err = _stop(proc)
    assert code == 0, err
    assert "draining in-flight calls" in err and "stopped" in err
    final = json.loads(run_cli(tmp_path, "--db", db, "--json", "get", slow).stdout)
    assert final["status"] == "succeeded" and final["result"] == {"square": 4}


def test_worker_process_with_a_worker_instance(tmp_path: Path) -> None:
    path = str(tmp_path / "own.db")
    (tmp_path / "app.py").write_text(INSTANCE.format(path=path))
    refused = run_cli(tmp_path, "worker", "app:worker", "--queues", "other")
    assert refused.returncode == 2 and "Worker instance" in refused.stderr
    proc = _start_worker(tmp_path, "worker", "app:worker", "--concurrency", "1")  # no --db needed
    try:
        done = run_cli(
            tmp_path, "--db", path, "submit", "greet", '"cli"', "--queue", "inst", "--wait",
            "--timeout-ms", "20000",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[1] == 'succeeded "hello cli"'
    finally:
        code, err = _stop(proc)
    assert code == 0, err


def test_worker_on_a_mismatched_database_exits_3(tmp_path: Path) -> None:
    (tmp_path / "handlers.py").write_text(HANDLERS)
    db = _mismatched_sqlite(tmp_path / "mm.db")
    proc = run_cli(tmp_path, "--db", db, "worker", "handlers:setup")
    assert proc.returncode == 3 and "protocol_version=2" in proc.stderr
