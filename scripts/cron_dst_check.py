"""Which daily fires a cron library gives across the DST transitions of 2026.

    python scripts/cron_dst_check.py cronsim
    python scripts/cron_dst_check.py croniter   (pip install croniter first)

For each zone: a wall time inside the spring-forward gap and one inside the
fall-back overlap, three days around each transition. A correct library
gives one fire per day on every line; docs/periodic.md has the results that
chose cronsim (croniter fires the overlap time twice).
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from typing import Any, Iterator
from zoneinfo import ZoneInfo

CASES = [
    ("Europe/Berlin", "30 2 * * *", "2026-03-28", "30 2 * * *", "2026-10-24"),
    ("America/New_York", "30 2 * * *", "2026-03-07", "30 1 * * *", "2026-10-31"),
    ("Australia/Lord_Howe", "15 2 * * *", "2026-10-03", "45 1 * * *", "2026-04-04"),
]


def fires(library: str, expr: str, start: datetime) -> Iterator[datetime]:
    if library == "cronsim":
        from cronsim import CronSim

        yield from CronSim(expr, start)
    else:
        from croniter import croniter

        it: Any = croniter(expr, start)
        while True:
            yield it.get_next(datetime)


def main(library: str) -> int:
    doubled = 0
    for zone_name, gap_expr, gap_day, overlap_expr, overlap_day in CASES:
        zone = ZoneInfo(zone_name)
        for what, expr, day in (("gap", gap_expr, gap_day), ("overlap", overlap_expr, overlap_day)):
            start = datetime.fromisoformat(day).replace(tzinfo=zone)
            got = []
            for moment in fires(library, expr, start):
                if len(got) == 3:
                    break
                got.append(moment)
            days = [m.astimezone(zone).date() for m in got]
            doubled += len(set(days)) < len(days)
            shown = ", ".join(
                f"{m.astimezone(zone):%m-%d %H:%M%z} ({m.astimezone(timezone.utc):%H:%MZ})"
                for m in got
            )
            print(f"{library:8} {zone_name:20} {what:7} {expr:11} {shown}")
    print(f"{library}: {'a fire doubled' if doubled else 'one fire per day'}")
    return 1 if doubled else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "cronsim"))
