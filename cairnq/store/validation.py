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

import math
import os
import re
from collections.abc import Mapping
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
    "check_submit",
    "check_lease_ms",
    "check_task_ids",
    "check_progress",
    "check_list_window",
    "check_busy_timeout_ms",
    "check_choice",
    "check_schema_name",
    "PLAIN_IDENT",
    "MAX_SCHEMA_BYTES",
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


def check_submit(
    conflict: Any,
    conflicts: Sequence[str],
    max_attempts: Any,
    delay_ms: Any,
    priority: Any,
    name: Any,
    queue: Any,
    key: Any,
    parent_id: Any,
    root_id: Any,
    correlation_id: Any,
    metadata: Any,
) -> None:
    """Every argument of ``submit`` that reaches a column."""
    if conflict not in conflicts:
        raise ValueError(f"unknown conflict strategy: {conflict!r}; expected one of {tuple(conflicts)}")
    # Exact-type fast path first: the full checks only run to explain a failure.
    if not (
        type(max_attempts) is int
        and 1 <= max_attempts <= INT32_MAX
        and type(delay_ms) is int
        and 0 <= delay_ms <= DURATION_MS_MAX
        and type(priority) is int
        and INT32_MIN <= priority <= INT32_MAX
    ):
        check_int("max_attempts", max_attempts, minimum=1, maximum=INT32_MAX)
        check_int("delay_ms", delay_ms, minimum=0, maximum=DURATION_MS_MAX)
        check_int("priority", priority, minimum=INT32_MIN, maximum=INT32_MAX)
    check_text("name", name)
    check_text("queue", queue)
    if key is not None or parent_id is not None or root_id is not None or correlation_id is not None:
        check_text("key", key, optional=True, empty=True)  # keys are opaque: "" is one
        check_text("parent_id", parent_id, optional=True)
        check_text("root_id", root_id, optional=True)
        check_text("correlation_id", correlation_id, optional=True)
    if metadata is not None and not isinstance(metadata, dict):
        raise TypeError(f"metadata must be a dict, got {type(metadata).__name__}")


def check_lease_ms(lease_ms: Any) -> None:
    check_int("lease_ms", lease_ms, minimum=0, maximum=DURATION_MS_MAX)  # 0: expired at once


def check_task_ids(task_ids: Any) -> None:
    """A list of task ids (a lone str is a mistake, not a list of letters)."""
    if isinstance(task_ids, str):
        raise TypeError("task_ids must be a list of str, not a str")
    for task_id in task_ids:
        check_task_id(task_id, "each of task_ids")


def check_progress(progress: Any) -> None:
    if progress is not None:
        if isinstance(progress, bool) or not isinstance(progress, (int, float)):
            raise TypeError(f"progress must be a number, got {type(progress).__name__}")
        if not math.isfinite(progress):
            raise ValueError(f"progress must be finite, got {progress!r}")


def check_list_window(limit: Any, offset: Any) -> None:
    check_int("limit", limit, maximum=INT64_MAX)
    check_int("offset", offset, maximum=INT64_MAX)
    if limit < 0 or offset < 0:
        raise ValueError(f"limit/offset must be >= 0, got limit={limit} offset={offset}")


def check_busy_timeout_ms(busy_timeout_ms: Any) -> None:
    if isinstance(busy_timeout_ms, bool) or not isinstance(busy_timeout_ms, int):
        raise TypeError("busy_timeout_ms must be an int")
    if busy_timeout_ms < 0:
        raise ValueError(f"busy_timeout_ms must be >= 0, got {busy_timeout_ms}")


def check_choice(what: str, value: Any, choices: Sequence[str]) -> None:
    """``value`` (case-insensitive) is one of ``choices``."""
    if value.lower() not in choices:
        raise ValueError(f"{what} must be one of {choices}, got {value!r}")


# PostgreSQL keeps the first NAMEDATALEN - 1 bytes of an identifier and
# silently drops the rest: a longer name would create a different schema.
MAX_SCHEMA_BYTES = 63
PLAIN_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*$")


def check_schema_name(schema: str) -> None:
    """A schema name must be a plain identifier (it is double-quoted, never
    escaped), fit PostgreSQL's identifier length, and not be a system schema."""
    # (fullmatch: ``$`` alone also matches before a final line break)
    if not isinstance(schema, str) or not PLAIN_IDENT.fullmatch(schema):
        raise ValueError(
            "schema must be a plain identifier (letters, digits, _ and $, not starting "
            f"with a digit), got {schema!r}"
        )
    if len(schema) > MAX_SCHEMA_BYTES:
        raise ValueError(
            f"schema must be at most {MAX_SCHEMA_BYTES} characters (PostgreSQL truncates "
            f"longer identifiers), got {len(schema)}: {schema!r}"
        )
    lowered = schema.lower()
    if lowered == "information_schema" or lowered.startswith("pg_"):
        raise ValueError(
            f"schema {schema!r} is reserved for PostgreSQL's own catalogs "
            "(information_schema and pg_*); choose another name"
        )


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
