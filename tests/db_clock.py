"""The window a row's stamp must fall in, as the store tests check it.

SQLite stamps rows with the SDK clock, ``int(time.time() * 1000)``: what
``now_ms`` here reads. PostgreSQL stamps them with the database clock,
``(extract(epoch from now()) * 1000)::bigint``, which rounds to the nearest
millisecond where the SDK clock truncates: its stamp may read one more than
``now_ms()`` taken after it (``latest_ms``), and a check across the two clocks
allows them a second apart (``assert_within``).
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["now_ms", "latest_ms", "slack", "assert_within"]


def now_ms() -> int:
    return int(time.time() * 1000)


def latest_ms() -> int:
    """An upper bound for a stamp the database made before now."""
    return now_ms() + 1


def slack(backend: Any) -> int:
    """SQLite stamps rows with the SDK clock (exact); Postgres with the DB clock."""
    return 0 if backend.dialect == "sqlite" else 1000


def assert_within(value: Any, before: int, after: int, backend: Any) -> None:
    s = slack(backend)
    assert type(value) is int
    assert before - s <= value <= after + s, (value, before, after)
