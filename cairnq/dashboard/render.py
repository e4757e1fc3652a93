"""Turning values into page text: the Jinja2 environment (autoescape on for
every template), times as UTC with their age, JSON as indented text cut at
``TEXT_LIMIT`` bytes."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional
from urllib.parse import quote, urlencode

import jinja2

__all__ = [
    "TEXT_LIMIT",
    "Shown",
    "environment",
    "utc",
    "age",
    "duration",
    "shown_json",
    "shown_text",
    "to_json_text",
]

TEXT_LIMIT = 64 * 1024  # bytes of payload/result/metadata/error text a page shows
TEMPLATES = Path(__file__).parent / "templates"


def utc(ms: Optional[int]) -> str:
    """``2026-12-01 10:00:00.123Z``; a dash for None."""
    if ms is None:
        return "-"
    when = dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)
    return when.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}Z"


def duration(ms: Optional[int]) -> str:
    """A short human duration: ``850 ms``, ``42 s``, ``3 min``, ``5 h 2 min``, ``2 d 4 h``."""
    if ms is None:
        return "-"
    ms = abs(int(ms))
    if ms < 1000:
        return f"{ms} ms"
    s = ms // 1000
    if s < 60:
        return f"{s} s"
    m = s // 60
    if m < 60:
        return f"{m} min"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(h, 24)
    return f"{d} d {h} h" if h else f"{d} d"


def age(ms: Optional[int], now_ms: int) -> str:
    """``3 min ago`` (or ``in 3 min`` for a time still ahead)."""
    if ms is None:
        return ""
    delta = now_ms - ms
    if -1000 < delta < 1000:
        return "just now"
    return f"{duration(delta)} ago" if delta > 0 else f"in {duration(delta)}"


@dataclass(frozen=True)
class Shown:
    """JSON as the page shows it: the text (cut when too long) and its full size."""

    text: str
    truncated: bool
    size: int


def to_json_text(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)


def shown_json(value: Any, limit: int = TEXT_LIMIT) -> Shown:
    return shown_text(to_json_text(value), limit)


def shown_text(text: str, limit: int = TEXT_LIMIT) -> Shown:
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return Shown(text, False, len(raw))
    # Cut on a character boundary: drop a partial UTF-8 sequence at the end.
    return Shown(raw[:limit].decode("utf-8", "ignore"), True, len(raw))


def _size(n: int) -> str:
    return f"{n} bytes" if n < 1024 else f"{n / 1024:.1f} KiB"


def _query(params: dict[str, Any]) -> str:
    kept = {k: v for k, v in params.items() if v is not None and v != ""}
    return "?" + urlencode(kept) if kept else ""


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,  # every template, whatever its name
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        utc=utc,
        duration=duration,
        size=_size,
        segment=lambda text: quote(str(text), safe=""),
        query=_query,
    )
    env.globals.update(age=age)
    return env
