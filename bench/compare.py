"""Side by side: this cairnq against the reference SDK (cairnq==0.15.1), one run.

    python bench/compare.py                       # everything, both dialects, 3 rounds
    python bench/compare.py --dialects sqlite --workloads get,submit_seq --rounds 5

Each workload in ``bench/workloads.py`` runs under both interpreters (ours, and
the reference's own cached virtualenv, built on first use), against a fresh
database each time, alternating which SDK goes first between rounds. The
physical limits of this machine (bare sqlite3 loops of 1-row and 64-row
commits, no SDK) are measured in the same run, and so is the drains' floor
(``floor_drain``: their own claim and settlement statements in a bare loop;
on PostgreSQL also ``floor_drain_pipelined``, two connections), reported as
``drain_c64`` ours / floor. Prints medians, ranges and the
ratio per row; ``--json FILE`` saves the raw samples.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import refsdk  # noqa: E402

WORKLOADS = [
    "submit_seq", "submit_concurrent", "get", "cancel", "purge", "claim_idle",
    "drain_c8", "drain_c64", "drain_distinct_c64", "drain_batch64", "call_latency", "e2e_throughput",
    "drain_sleep1ms_c64", "drain_sleep1ms_c256", "drain_cpu1ms_c64",
]  # fmt: skip
LIMITS = ["limit_commit1", "limit_commit1_schema", "limit_commit64", "limit_commit64_schema"]
# The drains' floor: their claim and settlement statements in a bare loop, no
# SDK (bench/workloads.py floor_*), run with ours whenever drain_c64 runs.
FLOORS = {"sqlite": ["floor_drain"], "postgres": ["floor_drain", "floor_drain_pipelined"]}
LOWER_IS_BETTER = {"claim_idle", "call_latency"}


class Database:
    """A fresh database per run: a temp SQLite file, or a new Postgres database."""

    def __init__(self, dialect: str) -> None:
        self.dialect = dialect
        self._dir: str | None = None
        self._pg: str | None = None

    def __enter__(self) -> str:
        if self.dialect == "sqlite":
            self._dir = tempfile.mkdtemp(prefix="cairnq-bench-")
            return os.path.join(self._dir, "bench.db")
        from backends import create_database, dsn_for

        self._pg = create_database()
        return dsn_for(self._pg)

    def __exit__(self, *exc: object) -> None:
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
        if self._pg:
            from backends import drop_database

            drop_database(self._pg)


def run_one(python: str, workload: str, dialect: str, target: str, options: dict[str, Any]) -> dict[str, Any]:
    proc = subprocess.run(
        [python, "-I", str(HERE / "workloads.py"), workload, dialect, target, json.dumps(options)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tempfile.gettempdir(),
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{workload} ({python}) failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def summarize(samples: list[float]) -> str:
    if not samples:
        return "-"
    med = statistics.median(samples)
    return f"{med:,.1f} [{min(samples):,.1f}-{max(samples):,.1f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dialects", default="sqlite,postgres")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--options", default="{}", help="JSON overrides for bench/workloads.py DEFAULTS")
    parser.add_argument("--python", default=sys.executable, help="interpreter with our cairnq installed")
    parser.add_argument("--json", default=None, help="write the raw samples here")
    args = parser.parse_args()

    ours = args.python
    check = subprocess.run([ours, "-I", "-c", "import cairnq; print(cairnq.__version__, cairnq.SPEEDUPS)"],
                           capture_output=True, text=True, cwd=tempfile.gettempdir(), check=True)  # fmt: skip
    reference = str(refsdk.python())
    print(f"ours: cairnq {check.stdout.strip()} ({ours})")
    print(f"reference: {refsdk.REFERENCE} ({reference})")
    options = json.loads(args.options)
    results: dict[str, Any] = {"when": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": []}

    for dialect in [d for d in args.dialects.split(",") if d]:
        print(f"\n== {dialect}")
        header = f"{'workload':<20} {'unit':<34} {'ours':>28} {'reference':>28} {'ratio':>8}"
        print(header)
        print("-" * len(header))
        for workload in [w for w in args.workloads.split(",") if w]:
            samples: dict[str, list[float]] = {"ours": [], "reference": []}
            extra: dict[str, list[float]] = {"ours": [], "reference": []}
            unit = ""
            bound = None
            for r in range(args.rounds):
                order = [("ours", ours), ("reference", reference)]
                if r % 2:
                    order.reverse()
                for who, python in order:
                    with Database(dialect) as target:
                        out = run_one(python, workload, dialect, target, options)
                    samples[who].append(out["value"])
                    if "p95" in out:
                        extra[who].append(out["p95"])
                    unit = out["unit"]
                    bound = out.get("bound")
            a, b = statistics.median(samples["ours"]), statistics.median(samples["reference"])
            ratio = (b / a) if workload in LOWER_IS_BETTER else (a / b)
            print(f"{workload:<20} {unit:<34} {summarize(samples['ours']):>28} {summarize(samples['reference']):>28} {ratio:>7.1f}x")
            if extra["ours"]:
                print(f"{'  p95':<20} {'ms':<34} {summarize(extra['ours']):>28} {summarize(extra['reference']):>28}")
            if bound:  # a handler that does work sets a bound of its own
                print(f"{'  of its bound':<20} {f'{bound:,} tasks/s':<34} {a / bound:>27.1%} {b / bound:>27.1%}")
            results["rows"].append(
                {"dialect": dialect, "workload": workload, "unit": unit, "ours": samples["ours"],
                 "reference": samples["reference"], "p95": extra, "ratio": ratio}  # fmt: skip
            )
        drain = next((r for r in results["rows"] if r["dialect"] == dialect and r["workload"] == "drain_c64"), None)
        if drain is not None:
            for floor in FLOORS[dialect]:
                values = []
                for _ in range(args.rounds):
                    with Database(dialect) as target:
                        out = run_one(ours, floor, dialect, target, options)
                    values.append(out["value"])
                share = statistics.median(drain["ours"]) / statistics.median(values)
                print(f"{floor:<20} {out['unit']:<34} {summarize(values):>28} {'drain_c64 ours/floor':>28} {share:>7.2f}x")
                results["rows"].append({"dialect": dialect, "workload": floor, "unit": out["unit"], "floor": values,
                                        "drain_c64_over_floor": share})  # fmt: skip
        if dialect == "sqlite":
            for limit in LIMITS:
                values = []
                for _ in range(args.rounds):
                    with Database("sqlite") as target:
                        out = run_one(ours, limit, "sqlite", target, options)
                    values.append(out["value"])
                print(f"{limit:<20} {out['unit']:<34} {summarize(values):>28}")
                results["rows"].append({"dialect": "sqlite", "workload": limit, "unit": out["unit"], "limit": values})
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
