"""``cairnq schedules``: the periodic schedules the workers declared, read
back from the tasks they enqueued (each carries its schedule in metadata
``"cairnq.periodic"``; there is no table of schedules)."""

from __future__ import annotations

import argparse
import time
from datetime import datetime, timezone
from typing import Any, Optional
from zoneinfo import ZoneInfo

from cairnq.cli.common import EXIT_OK, emit_json, table, with_client
from cairnq.client import CairnQ
from cairnq.models import Task
from cairnq.periodic.declaration import METADATA_KEY
from cairnq.periodic.schedule import instant_text, parse_instant, parse_schedule

__all__ = ["add_parser", "run", "schedule_rows"]


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "schedules",
        parents=[common],
        help="list the periodic schedules the workers run",
        description="List the periodic schedules (worker.periodic / @worker.task(periodic=...)), "
        "read from the tasks they enqueued: a schedule appears once it has fired. Per "
        "schedule: its task name and queue, cron or interval, time zone, next fire, and "
        "the last fire with its task's status. Times are shown in the schedule's time "
        "zone (--json: UTC). Reads every task: meant for people, not for polling.",
    )
    p.set_defaults(run=run, parser=p)


async def _latest(client: CairnQ) -> list[Task]:
    return await client.store.periodic_latest()


def schedule_rows(tasks: list[Task], now_ms: int) -> list[dict[str, Any]]:
    """One dict per schedule, from the newest task of each."""
    rows: dict[str, dict[str, Any]] = {}
    for task in tasks:
        info = task.metadata.get(METADATA_KEY)
        if not isinstance(info, dict) or not isinstance(info.get("schedule"), str):
            continue
        if info["schedule"] in rows:
            continue  # the newest of one schedule comes first
        rows[info["schedule"]] = {
            "schedule": info["schedule"],
            "task": task.name,
            "queue": task.queue,
            "cron": info.get("cron"),
            "timezone": info.get("timezone"),
            "catch_up": info.get("catch_up"),
            "next_fire": _next_fire(info, now_ms),
            "last_fire": info.get("fire_at"),
            "last_status": task.status,
            "last_task_id": task.id,
        }
    return [rows[name] for name in sorted(rows)]


def _next_fire(info: dict[str, Any], now_ms: int) -> Optional[str]:
    """From the schedule as its last task recorded it (None if unreadable)."""
    try:
        schedule = parse_schedule(info.get("cron"), info.get("timezone", "UTC"))
        return instant_text(schedule.next_after(now_ms))
    except (TypeError, ValueError):
        return None


def _local(text: Optional[str], zone_name: Any) -> str:
    if not text:
        return "-"
    try:
        zone = ZoneInfo(zone_name) if isinstance(zone_name, str) else timezone.utc
        moment = datetime.fromtimestamp(parse_instant(text) / 1000, timezone.utc).astimezone(zone)
    except (ValueError, KeyError):
        return text
    return moment.strftime("%Y-%m-%d %H:%M:%S %z")


def run(args: argparse.Namespace) -> int:
    tasks = with_client(args, _latest)
    rows = schedule_rows(tasks, time.time_ns() // 1_000_000)
    if args.json:
        emit_json(rows)
        return EXIT_OK
    if not rows:
        print("no schedules (none has fired yet)")
        return EXIT_OK
    headers = ("SCHEDULE", "TASK", "QUEUE", "CRON", "TIMEZONE", "NEXT FIRE", "LAST FIRE", "STATUS")
    lines = table(
        headers,
        [
            (
                r["schedule"],
                r["task"],
                r["queue"],
                r["cron"] or "-",
                r["timezone"] or "-",
                _local(r["next_fire"], r["timezone"]),
                _local(r["last_fire"], r["timezone"]),
                r["last_status"],
            )
            for r in rows
        ],
    )
    print("\n".join(lines))
    return EXIT_OK
