"""A declared periodic task: what it enqueues, under which key, with what
metadata. Checked whole at declaration time, so a bad one never reaches a
running worker."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Optional, Union

import orjson

from cairnq.periodic.schedule import Schedule, instant_text, parse_schedule

__all__ = [
    "CATCH_UP",
    "CATCH_UP_WINDOW_MS",
    "CATCH_UP_MAX_FIRES",
    "KEY_PREFIX",
    "METADATA_KEY",
    "Periodic",
    "declare",
    "fire_key",
]

CATCH_UP = ("latest", "none", "all")
# How far back a starting (or waking) scheduler looks for fires it missed,
# and at most how many it considers: the newest of them within 24 hours.
CATCH_UP_WINDOW_MS = 24 * 3600 * 1000
CATCH_UP_MAX_FIRES = 100
KEY_PREFIX = "cairnq.periodic:"
METADATA_KEY = "cairnq.periodic"


def _quote(text: str) -> str:
    # A schedule id never holds ":" in a key, so "<prefix><id>:" names one
    # schedule's fires and no other's.
    return text.replace("%", "%25").replace(":", "%3A")


def fire_key(schedule_id: str, fire_ms: int) -> str:
    """The task key of one fire: the schedule and the UTC instant, never
    the definition (a changed cron or payload still fires once per instant)."""
    return f"{KEY_PREFIX}{_quote(schedule_id)}:{instant_text(fire_ms)}"


@dataclass(frozen=True)
class Periodic:
    """One schedule of one task name."""

    id: str
    name: str
    schedule: Schedule
    payload: Any
    queue: str
    priority: int
    max_attempts: int
    metadata: Optional[dict[str, Any]]
    catch_up: str

    def metadata_for(self, fire_ms: int) -> dict[str, Any]:
        info = {
            "schedule": self.id,
            "cron": self.schedule.text,
            "timezone": self.schedule.timezone,
            "fire_at": instant_text(fire_ms),
            "catch_up": self.catch_up,
        }
        return {**(self.metadata or {}), METADATA_KEY: info}


def _check_int(what: str, value: Any, minimum: Optional[int] = None) -> int:
    if type(value) is not int:
        raise TypeError(f"periodic: {what} must be an int, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"periodic: {what} must be >= {minimum}, got {value}")
    return value


def _check_name(what: str, value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"periodic: {what} must be a str, got {type(value).__name__}")
    if not value or "\x00" in value:
        raise ValueError(f"periodic: {what} must be a non-empty string without NUL")
    return value


def declare(
    schedule: Union[str, timedelta],
    name: str,
    payload: Any = None,
    *,
    id: Optional[str] = None,
    queue: str = "default",
    timezone: str = "UTC",
    priority: int = 0,
    max_attempts: int = 3,
    metadata: Optional[dict[str, Any]] = None,
    catch_up: str = "latest",
) -> Periodic:
    """Every check, with the argument's name in the message."""
    _check_name("name", name)
    schedule_id = _check_name("id", name if id is None else id)
    _check_name("queue", queue)
    parsed = parse_schedule(schedule, timezone)
    _check_int("priority", priority)
    _check_int("max_attempts", max_attempts, 1)
    if catch_up not in CATCH_UP:
        raise ValueError(
            f"periodic: catch_up must be one of {', '.join(CATCH_UP)}; got {catch_up!r}"
        )
    if metadata is not None:
        if not isinstance(metadata, dict):
            raise TypeError(f"periodic: metadata must be a dict, got {type(metadata).__name__}")
        if METADATA_KEY in metadata:
            raise ValueError(
                f"periodic: metadata key {METADATA_KEY!r} is reserved for the schedule"
            )
    for what, value in (("payload", payload), ("metadata", metadata)):
        try:
            orjson.dumps(value)
        except TypeError as exc:
            raise TypeError(f"periodic: {what} is not JSON-serializable: {exc}") from exc
    return Periodic(
        id=schedule_id,
        name=name,
        schedule=parsed,
        payload=payload,
        queue=queue,
        priority=priority,
        max_attempts=max_attempts,
        metadata=dict(metadata) if metadata else None,
        catch_up=catch_up,
    )
