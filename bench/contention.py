"""Writers contending for one SQLite file: who waits how long for the lock.

    python bench/contention.py [--hogs 3] [--victims 2] [--seconds 10] [--budget-ms 5000]
                               [--ref-hogs 0] [--ref-victims 0] [--hog-lanes 64] [--kill-every 0]

Hogs keep the write lock as busy as they can: each keeps ``--hog-lanes``
submits in flight without pause (group commits back to back). Victims write
a little at a time, the way a producer does: a gather of 4 submits every
25 ms (or at once if the last took longer); each records how long every gather took and every error it
raised (type, SQLite's extended error name). ``--ref-hogs`` and
``--ref-victims`` run the same roles under the reference SDK's interpreter
(``CAIRNQ_REF_VENV``, see tests/refsdk.py), which takes part in no handshake
of ours. ``--kill-every S`` SIGKILLs a random hog every S seconds and starts
another (a writer killed with the lock held, then WAL recovery).

Prints one line per role: calls, errors by code, and the gathers' latency
(p50, p99, max, ms). Run it under the interpreter whose cairnq is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

ROLE = r'''
import asyncio, json, sys, time
args = json.loads(sys.argv[1])
from cairnq import CairnQ


async def hog(q):
    async def lane():
        while time.monotonic() < deadline:
            try:
                await q.submit("hog", {})
                done[0] += 1
            except Exception as exc:
                errors.append((type(exc).__name__, getattr(exc, "sqlite_errorname", None), str(exc)))
    await asyncio.gather(*(lane() for _ in range(args["lanes"])))


async def victim(q):
    started = time.monotonic()
    while started < deadline:
        outcome = await asyncio.gather(*(q.submit("victim", {}) for _ in range(4)), return_exceptions=True)
        latencies.append(time.monotonic() - started)
        for r in outcome:
            if isinstance(r, BaseException):
                errors.append((type(r).__name__, getattr(r, "sqlite_errorname", None), str(r)))
            else:
                done[0] += 1
        # a fixed pace (open loop): the same offered load however long each gather took
        started = max(started + 0.025, time.monotonic())
        await asyncio.sleep(started - time.monotonic())


async def main():
    q = CairnQ.sqlite(args["path"], **({"busy_timeout_ms": args["budget_ms"]} if args["budget_ms"] else {}))
    await q.connect()
    print("ready", flush=True)
    await (hog if args["role"] == "hog" else victim)(q)
    await q.close()

latencies, errors, done = [], [], [0]
deadline = time.monotonic() + args["seconds"]
asyncio.run(main())
with open(args["out"], "w") as f:
    json.dump({"latencies": latencies, "errors": errors, "done": done[0]}, f)
'''


def _start(python: str, role: str, path: str, out: Path, o: argparse.Namespace, seconds: float) -> subprocess.Popen[str]:
    args = {"role": role, "path": path, "out": str(out), "seconds": seconds, "lanes": o.hog_lanes,
            "budget_ms": o.budget_ms}  # fmt: skip
    proc = subprocess.Popen([python, "-I", "-c", ROLE, json.dumps(args)], stdout=subprocess.PIPE, text=True,
                            cwd=str(out.parent))  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def _ref_python() -> str:
    sys.path.insert(0, str(HERE.parent / "tests"))
    import refsdk

    return str(refsdk.python())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hogs", type=int, default=3)
    p.add_argument("--victims", type=int, default=2)
    p.add_argument("--ref-hogs", type=int, default=0)
    p.add_argument("--ref-victims", type=int, default=0)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--budget-ms", type=int, default=0, help="busy_timeout_ms of every store (0: the default)")
    p.add_argument("--hog-lanes", type=int, default=64)
    p.add_argument("--kill-every", type=float, default=0.0)
    p.add_argument("--path", default=None, help="the SQLite file (default: a fresh temp file)")
    o = p.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="cairnq-contention-"))
    path = o.path or str(tmp / "contention.db")
    ours = sys.executable
    ref = _ref_python() if (o.ref_hogs or o.ref_victims) else None
    subprocess.run([ours, "-I", "-c", f"import asyncio; from cairnq import CairnQ; "
                    f"asyncio.run(CairnQ.sqlite({path!r}).connect())"], check=True, cwd=tmp)  # fmt: skip
    roles: list[tuple[str, str, str]] = (
        [("hog", "hog", ours)] * o.hogs + [("victim", "victim", ours)] * o.victims
        + [("ref-hog", "hog", ref or "")] * o.ref_hogs + [("ref-victim", "victim", ref or "")] * o.ref_victims
    )  # fmt: skip
    procs: list[tuple[str, subprocess.Popen[str], Path]] = []
    deadline = time.monotonic() + o.seconds
    for i, (label, role, python) in enumerate(roles):
        out = tmp / f"{label}-{i}.json"
        procs.append((label, _start(python, role, path, out, o, o.seconds), out))
    kills = 0
    rng = random.Random(5)
    try:
        while o.kill_every and time.monotonic() + o.kill_every < deadline:
            time.sleep(o.kill_every)
            hogs = [i for i, (label, proc, _) in enumerate(procs) if label.endswith("hog") and proc.poll() is None]
            if not hogs:
                break
            i = rng.choice(hogs)
            label, proc, _ = procs[i]
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            kills += 1
            out = tmp / f"{label}-{len(procs)}.json"
            python = ours if label == "hog" else (ref or "")
            procs.append((label, _start(python, "hog", path, out, o, max(0.5, deadline - time.monotonic())), out))
        for _, proc, _ in procs:
            proc.wait(timeout=o.seconds + 120)
    finally:
        for _, proc, _ in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    report(o, procs, kills, ours)
    shutil.rmtree(tmp, ignore_errors=True)


def report(o: argparse.Namespace, procs: list[tuple[str, subprocess.Popen[str], Path]], kills: int, ours: str) -> None:
    by_label: dict[str, dict[str, Any]] = {}
    for label, proc, out in procs:
        agg = by_label.setdefault(label, {"latencies": [], "errors": [], "procs": 0, "done": 0})
        agg["procs"] += 1
        if out.exists():
            data = json.loads(out.read_text())
            agg["latencies"] += data["latencies"]
            agg["errors"] += data["errors"]
            agg["done"] += data["done"]
    print(f"{o.hogs} hogs x {o.hog_lanes} lanes, {o.victims} victims, ref: {o.ref_hogs} hogs {o.ref_victims} "
          f"victims, {o.seconds:.0f} s, kills {kills}, cairnq at {ours}")  # fmt: skip
    for label, agg in by_label.items():
        lat = sorted(agg["latencies"])
        codes = Counter(f"{e[0]}:{e[1]}" for e in agg["errors"])
        if lat:
            p50, p99 = statistics.median(lat), lat[min(len(lat) - 1, int(len(lat) * 0.99))]
            timing = f"gathers p50 {p50 * 1000:.1f} p99 {p99 * 1000:.1f} max {lat[-1] * 1000:.1f} ms"
        else:
            timing = "no gathers timed"
        print(f"  {label:10s} procs {agg['procs']:3d}  submits/s {agg['done'] / o.seconds:7.0f}  errors {sum(codes.values()):5d} "
              f"{dict(codes)}  {timing}")  # fmt: skip


if __name__ == "__main__":
    main()
