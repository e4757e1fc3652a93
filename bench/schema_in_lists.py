"""What the SQLite schema's IN lists cost a drain's two UPDATEs.

    python bench/schema_in_lists.py                  # 20,000 tasks, 3 rounds
    python bench/schema_in_lists.py --tasks 5000 --rounds 5

``cairnq_tasks`` checks ``status in ('queued', 'running', 'succeeded',
'failed', 'canceled')`` and keeps ``cairnq_tasks_queue_completed_idx`` only
``where status in ('succeeded', 'failed', 'canceled')``. SQLite (3.40 here)
codes an IN list of more than two constants as a small temporary b-tree, and
in a CHECK constraint or a partial index's WHERE, evaluated for each row an
UPDATE changes, it builds that b-tree again for every row: three times a row
for the claim and for the settlement (the CHECK, then the partial index for
the old row and for the new one). The script shows it and what it costs:

* the ``OpenEphemeral`` opcodes inside each statement's per-row loop
  (``EXPLAIN``), on the protocol's schema and on a copy whose two IN lists
  are written as chains of ``=`` joined by ``or`` (the same rows pass);
* the bare drain loop of ``floors.py`` (the protocol's claim and
  ``complete_many``, 64 a transaction, the store's durability) on each,
  alternating, with only the two UPDATEs timed.

The schema is the protocol's (migrations are its only source); the copy is a
measurement, not a proposal this SDK could adopt alone: every SDK sharing a
file must see one schema. It is the protocol owners' to weigh.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from floors import _drain_backlog, _sqlite_drain_steps, _sqlite_floor_conn, _statement  # noqa: E402

# The two IN lists of the protocol's schema, and the same conditions as
# chains of equalities (text owned here, no value composed into SQL).
REWRITES = (
    (
        "check (status in ('queued', 'running', 'succeeded', 'failed', 'canceled'))",
        (
            "check (status = 'queued' or status = 'running' or status = 'succeeded'"
            " or status = 'failed' or status = 'canceled')"
        ),
    ),
    (
        "where status in ('succeeded', 'failed', 'canceled')",
        "where status = 'succeeded' or status = 'failed' or status = 'canceled'",
    ),
)


def _rewrite_in_lists(path: str) -> None:
    """Rebuild ``cairnq_tasks`` in ``path`` (empty) with its IN lists as OR
    chains. Fails if the protocol's schema no longer reads as expected."""
    conn = sqlite3.connect(path, isolation_level=None)
    ddl = [
        row[0]
        for row in conn.execute(
            "select sql from sqlite_master where tbl_name = 'cairnq_tasks' and sql is not null"
            " order by type desc"  # the table first, then its indexes
        )
    ]
    text = "\n".join(ddl)
    for old, _ in REWRITES:
        if text.count(old) != 1:
            raise SystemExit(f"the schema no longer has exactly one {old!r}: update REWRITES")
    conn.execute("drop table cairnq_tasks")
    for statement in ddl:
        for old, new in REWRITES:
            statement = statement.replace(old, new)
        conn.execute(statement)
    conn.close()


def _ephemeral_per_row(path: str) -> dict[str, int]:
    """OpenEphemeral opcodes inside each UPDATE's row loop (not the ones
    built once: the ``id in (...)`` subquery's, RETURNING's)."""
    conn = sqlite3.connect(path)
    params = {
        "worker_id": "w", "lease_until_ms": 1, "now_ms": 1, "queue": "q", "name": "n",
        "limit": 64, "ids": "[]", "result": None,
    }  # fmt: skip
    found = {}
    for name in ("claim_one_queue_one_name", "complete_many"):
        program = conn.execute("explain " + _statement("sqlite", name), params).fetchall()
        opcodes = [row[1] for row in program]
        # The row loop: from the table's first OpenWrite to the program's
        # end (its first Halt with no error code; what follows is set-up).
        loop = opcodes.index("OpenWrite")
        end = next(
            i for i in range(loop, len(program)) if opcodes[i] == "Halt" and program[i][2] == 0
        )
        found[name] = sum(1 for op in opcodes[loop:end] if op == "OpenEphemeral")
    conn.close()
    return found


def _updates_us_per_task(path: str, n: int) -> float:
    """The bare drain loop (floors.py's statements and settings); only the
    two UPDATEs are timed, in CPU time of this thread (a VM's stolen time
    and the disk's waits are not counted: the UPDATEs wait on neither)."""
    conn = _sqlite_floor_conn(path)
    claim_ids, settle = _sqlite_drain_steps(conn, 64)
    done, spent = 0, 0.0
    while done < n:
        now = int(time.time() * 1000)
        conn.execute("begin immediate")
        began = time.thread_time()
        ids = claim_ids(now)
        done += settle(ids, now)
        spent += time.thread_time() - began
        conn.execute("commit")
        if not ids:
            raise RuntimeError(f"ran dry after {done} of {n} tasks")
    conn.close()
    return spent / n * 1e6


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--tasks", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=3)
    o = p.parse_args()
    print(f"SQLite {sqlite3.sqlite_version}; {o.tasks:,} tasks a round, 64 a transaction")
    times: dict[str, list[float]] = {"protocol": [], "or-chains": []}
    with tempfile.TemporaryDirectory(prefix="cairnq-in-lists-") as tmp:
        for r in range(o.rounds):
            for variant, spent in times.items():
                path = os.path.join(tmp, f"{variant}-{r}.db")
                _drain_backlog("sqlite", path, 0)  # the schema, through the SDK's migrations
                if variant == "or-chains":
                    _rewrite_in_lists(path)
                if r == 0:
                    print(
                        f"{variant:<10} OpenEphemeral in the row loop: {_ephemeral_per_row(path)}"
                    )
                _drain_backlog("sqlite", path, o.tasks)
                spent.append(_updates_us_per_task(path, o.tasks))
    for variant, values in times.items():
        shown = ", ".join(f"{v:.1f}" for v in values)
        median = statistics.median(values)
        print(f"{variant:<10} the two UPDATEs: median {median:.1f} us of CPU a task ({shown})")
    ratio = statistics.median(times["or-chains"]) / statistics.median(times["protocol"])
    print(f"or-chains / protocol: {ratio:.2f}")


if __name__ == "__main__":
    main()
