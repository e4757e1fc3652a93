"""Fleets of real worker processes on one database, for the fleet tests.

Each worker process (``Worker.sqlite/postgres``, concurrency 4, queue
``default``) registers ``noop`` (returns None) and ``stamp`` (appends
``{"id", "attempt", "t", "label"}`` to the shared stamps log; with payload
``{"hold": true}`` on its first attempt it never returns: the victim's
task). Every 0.1 s it rewrites ``<label>.counts`` with the statements it has
run so far, by name (statement events: an exact count, no database
statistics involved), and writes ``<label>.ready`` once its claim loop runs.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any, Optional

from processes import Procs, read_jsonl, until

WORKER = r"""
import collections
from cairnq import Worker, events

counts = collections.Counter()
events.subscribe(lambda e: counts.__setitem__(e.name, counts[e.name] + 1), ["statement"])

options = dict(concurrency=4, poll_interval_ms=ARGS["poll_interval_ms"], lease_ms=ARGS["lease_ms"])
if ARGS["dialect"] == "sqlite":
    worker = Worker.sqlite(ARGS["target"], **options)
else:
    worker = Worker.postgres(ARGS["target"], **options)

@worker.task("noop")
async def noop(ctx, payload):
    return None

@worker.task("stamp")
async def stamp(ctx, payload):
    append(ARGS["stamps"], {"id": ctx.task_id, "attempt": ctx.attempt, "t": time.time(), "label": ARGS["label"]})
    if isinstance(payload, dict) and payload.get("hold") and ctx.attempt == 1:
        await asyncio.sleep(3600)
    return None

async def report():
    first = True
    while True:
        tmp = ARGS["counts"] + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"t": time.time(), "counts": counts}, f)
        os.replace(tmp, ARGS["counts"])
        if first:
            open(ARGS["ready"], "w").close()
            first = False
        await asyncio.sleep(0.1)

async def main():
    import signal
    await worker.store.connect()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop)
    reporter = asyncio.ensure_future(report())
    try:
        await worker.run()
    finally:
        reporter.cancel()
        await worker.close()

asyncio.run(main())
"""


class FleetProcs:
    """Worker processes of one test, on the backend's database."""

    def __init__(self, procs: Procs, backend: Any, tmp_path: Path) -> None:
        self.procs = procs
        self.backend = backend
        self.tmp_path = tmp_path
        self.stamps = tmp_path / "stamps.jsonl"
        self.labels: list[str] = []
        self.popen: dict[str, Any] = {}

    def start(self, label: str, *, poll_interval_ms: int, lease_ms: int = 30_000) -> None:
        args = {
            "dialect": self.backend.dialect,
            "target": self.backend.target,
            "poll_interval_ms": poll_interval_ms,
            "lease_ms": lease_ms,
            "label": label,
            "stamps": str(self.stamps),
            "counts": str(self.tmp_path / f"{label}.counts"),
            "ready": str(self.tmp_path / f"{label}.ready"),
        }
        self.popen[label] = self.procs.start(label, WORKER, args)
        self.labels.append(label)

    async def ready(self, labels: Optional[list[str]] = None, timeout: float = 60) -> None:
        wanted = labels or self.labels

        def all_ready() -> bool:
            for label in wanted:
                if self.popen[label].poll() is not None:
                    raise AssertionError(f"{label} exited:\n{self.procs.outputs()}")
            return all((self.tmp_path / f"{label}.ready").exists() for label in wanted)

        await until(all_ready, timeout, "the workers to start")

    def counts(self, labels: Optional[list[str]] = None) -> dict[str, int]:
        """Statements run so far by these workers, by name, summed."""
        total: dict[str, int] = {}
        for label in labels or self.labels:
            path = self.tmp_path / f"{label}.counts"
            for name, n in json.loads(path.read_text())["counts"].items():
                total[name] = total.get(name, 0) + n
        return total

    async def window(self, seconds: float, labels: Optional[list[str]] = None) -> dict[str, int]:
        """The statements run in the next ``seconds`` (reports are 0.1 s apart)."""
        before = self.counts(labels)
        await asyncio.sleep(seconds)
        await asyncio.sleep(0.25)  # the last report of the window is written
        after = self.counts(labels)
        return {
            k: after.get(k, 0) - before.get(k, 0)
            for k in after
            if after.get(k, 0) != before.get(k, 0)
        }

    async def window_by_member(self, seconds: float) -> dict[str, dict[str, int]]:
        """``window`` for each worker on its own, by label."""
        before = {label: self.counts([label]) for label in self.labels}
        await asyncio.sleep(seconds)
        await asyncio.sleep(0.25)  # the last report of the window is written
        after = {label: self.counts([label]) for label in self.labels}
        return {
            label: {k: n - before[label].get(k, 0) for k, n in after[label].items() if n != before[label].get(k, 0)}
            for label in self.labels
        }

    def stamped(self) -> list[dict[str, Any]]:
        return read_jsonl(self.stamps)

    async def stamp_of(self, task_id: str, attempt: int, timeout: float) -> dict[str, Any]:
        def found() -> Optional[dict[str, Any]]:
            for record in self.stamped():
                if record["id"] == task_id and record["attempt"] == attempt:
                    return record
            return None

        return await until(found, timeout, f"attempt {attempt} of {task_id} to start")  # type: ignore[no-any-return]


def now_ms() -> float:
    return time.time() * 1000
