"""``cairnq worker module:attr``: run a worker process until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import os
import stat
import sys
from typing import Any

from cairnq.cli.common import (
    ENV_DB,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    is_database_error,
    log,
    one_line,
    open_client,
    positive_duration_ms,
    positive_int,
    resolve_target,
)
from cairnq.cli.supervisor import Policy, supervise
from cairnq.worker import Worker, lifecycle

__all__ = ["add_parser", "load_target"]

_EPILOG = """\
TARGET is module:attr (attr may be dotted). The module is imported with the
current directory first on sys.path. attr is either

  * a Worker instance, run as it is: its store, queues, lease and poll
    interval are its own (--db, --queues, --lease-ms and --poll-interval-ms
    do not apply; --concurrency still caps the calls in flight), e.g.

        # tasks.py                       $ cairnq worker tasks:worker
        from cairnq import Worker

        worker = Worker.sqlite("tasks.db", concurrency=8)

        @worker.task("math.square")
        async def square(ctx, payload):
            return {"square": payload["n"] ** 2}

  * or a callable taking a Worker (a registration function): the CLI builds
    the Worker on --db / $CAIRNQ_DB with the flags below and calls attr(worker)
    to register the handlers, e.g.

        # tasks.py                       $ cairnq --db tasks.db worker tasks:setup
        async def square(ctx, payload):
            return {"square": payload["n"] ** 2}

        def setup(worker):
            worker.register("math.square", square)

The first SIGINT or SIGTERM stops claiming and lets the calls in flight
finish (exit 0); a second one interrupts.

--processes N (or auto: one per usable core) runs N worker processes under a
supervisor; each is this same command (it imports TARGET and opens its own
connection). One process (the default) runs in this process, as above. The
supervisor
  * restarts a worker process that dies, after 0.5 s doubling up to 30 s
    (back to 0.5 s once one has run for 10 s); a worker process that dies
    within 10 s of starting 5 times in a row ends everything (exit 5), one
    that ends with a usage error too (exit 2);
  * forwards the first SIGINT/SIGTERM (Ctrl-C counts once): every worker
    process drains, none is restarted; a second one interrupts them (exit
    130); those still running --grace-ms after the first are killed (exit
    4; their tasks are claimed again once their leases expire);
  * exits 0 when every worker process drained cleanly, 1 when one ended with
    an error while draining.
If the supervisor itself is killed, its worker processes notice and drain.
"""


def add_parser(commands: Any, common: Any) -> None:
    p = commands.add_parser(
        "worker",
        parents=[common],
        help="run handlers from module:attr until SIGINT/SIGTERM",
        description="Run a worker in this process until SIGINT/SIGTERM (graceful drain).",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("target", metavar="TARGET", help="module:attr (see below)")
    p.add_argument(
        "--queues",
        metavar="Q1,Q2",
        default=None,
        help="comma-separated queues to claim from (default: default)",
    )
    p.add_argument(
        "--concurrency", type=positive_int, default=None, help="handler calls in flight (default 1)"
    )
    p.add_argument(
        "--lease-ms", type=positive_duration_ms, default=None, help="lease per claim (default 30000)"
    )
    p.add_argument(
        "--poll-interval-ms",
        type=positive_duration_ms,
        default=None,
        help="longest idle wait between claims (default 500)",
    )
    p.add_argument(
        "--processes",
        type=processes_count,
        default=1,
        metavar="N|auto",
        help="worker processes under one supervisor (default 1: this process; "
        "auto: one per usable core)",
    )
    p.add_argument(
        "--grace-ms",
        type=positive_duration_ms,
        default=DEFAULT_GRACE_MS,
        help="with --processes: how long after the first signal the worker processes "
        f"may drain before they are killed (default {DEFAULT_GRACE_MS})",
    )
    p.add_argument(
        "--metrics-port",
        type=port_number,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics on http://HOST:PORT/metrics and health on /healthz "
        "(needs cairnq[prometheus]; e.g. 9464)",
    )
    p.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        metavar="HOST",
        help="address the metrics endpoint binds (default 127.0.0.1: this machine only)",
    )
    p.add_argument(
        "--metrics-interval-ms",
        type=positive_duration_ms,
        default=5_000,
        help="how often queue depth and store reachability are read (default 5000)",
    )
    p.add_argument(
        "--metrics-statements",
        action="store_true",
        help="also count every protocol statement and its latency",
    )
    # Given by the supervisor to its children: where to announce their metrics port.
    p.add_argument("--metrics-dir", default=None, help=argparse.SUPPRESS)
    # Given by the supervisor to its children: the read end of its lifeline.
    p.add_argument("--supervisor-fd", type=int, default=None, help=argparse.SUPPRESS)
    p.set_defaults(run=run, parser=p)


DEFAULT_GRACE_MS = 30_000


def port_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text[:40]!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be from 0 to 65535, got {value}")
    return value

MAX_PROCESSES = 256


def usable_cores() -> int:
    counted = getattr(os, "process_cpu_count", None)  # Python 3.13+
    if counted is not None:
        return int(counted() or 1)
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def processes_count(text: str) -> int:
    """``--processes``: a count from 1 to MAX_PROCESSES, or ``auto``."""
    if text.strip().lower() == "auto":
        return min(usable_cores(), MAX_PROCESSES)
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number of processes or auto, got {text[:40]!r}"
        ) from None
    if not 1 <= value <= MAX_PROCESSES:
        raise argparse.ArgumentTypeError(f"must be from 1 to {MAX_PROCESSES}, got {value}")
    return value


def load_target(spec: str) -> Any:
    """Import ``module:attr`` with the current directory on sys.path."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise CliError(f"TARGET must be module:attr, got {spec!r}", EXIT_USAGE)
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        log.debug("import of %s failed", module_name, exc_info=True)
        raise CliError(f"cannot import {module_name!r}: {exc}", EXIT_USAGE) from exc
    except Exception as exc:  # the module's own code raised (or does not compile)
        log.debug("import of %s failed", module_name, exc_info=True)
        raise CliError(f"cannot import {module_name!r}: {one_line(exc)}", EXIT_USAGE) from exc
    value: Any = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise CliError(
                f"module {module_name!r} has no attribute {attr!r}", EXIT_USAGE
            ) from None
        except Exception as exc:  # a module __getattr__ or property that raised
            raise CliError(f"cannot read {spec}: {one_line(exc)}", EXIT_USAGE) from exc
    return value


def _queues(text: str | None) -> list[str] | None:
    if text is None:
        return None
    queues = [q.strip() for q in text.split(",") if q.strip()]
    if not queues:
        raise CliError("--queues needs at least one queue name", EXIT_USAGE)
    return queues


def run(args: argparse.Namespace) -> int:
    queues = _queues(args.queues)
    if args.processes > 1:
        return _supervise(args)
    if args.supervisor_fd is not None:
        _check_lifeline(args.supervisor_fd)
    target = load_target(args.target)
    if isinstance(target, Worker):
        fixed = [
            flag
            for flag, value in (
                ("--queues", args.queues),
                ("--lease-ms", args.lease_ms),
                ("--poll-interval-ms", args.poll_interval_ms),
            )
            if value is not None
        ]
        if fixed:
            raise CliError(
                f"{', '.join(fixed)}: {args.target} is a Worker instance; configure it in code",
                EXIT_USAGE,
            )
        if getattr(args, "db_target", None):
            log.warning("--db ignored: %s is a Worker with a store of its own", args.target)
        worker = target
    elif callable(target) and not inspect.isclass(target):
        if inspect.iscoroutinefunction(target):
            raise CliError(
                f"{args.target} must be a plain function taking the worker, not async", EXIT_USAGE
            )
        worker = _build_worker(args, queues)
        try:
            inspect.signature(target).bind(worker)
        except (TypeError, ValueError) as exc:
            if isinstance(exc, TypeError):
                raise CliError(
                    f"{args.target} cannot be called with the worker: {exc}", EXIT_USAGE
                ) from None
        # Fail fast, with exit 3, on a database that cannot be opened.
        asyncio.run(_preflight(args))
        _register(args.target, target, worker)
    else:
        raise CliError(
            f"{args.target} is a {type(target).__name__}: expected a Worker or a function "
            "taking one",
            EXIT_USAGE,
        )
    closers = _observe(args, worker)
    try:
        log.info("worker %s serving on %r", worker.worker_id, worker.store)
        if args.supervisor_fd is None:
            worker.serve(concurrency=args.concurrency)
        else:
            # The process ends after this, so the store is closed whoever built it.
            lifecycle.serve(
                worker, args.concurrency, close_store=True, drain_on_eof=args.supervisor_fd
            )
        log.info("worker %s stopped", worker.worker_id)
    finally:
        for close in closers:
            close()
    return EXIT_OK


def _observe(args: argparse.Namespace, worker: Worker) -> list[Any]:
    """JSON log fields and the metrics endpoint, as asked; returns what ends them."""
    closers: list[Any] = []
    if getattr(args, "log_format", None) == "json":
        import logging

        from cairnq.observability.logs import JsonFormatter, track_tasks

        for handler in logging.getLogger().handlers:
            if isinstance(handler.formatter, JsonFormatter):
                handler.formatter.static["worker_id"] = worker.worker_id
        closers.append(track_tasks())
    if args.metrics_port is not None:
        try:
            from cairnq.observability import serve_metrics

            server = serve_metrics(
                worker,
                port=args.metrics_port,
                host=args.metrics_host,
                statements=args.metrics_statements,
                sample_interval_s=args.metrics_interval_ms / 1000,
            )
        except ImportError as exc:
            raise CliError(str(exc), EXIT_USAGE) from None
        except OSError as exc:
            raise CliError(
                f"cannot serve metrics on {args.metrics_host}:{args.metrics_port}: {one_line(exc)}",
                EXIT_USAGE,
            ) from None
        log.info("metrics on http://%s:%d/metrics", server.host, server.port)
        closers.append(server.close)
        if args.metrics_dir is not None:  # a child of a supervisor: tell it where
            from cairnq.observability.aggregate import announce

            closers.insert(0, announce(args.metrics_dir, server.port))
    return closers


def _check_lifeline(fd: int) -> None:
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            raise CliError(f"--supervisor-fd {fd} is not a pipe", EXIT_USAGE)
    except (OSError, OverflowError) as exc:
        raise CliError(f"--supervisor-fd {fd}: {one_line(exc)}", EXIT_USAGE) from None


def _supervise(args: argparse.Namespace) -> int:
    """Run this command ``--processes`` times under a supervisor."""
    if os.name != "posix":
        raise CliError("--processes above 1 needs a POSIX system", EXIT_USAGE)
    module_name, sep, attr = args.target.partition(":")
    if not sep or not module_name or not attr:
        raise CliError(f"TARGET must be module:attr, got {args.target!r}", EXIT_USAGE)
    command = [sys.executable, "-m", "cairnq"]
    if getattr(args, "verbose", 0):
        command.append("-" + "v" * args.verbose)
    if getattr(args, "log_level", None):
        command += ["--log-level", args.log_level]
    command += ["worker", args.target]
    for flag, value in (
        ("--queues", args.queues),
        ("--concurrency", args.concurrency),
        ("--lease-ms", args.lease_ms),
        ("--poll-interval-ms", args.poll_interval_ms),
        ("--log-format", getattr(args, "log_format", None)),
    ):
        if value is not None:
            command += [flag, str(value)]
    env = dict(os.environ)
    if getattr(args, "db_target", None):
        env[ENV_DB] = args.db_target  # not on the command line, where ps shows a password
    log.info("supervising %d worker processes of %s", args.processes, args.target)
    policy = Policy(grace_s=args.grace_ms / 1000)
    if args.metrics_port is None:
        return supervise(command, env, args.processes, policy)
    return _supervise_with_metrics(args, command, env, policy)


def _supervise_with_metrics(
    args: argparse.Namespace, command: list[str], env: dict[str, str], policy: Policy
) -> int:
    """Children serve on free local ports and announce them in a directory of
    this run; the supervisor serves one endpoint merging theirs."""
    import shutil
    import tempfile

    from cairnq.observability.aggregate import Aggregator

    directory = tempfile.mkdtemp(prefix="cairnq-metrics-")
    command = command + [
        "--metrics-port", "0", "--metrics-host", "127.0.0.1", "--metrics-dir", directory,
        "--metrics-interval-ms", str(args.metrics_interval_ms),
    ]  # fmt: skip
    if args.metrics_statements:
        command.append("--metrics-statements")
    try:
        try:
            aggregator = Aggregator(directory, args.processes, args.metrics_host, args.metrics_port)
        except OSError as exc:
            raise CliError(
                f"cannot serve metrics on {args.metrics_host}:{args.metrics_port}: {one_line(exc)}",
                EXIT_USAGE,
            ) from None
        log.info("metrics of %d processes on http://%s:%d/metrics",
                 args.processes, args.metrics_host, aggregator.port)  # fmt: skip
        try:
            return supervise(command, env, args.processes, policy)
        finally:
            aggregator.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _register(spec: str, setup: Any, worker: Worker) -> None:
    """Run the registration function; its failure is the command's (exit 2,
    the cause on one line), a database's stays a database error (exit 3)."""
    try:
        setup(worker)
    except Exception as exc:
        if is_database_error(exc):
            raise
        log.debug("%s raised", spec, exc_info=True)
        raise CliError(f"{spec} raised {one_line(exc)}", EXIT_USAGE) from exc


async def _preflight(args: argparse.Namespace) -> None:
    async with open_client(args, max_size=1):
        pass


def _build_worker(args: argparse.Namespace, queues: list[str] | None) -> Worker:
    target = resolve_target(args)
    kwargs: dict[str, Any] = {}
    if queues is not None:
        kwargs["queues"] = queues
    if args.concurrency is not None:
        kwargs["concurrency"] = args.concurrency
    if args.lease_ms is not None:
        kwargs["lease_ms"] = args.lease_ms
    if args.poll_interval_ms is not None:
        kwargs["poll_interval_ms"] = args.poll_interval_ms
    try:
        if target.is_postgres:
            return Worker.postgres(target.location, **kwargs)
        return Worker.sqlite(target.location, **kwargs)
    except (TypeError, ValueError) as exc:
        raise CliError(f"cannot build the worker: {exc}", EXIT_USAGE) from exc
