"""``python manage.py cairnq_worker``: run the project's Django tasks until
SIGINT/SIGTERM (the first drains: the tasks in flight finish; a second
interrupts). ``--processes N`` runs N such workers under cairnq's supervisor
(restarts, one shutdown for all, no orphans: see ``cairnq worker --help``)."""

# mypy: disallow-subclassing-any=False

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from cairnq.cli.supervisor import Policy, supervise
from cairnq.cli.worker import DEFAULT_GRACE_MS, processes_count
from cairnq.contrib.django._django import (
    BaseCommand,
    CommandError,
    CommandParser,
    InvalidTaskBackend,
    settings,
    task_backends,
)
from cairnq.contrib.django.backend import CairnQBackend
from cairnq.contrib.django.results import resolve_task
from cairnq.contrib.django.runner import DjangoRunner, discover_tasks
from cairnq.worker import Worker, lifecycle


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text[:40]!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


class Command(BaseCommand):
    help = "Run the Django tasks of a cairnq task backend until SIGINT/SIGTERM."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--backend", default="default", help="the TASKS alias to serve (default: default)"
        )
        parser.add_argument(
            "--queue", action="append", default=None, metavar="Q[,Q2]",
            help="a queue to claim from; repeat or comma-separate (default: the backend's QUEUES)",
        )  # fmt: skip
        parser.add_argument(
            "--concurrency", type=_positive, default=1,
            help="tasks in flight per process; sync tasks run in as many threads (default 1)",
        )  # fmt: skip
        parser.add_argument(
            "--processes", type=processes_count, default=1, metavar="N|auto",
            help="worker processes under one supervisor (default 1: this process; "
            "auto: one per usable core)",
        )  # fmt: skip
        parser.add_argument(
            "--poll-interval-ms", type=_positive, default=500,
            help="longest idle wait between claims (default 500)",
        )  # fmt: skip
        parser.add_argument(
            "--lease-ms", type=_positive, default=30_000, help="lease per claim (default 30000)"
        )
        parser.add_argument(
            "--grace-ms", type=_positive, default=DEFAULT_GRACE_MS,
            help="with --processes: how long the worker processes may drain after the first "
            f"signal before they are killed (default {DEFAULT_GRACE_MS})",
        )  # fmt: skip
        parser.add_argument(
            "--task", action="append", default=[], metavar="IMPORT.PATH",
            help="also run this task (by import path) when discovery would not find it",
        )  # fmt: skip
        # Given by the supervisor to its children: the read end of its lifeline.
        parser.add_argument("--supervisor-fd", type=int, default=None, help=argparse.SUPPRESS)

    def handle(self, *args: Any, **options: Any) -> None:
        alias = options["backend"]
        try:
            backend = task_backends[alias]
        except InvalidTaskBackend as exc:
            raise CommandError(str(exc)) from exc
        if not isinstance(backend, CairnQBackend):
            raise CommandError(
                f"TASKS[{alias!r}] is a {type(backend).__name__}, not "
                "cairnq.contrib.django.CairnQBackend"
            )
        queues = _queues(options["queue"]) or backend.worker_queues()
        extra = []
        for path in options["task"]:
            try:
                extra.append(resolve_task(path).module_path)
            except ValueError as exc:
                raise CommandError(f"--task {path}: {exc}") from exc
        if options["processes"] > 1:
            code = self._supervise(options)
            if code:
                sys.exit(code)
            return
        worker = Worker(
            backend.spec.open(),
            queues,
            concurrency=options["concurrency"],
            lease_ms=options["lease_ms"],
            poll_interval_ms=options["poll_interval_ms"],
        )
        runner = DjangoRunner(worker, alias, threads=options["concurrency"])
        runner.register([task.module_path for task in discover_tasks()])
        runner.register(extra)
        worker.run_beside(runner.discover)
        self.stdout.write(
            f"cairnq worker {worker.worker_id} on {backend.spec.describe()}, queues "
            f"{', '.join(queues)}: {len(runner.names)} Django task(s) found"
        )
        self.stdout.flush()
        try:
            lifecycle.serve(worker, None, close_store=True, drain_on_eof=options["supervisor_fd"])
        finally:
            runner.close()
        self.stdout.write(f"cairnq worker {worker.worker_id} stopped")

    def _supervise(self, options: dict[str, Any]) -> int:
        if os.name != "posix":
            raise CommandError("--processes above 1 needs a POSIX system")
        command = [*_this_command(), "--backend", options["backend"]]
        for queue in options["queue"] or ():
            command += ["--queue", queue]
        for path in options["task"]:
            command += ["--task", path]
        for flag in ("concurrency", "poll_interval_ms", "lease_ms"):
            command += ["--" + flag.replace("_", "-"), str(options[flag])]
        self.stdout.write(f"supervising {options['processes']} cairnq worker processes")
        self.stdout.flush()
        policy = Policy(grace_s=options["grace_ms"] / 1000)
        return supervise(command, dict(os.environ), options["processes"], policy)


def _queues(given: list[str] | None) -> list[str]:
    queues = [q.strip() for text in given or () for q in text.split(",") if q.strip()]
    if given and not queues:
        raise CommandError("--queue needs a queue name")
    return queues


def _this_command() -> list[str]:
    """How a child runs this same command: through manage.py when that is how
    we were started, else through ``python -m django`` with our settings."""
    script = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if os.path.basename(script) == "manage.py" and os.path.isfile(script):
        return [sys.executable, script, "cairnq_worker"]
    return [sys.executable, "-m", "django", "cairnq_worker", "--settings", settings.SETTINGS_MODULE]
