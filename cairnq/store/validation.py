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


# -- the worker's arguments (Worker, its registry) ----------------------------------
# Refused at construction what would otherwise fail later, on every claim or
# settlement; each argument by name, in 0.15.1's words where it checked at all.


def check_max_run_ms(value: Any) -> None:
    """None, or a positive int (0.15.1's order and words)."""
    if value is not None:
        check_int("max_run_ms", value)
        if value <= 0:
            raise ValueError(f"max_run_ms must be > 0, got {value}")


def check_capacities(resources: Any) -> dict[str, int]:
    """``resources=``: None, or a dict of resource name -> capacity >= 1."""
    from collections.abc import Mapping

    capacities: dict[str, int] = {}
    if resources is None:
        return capacities
    if not isinstance(resources, Mapping):
        raise TypeError(
            f"resources must be a dict of name -> capacity, got {type(resources).__name__}"
        )
    for resource, capacity in resources.items():
        if not isinstance(resource, str):
            raise TypeError(f"resources keys must be str, got {type(resource).__name__}")
        check_int(f"resources[{resource!r}]", capacity, minimum=1)
        capacities[resource] = capacity
    return capacities


def check_worker_store(store: Any) -> None:
    """A store object, not the path of one."""
    import os

    if isinstance(store, (str, bytes, os.PathLike)):
        raise TypeError(
            f"store must be a TaskStore, got {type(store).__name__} "
            "(for a file path use Worker.sqlite(path))"
        )


def check_queue_names(queues: Any) -> list[str]:
    """A worker's ``queues``: a non-empty list of non-empty names."""
    if isinstance(queues, str):
        raise TypeError("queues must be a list of queue names, not a str")
    names: list[str] = list(queues)
    if not names or not all(isinstance(q, str) and q for q in names):
        raise ValueError(f"queues must be non-empty names, got {names!r}")
    return names


def check_ints(ranges: Sequence[tuple[str, Any, int, int | None]]) -> None:
    """``(name, value, minimum, maximum)`` for each optional int: None passes."""
    for what, value, minimum, maximum in ranges:
        if value is not None:
            check_int(what, value, minimum=minimum, maximum=maximum)


def check_callable(what: str, value: Any) -> None:
    """None, or something callable."""
    if value is not None and not callable(value):
        raise TypeError(f"{what} must be callable, got {type(value).__name__}")
