"""What every ``cairnq`` command shares: the database target, exit codes,
error mapping and output (aligned tables or one JSON document)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import sqlite3
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

from cairnq.client import CairnQ
from cairnq.errors import (
    ProtocolVersionMismatch,
    SchemaMismatch,
    StoreClosed,
    UnsupportedBackend,
)
from cairnq.models import Task
from cairnq.store.validation import DURATION_MS_MAX, INT32_MAX, INT32_MIN, INT64_MAX

log = logging.getLogger("cairnq.cli")

__all__ = [
    "ENV_DB",
    "EXIT_DATABASE",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_KILLED",
    "EXIT_OK",
    "EXIT_USAGE",
    "EXIT_WORKERS_FAILING",
    "CliError",
    "DatabaseError",
    "Target",
    "any_int",
    "attempts_int",
    "check_text_arguments",
    "duration_ms",
    "emit_json",
    "fail",
    "fmt_duration",
    "fmt_time",
    "is_database_error",
    "log",
    "non_negative_int",
    "one_line",
    "open_client",
    "positive_duration_ms",
    "positive_int",
    "progress_bar",
    "resolve_target",
    "settle",
    "table",
    "task_dict",
    "with_client",
]

EXIT_OK = 0  # success
EXIT_FAILED = 1  # the operation failed: not found, not allowed, waited task not succeeded
EXIT_USAGE = 2  # bad command line (argparse's own code)
EXIT_DATABASE = 3  # cannot open/connect/migrate, protocol mismatch, driver error
EXIT_KILLED = 4  # worker --processes: workers still running after --grace-ms were killed
EXIT_WORKERS_FAILING = 5  # worker --processes: a worker process kept failing at start
EXIT_INTERRUPTED = 130  # a second signal (or Ctrl-C) interrupted the command

ENV_DB = "CAIRNQ_DB"
_PG_PREFIXES = ("postgres://", "postgresql://")


class CliError(Exception):
    """Ends the command with ``code`` and a one-line ``message`` on stderr."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


class DatabaseError(CliError):
    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_DATABASE)


# -- the database target ---------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Target:
    """Where the tasks live: ``dialect`` is "sqlite" or "postgres"."""

    dialect: str
    location: str  # SQLite path (user-expanded) or Postgres DSN

    @property
    def is_postgres(self) -> bool:
        return self.dialect == "postgres"

    def describe(self) -> str:
        """For humans: the SQLite path, or the DSN without its password."""
        if not self.is_postgres:
            return f"sqlite {self.location}"
        return f"postgres {_redact(self.location)}"

    def sqlite_exists(self) -> bool:
        if self.is_postgres or _sqlite_special(self.location):
            return True
        return os.path.exists(self.location)


def _sqlite_special(path: str) -> bool:
    return path in ("", ":memory:") or path.startswith("file:")


def _redact(dsn: str) -> str:
    scheme, sep, rest = dsn.partition("://")
    if not sep:
        return dsn
    creds, at, host = rest.rpartition("@")
    if not at or ":" not in creds:
        return dsn
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}"


def resolve_target(args: argparse.Namespace) -> Target:
    """``--db``, else ``$CAIRNQ_DB``; a postgres:// or postgresql:// URL is
    Postgres, anything else a SQLite path."""
    value = getattr(args, "db_target", None) or os.environ.get(ENV_DB) or ""
    value = value.strip()
    if not value:
        raise CliError(f"no database: pass --db PATH_OR_DSN or set {ENV_DB}", EXIT_USAGE)
    if value.lower().startswith(_PG_PREFIXES):
        return Target("postgres", value)
    return Target("sqlite", value if _sqlite_special(value) else os.path.expanduser(value))


def _driver_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [
        sqlite3.Error,
        ProtocolVersionMismatch,
        SchemaMismatch,
        StoreClosed,
        UnsupportedBackend,
    ]
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None:
        errors.append(psycopg.Error)
    pool = sys.modules.get("psycopg_pool")
    if pool is not None:
        errors.append(pool.PoolTimeout)
    return tuple(errors)


def is_database_error(exc: BaseException) -> bool:
    return isinstance(exc, _driver_errors())


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    name = type(exc).__name__
    return f"{name}: {text}" if text else name


@contextlib.asynccontextmanager
async def open_client(
    args: argparse.Namespace, *, create: bool = True, max_size: int = 2
) -> AsyncIterator[CairnQ]:
    """A connected client (migrations applied) on the chosen database.

    Anything that goes wrong while connecting is a DatabaseError (exit 3).
    With ``create=False`` a SQLite file that does not exist is refused rather
    than created, so a mistyped path does not make an empty queue appear.
    """
    target = resolve_target(args)
    if not create and not target.sqlite_exists():
        raise DatabaseError(f"cannot open {target.describe()}: no such file")
    log.debug("opening %s", target.describe())
    try:
        if target.is_postgres:
            client = CairnQ.postgres(target.location, min_size=1, max_size=max_size)
        else:
            client = CairnQ.sqlite(target.location)
        await client.connect()
    except CliError:
        raise
    except Exception as exc:
        log.debug("connect failed", exc_info=True)
        raise DatabaseError(f"cannot open {target.describe()}: {one_line(exc)}") from exc
    try:
        yield client
    finally:
        with contextlib.suppress(Exception):
            await client.close()
        await settle()


T = TypeVar("T")


def with_client(
    args: argparse.Namespace, work: Callable[[CairnQ], Awaitable[T]], *, create: bool = False
) -> T:
    """Run ``work(client)`` on a client of the chosen database and return
    what it returns: the one open/close around every command that reads or
    manages tasks (``create=False``: a SQLite file must exist already)."""

    async def run() -> T:
        async with open_client(args, create=create) as client:
            return await work(client)

    return asyncio.run(run())


async def settle(timeout_s: float = 2.0) -> None:
    """Let the tasks a store's close left behind (a listener connection still
    closing, say) finish, instead of having asyncio.run cancel them midway."""
    current = asyncio.current_task()
    pending = [t for t in asyncio.all_tasks() if t is not current and not t.done()]
    if pending:
        await asyncio.wait(pending, timeout=timeout_s)


# -- output ------------------------------------------------------------------------


def fail(command: str, message: str) -> None:
    print(f"cairnq {command}: {message}", file=sys.stderr)


def emit_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n")


def task_dict(task: Task) -> dict[str, Any]:
    return dataclasses.asdict(task)


def table(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], *, right: Iterable[int] = ()
) -> list[str]:
    """Aligned columns separated by two spaces; ``right`` holds the indexes of
    right-aligned (numeric) columns. The last column is not padded."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    right = set(right)
    lines = []
    for row in cells:
        parts = []
        for i, cell in enumerate(row):
            last = i == len(row) - 1
            if i in right:
                parts.append(cell.rjust(widths[i]))
            else:
                parts.append(cell if last else cell.ljust(widths[i]))
        lines.append("  ".join(parts).rstrip())
    return lines


def fmt_time(ms: int | None) -> str:
    if ms is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


def fmt_duration(ms: float) -> str:
    s = max(0.0, ms / 1000)
    if s < 60:
        return f"{s:.1f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    if s < 86400:
        return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    return f"{int(s // 86400)}d{int(s % 86400 // 3600):02d}h"


def progress_bar(progress: float | None, message: str | None, width: int = 10) -> str:
    """``[#####.....] 50% message``; progress is a fraction (0..1), clamped."""
    if progress is None:
        return message or ""
    fraction = min(1.0, max(0.0, float(progress)))
    filled = round(fraction * width)
    bar = f"[{'#' * filled}{'.' * (width - filled)}] {int(fraction * 100 + 1e-6)}%"
    return f"{bar} {message}" if message else bar


# -- argparse value types -------------------------------------------------------------


def _int_type(minimum: int, maximum: int) -> Any:
    """An int flag within what the store takes (a huge value is a usage error,
    not a traceback from the store's own check)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:  # also a number too long to convert
            raise argparse.ArgumentTypeError(f"invalid integer: {text[:40]!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        if value > maximum:
            raise argparse.ArgumentTypeError(f"must be <= {maximum}, got {value}")
        return value

    parse.__name__ = "int"
    return parse


non_negative_int = _int_type(0, INT64_MAX)  # counts: limits, offsets
positive_int = _int_type(1, INT64_MAX)
any_int = _int_type(INT32_MIN, INT32_MAX)  # priority
attempts_int = _int_type(1, INT32_MAX)
duration_ms = _int_type(0, DURATION_MS_MAX)
positive_duration_ms = _int_type(1, DURATION_MS_MAX)


def check_text_arguments(args: argparse.Namespace) -> None:
    """Every text argument must be UTF-8 (bytes that are not arrive as lone
    surrogates, which no database column takes); the database path may be
    anything the file system takes."""
    for dest, value in vars(args).items():
        if dest == "db_target" or not isinstance(value, str):
            continue
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise CliError(f"argument {value!r} is not valid UTF-8", EXIT_USAGE) from None
