"""A/B: two builds of this cairnq on the same workloads, alternating.

    python bench/ab.py --a /path/old-venv/bin/python --b .cache/venv/bin/python \\
        --dialects sqlite,postgres --workloads get,submit_seq,submit_concurrent,drain_c64 --rounds 6
    python bench/ab.py --a .cache/venv/bin/python --b .cache/venv/bin/python \
        --workloads drain_c64 --b-options '{"events": "count"}'   # one build, B with a subscriber

Each round runs every workload once under each interpreter (a fresh database
each time, see ``compare.py``), the order of the two builds alternating from
round to round. Prints the median, range and b/a ratio per workload (the
ratio is inverted for the lower-is-better ones); ``--json FILE`` keeps the
samples.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from compare import LOWER_IS_BETTER, Database, run_one, summarize

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", required=True, help="interpreter of build A (the baseline)")
    p.add_argument("--b", required=True, help="interpreter of build B")
    p.add_argument("--dialects", default="sqlite")
    p.add_argument("--workloads", default="get,submit_seq,submit_concurrent,drain_c64")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--options", default="{}", help="JSON overrides for bench/workloads.py DEFAULTS")
    p.add_argument("--b-options", default=None, help="JSON overrides for B only (e.g. the same build with an event subscriber)")
    p.add_argument("--json", default=None)
    o = p.parse_args()
    options = json.loads(o.options)
    options_for = {"a": options, "b": dict(options, **json.loads(o.b_options)) if o.b_options else options}
    rows = []
    for dialect in o.dialects.split(","):
        for workload in o.workloads.split(","):
            samples: dict[str, list[float]] = {"a": [], "b": []}
            unit = ""
            for r in range(o.rounds):
                order = [("a", o.a), ("b", o.b)]
                if r % 2:
                    order.reverse()
                for who, python in order:
                    with Database(dialect) as target:
                        out = run_one(python, workload, dialect, target, options_for[who])
                    samples[who].append(out["value"])
                    unit = out["unit"]
            a, b = statistics.median(samples["a"]), statistics.median(samples["b"])
            ratio = a / b if workload in LOWER_IS_BETTER else b / a
            print(f"{dialect:<8} {workload:<20} {unit:<28} A {summarize(samples['a']):>28}  "
                  f"B {summarize(samples['b']):>28}  B/A {ratio:6.3f}", flush=True)  # fmt: skip
            rows.append({"dialect": dialect, "workload": workload, "unit": unit, **samples, "ratio": ratio})
    if o.json:
        Path(o.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
