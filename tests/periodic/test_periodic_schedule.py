"""Schedule arithmetic: cron vectors, intervals, DST in three zones, and the
messages of bad declarations. Pure: no clock, no database."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from cairnq.periodic import declare, fire_key, instant_text, parse_instant, parse_schedule

DAY_MS = 86_400_000


def ms(text: str) -> int:
    """An instant written as UTC ISO (seconds), in ms."""
    return parse_instant(text.replace("Z", ".000Z") if "." not in text else text)


def fires(schedule: Any, tz: str, start: str, end: str, limit: int = 1000) -> list[str]:
    """Every fire in (start, end] as UTC text (seconds)."""
    found = parse_schedule(schedule, tz).fires_between(ms(start), ms(end), limit)
    return [instant_text(f)[:19] + "Z" for f in found]


def walk(schedule: Any, tz: str, start: str, count: int) -> list[str]:
    """``count`` fires by repeated next_after, as local wall times."""
    sched = parse_schedule(schedule, tz)
    zone = ZoneInfo(tz)
    out, at = [], ms(start)
    for _ in range(count):
        at = sched.next_after(at)
        moment = datetime.fromtimestamp(at / 1000, timezone.utc).astimezone(zone)
        out.append(moment.strftime("%m-%d %H:%M %z"))
    return out


def test_instant_text_is_fixed_width_and_round_trips() -> None:
    for value in (0, 1, 999, 1_000, 1_764_652_800_123, 253_402_300_799_999):
        text = instant_text(value)
        assert len(text) == 24 and text.endswith("Z")
        assert parse_instant(text) == value
    assert instant_text(0) == "1970-01-01T00:00:00.000Z"


@pytest.mark.parametrize(
    "cron, start, expected",
    [
        ("*/15 * * * *", "2026-01-01T00:00:00Z", ["00:15", "00:30", "00:45", "01:00"]),
        ("0 9-11 * * *", "2026-01-01T00:00:00Z", ["09:00", "10:00", "11:00", "09:00"]),
        ("5,35 2 * * *", "2026-01-01T00:00:00Z", ["02:05", "02:35", "02:05", "02:35"]),
        ("0-20/10 3 * * *", "2026-01-01T00:00:00Z", ["03:00", "03:10", "03:20", "03:00"]),
        ("@hourly", "2026-01-01T00:30:00Z", ["01:00", "02:00", "03:00", "04:00"]),
        ("@daily", "2026-01-01T00:30:00Z", ["00:00"] * 4),
        ("@midnight", "2026-01-01T00:30:00Z", ["00:00"] * 4),
    ],
)
def test_cron_vectors_utc(cron: str, start: str, expected: list[str]) -> None:
    assert [w[6:11] for w in walk(cron, "UTC", start, 4)] == expected


def test_cron_day_fields_and_aliases() -> None:
    # 2026-01-01 is a Thursday.
    assert walk("0 0 * * MON-FRI", "UTC", "2026-01-01T00:00:00Z", 3) == [
        "01-02 00:00 +0000", "01-05 00:00 +0000", "01-06 00:00 +0000",
    ]  # fmt: skip
    assert walk("@weekly", "UTC", "2026-01-01T00:00:00Z", 2) == [
        "01-04 00:00 +0000",
        "01-11 00:00 +0000",
    ]
    assert walk("@monthly", "UTC", "2026-01-15T00:00:00Z", 2) == [
        "02-01 00:00 +0000",
        "03-01 00:00 +0000",
    ]
    assert walk("@yearly", "UTC", "2026-06-01T00:00:00Z", 1) == ["01-01 00:00 +0000"]
    assert walk("@annually", "UTC", "2026-06-01T00:00:00Z", 1) == ["01-01 00:00 +0000"]
    assert walk("0 12 31 * *", "UTC", "2026-04-01T00:00:00Z", 2) == [
        "05-31 12:00 +0000",
        "07-31 12:00 +0000",
    ]


def test_cron_in_a_zone_fires_at_local_wall_time() -> None:
    assert fires("0 9 * * *", "Asia/Tokyo", "2025-12-31T23:00:00Z", "2026-01-02T23:00:00Z") == [
        "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z",
    ]  # fmt: skip


def test_next_after_is_strictly_after() -> None:
    sched = parse_schedule("* * * * *")
    at = ms("2026-01-01T00:01:00Z")
    assert sched.next_after(at) == at + 60_000
    assert sched.next_after(at - 1) == at
    every = parse_schedule(timedelta(seconds=10))
    assert every.next_after(10_000) == 20_000
    assert every.next_after(9_999) == 10_000


def test_interval_fires_at_epoch_multiples() -> None:
    sched = parse_schedule(timedelta(minutes=5))
    start = ms("2026-01-01T00:02:30Z")
    assert [instant_text(f)[11:19] for f in sched.fires_between(start, start + 15 * 60_000, 10)] == [
        "00:05:00", "00:10:00", "00:15:00",
    ]  # fmt: skip
    # Sub-second, and the limit keeps the newest.
    fast = parse_schedule(timedelta(milliseconds=250))
    assert fast.fires_between(0, 2_000, 3) == [1_500, 1_750, 2_000]
    assert fast.fires_between(0, 2_000, 100) == list(range(250, 2_001, 250))
    assert fast.fires_between(2_000, 2_000, 10) == []
    # An interval is the same in every zone: instants, not wall times.
    assert parse_schedule(timedelta(hours=1), "Europe/Berlin").fires_between(0, 7_200_000, 9) == [
        3_600_000, 7_200_000,
    ]  # fmt: skip
    assert parse_schedule(timedelta(seconds=1)).text == "every 1s"
    assert parse_schedule(timedelta(milliseconds=1500)).text == "every 1500ms"
    assert parse_schedule("every 1500ms") == parse_schedule(timedelta(milliseconds=1500))


def test_cron_fires_between_keeps_the_newest() -> None:
    got = fires("0 * * * *", "UTC", "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z", limit=3)
    assert got == ["2026-01-01T22:00:00Z", "2026-01-01T23:00:00Z", "2026-01-02T00:00:00Z"]


# -- DST: no fire skipped, none doubled, across both transitions -----------------

DST_CASES = [
    # zone, spring-forward day (local), fall-back day (local), a wall time in the
    # gap, a wall time in the overlap, the first instant after the gap (local)
    ("Europe/Berlin", "2026-03-29", "2026-10-25", "30 2", "30 2", "03:00"),
    ("America/New_York", "2026-03-08", "2026-11-01", "30 2", "30 1", "03:00"),
    # 30-minute shift: 02:00 -> 02:30 in spring, 02:00 -> 01:30 in autumn
    ("Australia/Lord_Howe", "2026-10-04", "2026-04-05", "15 2", "45 1", "02:30"),
]


def _local_days(schedule: str, tz: str, day: str, days: int = 3) -> list[str]:
    """Fires from the day before ``day`` to the day after, as local times."""
    zone = ZoneInfo(tz)
    start = datetime.fromisoformat(day).replace(tzinfo=zone) - timedelta(days=1)
    start_ms = int(start.timestamp() * 1000) - 1
    found = parse_schedule(schedule, tz).fires_between(start_ms, start_ms + days * DAY_MS, 10_000)
    out = []
    for f in found:
        moment = datetime.fromtimestamp(f / 1000, timezone.utc).astimezone(zone)
        out.append(moment.strftime("%m-%d %H:%M %z"))
    return out


@pytest.mark.parametrize("tz, spring, _fall, gap, _overlap, after_gap", DST_CASES)
def test_dst_gap_fires_once_at_the_first_instant_after(
    tz: str, spring: str, _fall: str, gap: str, _overlap: str, after_gap: str
) -> None:
    got = _local_days(f"{gap} * * *", tz, spring)
    assert len(got) == 3, got  # one per day: not skipped on the short day
    assert got[1].startswith(f"{spring[5:]} {after_gap}"), got
    assert got[0][6:11] == got[2][6:11] == gap.split()[1].zfill(2) + ":" + gap.split()[0].zfill(2)


@pytest.mark.parametrize("tz, _spring, fall, _gap, overlap, _after", DST_CASES)
def test_dst_overlap_fires_once_at_the_first_occurrence(
    tz: str, _spring: str, fall: str, _gap: str, overlap: str, _after: str
) -> None:
    got = _local_days(f"{overlap} * * *", tz, fall)
    assert len(got) == 3, got  # one per day: not doubled on the long day
    fall_fire = [g for g in got if g.startswith(fall[5:])]
    assert len(fall_fire) == 1
    # The first occurrence: the earlier (summer) offset.
    zone = ZoneInfo(tz)
    summer = datetime.fromisoformat(fall).replace(tzinfo=zone) - timedelta(days=1)
    assert fall_fire[0].endswith(summer.strftime("%z")), (fall_fire, summer.strftime("%z"))


@pytest.mark.parametrize("tz, spring, fall, _gap, _overlap, _after", DST_CASES)
def test_dst_wildcard_hours_follow_real_time(
    tz: str, spring: str, fall: str, _gap: str, _overlap: str, _after: str
) -> None:
    """Every quarter hour: across either transition the fires are exactly 15
    real minutes apart (none skipped, none repeated)."""
    for day in (spring, fall):
        zone = ZoneInfo(tz)
        start = int(
            (datetime.fromisoformat(day).replace(tzinfo=zone) - timedelta(hours=2)).timestamp()
            * 1000
        )
        got = parse_schedule("*/15 * * * *", tz).fires_between(start, start + 8 * 3_600_000, 1000)
        gaps = {b - a for a, b in zip(got, got[1:])}
        assert gaps == {15 * 60_000}, (day, gaps)
        assert len(got) == len(set(got)) == 32


def test_dst_overlap_started_inside_the_overlap_does_not_fire_again() -> None:
    """A worker (re)started during the repeated hour, after the first 02:30,
    must not see the second 02:30 as due (cronsim alone hands back the first
    one, which lies before the start: it is skipped)."""
    sched = parse_schedule("30 2 * * *", "Europe/Berlin")
    # 02:15 CET, the second pass (01:15 UTC), after 02:30 CEST (00:30 UTC) fired
    nxt = sched.next_after(ms("2026-10-25T01:15:00Z"))
    assert instant_text(nxt) == "2026-10-26T01:30:00.000Z"
    # 02:45 CEST, the first pass, after the first 02:30: next is tomorrow too
    nxt = sched.next_after(ms("2026-10-25T00:45:00Z"))
    assert instant_text(nxt) == "2026-10-26T01:30:00.000Z"


# -- declarations -------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, kwargs, error, message",
    [
        (("* * * *", "t"), {}, ValueError, "expected five fields"),
        (("61 * * * *", "t"), {}, ValueError, "bad cron '61 * * * *': Bad minute"),
        (("0 0 30 2 *", "t"), {}, ValueError, "Bad day-of-month"),
        (("@fortnightly", "t"), {}, ValueError, "unknown cron alias '@fortnightly'"),
        (
            ("0 3 * * *", "t"),
            {"timezone": "Mars/Olympus"},
            ValueError,
            "unknown time zone 'Mars/Olympus'",
        ),
        (("0 3 * * *", "t"), {"timezone": 3}, TypeError, "timezone must be an IANA zone name"),
        ((timedelta(0), "t"), {}, ValueError, "interval must be positive"),
        ((timedelta(seconds=-1), "t"), {}, ValueError, "interval must be positive"),
        ((timedelta(microseconds=1500), "t"), {}, ValueError, "whole milliseconds"),
        ((60, "t"), {}, TypeError, "schedule must be a cron string"),
        (
            ("0 3 * * *", "t"),
            {"catch_up": "some"},
            ValueError,
            "catch_up must be one of latest, none, all",
        ),
        (("0 3 * * *", ""), {}, ValueError, "name must be a non-empty string"),
        (("0 3 * * *", 7), {}, TypeError, "name must be a str"),
        (("0 3 * * *", "t"), {"id": ""}, ValueError, "id must be a non-empty string"),
        (("0 3 * * *", "t"), {"max_attempts": 0}, ValueError, "max_attempts must be >= 1"),
        (("0 3 * * *", "t"), {"priority": "high"}, TypeError, "priority must be an int"),
        (("0 3 * * *", "t", {1, 2}), {}, TypeError, "payload is not JSON-serializable"),
        (("0 3 * * *", "t"), {"metadata": []}, TypeError, "metadata must be a dict"),
        (("0 3 * * *", "t"), {"metadata": {"cairnq.periodic": 1}}, ValueError, "is reserved"),
    ],
)
def test_bad_declarations_say_what_is_wrong(
    args: tuple[Any, ...], kwargs: dict[str, Any], error: type, message: str
) -> None:
    with pytest.raises(error, match=None) as info:
        declare(*args, **kwargs)
    assert message in str(info.value)
    assert str(info.value).startswith("periodic: ")


def test_declaration_metadata_and_key() -> None:
    p = declare(
        "0 3 * * *", "report.nightly", {"x": 1}, timezone="Europe/Berlin", metadata={"team": "ops"}
    )
    fire = ms("2026-01-02T02:00:00Z")
    assert p.metadata_for(fire) == {
        "team": "ops",
        "cairnq.periodic": {
            "schedule": "report.nightly", "cron": "0 3 * * *", "timezone": "Europe/Berlin",
            "fire_at": "2026-01-02T02:00:00.000Z", "catch_up": "latest",
        },
    }  # fmt: skip
    assert (
        fire_key("report.nightly", fire)
        == "cairnq.periodic:report.nightly:2026-01-02T02:00:00.000Z"
    )
    # A ":" in a schedule id never makes its keys look like another schedule's.
    assert fire_key("a:1", fire) == "cairnq.periodic:a%3A1:2026-01-02T02:00:00.000Z"
    assert fire_key("a%3A1", fire) == "cairnq.periodic:a%253A1:2026-01-02T02:00:00.000Z"


def test_cronsim_is_imported_only_for_a_cron_string(tmp_path: Any) -> None:
    """Nothing is paid unused: no cronsim for a worker with no schedule or an
    interval one; the first cron string imports it."""
    import subprocess
    import sys

    code = f"""
import sys
from datetime import timedelta
from cairnq import Worker
worker = Worker.sqlite({str(tmp_path / "q.db")!r})
assert "cronsim" not in sys.modules and "cairnq.periodic" not in sys.modules
worker.periodic(timedelta(seconds=1), "tick")
assert "cronsim" not in sys.modules
worker.periodic("* * * * *", "minute")
assert "cronsim" in sys.modules
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
