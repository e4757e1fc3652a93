"""Instructions per operation, under valgrind: a cost that does not move with the load.

    python bench/instructions.py --python .cache/venv/bin/python --ops get,submit_seq,drain
    python bench/instructions.py --ops drain --events count      # with one counting subscriber
    python bench/instructions.py --ops worker --events metrics   # with Prometheus metrics served
    python bench/instructions.py --ops worker                    # the worker alone, bulk-loaded backlog
    python bench/instructions.py --ops worker_batch64            # the same, one batch handler of 64
    python bench/instructions.py --ops worker_flaky              # the same, one call in 50 failing once
    python bench/instructions.py --ops worker_c1                 # the same, concurrency 1: a claim a task
    python bench/instructions.py --ops worker --by-library 12    # where a task's instructions go, by library
    python bench/instructions.py --ops submit_seq,floor_submit_seq --by-library 12  # ours beside the bare loop
    python bench/instructions.py --ops worker,floor_worker --by-library 12          # the same for a drained task
    python bench/instructions.py --ops worker,floor_worker --difference 30          # the functions that differ most

Wall-clock A/B on a shared 2-vCPU host moves by ±10 % from run to run; the
instructions a process executes do not. For each operation the script runs a
child process twice under ``valgrind --tool=callgrind`` (SQLite, a fresh
file in a temp directory): once doing ``--n`` operations and once doing
``--n0``; the difference divided by ``n - n0`` is the cost of one operation,
set-up and interpreter start-up cancelled out. Timing-driven code (the
engine's once-a-millisecond checks) runs about 50 times more often per
operation under valgrind's slowdown, so compare builds with each other, never
with wall-clock figures. Requires valgrind.

``floor_submit_seq`` is ``submit_seq``'s floor (``bench/floors.py``): the
same statement and bound values in a bare stdlib ``sqlite3`` loop, so
``submit_seq`` less ``floor_submit_seq`` is what our ``submit`` adds.
``floor_worker`` is ``worker``'s: the riding floor loop (claims of 64, each
batch settled in the next claim's transaction) over the same bulk-loaded
backlog, so ``worker`` less ``floor_worker`` is what our worker adds a task.

``--by-library K`` also splits an operation's instructions by the shared
object that executed them (SQLite, the C library, CPython, the kernels) and
lists the K functions that cost most: each profile is summed function by
function with ``callgrind_annotate --inclusive=no``, and the two runs'
difference divided as above. ``--difference K``, given two operations
(ours, then its floor), lists the K functions whose cost an operation
differs most between them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from typing import Any

OPS = (
    "get", "submit_seq", "submit_concurrent", "drain", "worker", "worker_batch64", "worker_flaky", "worker_c1",
    "floor_submit_seq", "floor_worker",
)  # fmt: skip
FLOOR_OPS = ("floor_submit_seq", "floor_worker")


async def _child(op: str, n: int, path: str, events: str | None) -> None:
    from cairnq import CairnQ, Worker

    def subscribe() -> None:
        if events == "count":
            from cairnq import events as seam

            counts: dict[str, int] = {}

            def count(event: Any) -> None:
                counts[event.kind] = counts.get(event.kind, 0) + 1

            seam.subscribe(count)

    if op in ("worker", "worker_batch64", "worker_flaky", "worker_c1"):
        # The worker alone: a bulk-loaded backlog (one INSERT ... SELECT, as
        # bench/memory.py), then a drain that stops itself at the last task
        # (worker_batch64: one batch handler taking 64 tasks a call, as
        # bench/workloads.py's drain_batch64; worker_flaky: one call in 50
        # fails its first attempt and is retried at once, as drain_flaky_c64;
        # worker_c1: concurrency 1, so a claim a task: what a claim costs
        # besides its task, as on the worker's side of a call()).
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from memory import prepare_backlog

        await prepare_backlog(path, n)
        subscribe()
        q = CairnQ.sqlite(path)
        await q.connect()
        batch = 64 if op == "worker_batch64" else 1
        flaky = op == "worker_flaky"
        worker = Worker(
            q.store, ["default"], concurrency=1 if op == "worker_c1" else 64 // batch, poll_interval_ms=20,
            **({"retry_backoff_ms": 1} if flaky else {}),
        )  # fmt: skip
        if events in ("metrics", "metrics-statements"):
            from cairnq.observability import serve_metrics

            # The recorder and the endpoint, nobody scraping.
            serve_metrics(worker, port=0, statements=events == "metrics-statements")
        done = 0

        def count(k: int) -> None:
            nonlocal done
            done += k
            if done == n:
                worker.stop()

        if batch == 1:

            calls = 0

            @worker.task("noop")
            async def counted(ctx: Any, payload: Any) -> None:
                nonlocal calls
                calls += 1
                if flaky and calls % 50 == 0 and ctx.attempt == 1:
                    raise RuntimeError("transient")
                count(1)

        else:

            @worker.task("noop", batch=batch)
            async def counted_batch(contexts: Any) -> None:
                count(len(contexts))

        await worker.run()
        await q.close()
        return
    if op != "drain":
        subscribe()
    q = CairnQ.sqlite(path)
    await q.connect()
    task = await q.submit("noop", {"i": 0})
    if op == "get":
        for _ in range(n):
            await q.get(task.id)
    elif op == "submit_seq":
        for i in range(n):
            await q.submit("noop", {"i": i})
    elif op == "submit_concurrent":
        for start in range(0, n, 64):
            await asyncio.gather(*(q.submit("noop", {"i": i}) for i in range(start, min(n, start + 64))))
    elif op == "drain":
        for start in range(0, n, 64):
            await asyncio.gather(*(q.submit("noop", {"i": i}) for i in range(start, min(n, start + 64))))
        subscribe()  # the drain's own events, as bench/workloads.py's drain_c64 counts them
        worker = Worker(q.store, ["default"], concurrency=64, poll_interval_ms=20)

        @worker.task("noop")
        async def noop(ctx: Any, payload: Any) -> None:
            return None

        run = asyncio.ensure_future(worker.run())
        while (await q.stats())["default"]["succeeded"] < n + 1:
            await asyncio.sleep(0.01)
        worker.stop()
        await run
    await q.close()


def _floor_child(op: str, n: int, path: str) -> None:
    """A floor op: ``bench/floors.py``'s own set-up and loop, no SDK in the
    loop (run outside any event loop: the floors start their own)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import floors
    from memory import prepare_backlog

    if op == "floor_submit_seq":
        floors.floor_submit_seq("sqlite", path, {"submit_n": n})
    else:  # floor_worker: the riding loop, over the worker op's bulk-loaded backlog
        asyncio.run(prepare_backlog(path, n))
        floors._floor_sqlite_riding(path, n, 64)


def _instructions(
    python: str, op: str, n: int, events: str | None, functions: bool = False
) -> tuple[int, Counter[str]]:
    """The instructions ``n`` operations took in all, and (``functions``)
    each function's own share, keyed ``file:function [object]``."""
    with tempfile.TemporaryDirectory(prefix="cairnq-instr-") as tmp:
        out = os.path.join(tmp, "callgrind.out")
        args = [python, "-I", os.path.abspath(__file__), "--child", op, str(n), os.path.join(tmp, "t.db")]
        if events:
            args.append(events)
        proc = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *args],
            capture_output=True,
            text=True,
            cwd=tmp,
        )
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-2000:])
        found = re.search(r"Collected\s*:\s*(\d+)", proc.stderr)
        if not found:
            raise RuntimeError(f"no instruction count in valgrind's output:\n{proc.stderr[-2000:]}")
        return int(found.group(1)), _own_costs(out) if functions else Counter()


# A function's line in callgrind_annotate's listing: "  1,234 (12.34%)  file:function [object]".
_FUNCTION_LINE = re.compile(r"^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(\S.*:.*)$")


def _own_costs(profile: str) -> Counter[str]:
    """Each function's own instructions in a callgrind profile."""
    listing = subprocess.run(
        ["callgrind_annotate", "--inclusive=no", "--threshold=100", "--auto=no", profile],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    costs: Counter[str] = Counter()
    for line in listing.splitlines():
        found = _FUNCTION_LINE.match(line)
        if found and not found.group(2).startswith("=>"):  # (a call's cost, not the function's own)
            costs[found.group(2).strip()] += int(found.group(1).replace(",", ""))
    return costs


def _library(function: str) -> str:
    """The shared object a listed function ran in (its file name without the
    path), or its source file where the listing names no object."""
    found = re.search(r"\[([^\]]+)\]$", function)
    if found:
        return os.path.basename(found.group(1))
    return f"({os.path.basename(function.split(':', 1)[0])}, no object named)"


def _print_split(per_op: dict[str, float], top: int) -> None:
    total = sum(per_op.values())
    libraries: dict[str, float] = {}
    for function, cost in per_op.items():
        library = _library(function)
        libraries[library] = libraries.get(library, 0.0) + cost
    print("  by library:")
    for library, cost in sorted(libraries.items(), key=lambda item: -item[1]):
        if cost >= 0.001 * total:
            print(f"    {cost:>12,.0f}  {100 * cost / total:5.1f} %  {library}")
    if top:
        print(f"  the {top} costliest functions:")
        for function, cost in sorted(per_op.items(), key=lambda item: -item[1])[:top]:
            print(f"    {cost:>12,.0f}  {100 * cost / total:5.1f} %  {function[-110:]}")


def _print_difference(names: list[str], first: dict[str, float], second: dict[str, float], top: int) -> None:
    """The ``top`` functions whose cost an operation differs most between
    the two operations, each with both costs."""
    functions = set(first) | set(second)
    gaps = sorted(functions, key=lambda f: -abs(first.get(f, 0.0) - second.get(f, 0.0)))
    total = sum(first.values()) - sum(second.values())
    print(f"  {names[0]} less {names[1]}: {total:,.0f} instructions/op; the {top} functions that differ most:")
    print(f"    {'difference':>12}  {names[0]:>12}  {names[1]:>12}  function")
    for function in gaps[:top]:
        a, b = first.get(function, 0.0), second.get(function, 0.0)
        print(f"    {a - b:>12,.0f}  {a:>12,.0f}  {b:>12,.0f}  {function[-90:]}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        op, n, path = sys.argv[2], int(sys.argv[3]), sys.argv[4]
        events = sys.argv[5] if len(sys.argv) > 5 else None
        if op in FLOOR_OPS:
            _floor_child(op, n, path)
        else:
            asyncio.run(_child(op, n, path, events))
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--n0", type=int, default=200)
    p.add_argument(
        "--events", choices=["count", "metrics", "metrics-statements"], default=None,
        help="subscribe a counting handler to every event (for drain: after the submits); "
        "metrics: serve Prometheus metrics (op worker only; metrics-statements: with "
        "the per-statement metrics too)",
    )  # fmt: skip
    p.add_argument(
        "--by-library", type=int, metavar="K", default=None,
        help="split each operation's instructions by library, and list its K costliest functions (0: none)",
    )  # fmt: skip
    p.add_argument(
        "--difference", type=int, metavar="K", default=None,
        help="with two operations (ours, then its floor): the K functions whose cost an operation "
        "differs most between them, the first's less the second's",
    )  # fmt: skip
    o = p.parse_args()
    names = o.ops.split(",")
    for op in names:
        if op not in OPS:
            raise SystemExit(f"unknown op {op!r}; known: {', '.join(OPS)}")
    if o.difference is not None and len(names) != 2:
        raise SystemExit("--difference compares two operations: --ops OURS,FLOOR")
    split = o.by_library is not None or o.difference is not None
    per_op: list[dict[str, float]] = []
    for op in names:
        big, big_costs = _instructions(o.python, op, o.n, o.events, split)
        small, small_costs = _instructions(o.python, op, o.n0, o.events, split)
        ops = o.n - o.n0
        print(f"{op:<18} {(big - small) / ops:>12,.0f} instructions/op", flush=True)
        if split:
            named = set(big_costs) | set(small_costs)
            per_op.append({f: (big_costs[f] - small_costs[f]) / ops for f in named})
            if o.by_library is not None:
                _print_split(per_op[-1], o.by_library)
    if o.difference is not None:
        _print_difference(names, per_op[0], per_op[1], o.difference)


if __name__ == "__main__":
    main()
