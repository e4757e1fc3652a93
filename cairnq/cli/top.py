"""``cairnq top``: a live view of the queues.

Every interval it reads ``stats()`` and one ``list(status="running",
limit=20)`` (the public API only, two cheap queries) and redraws in place:
per queue the counts by status and the throughput since the previous frame
(tasks that reached succeeded, failed or canceled, per second), then the
running tasks with their progress.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from cairnq.cli.common import (
    EXIT_OK,
    emit_json,
    fmt_duration,
    fmt_time,
    is_database_error,
    log,
    one_line,
    open_client,
    positive_duration_ms,
    progress_bar,
    resolve_target,
    table,
    task_dict,
)
from cairnq.models import STATUSES, TERMINAL, Task

__all__ = ["Sample", "add_parser", "render"]

RUNNING_LIMIT = 20
_HOME, _CLEAR_SCREEN, _CLEAR_LINE, _CLEAR_BELOW = "\x1b[H", "\x1b[2J", "\x1b[K", "\x1b[J"


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "top",
        parents=[common],
        help="live view: counts, throughput and running tasks per queue",
        description="A live view redrawn in place every --interval-ms: per queue the task "
        "counts by status and the throughput since the previous refresh (succeeded + "
        "failed + canceled per second), then the running tasks (up to "
        f"{RUNNING_LIMIT}) with attempt, worker, age and progress. AGE counts from when "
        "the task became due (submitted, or scheduled for its retry). Ctrl-C quits. "
        "With --json, one JSON document per refresh, one per line.",
    )
    p.add_argument("--interval-ms", type=positive_duration_ms, default=1000, help="default 1000")
    p.add_argument("--queue", help="only this queue")
    p.add_argument("--once", action="store_true", help="print one frame and exit")
    p.set_defaults(run=run, parser=p)


@dataclass
class Sample:
    """One refresh: what was read, and when."""

    at: float  # time.monotonic()
    at_ms: int  # wall clock, for ages
    stats: dict[str, dict[str, int]]
    running: list[Task]
    error: str | None = None
    throughput: dict[str, float | None] = field(default_factory=dict)


def _finished(counts: dict[str, int]) -> int:
    return sum(counts.get(s, 0) for s in TERMINAL)


def _throughput(now: Sample, previous: Sample | None) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for queue, counts in now.stats.items():
        before = previous.stats.get(queue) if previous is not None else None
        elapsed = now.at - previous.at if previous is not None else 0.0
        if before is None or elapsed <= 0:
            out[queue] = None
        else:
            # A purge between refreshes lowers the count: never report < 0.
            out[queue] = max(0, _finished(counts) - _finished(before)) / elapsed
    return out


def _short_worker(worker_id: str | None) -> str:
    if not worker_id:
        return "-"
    return worker_id if len(worker_id) <= 16 else "~" + worker_id[-12:]


def render(sample: Sample, header: str) -> list[str]:
    """The frame as lines (no terminal codes)."""
    lines = [header, ""]
    if sample.error:
        lines += [f"error: {sample.error}", ""]
    if not sample.stats:
        lines.append("no tasks")
    else:
        headers = ("QUEUE",) + tuple(s.upper() for s in STATUSES) + ("DONE/S",)
        rows = []
        for queue, counts in sorted(sample.stats.items()):
            rate = sample.throughput.get(queue)
            rows.append(
                (queue,)
                + tuple(counts.get(s, 0) for s in STATUSES)
                + ("-" if rate is None else f"{rate:.1f}",)
            )
        lines += table(headers, rows, right=range(1, len(headers)))
    total = sum(c.get("running", 0) for c in sample.stats.values())
    lines.append("")
    if not sample.running:
        lines.append("running: none" if total == 0 else f"running: {total}")
        return lines
    shown = len(sample.running)
    lines.append(f"running: {total}" + (f" (showing {shown})" if shown < total else ""))
    running = sorted(sample.running, key=lambda t: (t.queue, t.created_at_ms, t.id))
    rows = [
        (
            t.queue,
            t.id,
            t.name,
            f"{t.attempt}/{t.max_attempts}",
            _short_worker(t.worker_id),
            fmt_duration(sample.at_ms - max(t.created_at_ms, t.run_at_ms)),
            progress_bar(t.progress, t.message)
            + (" (cancel requested)" if t.cancel_requested else ""),
        )
        for t in running
    ]
    lines += table(
        ("QUEUE", "ID", "NAME", "ATTEMPT", "WORKER", "AGE", "PROGRESS"), rows, right=(3, 5)
    )
    return lines


def _as_json(sample: Sample) -> dict[str, Any]:
    return {
        "at_ms": sample.at_ms,
        "error": sample.error,
        "queues": {
            q: {"counts": counts, "throughput_per_s": sample.throughput.get(q)}
            for q, counts in sorted(sample.stats.items())
        },
        "running_total": sum(c.get("running", 0) for c in sample.stats.values()),
        "running": [task_dict(t) for t in sample.running],
    }


def _fit(lines: list[str]) -> list[str]:
    width = shutil.get_terminal_size((120, 40)).columns
    return [line if len(line) <= width else line[:width] for line in lines]


def run(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_top(args))
    except KeyboardInterrupt:
        if not args.once and not args.json:
            sys.stdout.write("\n")
        return EXIT_OK


async def _top(args: argparse.Namespace) -> int:
    target = resolve_target(args)
    interval = args.interval_ms / 1000
    previous: Sample | None = None
    first = True
    async with open_client(args, create=False) as client:
        while True:
            now = Sample(time.monotonic(), int(time.time() * 1000), {}, [])
            try:
                now.stats = await client.stats(args.queue)  # type: ignore[assignment]
                now.running = await client.list(
                    status="running", queue=args.queue, limit=RUNNING_LIMIT
                )
            except Exception as exc:
                if args.once or not is_database_error(exc):
                    raise
                log.debug("top: refresh failed", exc_info=True)
                now.error = one_line(exc)
                if previous is not None:  # keep showing the last good numbers
                    now.stats, now.running = previous.stats, previous.running
            now.throughput = _throughput(now, previous) if now.error is None else {}
            if args.json:
                if args.once:
                    emit_json(_as_json(now))
                else:
                    sys.stdout.write(json.dumps(_as_json(now), ensure_ascii=False) + "\n")
            else:
                header = f"cairnq top  {target.describe()}  {fmt_time(now.at_ms)}" + (
                    "" if args.once else f"  every {fmt_duration(args.interval_ms)}  (Ctrl-C quits)"
                )
                lines = render(now, header)
                if args.once:
                    sys.stdout.write("\n".join(lines) + "\n")
                else:
                    prefix = _HOME + (_CLEAR_SCREEN if first else "")
                    body = "".join(line + _CLEAR_LINE + "\n" for line in _fit(lines))
                    sys.stdout.write(prefix + body + _CLEAR_BELOW)
            sys.stdout.flush()
            if args.once:
                return EXIT_OK
            first = False
            if now.error is None:
                previous = now
            await asyncio.sleep(interval)
