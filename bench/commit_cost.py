"""What one durable commit costs on this disk, and why a submit's costs more
than a bare loop's.

    python bench/commit_cost.py      # per-commit frames and time, then fdatasync cost by size

1. The bare loops of ``bench/workloads.py`` (``limit_commit1``,
   ``limit_commit1_schema``) inserting one row per transaction: WAL frames per
   commit (from the WAL's growth, checkpoints held off; a frame is one page
   plus a 24-byte header), and µs per commit at ``synchronous=FULL`` and at
   ``OFF`` (the same work without the fdatasync).
2. fdatasync cost by the bytes appended before it, on a preallocated file in
   the same directory: the same pattern as a WAL commit, without SQLite.

Together they split the one-row-commit limit into the sync and SQLite's own
work per commit, for the rows a submit must write (the cairnq schema puts
each new row into the table and every secondary index: several pages per
commit) and for a table with only a primary key.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from floors import _bare_table, _cairnq_schema

FRAME_HEADER = 24
WAL_HEADER = 32


def per_commit(directory: str, commits: int) -> None:
    """Frames, and µs per one-row commit with and without its fdatasync."""
    shapes = (("bare table (limit_commit1)", _bare_table), ("cairnq schema (limit_commit1_schema)", _cairnq_schema))
    for n, (label, make) in enumerate(shapes):
        timings = {}
        for synchronous in ("off", "full"):
            path = Path(directory) / f"shape{n}-{synchronous}.db"
            conn = sqlite3.connect(path, isolation_level=None)
            conn.execute("pragma journal_mode = wal")
            conn.execute(f"pragma synchronous = {synchronous}")
            sql, row = make(conn)
            now = int(time.time() * 1000)
            for j in range(1000):  # past the first pages of every index
                conn.execute(sql, row(j, now, f"task_{j:026d}"))
            if synchronous == "off":  # count frames with checkpoints held off
                conn.execute("pragma wal_autocheckpoint = 0")
                conn.execute("pragma wal_checkpoint(truncate)")
            started = time.perf_counter()
            for j in range(1000, 1000 + commits):
                conn.execute(sql, row(j, now, f"task_{j:026d}"))
            timings[synchronous] = (time.perf_counter() - started) / commits * 1e6
            if synchronous == "off":
                page = conn.execute("pragma page_size").fetchone()[0]
                frames = (os.path.getsize(f"{path}-wal") - WAL_HEADER) / (page + FRAME_HEADER) / commits
            conn.close()
        print(
            f"{label:<38} {frames:5.2f} frames/commit ({frames * (page + FRAME_HEADER) / 1024:4.1f} KiB);"
            f" per commit {timings['full']:6.1f} us, of which {timings['off']:5.1f} us without the fdatasync"
        )


def sync_cost(directory: str, sizes_kib: list[int], syncs: int) -> dict[int, float]:
    path = Path(directory) / "sync.bin"
    span = 64 << 20
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.pwrite(fd, b"\0" * span, 0)  # preallocated: appends overwrite, as a reset WAL does
        os.fsync(fd)
        out = {}
        for kib in sizes_kib:
            block = b"x" * (kib * 1024)
            offset, samples = 0, []
            for _ in range(syncs):
                started = time.perf_counter()
                os.pwrite(fd, block, offset)  # one write: the sync is what is timed
                offset = (offset + len(block)) % (span - len(block))
                os.fdatasync(fd)
                samples.append(time.perf_counter() - started)
            out[kib] = statistics.median(samples) * 1e6
            print(f"write {kib:3d} KiB + fdatasync   median {out[kib]:7.1f} us")
        return out
    finally:
        os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default=None, help="directory on the disk to measure (default: a temp dir)")
    parser.add_argument("--commits", type=int, default=2000)
    parser.add_argument("--syncs", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cairnq-commit-cost-", dir=args.dir) as directory:
        per_commit(directory, args.commits)
        sync_cost(directory, [4, 8, 12, 16, 24, 36, 48], args.syncs)


if __name__ == "__main__":
    main()
