"""``cairnq <command>``: argument parsing and dispatch.

``main(argv)`` returns the exit code (it never calls ``sys.exit`` itself):
0 success, 1 the operation failed, 2 usage error, 3 database error; 4, 5 and
130 are ``worker``'s (see the epilog).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

import cairnq
from cairnq import _distribution

# The reference SDK's `cairnq`, installed after us, may own the package now.
_distribution.refuse_unless_ours("the `cairnq` command")

from cairnq.cli import dashboard, demo, migrate, schedules, tasks, top, worker
from cairnq.cli.common import (
    ENV_DB,
    EXIT_DATABASE,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    CliError,
    check_text_arguments,
    is_database_error,
    log,
    one_line,
)
from cairnq.store.ops.core import SUPPORTED_PROTOCOL_MAJOR

__all__ = ["build_parser", "main", "version_line"]

_EPILOG = f"""\
database:
  --db PATH_OR_DSN (or ${ENV_DB}): a value starting with postgres:// or
  postgresql:// is a PostgreSQL DSN, anything else a SQLite file. Commands
  that only read or manage tasks refuse a SQLite file that does not exist;
  submit, worker and migrate create it.

global options (--db, --json, -v, --log-level) go before or after the command.

exit codes:
  0  success
  1  the operation failed (task not found, not cancelable/retryable, key
     taken, a --wait that ended other than succeeded)
  2  usage error
  3  database error (cannot open or connect, protocol mismatch)
  4  worker --processes: worker processes still running --grace-ms after
     the first signal had to be killed
  5  worker --processes: a worker process kept failing at start
  130  interrupted (a second SIGINT/SIGTERM, or Ctrl-C outside a worker)
"""

_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _common_options(*, suppress: bool) -> argparse.ArgumentParser:
    """The global options. On the subcommands their defaults are suppressed,
    so a value given before the command is not reset by the subparser."""
    common = argparse.ArgumentParser(add_help=False)
    default = argparse.SUPPRESS if suppress else None
    group = common.add_argument_group("global options")
    group.add_argument(
        "--db",
        dest="db_target",
        metavar="PATH_OR_DSN",
        default=default,
        help=f"SQLite file or postgres:// DSN (default: ${ENV_DB})",
    )
    group.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS if suppress else False,
        help="machine-readable output: one JSON document",
    )
    group.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=argparse.SUPPRESS if suppress else 0,
        help="log cairnq's INFO messages to stderr (-vv: DEBUG)",
    )
    group.add_argument(
        "--log-level",
        type=str.upper,
        choices=_LEVELS,
        default=default,
        help="log level of the cairnq loggers (overrides -v)",
    )
    group.add_argument(
        "--log-format",
        choices=("text", "json"),
        default=default,
        help="log lines as text (default) or one JSON object each (implies INFO "
        "unless -v or --log-level say otherwise)",
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cairnq",
        description="CairnQ durable task queue",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[_common_options(suppress=False)],
    )
    parser.add_argument(
        "--version",
        action="version",
        version=version_line(),
        help="print the implementation, its version, the active kernels and the protocol",
    )
    common = _common_options(suppress=True)
    commands = parser.add_subparsers(dest="command", required=True, metavar="command")
    worker.add_parser(commands, common)
    tasks.add_parsers(commands, common)
    migrate.add_parser(commands, common)
    top.add_parser(commands, common)
    schedules.add_parser(commands, common)
    dashboard.add_parser(commands, common)
    demo.add_parser(commands)
    return parser


def version_line() -> str:
    """``cairnq-fast 0.16.0 (kernels: cython; protocol 1)``: which implementation
    and distribution is active, its kernels and the storage protocol it speaks."""
    return (
        f"{cairnq.IMPLEMENTATION} {cairnq.__version__} "
        f"(kernels: {cairnq.SPEEDUPS}; protocol {SUPPORTED_PROTOCOL_MAJOR})"
    )


class _Logging:
    """Route the ``cairnq`` loggers to stderr at the asked level, for the
    duration of one ``main()`` call (restored afterwards). JSON lines go on
    the root logger instead, so the handlers' own loggers (at INFO and above,
    or the asked level) come out as JSON too."""

    def __init__(self, verbose: int, level_name: str | None, fmt: str | None = None) -> None:
        self.logger = logging.getLogger("cairnq")
        self.handler: logging.Handler | None = None
        self.formatter: logging.Formatter | None = None
        json_lines = fmt == "json"
        if level_name is None and not verbose and not json_lines:
            return  # untouched: warnings still reach stderr (logging's last resort)
        level = (
            getattr(logging, level_name)
            if level_name
            else (logging.DEBUG if verbose >= 2 else logging.INFO)
        )
        self.handler = logging.StreamHandler(sys.stderr)
        if json_lines:
            from cairnq.observability.logs import JsonFormatter

            self.formatter = JsonFormatter()
            self.owner = logging.getLogger()
        else:
            self.formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
            self.owner = self.logger
        self.handler.setFormatter(self.formatter)
        self.saved = (self.logger.level, self.logger.propagate, self.owner.level)
        self.owner.addHandler(self.handler)
        self.owner.setLevel(level)
        self.logger.setLevel(level)
        self.logger.propagate = json_lines

    def restore(self) -> None:
        if self.handler is not None:
            self.owner.removeHandler(self.handler)
            self.owner.setLevel(self.saved[2])
            self.logger.setLevel(self.saved[0])
            self.logger.propagate = self.saved[1]
            self.handler = None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USAGE)
    logs = _Logging(
        getattr(args, "verbose", 0) or 0,
        getattr(args, "log_level", None),
        getattr(args, "log_format", None),
    )
    command = args.command
    try:
        check_text_arguments(args)
        return int(args.run(args) or 0)
    except SystemExit as exc:  # a subparser's error() after parsing
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    except CliError as exc:
        print(f"cairnq {command}: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_FAILED
    except Exception as exc:
        if not is_database_error(exc):
            raise
        log.debug("database error", exc_info=True)
        print(f"cairnq {command}: database error: {one_line(exc)}", file=sys.stderr)
        return EXIT_DATABASE
    finally:
        logs.restore()


def _silence_stdout() -> None:
    """After the reader of our stdout went away (``cairnq list | head``)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


if __name__ == "__main__":
    sys.exit(main())
