"""Bytecodes per operation, by Python function: our Python's share of an
operation in the interpreter's own terms.

    python bench/bytecodes.py                        # submit_seq and worker, the top 25 functions
    python bench/bytecodes.py --ops worker --top 40

``bench/instructions.py`` counts the machine instructions of an operation
and names the C functions that ran them; the bytecode loop is one of them,
whichever Python function it was running. This script names the Python
functions: a trace function (``sys.settrace`` with per-opcode events) counts
the bytecodes each code object ran and the times it was entered (a call,
or a coroutine resumed after it suspended), over the
operations in the middle of a run (the first and last ``--skip`` are left
out: warm-up, and a worker's stop), divided by their number.

* ``submit_seq``: ``submit`` after ``submit`` on one client;
* ``worker``: a worker of concurrency 64 draining a bulk-loaded backlog of
  no-op tasks (as ``instructions.py --ops worker``), counted per task.

Bytecode counts weigh every bytecode alike and leave out the C code a
bytecode calls (a statement, a dict copy). The trace slows the process
about tenfold, so code paced by the clock (the engine's fairness slices, a
claim's batching) runs more often per operation than it does untraced:
compare builds with each other, on the same host, never with wall-clock
figures. SQLite, a fresh file in a temporary directory.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from collections import Counter
from types import CodeType, FrameType
from typing import Any, Callable, Optional

OPS = ("submit_seq", "worker")


class BytecodeCount:
    """Bytecodes and calls per code object while ``on``."""

    def __init__(self) -> None:
        self.bytecodes: Counter[CodeType] = Counter()
        self.calls: Counter[CodeType] = Counter()

    def on(self) -> None:
        sys.settrace(self._call)

    def off(self) -> None:
        sys.settrace(None)

    def _call(self, frame: FrameType, event: str, arg: Any) -> Optional[Callable[..., Any]]:
        frame.f_trace_opcodes = True
        code = frame.f_code
        if event == "call":
            self.calls[code] += 1
        bytecodes = self.bytecodes

        def each(frame: FrameType, event: str, arg: Any) -> Callable[..., Any]:
            if event == "opcode":
                bytecodes[code] += 1
            return each

        return each

    def report(self, op: str, ops: int, top: int) -> None:
        total = sum(self.bytecodes.values())
        print(f"{op}: {total / ops:,.1f} bytecodes per operation ({ops:,} operations counted)")
        print(f"  {'bytecodes':>10} {'entered':>7}  function (per operation)")
        for code, count in self.bytecodes.most_common(top):
            where = f"{_short(code.co_filename)}:{code.co_firstlineno} {getattr(code, 'co_qualname', code.co_name)}"
            print(f"  {count / ops:>10,.1f} {self.calls[code] / ops:>7.3f}  {where}")


def _short(filename: str) -> str:
    """A file's path from its package (cairnq/..., asyncio/...), or its name."""
    parts = filename.split(os.sep)
    for anchor in ("cairnq", "asyncio"):
        if anchor in parts:
            return "/".join(parts[parts.index(anchor) :])
    return os.path.basename(filename)


async def _submit_seq(path: str, n: int, skip: int, count: BytecodeCount) -> int:
    from cairnq import CairnQ

    async with CairnQ.sqlite(path) as q:
        for i in range(skip):
            await q.submit("noop", {"i": i})
        count.on()
        for i in range(n):
            await q.submit("noop", {"i": i})
        count.off()
    return n


async def _worker(path: str, n: int, skip: int, count: BytecodeCount) -> int:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from memory import prepare_backlog

    from cairnq import CairnQ, Worker

    total = n + 2 * skip
    await prepare_backlog(path, total)
    async with CairnQ.sqlite(path) as q:
        worker = Worker(q.store, ["default"], concurrency=64, poll_interval_ms=20)
        ran = 0

        @worker.task("noop")
        async def noop(ctx: Any, payload: Any) -> None:
            nonlocal ran
            ran += 1
            if ran == skip:
                count.on()
            if ran == skip + n:
                count.off()
            if ran == total:
                worker.stop()

        if skip == 0:
            count.on()
        await worker.run()
    return n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--n", type=int, default=3200, help="operations counted")
    p.add_argument("--skip", type=int, default=640, help="operations left out before and after")
    p.add_argument("--top", type=int, default=25, help="functions listed")
    o = p.parse_args()
    runs = {"submit_seq": _submit_seq, "worker": _worker}
    for op in o.ops.split(","):
        if op not in runs:
            raise SystemExit(f"unknown op {op!r}; known: {', '.join(OPS)}")
        count = BytecodeCount()
        with tempfile.TemporaryDirectory(prefix="cairnq-bytecodes-") as tmp:
            ops = asyncio.run(runs[op](os.path.join(tmp, "t.db"), o.n, o.skip, count))
        count.report(op, ops, o.top)


if __name__ == "__main__":
    main()
