"""A periodic job: a worker that enqueues and runs a cleanup every 2 seconds.

    pip install cairnq-fast
    python examples/periodic_job.py [tasks.db] [--fires N]

Every worker that declares a schedule runs it and each fire instant becomes
exactly one task (its key names the schedule and the instant), so starting
this twice on one database still runs one cleanup per fire. A cron string
works the same way: ``periodic="*/5 * * * *"`` (every five minutes, UTC) or
``worker.periodic("0 3 * * *", "cleanup", timezone="Europe/Berlin")``. With
``--fires N`` the worker stops after its N-th cleanup (the test runs it so);
without it, it runs until Ctrl-C.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from typing import Any

from cairnq import TaskContext, Worker


def build_worker(path: str, fires: int | None) -> Worker:
    worker = Worker.sqlite(path)
    runs = 0

    @worker.task("cleanup", periodic=timedelta(seconds=2))
    async def cleanup(ctx: TaskContext) -> dict[str, Any]:
        nonlocal runs
        runs += 1
        fired_at = ctx.metadata["cairnq.periodic"]["fire_at"]  # the instant this task stands for
        print(f"cleanup #{runs} for the fire at {fired_at}", flush=True)
        if fires is not None and runs >= fires:
            worker.stop()  # serve() returns once this call is settled
        return {"fire_at": fired_at}

    return worker


if __name__ == "__main__":
    args = sys.argv[1:]
    fires = None
    if "--fires" in args:
        at = args.index("--fires")
        fires = int(args[at + 1])
        del args[at : at + 2]
    build_worker(args[0] if args else "periodic.db", fires).serve()
