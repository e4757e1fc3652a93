"""Argument checks shared by the store's operations: a clear TypeError or
ValueError before anything is written.

Text that names things (task names, queues, keys, ids, worker ids) obeys one
rule on both dialects, so whatever works on SQLite works on PostgreSQL:

* valid Unicode: no lone surrogates (they cannot be encoded as UTF-8; SQLite's
  driver fails to bind them, PostgreSQL refuses them);
* no NUL (U+0000): PostgreSQL text cannot hold it;
* at most ``MAX_TEXT_BYTES`` bytes of UTF-8: these columns are indexed, and a
  PostgreSQL btree entry must fit in a third of a page (~2.7 kB) with the
  other columns of the claim index beside it.

Free text (a progress message) obeys the first two rules only.
"""

from __future__ import annotations

from typing import Any, Sequence

from cairnq.models import STATUSES, TERMINAL

__all__ = [
    "INT32_MIN",
    "INT32_MAX",
    "INT64_MAX",
    "DURATION_MS_MAX",
    "check_int",
    "check_text",
    "check_message",
    "check_task_id",
    "MAX_TEXT_BYTES",
    "check_status",
    "unique_names",
    "validate_purge_input",
]

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1  # priority and attempts are int4 on Postgres
INT64_MAX = 2**63 - 1  # counts and limits are int8 on Postgres, INTEGER on SQLite
# Durations are added to "now" in milliseconds; this keeps the sum inside int8
# (about 146 million years), so the database never sees an overflow.
DURATION_MS_MAX = 2**62
MAX_TEXT_BYTES = 1024
_TERMINAL = frozenset(TERMINAL)
_STATUSES = frozenset(STATUSES)


def check_int(
    what: str, value: Any, *, minimum: int | None = None, maximum: int | None = None
) -> None:
    if type(value) is not int:  # bool is an int subclass and never meant here
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{what} must be an int, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{what} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{what} must be <= {maximum}, got {value}")


def check_text(what: str, value: Any, *, optional: bool = False, empty: bool = False) -> None:
    """A str (None too when ``optional``; "" too when ``empty``) that names
    something: valid Unicode, no NUL, at most MAX_TEXT_BYTES of UTF-8."""
    if value is None and optional:
        return
    if type(value) is str and value.isascii():
        # The common case, without encoding: ASCII length is UTF-8 length.
        if 0 < len(value) <= MAX_TEXT_BYTES and "\x00" not in value:
            return
    elif not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {type(value).__name__}")
    if not value and not empty:
        raise ValueError(f"{what} must not be empty")
    _check_unicode(what, value)
    size = len(value.encode("utf-8"))
    if size > MAX_TEXT_BYTES:
        raise ValueError(
            f"{what} must be at most {MAX_TEXT_BYTES} bytes of UTF-8, got {size} bytes"
        )


def check_message(what: str, value: Any) -> None:
    """Free text (None allowed): valid Unicode without NUL, any length."""
    if value is None:
        return
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {type(value).__name__}")
    if value.isascii():
        if "\x00" in value:
            _check_unicode(what, value)
        return
    _check_unicode(what, value)


def check_task_id(value: Any, what: str = "task_id") -> None:
    """A task id to look up: any str that can be bound (an id that does not
    exist is simply not found); not an int or None by mistake."""
    if type(value) is str and value.isascii() and "\x00" not in value:
        return
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {type(value).__name__}")
    _check_unicode(what, value)


def _check_unicode(what: str, value: str) -> None:
    if "\x00" in value:
        raise ValueError(f"{what} must not contain NUL (U+0000): PostgreSQL text cannot hold it")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{what} must be valid Unicode: lone surrogate {value[exc.start]!r} at index "
            f"{exc.start} cannot be encoded as UTF-8"
        ) from None


def check_status(status: Any) -> None:
    if status is not None and status not in _STATUSES:
        raise ValueError(f"unknown status filter: {status!r}; expected one of {STATUSES}")


def unique_names(values: Sequence[str], what: str) -> list[str]:
    if isinstance(values, str):
        raise TypeError(f"{what} must be a list of str, not a str")
    out = list(dict.fromkeys(values))
    for v in out:
        check_text(f"each of {what}", v)
    return out


def validate_purge_input(*, older_than_ms: int, status: str | None, limit: int) -> None:
    check_int("older_than_ms", older_than_ms, minimum=0, maximum=DURATION_MS_MAX)
    check_int("limit", limit, minimum=1, maximum=INT64_MAX)
    if status is not None and status not in _TERMINAL:
        raise ValueError(f"status must be terminal, got {status!r}; expected one of {TERMINAL}")
