"""What the instrumentation seam costs a worker per task, in-process.

    python bench/event_cost.py [--tasks 200000]

Runs the worker's per-task event path (``task.claimed``, ``task.started``,
``task.succeeded``, each behind its ``channel.on`` test, on real
``TaskContext`` objects) with nobody listening and then with one subscriber
that counts events by kind (the issue's yardstick), and prints the
difference per task. Divide it by a drain's time per task (``1e6 /
tasks_per_s`` from ``python bench/compare.py --workloads drain_c64``) for the
share: a wall-clock A/B of whole drains (``python bench/ab.py --a P --b P
--workloads drain_c64 --b-options '{"events": "count"}'``) cannot resolve 2 %
on a shared host.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from typing import Any

from cairnq import CairnQ, events
from cairnq.context import RUN_TIMED, TaskContext, mark_completed, mark_started, report_claimed


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", type=int, default=200_000)
    o = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="cairnq-events-") as tmp:
        q = CairnQ.sqlite(os.path.join(tmp, "events.db"))
        await q.connect()
        task = await q.submit("noop", {"i": 0})
        claimed = events.channel("task.claimed")

        def per_task_us() -> float:
            started = time.perf_counter()
            for _ in range(o.tasks):
                ctx = TaskContext(q.store, task, "w", 30_000)
                if claimed.on:
                    report_claimed((ctx,))
                if RUN_TIMED.on:
                    mark_started((ctx,))
                mark_completed(ctx, "succeeded")
            return (time.perf_counter() - started) / o.tasks * 1e6

        counts: dict[str, int] = {}

        def count(event: Any) -> None:
            counts[event.kind] = counts.get(event.kind, 0) + 1

        quiet = min(per_task_us() for _ in range(3))
        stop = events.subscribe(count)
        listened = min(per_task_us() for _ in range(3))
        stop()
        await q.close()
    print(f"per task: nobody listening {quiet:.2f} us, one counting subscriber {listened:.2f} us, "
          f"the events cost {listened - quiet:.2f} us")  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
