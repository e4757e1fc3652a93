"""PostgreSQL faults mid-drain: killed backends and a full server restart.

A client keeps submitting while two workers drain, all in this process, each
on a store of its own; none of them is ever recreated. Meanwhile:

1. every backend of the database (except the test's own admin connection) is
   terminated with ``pg_terminate_backend``, ``CAIRNQ_PG_TERMINATIONS`` times
   (default 5), ~0.7 s apart;
2. the server itself is restarted (``pg_ctlcluster --skip-systemctl-redirect
   <version> main restart``; skipped where that is not available), after which
   the test waits for ``pg_isready`` -- and makes sure the server is up again
   at the end even if the test fails.

Failures must surface -- through ``on_error`` (counted per phase and type) or
as errors raised to the caller (counted; a submit that raised is not retried,
a wait that raised is) -- and nothing may be lost: every submit that returned
ends succeeded, and so does every row in the table (a submit whose
acknowledgement was lost may still have committed).

Sizes: ``CAIRNQ_SOAK_TASKS`` (default 300 tasks), ``CAIRNQ_PG_TERMINATIONS``.
"""

from __future__ import annotations

import asyncio
import glob
import os
import shutil
import subprocess
import time
from collections import Counter
from typing import Any, Optional
from urllib.parse import urlparse

import pytest

from backends import ADMIN_DSN, DIALECTS, create_database, dsn_for, drop_database

from cairnq import CairnQ, PostgresStore, Worker

N_TASKS = int(os.environ.get("CAIRNQ_SOAK_TASKS", "300"))
TERMINATIONS = int(os.environ.get("CAIRNQ_PG_TERMINATIONS", "5"))
LEASE_MS = 2_000
CONCURRENCY = 8

pytestmark = pytest.mark.skipif("postgres" not in DIALECTS, reason="PostgreSQL is not available")


@pytest.fixture
def database() -> Any:
    name = create_database()
    try:
        yield name
    finally:
        ensure_server_up()
        drop_database(name)


# -- the server -----------------------------------------------------------------------------------


def _host_port() -> tuple[str, str]:
    url = urlparse(ADMIN_DSN)
    return url.hostname or "127.0.0.1", str(url.port or 5432)


def pg_isready(timeout_s: float = 60) -> bool:
    host, port = _host_port()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done = subprocess.run(["pg_isready", "-h", host, "-p", port, "-t", "2"], capture_output=True)
        if done.returncode == 0:
            return True
        time.sleep(0.2)
    return False


def local_cluster() -> Optional[tuple[str, str]]:
    """(version, name) of the local cluster serving ADMIN_DSN, if pg_ctlcluster can drive it."""
    if shutil.which("pg_ctlcluster") is None or shutil.which("pg_isready") is None:
        return None
    host, port = _host_port()
    if host not in ("127.0.0.1", "localhost", "::1"):
        return None
    if os.geteuid() != 0:
        return None  # pg_ctlcluster must run as root or as the cluster owner
    for conf in sorted(glob.glob("/etc/postgresql/*/*/postgresql.conf")):
        version, name = conf.split("/")[3:5]
        with open(conf) as f:
            ports = [ln.split("=")[1].split("#")[0].strip() for ln in f if ln.strip().startswith("port")]
        if ports and ports[-1] == port:
            return version, name
    return None


def pg_ctlcluster(action: str) -> subprocess.CompletedProcess[str]:
    cluster = local_cluster()
    assert cluster is not None
    return subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", *cluster, action],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def ensure_server_up() -> None:
    """Whatever happened in the test: the server is accepting connections again."""
    if pg_isready(5):
        return
    if local_cluster() is not None:
        pg_ctlcluster("start")
    assert pg_isready(60), "PostgreSQL did not come back up"


# -- the fleet -------------------------------------------------------------------------------------------


class Fleet:
    """One client and two workers in this process; counts everything that surfaced."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.client = CairnQ(PostgresStore(dsn))
        self.on_error: Counter[tuple[str, str, str]] = Counter()
        self.raised: Counter[tuple[str, str]] = Counter()
        self.calls: Counter[str] = Counter()
        self.submitted: list[str] = []
        self.workers = [self._worker(label) for label in ("A", "B")]
        self.runs: list[asyncio.Task[None]] = []

    def _worker(self, label: str) -> Worker:
        def on_error(exc: BaseException, info: dict[str, Any]) -> None:
            self.on_error[(label, info["phase"], type(exc).__name__)] += 1

        worker = Worker(PostgresStore(self.dsn), ["default"], concurrency=CONCURRENCY, lease_ms=LEASE_MS,
                        poll_interval_ms=100, retry_backoff_ms=50, retry_backoff_max_ms=500,
                        on_error=on_error)  # fmt: skip

        async def work(ctx: Any, payload: Any) -> Any:
            self.calls[ctx.task_id] += 1
            await asyncio.sleep(0.02)
            return {"i": payload["i"], "by": label}

        worker.register("work", work)
        return worker

    async def start(self) -> None:
        await self.client.connect()
        self.runs = [asyncio.create_task(w.run()) for w in self.workers]

    async def produce(self, n: int, pace_s: float) -> None:
        for i in range(n):
            try:
                self.submitted.append((await self.client.submit("work", {"i": i})).id)
            except Exception as exc:  # surfaced to the caller; not retried (it may have committed)
                self.raised[("submit", type(exc).__name__)] += 1
            await asyncio.sleep(pace_s)

    async def wait_all(self, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        done = {}
        for task_id in self.submitted:
            while True:
                remaining_ms = int((deadline - time.monotonic()) * 1000)
                assert remaining_ms > 0, f"tasks unfinished at the deadline: {len(self.submitted) - len(done)}"
                try:
                    done[task_id] = await self.client.wait(task_id, timeout_ms=remaining_ms, poll_ms=20, max_poll_ms=200)
                    break
                except Exception as exc:  # a read that failed with the connection: surfaced, retried
                    self.raised[("wait", type(exc).__name__)] += 1
                    await asyncio.sleep(0.1)
        return done

    async def stop(self) -> None:
        for w in self.workers:
            w.stop()
        await asyncio.gather(*self.runs)
        for w in self.workers:
            await w.close()
        await self.client.close()

    def rows(self) -> dict[str, str]:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return dict(conn.execute("select id, status from cairnq_tasks").fetchall())

    def report(self, what: str, done: dict[str, Any], extra: str = "") -> None:
        lost = sum(1 for t in done.values() if t.status != "succeeded")
        duplicates = sum(max(0, n - 1) for n in self.calls.values())
        by_phase = Counter()
        for (_, phase, kind), n in self.on_error.items():
            by_phase[f"{phase}:{kind}"] += n
        print(
            f"\n[reliability] postgres {what}: {len(self.submitted)} tasks (2 workers x {CONCURRENCY}, "
            f"lease {LEASE_MS} ms){extra} -- lost: {lost}, duplicates: {duplicates}, errors surfaced: "
            f"{sum(self.on_error.values()) + sum(self.raised.values())} (on_error {dict(by_phase)}; "
            f"raised {dict(self.raised)})"
        )

    def check(self, done: dict[str, Any]) -> None:
        bad = {i: (t.status, t.error) for i, t in done.items() if t.status != "succeeded"}
        assert not bad, bad
        rows = self.rows()
        assert set(self.submitted) <= set(rows)
        assert set(rows.values()) == {"succeeded"}, Counter(rows.values())
        for task_id, task in done.items():
            assert self.calls[task_id] >= 1
            # every call was an attempt of its own (a claim whose commit was
            # acknowledged to nobody is an attempt without a call)
            assert self.calls[task_id] <= task.attempt, (task_id, task.attempt, self.calls[task_id])


async def test_terminated_backends_mid_drain(database: str) -> None:
    fleet = Fleet(dsn_for(database))
    await fleet.start()
    import psycopg

    admin = await psycopg.AsyncConnection.connect(ADMIN_DSN, autocommit=True)
    killed = []

    async def terminate() -> None:
        await asyncio.sleep(0.5)
        for _ in range(TERMINATIONS):
            cur = await admin.execute(
                "select count(pg_terminate_backend(pid)) from pg_stat_activity"
                " where datname = %s and pid <> pg_backend_pid()",
                [database],
            )
            killed.append((await cur.fetchone())[0])
            await asyncio.sleep(0.7)

    try:
        await asyncio.gather(fleet.produce(N_TASKS, 0.01), terminate())
        done = await fleet.wait_all(60)
    finally:
        await admin.close()
        await fleet.stop()
    assert sum(killed) >= TERMINATIONS, killed  # each round found backends to kill
    fleet.check(done)
    surfaced = sum(fleet.on_error.values()) + sum(fleet.raised.values())
    assert surfaced >= 1, "the terminations went unnoticed"
    fleet.report("pg_terminate_backend", done, f", {TERMINATIONS} rounds killing {killed} backends")


async def test_server_restart_mid_drain(database: str) -> None:
    if local_cluster() is None:
        pytest.skip("no local cluster that pg_ctlcluster can restart (needs root and /etc/postgresql)")
    fleet = Fleet(dsn_for(database))
    await fleet.start()
    restart: dict[str, Any] = {}

    async def restart_server() -> None:
        await asyncio.sleep(1.0)
        t0 = time.monotonic()
        try:
            done = await asyncio.to_thread(pg_ctlcluster, "restart")
            restart["rc"], restart["stderr"] = done.returncode, done.stderr
        finally:
            restart["up"] = await asyncio.to_thread(pg_isready, 60)
            restart["s"] = time.monotonic() - t0

    try:
        await asyncio.gather(fleet.produce(N_TASKS, 0.015), restart_server())
        assert restart.get("rc") == 0, restart
        assert restart["up"], "the server did not come back"
        done = await fleet.wait_all(90)
    finally:
        ensure_server_up()
        await fleet.stop()
    fleet.check(done)
    surfaced = sum(fleet.on_error.values()) + sum(fleet.raised.values())
    assert surfaced >= 1, "the restart went unnoticed"
    fleet.report("server restart", done, f", restart took {restart['s']:.1f}s")
