"""Side by side: this cairnq against the reference SDK (cairnq==0.15.1), one run.

    python bench/compare.py                       # everything, both dialects, 3 rounds
    python bench/compare.py --dialects sqlite --workloads get,submit_seq --rounds 5

Each workload in ``bench/workloads.py`` runs under both interpreters (ours, and
the reference's own cached virtualenv, built on first use), against a fresh
database each time, alternating which SDK goes first between rounds. The
physical limits of this machine (bare sqlite3 loops of 1-row and 64-row
commits, no SDK) are measured in the same run, and so are the floors of
``drain_c64``, ``get``, ``submit_seq`` and ``call_latency``: their own
statements in a bare loop, same schema, durability and connection settings
(``bench/floors.py`` ``floor_*``), run in the same rounds and reported as
ours / floor. ``call_latency`` has two: ``floor_call`` (every statement on one
connection, no process hop: below anything a call can reach) and
``floor_call_processes`` (a bare worker in a second process, woken by
NOTIFY on PostgreSQL or by spinning on PRAGMA data_version on SQLite, and the
caller woken back the same way: the floor of a real cross-process call).
Prints medians, ranges and the ratio per row;
``--json FILE`` saves the raw samples; ``--no-reference`` leaves the
reference SDK out.
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
    "drain_sleep1ms_c64", "drain_sleep1ms_c256", "drain_cpu1ms_c64", "drain_flaky_c64",
]  # fmt: skip
LIMITS = ["limit_commit1", "limit_commit1_schema", "limit_commit64", "limit_commit64_schema"]
# Floors: a row's own statements in a bare loop, no SDK (bench/floors.py
# floor_*), run in the same rounds as ours whenever that row runs, and
# reported as ours/floor (for call_latency: our milliseconds over the floor's;
# floor_call is one connection in one process, floor_call_processes a bare
# worker in a second process woken the fastest way the database allows).
FLOORS = {
    "drain_c64": {"sqlite": ["floor_drain", "floor_drain_riding"], "postgres": ["floor_drain", "floor_drain_pipelined"]},
    "get": {"sqlite": ["floor_get"], "postgres": ["floor_get"]},
    "submit_seq": {"sqlite": ["floor_submit_seq"], "postgres": ["floor_submit_seq"]},
    "call_latency": {
        "sqlite": ["floor_call", "floor_call_processes"],
        "postgres": ["floor_call", "floor_call_processes"],
    },
}
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
    parser.add_argument("--no-reference", action="store_true", help="ours (and the floors) only")
    args = parser.parse_args()

    ours = args.python
    check = subprocess.run([ours, "-I", "-c", "import cairnq; print(cairnq.__version__, cairnq.SPEEDUPS)"],
                           capture_output=True, text=True, cwd=tempfile.gettempdir(), check=True)  # fmt: skip
    print(f"ours: cairnq {check.stdout.strip()} ({ours})")
    reference = None
    if not args.no_reference:
        reference = str(refsdk.python())
        print(f"reference: {refsdk.REFERENCE} ({reference})")
    options = json.loads(args.options)
    results: dict[str, Any] = {"when": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": []}

    for dialect in [d for d in args.dialects.split(",") if d]:
        print(f"\n== {dialect}")
        header = f"{'workload':<20} {'unit':<34} {'ours':>28} {'reference':>28} {'ratio':>8}"
        print(header)
        print("-" * len(header))
        for workload in [w for w in args.workloads.split(",") if w]:
            floors = FLOORS.get(workload, {}).get(dialect, [])
            runs = [("ours", ours)] + ([("reference", reference)] if reference else [])
            runs += [(floor, ours) for floor in floors]
            samples: dict[str, list[float]] = {who: [] for who, _ in runs}
            extra: dict[str, list[float]] = {who: [] for who, _ in runs}
            units: dict[str, str] = {}
            bound = None
            for r in range(args.rounds):
                order = runs if r % 2 == 0 else runs[::-1]  # alternating, floors included
                for who, python in order:
                    with Database(dialect) as target:
                        out = run_one(python, workload if who in ("ours", "reference") else who, dialect, target, options)
                    samples[who].append(out["value"])
                    if "p95" in out:
                        extra[who].append(out["p95"])
                    units[who] = out["unit"]
                    if who == "ours":
                        bound = out.get("bound")
            unit = units["ours"]
            a = statistics.median(samples["ours"])
            ref = samples.get("reference", [])
            b = statistics.median(ref) if ref else None
            ratio = None if b is None else (b / a) if workload in LOWER_IS_BETTER else (a / b)
            shown = f"{ratio:>7.1f}x" if ratio is not None else f"{'-':>8}"
            print(f"{workload:<20} {unit:<34} {summarize(samples['ours']):>28} {summarize(ref):>28} {shown}")
            if extra["ours"]:
                print(f"{'  p95':<20} {'ms':<34} {summarize(extra['ours']):>28} {summarize(extra.get('reference', [])):>28}")
                worst = max(p95 / p50 for p95, p50 in zip(extra["ours"], samples["ours"]))
                print(f"{'  p95/p50 (worst)':<20} {'':<34} {worst:>27.2f}x")
            if bound:  # a handler that does work sets a bound of its own
                of_ref = f"{b / bound:>27.1%}" if b is not None else f"{'-':>28}"
                print(f"{'  of its bound':<20} {f'{bound:,} tasks/s':<34} {a / bound:>27.1%} {of_ref}")
            results["rows"].append(
                {"dialect": dialect, "workload": workload, "unit": unit, "ours": samples["ours"],
                 "reference": ref, "p95": extra, "ratio": ratio}  # fmt: skip
            )
            for floor in floors:
                share = a / statistics.median(samples[floor])
                label = f"{workload} ours/floor" + (" (ms)" if workload in LOWER_IS_BETTER else "")
                print(f"{floor:<20} {units[floor]:<34} {summarize(samples[floor]):>28} {label:>28} {share:>7.2f}x")
                if extra[floor]:
                    print(f"{'  p95':<20} {'ms':<34} {summarize(extra[floor]):>28}")
                results["rows"].append({"dialect": dialect, "workload": floor, "unit": units[floor], "floor": samples[floor],
                                        "p95": extra[floor], f"{workload}_over_floor": share})  # fmt: skip
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
