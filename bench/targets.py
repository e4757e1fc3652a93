"""Issue 13's done-when, run by run: one row per full side-by-side run.

    python bench/targets.py                                   # every bench/results/compare-*-full.json
    python bench/targets.py bench/results/compare-20261207-session32-full.json

Reads what ``compare.py --json`` kept (medians of its rounds, as it prints
them) and prints two markdown tables, SQLite and PostgreSQL, with each
target's figure. A figure that misses its target is marked ``✗``. The
one-row commit (``limit_commit1_schema``: a bare loop inserting one row of
the cairnq schema per commit) tells the hosts' disks apart; the runs carry
no other trace of their host, so say which host a row is in the notes that
quote it.

Targets (issue 13): SQLite drain at concurrency 64 ≥ 0.85 of its bare loop
and ≥ 12x the reference, sequential submit ≥ 0.95 of its loop, ``call()`` p50
≤ 1.5 ms with p95 ≤ 3x p50 in every round; PostgreSQL drain ≥ 1.0 of the
serial loop and ≥ 6x the reference, ``get`` and sequential submit ≥ 0.9 of
their loops, ``call()`` p50 ≤ 1.2 ms (same p95 rule).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))
MISSED = "✗"


class Run:
    """One compare.py JSON file: medians by (dialect, workload, who)."""

    def __init__(self, path: str) -> None:
        with open(path) as f:
            data = json.load(f)
        self.label = _label(os.path.basename(path))
        self._rows = {(row["dialect"], row["workload"]): row for row in data["rows"]}

    def median(self, dialect: str, workload: str, who: str = "ours") -> float | None:
        """The median of ``who`` ("ours", "reference") for a workload; a floor's
        or a limit's own samples for those rows."""
        row = self._rows.get((dialect, workload))
        if row is None:
            return None
        if workload.startswith("floor_"):
            who = "floor"
        elif workload.startswith("limit_"):
            who = "limit"
        values = row.get(who)
        return statistics.median(values) if values else None

    def worst_p95_over_p50(self, dialect: str) -> float | None:
        row = self._rows.get((dialect, "call_latency"))
        if row is None or not row["p95"].get("ours"):
            return None
        return max(float(p95) / float(p50) for p95, p50 in zip(row["p95"]["ours"], row["ours"]))


def _label(name: str) -> str:
    """``compare-20261207-session31-full.json`` -> ``31 (12-07)``; other
    names as they are, without ``compare-`` and ``.json``."""
    match = re.fullmatch(r"compare-\d{4}(\d\d)(\d\d)-session(\d+)-full\.json", name)
    if match is None:
        return name.removeprefix("compare-").removesuffix(".json")
    month, day, session = match.groups()
    return f"{session} ({month}-{day})"


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def _cell(value: float | None, target: float | None = None, *, at_most: bool = False, fmt: str = "{:.2f}") -> str:
    if value is None:
        return "–"
    text = fmt.format(value)
    if target is not None and (value > target if at_most else value < target):
        text += f" {MISSED}"
    return text


def _over(run: Run, dialect: str, ours: str, floor: str, target: float | None = None) -> str:
    """Ours over a floor (or over the reference: ``floor="reference"``)."""
    below = run.median(dialect, ours, "reference") if floor == "reference" else run.median(dialect, floor)
    value = _ratio(run.median(dialect, ours), below)
    return _cell(value, target, fmt="{:.1f}x" if floor == "reference" else "{:.2f}")


def _call(run: Run, dialect: str, target_ms: float) -> str:
    """``call()``'s p50 (ms) with its two floors, one connection / two processes."""
    floors = [run.median(dialect, f) for f in ("floor_call", "floor_call_processes")]
    shown = " / ".join(f"{f:.1f}" for f in floors if f is not None) or "–"
    return f"{_cell(run.median(dialect, 'call_latency'), target_ms, at_most=True, fmt='{:.1f}')} ({shown})"


def sqlite_row(run: Run) -> list[str]:
    d = "sqlite"
    commit = run.median(d, "limit_commit1_schema")
    return [
        run.label,
        _cell(None if commit is None else 1e6 / commit, fmt="{:.0f}"),
        _over(run, d, "drain_c64", "floor_drain", 0.85),
        _over(run, d, "drain_c64", "floor_drain_riding"),
        _over(run, d, "drain_c64", "reference", 12),
        _over(run, d, "submit_seq", "floor_submit_seq", 0.95),
        _call(run, d, 1.5),
        _cell(run.worst_p95_over_p50(d), 3.0, at_most=True),
    ]


def postgres_row(run: Run) -> list[str]:
    d = "postgres"
    return [
        run.label,
        _over(run, d, "drain_c64", "floor_drain", 1.0),
        _over(run, d, "drain_c64", "floor_drain_pipelined"),
        _over(run, d, "drain_c64", "reference", 6),
        _over(run, d, "get", "floor_get", 0.9),
        _over(run, d, "submit_seq", "floor_submit_seq", 0.9),
        _call(run, d, 1.2),
        _cell(run.worst_p95_over_p50(d), 3.0, at_most=True),
    ]


def table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="*", help="compare.py JSON files (default: bench/results/compare-*-full.json)")
    args = parser.parse_args()
    paths = args.runs or sorted(glob.glob(os.path.join(HERE, "results", "compare-*-full.json")))
    runs: list[Run] = [Run(p) for p in paths]
    sections = (
        ("SQLite", sqlite_row, ["one-row commit (µs)", "drain / bare loop", "drain / riding loop",
                                "drain / reference", "submit / loop"]),
        ("PostgreSQL", postgres_row, ["drain / serial loop", "drain / pipelined loop", "drain / reference",
                                      "get / loop", "submit / loop"]),
    )  # fmt: skip
    for title, row_of, columns in sections:
        head = ["session (date)", *columns, "call() p50 ms (floors)", "worst p95/p50"]
        print(f"### {title}\n")
        print(table(head, [row_of(run) for run in runs]) + "\n")
    print(f"{MISSED}: below its issue-13 target. Floors of call(): one connection / two processes.")


if __name__ == "__main__":
    main()
