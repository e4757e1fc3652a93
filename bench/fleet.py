"""What a fleet of worker processes costs PostgreSQL.

    python bench/fleet.py                          # fleets of 1, 4, 12, 24 workers
    python bench/fleet.py --sizes 4,24 --window 10 --json out.json

For each fleet size N, against a fresh database: N real worker processes
(``Worker.postgres``, concurrency 4, no-op handlers, default settings unless
``--poll-interval-ms``), then

* **idle**: transactions per second per worker, over ``--window`` seconds
  after a warm-up, nothing submitted;
* **loaded**: producers submitting ``--rate`` tasks/s for ``--window``
  seconds, each submit its own transaction (clients of 40/s each); per
  task, ``stmts/task``: the submit plus every statement the workers ran
  (claims, settlements, probes, turns: each one transaction, or less where
  writes were grouped), and ``all tx/task``: every transaction of the
  database until the producers and the fleet have closed, which also counts
  what the listening sessions spent reading notifications (see
  ``listeners()``). The rate reached is printed too;
* **burst**: ``--burst`` tasks whose handlers wait 10 ms, submitted at once
  into the idle fleet (a few group commits, so a few notifications): tasks/s
  until all have run, how many workers ran some, the workers' statements
  per task (a fleet that leaves a backlog to one worker drains it at that
  worker's pace: 4 slots of 10 ms, 400/s);
* **recovery**: how long after its lease expired a task is run again (a
  process claims it, with a 1 s lease, and is SIGKILLed; the claim is taken
  from a queue nobody serves and the row moved to the served queue while it
  runs, so no fleet worker races the victim for it), and how long after it
  came due a delayed task is run; ``--samples`` of each, median and max;
* **connections**: the fleet's connections to the database (its pools, its
  members' sessions, the leader's LISTEN), idle before the burst and again
  once the burst's client has left (the pools grown by the burst, not yet
  shrunk), per worker. The server's ``max_connections`` bounds the fleet
  sizes this can run (a warning says when a size may not fit).

Transactions are ``xact_commit + xact_rollback`` of ``pg_stat_database`` for
the database, whoever ran them (the producers' submits included, the bench's
own handful of reads too). A session reports its counts at most once a
second while busy, up to 10 s after it goes idle, and, if it only listens,
when it ends: the idle window starts after a warm-up of 11 s, and the loaded
count runs until every session has ended, less the idle fleet's rate over
that tail. The burst and the recovery run before the load, which has a
fleet of its own (started afresh once the first one's sessions have ended
and reported), and ends with it stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

WORKER = r"""
import asyncio, collections, json, os, signal, sys, time
from cairnq import Worker, events

ARGS = json.loads(sys.argv[1])
COUNTS = collections.Counter()  # statements this worker ran, by name (each its own transaction, or fewer)
RAN = "ran:sleep10"  # (not a statement: the burst's tasks it ran)
events.subscribe(lambda e: COUNTS.__setitem__(e.name, COUNTS[e.name] + 1), ["statement"])

async def report():
    while True:
        with open(ARGS["counts"] + ".tmp", "w") as f:
            json.dump(COUNTS, f)
        os.replace(ARGS["counts"] + ".tmp", ARGS["counts"])
        await asyncio.sleep(0.2)

async def main():
    options = {}
    if ARGS["poll_interval_ms"] is not None:
        options["poll_interval_ms"] = ARGS["poll_interval_ms"]
    worker = Worker.postgres(ARGS["dsn"], concurrency=4, **options)

    @worker.task("noop")
    async def noop(ctx, payload):
        return None

    @worker.task("sleep10")
    async def sleep10(ctx, payload):  # the burst's: 10 ms of waiting on something
        COUNTS[RAN] += 1
        await asyncio.sleep(0.01)

    @worker.task("stamp")
    async def stamp(ctx, payload):
        return {"t": time.time() * 1000}

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, worker.stop)
    await worker.store.connect()
    asyncio.ensure_future(report())
    print("ready", flush=True)
    try:
        await worker.run()
    finally:
        await worker.close()

asyncio.run(main())
"""

VICTIM = r"""
import asyncio, json, sys, time
from cairnq import CairnQ

ARGS = json.loads(sys.argv[1])

async def main():
    q = CairnQ.postgres(ARGS["dsn"])
    await q.connect()
    for task_id in ARGS["ids"]:
        while True:
            got = await q.store.claim(queues=["parked"], worker_id="victim", lease_ms=ARGS["lease_ms"], names=["stamp"])
            if got:
                break
            await asyncio.sleep(0.01)
        print(json.dumps({"id": got[0].id, "lease_until_ms": got[0].lease_until_ms}), flush=True)
        await asyncio.sleep(ARGS["spacing_s"])
    await asyncio.sleep(3600)  # SIGKILLed while it holds the leases

asyncio.run(main())
"""


FLUSH_S = 11.0  # an idle backend flushes its pending statistics within 10 s


def xacts(conn: Any) -> int:
    row = conn.execute(
        "select xact_commit + xact_rollback from pg_stat_database where datname = current_database()"
    ).fetchone()
    return int(row[0])


def connections(conn: Any) -> int:
    """Every other session of the database (the bench's own excluded)."""
    row = conn.execute(
        "select count(*) from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()"
    ).fetchone()
    return int(row[0])


def listeners(conn: Any) -> int:
    """Sessions of the database that LISTEN (their last command was one).

    On PostgreSQL 15 every notification, whatever its channel, costs one
    transaction in every listening session (it reads the queue in one), and a
    listening session that runs no command reports its counts to
    pg_stat_database only when it ends: those transactions are missing from
    the windows' counts. A task raises two notifications (queued, then done),
    so they are at most 2 per listening session per task (fewer when several
    arrive before the session reads them), whatever the workers do."""
    row = conn.execute(
        "select count(*) from pg_stat_activity where datname = current_database() and query ilike 'listen%'"
    ).fetchone()
    return int(row[0])


async def sample_listeners(conn: Any, seconds: float) -> dict[str, int]:
    """Listening sessions during the load, sampled every 0.25 s: the most at
    once, and how many distinct ones (a session started over is a new one)."""
    most, seen = 0, set()
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        rows = conn.execute(
            "select pid, backend_start from pg_stat_activity"
            " where datname = current_database() and query ilike 'listen%'"
        ).fetchall()
        most = max(most, len(rows))
        seen.update(rows)
        await asyncio.sleep(0.25)
    return {"most_at_once": most, "distinct": len(seen)}


def settle_stats(conn: Any) -> None:
    """Let the statistics of the moment reach pg_stat_database (flushed by
    each backend at most once a second, or when it goes idle a while)."""
    time.sleep(1.2)
    conn.execute("select pg_stat_clear_snapshot()")


class Fleet:
    def __init__(self, dsn: str, n: int, poll_interval_ms: int | None, logdir: Path) -> None:
        self.procs: list[subprocess.Popen[Any]] = []
        self.logs: list[Path] = []
        self.counts = [logdir / f"worker{i}.counts" for i in range(n)]
        for i in range(n):
            log = logdir / f"worker{i}.out"
            args = json.dumps(
                {"dsn": dsn, "poll_interval_ms": poll_interval_ms, "counts": str(self.counts[i])}
            )
            with open(log, "w") as sink:
                self.procs.append(
                    subprocess.Popen(
                        [sys.executable, "-c", WORKER, args],
                        stdout=sink,
                        stderr=subprocess.STDOUT,
                        cwd=logdir,
                    )
                )
            self.logs.append(log)

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not all("ready" in log.read_text() for log in self.logs):
            for proc, log in zip(self.procs, self.logs):
                if proc.poll() is not None:
                    raise RuntimeError(f"a worker exited early:\n{log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError("workers not ready in time")
            time.sleep(0.1)

    def statements(self) -> int:
        """Statements the workers have run so far (reported every 0.2 s)."""
        return sum(self.statements_by_name().values())

    def statements_by_name(self) -> dict[str, int]:
        """The same, by statement name."""
        total: dict[str, int] = {}
        for path in self.counts:
            if path.exists():
                for name, n in json.loads(path.read_text()).items():
                    if not name.startswith("ran:"):
                        total[name] = total.get(name, 0) + n
        return total

    def burst_runs(self) -> list[int]:
        """Burst tasks each worker has run so far."""
        return [
            json.loads(path.read_text()).get("ran:sleep10", 0) if path.exists() else 0
            for path in self.counts
        ]

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


LANE_RATE = 40.0  # tasks/s one client submits, one at a time (a commit's flush is ~10 ms here)


async def produce(clients: list[Any], rate: float, seconds: float) -> int:
    """Submit ``rate`` tasks/s for ``seconds`` from independent clients
    (lanes), each submitting one task at a time: every submit is its own
    transaction, as separate web requests' would be (nothing for a client's
    group commit to join); returns how many were submitted."""
    begun = time.monotonic()

    async def lane(q: Any, lane_rate: float) -> int:
        n = 0
        while time.monotonic() - begun < seconds:
            await q.submit("noop", {"n": n})
            n += 1
            ahead = n / lane_rate - (time.monotonic() - begun)
            if ahead > 0:
                await asyncio.sleep(ahead)
        return n

    counts = await asyncio.gather(*(lane(q, rate / len(clients)) for q in clients))
    return sum(counts)


def measure_loaded(
    conn: Any, dsn: str, rate: float, window: float, idle_rate: float, fleet: Fleet
) -> dict[str, Any]:
    """Transactions per task, two ways.

    ``statements_per_task``: the producer's submit (one transaction each)
    plus every statement the workers ran (claims, settlements, probes,
    turns: each one transaction, or less where writes were grouped), per
    task: what the workers do with the database.

    ``per_task``: every transaction of the database from just before the
    producer starts until the producer and the fleet have closed (a session
    reports its counts when it ends), less the idle fleet's rate over the
    tail: that also counts the listening sessions' reads of the load's
    notifications (see listeners()), which no worker policy changes.
    """
    from cairnq import CairnQ

    async def run() -> dict[str, Any]:
        lanes = max(1, math.ceil(rate / LANE_RATE))
        clients = [CairnQ.postgres(dsn) for _ in range(lanes)]
        for q in clients:
            await q.stats()  # connected (migrations checked) before anything is counted
        await asyncio.sleep(0.5)  # their listeners are up too
        listening = listeners(conn)
        before = xacts(conn)
        by_name_before = fleet.statements_by_name()
        sampling = asyncio.ensure_future(sample_listeners(conn, window))
        n = await produce(clients, rate, window)
        listening_seen = await sampling
        await asyncio.sleep(1.0)  # the last tasks run
        by_name = {
            name: count - by_name_before.get(name, 0)
            for name, count in fleet.statements_by_name().items()
            if count != by_name_before.get(name, 0)
        }
        statements = sum(by_name.values())
        stopped = time.monotonic()
        for q in clients:
            await q.close()
        fleet.stop()  # every session ends, and reports its counts
        await asyncio.sleep(2.0)
        conn.execute("select pg_stat_clear_snapshot()")
        total = xacts(conn) - before - idle_rate * (time.monotonic() - stopped)
        return {
            "transactions": total,
            "tasks": n,
            "rate": n / window,
            "per_task": total / max(1, n),
            "worker_statements_per_task": statements / max(1, n),
            "statements_per_task": (statements + n) / max(1, n),
            "worker_statements_by_name": dict(sorted(by_name.items())),
            "listening_sessions": listening,
            "listening_sessions_seen": listening_seen,
        }

    return asyncio.run(run())


def measure_burst(dsn: str, tasks: int, fleet: Fleet) -> dict[str, Any]:
    """A backlog at once: ``tasks`` tasks whose handlers wait 10 ms,
    submitted together (one client's group commits: a handful of
    notifications), into the idle fleet. How long until all have run, how
    many workers ran some, and the workers' statements per task: a fleet
    that leaves a backlog to one worker drains it at that worker's pace."""
    from cairnq import CairnQ

    async def run() -> dict[str, Any]:
        async with CairnQ.postgres(dsn) as q:
            await q.stats()
            await asyncio.sleep(1.0)  # counts reported
            runs_before = fleet.burst_runs()
            by_name_before = fleet.statements_by_name()
            began = time.monotonic()
            for at in range(0, tasks, 500):
                await asyncio.gather(
                    *(q.submit("sleep10", {"i": i}) for i in range(at, min(tasks, at + 500)))
                )
            while (await q.stats()).get("default", {}).get("succeeded", 0) < tasks:
                await asyncio.sleep(0.01)
            took = time.monotonic() - began
            await asyncio.sleep(0.5)  # counts reported
            ran = [after - before for after, before in zip(fleet.burst_runs(), runs_before)]
            by_name = {
                name: count - by_name_before.get(name, 0)
                for name, count in fleet.statements_by_name().items()
                if count != by_name_before.get(name, 0)
            }
            statements = sum(by_name.values())
            return {
                "tasks": tasks,
                "seconds": round(took, 3),
                "tasks_per_s": tasks / took,
                "workers_that_ran": sum(1 for n in ran if n),
                "worker_statements_per_task": statements / tasks,
                "worker_statements_by_name": dict(sorted(by_name.items())),
                "ran_by_worker": ran,
            }

    return asyncio.run(run())


def measure_recovery(dsn: str, samples: int, logdir: Path) -> dict[str, Any]:
    import psycopg

    conn = psycopg.connect(dsn, autocommit=True)
    # Expired leases: a victim claims from "parked"; the row is moved to the
    # served queue while running (an update of queue only: no notification).
    from cairnq import CairnQ

    async def submit_parked() -> list[str]:
        async with CairnQ.postgres(dsn) as q:
            return [(await q.submit("stamp", {}, queue="parked")).id for _ in range(samples)]

    ids = asyncio.run(submit_parked())
    log = logdir / "victim.out"
    with open(log, "w") as sink:
        victim = subprocess.Popen(
            [
                sys.executable,
                "-c",
                VICTIM,
                json.dumps({"dsn": dsn, "ids": ids, "lease_ms": 1_000, "spacing_s": 0.37}),
            ],
            stdout=subprocess.PIPE,
            stderr=sink,
            text=True,
            cwd=logdir,
        )
    leases: dict[str, int] = {}
    assert victim.stdout is not None
    for _ in range(samples):
        line = victim.stdout.readline()
        if not line:
            raise RuntimeError(f"victim died:\n{log.read_text()}")
        claimed = json.loads(line)
        conn.execute("update cairnq_tasks set queue = 'default' where id = %s", [claimed["id"]])
        leases[claimed["id"]] = claimed["lease_until_ms"]
    victim.kill()
    victim.wait()

    # Delayed tasks, coming due at spread-out moments.
    async def submit_delayed() -> list[str]:
        async with CairnQ.postgres(dsn) as q:
            out = []
            for i in range(samples):
                out.append((await q.submit("stamp", {}, delay_ms=1_000 + 370 * i)).id)
            return out

    delayed = asyncio.run(submit_delayed())
    wanted = list(leases) + delayed
    deadline = time.monotonic() + 60
    rows: list[Any] = []
    while time.monotonic() < deadline:
        rows = conn.execute(
            "select id, status, run_at_ms, result::text from cairnq_tasks where id = any(%s)",
            [wanted],
        ).fetchall()
        if sum(1 for r in rows if r[1] == "succeeded") == len(wanted):
            break
        time.sleep(0.1)
    conn.close()
    by_id = {r[0]: r for r in rows}
    lease_ms, delay_ms = [], []
    for task_id, until in leases.items():
        r = by_id.get(task_id)
        if r and r[1] == "succeeded":
            lease_ms.append(json.loads(r[3])["t"] - until)
    for task_id in delayed:
        r = by_id.get(task_id)
        if r and r[1] == "succeeded":
            delay_ms.append(json.loads(r[3])["t"] - r[2])
    return {
        "lease_ms": sorted(round(x) for x in lease_ms),
        "delayed_ms": sorted(round(x) for x in delay_ms),
        "lost": len(wanted) - len(lease_ms) - len(delay_ms),
    }


def run_size(n: int, args: argparse.Namespace) -> dict[str, Any]:
    import psycopg
    from backends import create_database, drop_database, dsn_for

    from cairnq import CairnQ

    name = create_database()
    dsn = dsn_for(name)
    with psycopg.connect(dsn, autocommit=True) as check:
        room = int(check.execute("show max_connections").fetchone()[0])
        used = int(
            check.execute("select count(*) from pg_stat_activity where backend_type = 'client backend'").fetchone()[0]
        )
    need = 5 * n + 20  # about 4 a worker under load (docs/postgresql.md), the bench's own clients
    if used + need > room:
        print(
            f"warning: {n} workers may need up to {need} more connections; the server allows "
            f"{room} and {used} are in use (max_connections in postgresql.conf)",
            file=sys.stderr,
        )
    logdir = Path(tempfile.mkdtemp(prefix=f"cairnq-fleet{n}-"))
    fleet = None
    try:

        async def migrate() -> None:
            async with CairnQ.postgres(dsn) as q:
                await q.stats()

        asyncio.run(migrate())
        fleet = Fleet(dsn, n, args.poll_interval_ms, logdir)
        fleet.wait_ready()
        conn = psycopg.connect(dsn, autocommit=True)
        time.sleep(args.warmup)
        settle_stats(conn)
        before = xacts(conn)
        started = time.monotonic()
        time.sleep(args.window)
        conn.execute("select pg_stat_clear_snapshot()")
        idle_tx = xacts(conn) - before
        idle_s = time.monotonic() - started
        idle = {
            "transactions": idle_tx,
            "seconds": round(idle_s, 2),
            "per_worker_s": idle_tx / idle_s / n,
        }
        held = {"idle": connections(conn)}
        burst = measure_burst(dsn, args.burst, fleet) if args.burst else None
        if burst is not None:
            time.sleep(1.0)  # the burst's client gone from pg_stat_activity
            held["after_burst"] = connections(conn)
        recovery = measure_recovery(dsn, args.samples, logdir)
        # A fleet of its own for the load: a listening session reports what
        # it spent reading notifications only when it ends, so the old
        # fleet's (the burst's, the recovery's) would land in the load's count.
        fleet.stop()
        fleet = Fleet(dsn, n, args.poll_interval_ms, logdir)
        fleet.wait_ready()
        time.sleep(args.warmup)
        settle_stats(conn)
        # Last: it ends with the fleet stopped (its sessions' counts land).
        loaded = measure_loaded(conn, dsn, args.rate, args.window, idle_tx / idle_s, fleet)
        conn.close()
        return {
            "workers": n, "idle": idle, "loaded": loaded, "recovery": recovery, "burst": burst,
            "connections": held,
        }  # fmt: skip
    finally:
        if fleet is not None:
            fleet.stop()
        drop_database(name)


def _median(xs: list[int]) -> str:
    return f"{statistics.median(xs):.0f}" if xs else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,4,12,24")
    parser.add_argument(
        "--window", type=float, default=10.0, help="seconds of each measuring window"
    )
    parser.add_argument(
        "--warmup",
        type=float,
        default=FLUSH_S,
        help="seconds idle before the idle window (statistics of start-up land)",
    )
    parser.add_argument("--rate", type=float, default=200.0, help="tasks/s the producer submits")
    parser.add_argument(
        "--samples", type=int, default=4, help="expired leases and delayed tasks each"
    )
    parser.add_argument("--poll-interval-ms", type=int, default=None, help="default: the Worker's")
    parser.add_argument(
        "--burst", type=int, default=2_000, help="tasks of 10 ms submitted at once (0: none)"
    )
    parser.add_argument("--json", metavar="FILE", default=None)
    args = parser.parse_args()
    results = []
    for n in [int(s) for s in args.sizes.split(",")]:
        result = run_size(n, args)
        results.append(result)
        print(json.dumps(result), file=sys.stderr, flush=True)
    print(
        f"{'workers':>7}  {'idle tx/s/worker':>16}  {'tasks/s':>7}  {'stmts/task':>10}  "
        f"{'all tx/task':>19}  {'lease recovery ms (med/max)':>27}  {'due ms (med/max)':>16}"
        f"  {'burst tasks/s (workers, stmts/task)':>35}  {'conns/worker idle, after burst':>30}"
    )
    for r in results:
        rec, loaded = r["recovery"], r["loaded"]
        lease = f"{_median(rec['lease_ms'])}/{max(rec['lease_ms'], default='-')}"
        delayed = f"{_median(rec['delayed_ms'])}/{max(rec['delayed_ms'], default='-')}"
        lost = f" ({rec['lost']} not run)" if rec["lost"] else ""
        every = f"{loaded['per_task']:.1f} ({loaded['listening_sessions']} lsn)"
        b = r["burst"]
        burst = "-" if b is None else (
            f"{b['tasks_per_s']:.0f} ({b['workers_that_ran']}, {b['worker_statements_per_task']:.2f})"
        )
        held = r["connections"]
        per = [held[k] / r["workers"] for k in ("idle", "after_burst") if k in held]
        conns = ", ".join(f"{x:.1f}" for x in per)
        print(
            f"{r['workers']:>7}  {r['idle']['per_worker_s']:>16.2f}  {loaded['rate']:>7.0f}  "
            f"{loaded['statements_per_task']:>10.2f}  {every:>19}  {lease:>27}  {delayed:>16}"
            f"  {burst:>35}  {conns:>30}{lost}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=2))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
