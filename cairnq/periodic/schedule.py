"""When a schedule fires: cron strings in a time zone, or fixed intervals.

Pure arithmetic on instants in integer milliseconds since the Unix epoch (UTC),
so it can be tested without a clock or a database. Cron strings are evaluated
by ``cronsim`` (imported only when a cron string is declared); intervals fire
at the multiples of the interval since the epoch, so every worker on every
host computes the same instants.

DST rule (cron in a zone with daylight saving time):

* a wall time inside the spring-forward gap fires once, at the first instant
  after the gap (``30 2 * * *`` in Berlin fires at 03:00 CEST that day);
* a wall time inside the fall-back overlap fires once, at its first
  occurrence (02:30 CEST, not again at 02:30 CET) when the hour field names
  the hour; a wildcard hour (``0 * * * *``, ``*/30 * * * *``) fires in both
  passes, since each is a different real instant an hour apart.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Iterator, Optional
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = [
    "Schedule",
    "parse_schedule",
    "instant_text",
    "parse_instant",
    "ALIASES",
]

# The usual @-extensions, spelled as the five fields they stand for.
ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_UTC = timezone.utc
_EPOCH = datetime(1970, 1, 1, tzinfo=_UTC)


def instant_text(ms: int) -> str:
    """Fixed-width UTC ISO text of an instant, ``2026-12-02T05:20:00.000Z``:
    its order as text is its order in time."""
    moment = _EPOCH + timedelta(milliseconds=ms)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def parse_instant(text: str) -> int:
    """The inverse of ``instant_text``."""
    moment = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=_UTC)
    return _to_ms(moment)


def _to_ms(moment: datetime) -> int:
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


@dataclass(frozen=True)
class Schedule:
    """One schedule: ``cron`` (five fields, in ``timezone``) or ``interval_ms``."""

    cron: Optional[str]
    interval_ms: Optional[int]
    timezone: str

    @property
    def text(self) -> str:
        """How it reads in metadata and in ``cairnq schedules``."""
        if self.cron is not None:
            return self.cron
        return f"every {_interval_text(self.interval_ms or 0)}"

    def next_after(self, after_ms: int) -> int:
        """The first fire strictly after ``after_ms``."""
        if self.interval_ms is not None:
            return (after_ms // self.interval_ms + 1) * self.interval_ms
        for fire in self._cron_fires(after_ms):
            return fire
        raise AssertionError("a cron iterator never ends")  # pragma: no cover

    def fires_between(self, after_ms: int, until_ms: int, limit: int) -> list[int]:
        """The last ``limit`` fires in ``(after_ms, until_ms]``, oldest first."""
        if limit <= 0 or until_ms <= after_ms:
            return []
        if self.interval_ms is not None:
            step = self.interval_ms
            last = until_ms // step * step
            first = max(after_ms // step + 1, last // step - limit + 1) * step
            return list(range(first, last + 1, step))
        kept: deque[int] = deque(maxlen=limit)
        for fire in self._cron_fires(after_ms):
            if fire > until_ms:
                break
            kept.append(fire)
        return list(kept)

    def _cron_fires(self, after_ms: int) -> Iterator[int]:
        """Cron fires after ``after_ms``, in order. cronsim starts from a wall
        time; one started inside the fall-back overlap can hand back the
        overlap's first occurrence, which lies before the start: such
        instants are skipped, which is what keeps an overlap fire single."""
        from cronsim import CronSim

        zone = ZoneInfo(self.timezone)
        start = (_EPOCH + timedelta(milliseconds=after_ms)).astimezone(zone)
        cron = self.cron or ""
        floor = after_ms
        for moment in CronSim(ALIASES.get(cron.lower(), cron), start):
            fire = _to_ms(moment)
            if fire > floor:
                floor = fire
                yield fire


def _interval_text(ms: int) -> str:
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


_INTERVAL_TEXT = re.compile(r"every (\d+)(ms|s|m|h|d)")
_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_schedule(schedule: Any, timezone: Any = "UTC") -> Schedule:
    """Check a declared schedule; ValueError/TypeError say what is wrong.

    ``schedule``: a cron string (five fields or an @-alias), a positive
    ``timedelta`` (whole milliseconds), or the text ``Schedule.text`` gives
    for an interval (``every 5s``: what ``cairnq schedules`` reads back).
    """
    zone = _check_zone(timezone)
    if isinstance(schedule, timedelta):
        return Schedule(None, _interval_ms(schedule), zone)
    if not isinstance(schedule, str):
        raise TypeError(
            "periodic: schedule must be a cron string (e.g. '0 3 * * *') or a "
            f"datetime.timedelta, not {type(schedule).__name__}"
        )
    spelled = _INTERVAL_TEXT.fullmatch(schedule.strip())
    if spelled:
        ms = int(spelled.group(1)) * _UNITS[spelled.group(2)]
        return Schedule(None, _interval_ms(timedelta(milliseconds=ms)), zone)
    return Schedule(_check_cron(schedule), None, zone)


def _check_zone(name: Any) -> str:
    if not isinstance(name, str):
        raise TypeError(f"periodic: timezone must be an IANA zone name, not {type(name).__name__}")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(
            f"periodic: unknown time zone {name!r} (an IANA name such as 'Europe/Berlin')"
        ) from exc
    return name


def _interval_ms(interval: timedelta) -> int:
    if interval <= timedelta(0):
        raise ValueError(f"periodic: the interval must be positive, got {interval!r}")
    if interval % timedelta(milliseconds=1):
        raise ValueError(f"periodic: the interval must be whole milliseconds, got {interval!r}")
    return interval // timedelta(milliseconds=1)


def _check_cron(text: str) -> str:
    spelled = " ".join(text.split())
    expr = ALIASES.get(spelled.lower(), spelled)
    if expr.startswith("@"):
        raise ValueError(
            f"periodic: unknown cron alias {text!r} (known: {', '.join(sorted(ALIASES))})"
        )
    if len(expr.split()) != 5:
        raise ValueError(
            f"periodic: bad cron {text!r}: expected five fields "
            "(minute hour day-of-month month day-of-week) or an @-alias"
        )
    from cronsim import CronSim, CronSimError

    try:
        CronSim(expr, datetime(2000, 1, 1, tzinfo=_UTC))
    except CronSimError as exc:
        raise ValueError(f"periodic: bad cron {text!r}: {exc}") from exc
    return spelled
