"""Shrink a pytest-benchmark JSON to what RESULTS.md quotes: every statistic
of every benchmark, without the per-round samples.

    pytest bench --benchmark-only --benchmark-json .cache/bench/run.json
    python bench/summarize.py .cache/bench/run.json bench/results/pytest-bench-<stamp>.json

The raw file (tens of MB with samples) stays outside the repository, under
``.cache/bench/`` (ignored by git); the summary is a few kB.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def summarize(raw: dict) -> dict:
    out = {key: raw[key] for key in ("machine_info", "commit_info", "datetime", "version") if key in raw}
    out["benchmarks"] = [
        {
            "name": b["name"],
            "group": b.get("group"),
            "params": b.get("params"),
            "extra_info": b.get("extra_info"),
            "stats": {k: v for k, v in b["stats"].items() if k != "data"},
        }
        for b in raw["benchmarks"]
    ]
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    raw = json.loads(Path(argv[1]).read_text())
    Path(argv[2]).write_text(json.dumps(summarize(raw), indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
