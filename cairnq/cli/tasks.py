"""Task commands: submit, get, list, stats, cancel, retry, purge."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Awaitable

from cairnq.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    any_int,
    attempts_int,
    duration_ms,
    emit_json,
    fail,
    fmt_time,
    log,
    non_negative_int,
    positive_int,
    progress_bar,
    table,
    task_dict,
    with_client,
)
from cairnq.client import CairnQ
from cairnq.errors import AlreadyExists, QueueFull, SerializationError, TaskTimeout
from cairnq.models import STATUSES, TERMINAL, Task
from cairnq.store.base import CONFLICTS

__all__ = ["add_parsers"]

# A wait without --timeout-ms lasts until the task finishes (or Ctrl-C).
_FOREVER_MS = 100 * 365 * 24 * 3600 * 1000


def add_parsers(commands: Any, common: argparse.ArgumentParser) -> None:
    """One subcommand each, in the order ``cairnq --help`` lists them."""
    for add in (_add_submit, _add_get, _add_list, _add_stats, _add_cancel, _add_retry, _add_purge):
        add(commands, common)


def _add_submit(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "submit",
        parents=[common],
        help="enqueue a task",
        description="Enqueue a task and print its id (the whole task with --json). "
        "With --wait, wait for it to finish: exit 0 only if it succeeded.",
    )
    p.add_argument("name", metavar="NAME", help="task name, e.g. email.send")
    p.add_argument(
        "payload",
        metavar="PAYLOAD_JSON",
        nargs="?",
        default=None,
        help="the payload as JSON (default: null); '-' reads it from stdin",
    )
    p.add_argument("--key", help="idempotency key")
    p.add_argument("--queue", default="default", help="queue (default: default)")
    p.add_argument(
        "--conflict",
        choices=CONFLICTS,
        default="reuse",
        help="what an existing task under --key means (default: reuse)",
    )
    p.add_argument("--priority", type=any_int, default=0, help="higher runs first (default 0)")
    p.add_argument("--delay-ms", type=duration_ms, default=0, help="run no sooner than this")
    p.add_argument("--max-attempts", type=attempts_int, default=3, help="default 3")
    p.add_argument("--metadata", metavar="JSON", help="a JSON object stored with the task")
    p.add_argument("--wait", action="store_true", help="wait until the task finishes")
    p.add_argument(
        "--timeout-ms",
        type=duration_ms,
        default=None,
        help="with --wait: give up after this long (exit 1); default: no limit",
    )
    p.set_defaults(run=run_submit, parser=p)


def _add_get(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "get", parents=[common], help="show one task", description="Show one task, by id or key."
    )
    _id_or_key(p)
    p.set_defaults(run=run_get, parser=p)


def _add_list(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "list",
        parents=[common],
        help="list tasks, newest first",
        description="List tasks, newest first; every filter is an equality.",
    )
    p.add_argument("--status", choices=STATUSES)
    p.add_argument("--queue")
    p.add_argument("--name")
    p.add_argument("--limit", type=non_negative_int, default=100, help="default 100")
    p.add_argument("--offset", type=non_negative_int, default=0)
    p.set_defaults(run=run_list, parser=p)


def _add_stats(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser("stats", parents=[common], help="task counts per queue and status")
    p.add_argument("--queue", help="only this queue")
    p.set_defaults(run=run_stats, parser=p)


def _add_cancel(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "cancel",
        parents=[common],
        help="cancel a queued task, flag a running one",
        description="Cancel a queued task now; a running task is flagged and finishes as "
        "canceled when its worker settles it. Exit 1 if the task is missing or finished.",
    )
    _id_or_key(p)
    p.set_defaults(run=run_cancel, parser=p)


def _add_retry(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "retry",
        parents=[common],
        help="requeue a failed or canceled task",
        description="Requeue a failed or canceled task now. Exit 1 if the task is missing "
        "or in another status.",
    )
    _id_or_key(p)
    p.add_argument("--reset-attempt", action="store_true", help="start the attempt count over at 0")
    p.set_defaults(run=run_retry, parser=p)


def _add_purge(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "purge",
        parents=[common],
        help="delete finished tasks, oldest first",
        description="Delete finished (succeeded, failed, canceled) tasks, oldest first, "
        "up to --limit; with --all, repeat until none are left. Prints the count.",
    )
    p.add_argument(
        "--older-than-ms",
        type=duration_ms,
        default=0,
        help="only tasks finished at least this long ago (default 0: any)",
    )
    p.add_argument("--queue")
    p.add_argument("--status", choices=TERMINAL)
    p.add_argument("--name")
    p.add_argument("--limit", type=positive_int, default=1000, help="per batch (default 1000)")
    p.add_argument("--all", action="store_true", help="repeat batches until fewer than --limit")
    p.set_defaults(run=run_purge, parser=p)


def _id_or_key(p: argparse.ArgumentParser) -> None:
    p.add_argument("task_id", metavar="ID", nargs="?", help="task id")
    p.add_argument("--key", help="find the task by its key instead")


def _subject(args: argparse.Namespace) -> tuple[str | None, str | None]:
    if (args.task_id is None) == (args.key is None):
        args.parser.error("give a task ID or --key, not both")  # exits 2
    return args.task_id, args.key


def _not_found(task_id: str | None, key: str | None) -> str:
    return f"task {task_id} not found" if task_id is not None else f"no task with key {key!r}"


def _json_arg(args: argparse.Namespace, flag: str, text: str) -> Any:
    parser: argparse.ArgumentParser = args.parser
    try:
        return json.loads(text)
    except ValueError as exc:
        parser.error(f"{flag}: invalid JSON ({exc})")
    except RecursionError:
        parser.error(f"{flag}: JSON nested too deep to read")


def _stdin_text(args: argparse.Namespace) -> str:
    parser: argparse.ArgumentParser = args.parser
    try:
        return sys.stdin.read()
    except UnicodeDecodeError as exc:
        parser.error(f"PAYLOAD_JSON: stdin is not valid UTF-8 ({exc})")


# -- human output ------------------------------------------------------------------


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _print_task(task: Task) -> None:
    rows: list[tuple[str, str]] = []
    for field, value in task_dict(task).items():
        if field in ("payload", "result", "error", "metadata"):
            text = _compact(value)
        elif field.endswith("_at_ms") or field in ("lease_until_ms", "run_at_ms"):
            text = "-" if value is None else f"{value} ({fmt_time(value)})"
        elif field == "progress":
            text = "-" if value is None else progress_bar(value, None)
        else:
            text = "-" if value is None else str(value)
        rows.append((field, text))
    width = max(len(f) for f, _ in rows)
    for field, text in rows:
        print(f"{field.ljust(width)}  {text}")


def _print_tasks(tasks: list[Task]) -> None:
    if not tasks:
        print("no tasks")
        return
    rows = [
        (
            t.id,
            t.name,
            t.queue,
            t.status + (" (cancel requested)" if t.cancel_requested and t.running else ""),
            f"{t.attempt}/{t.max_attempts}",
            t.priority,
            fmt_time(t.created_at_ms),
        )
        for t in tasks
    ]
    headers = ("ID", "NAME", "QUEUE", "STATUS", "ATTEMPT", "PRIORITY", "CREATED")
    print("\n".join(table(headers, rows, right=(4, 5))))


def _failure_text(task: Task) -> str:
    if task.status == "failed":
        err = task.error or {}
        code = err.get("code", "task_error")
        return f"task {task.id} failed: {code}: {err.get('message', '')}".rstrip(": ")
    if task.status == "canceled":
        return f"task {task.id} was canceled"
    return f"task {task.id} is {task.status}"


# -- commands ------------------------------------------------------------------------


def run_submit(args: argparse.Namespace) -> int:
    payload_text = args.payload
    if payload_text == "-":
        payload_text = _stdin_text(args)
    payload = None if payload_text is None else _json_arg(args, "PAYLOAD_JSON", payload_text)
    metadata = None
    if args.metadata is not None:
        metadata = _json_arg(args, "--metadata", args.metadata)
        if not isinstance(metadata, dict):
            args.parser.error("--metadata must be a JSON object")
    if args.timeout_ms is not None and not args.wait:
        args.parser.error("--timeout-ms needs --wait")
    return with_client(args, lambda client: _submit(args, client, payload, metadata), create=True)


async def _submit(args: argparse.Namespace, client: CairnQ, payload: Any, metadata: Any) -> int:
    try:
        task = await client.submit(
            args.name,
            payload,
            key=args.key,
            queue=args.queue,
            conflict=args.conflict,
            max_attempts=args.max_attempts,
            priority=args.priority,
            metadata=metadata,
            delay_ms=args.delay_ms,
        )
    except (AlreadyExists, QueueFull) as exc:
        raise CliError(str(exc)) from exc
    except (SerializationError, ValueError, TypeError) as exc:  # the arguments' fault
        raise CliError(f"cannot submit: {exc}", EXIT_USAGE) from exc
    if not args.wait:
        if args.json:
            emit_json(task_dict(task))
        else:
            print(task.id)
        return EXIT_OK
    if not args.json:
        print(task.id, flush=True)
    return await _wait(args, client, task)


async def _wait(args: argparse.Namespace, client: CairnQ, task: Task) -> int:
    timeout_ms = _FOREVER_MS if args.timeout_ms is None else args.timeout_ms
    try:
        done = await client.wait(task.id, timeout_ms=timeout_ms)
    except TaskTimeout as exc:
        if args.json:
            emit_json(task_dict(exc.task) if isinstance(exc.task, Task) else None)
        fail("submit", str(exc))
        return EXIT_FAILED
    if args.json:
        emit_json(task_dict(done))
    elif done.status == "succeeded":
        print(done.status if done.result is None else f"{done.status} {_compact(done.result)}")
    else:
        print(done.status)
    if done.status != "succeeded":
        fail("submit", _failure_text(done))
        return EXIT_FAILED
    return EXIT_OK


def run_get(args: argparse.Namespace) -> int:
    task_id, key = _subject(args)
    task = with_client(args, lambda client: _find(client, task_id, key))
    if task is None:
        raise CliError(_not_found(task_id, key))
    if args.json:
        emit_json(task_dict(task))
    else:
        _print_task(task)
    return EXIT_OK


def _find(client: CairnQ, task_id: str | None, key: str | None) -> Awaitable[Task | None]:
    return client.get(task_id) if task_id is not None else client.get_by_key(key)  # type: ignore[arg-type]


def run_list(args: argparse.Namespace) -> int:
    tasks = with_client(
        args,
        lambda client: client.list(
            status=args.status,
            queue=args.queue,
            name=args.name,
            limit=args.limit,
            offset=args.offset,
        ),
    )
    if args.json:
        emit_json([task_dict(t) for t in tasks])
    else:
        _print_tasks(tasks)
    return EXIT_OK


def run_stats(args: argparse.Namespace) -> int:
    stats = with_client(args, lambda client: client.stats(args.queue))
    if args.json:
        emit_json(stats)
        return EXIT_OK
    if not stats:
        print("no tasks")
        return EXIT_OK
    headers = ("QUEUE",) + tuple(s.upper() for s in STATUSES) + ("TOTAL",)
    rows = [
        (q,) + tuple(counts.get(s, 0) for s in STATUSES) + (sum(counts.values()),)
        for q, counts in sorted(stats.items())
    ]
    print("\n".join(table(headers, rows, right=range(1, len(headers)))))
    return EXIT_OK


def _print_changed(args: argparse.Namespace, task: Task) -> None:
    if args.json:
        emit_json(task_dict(task))
        return
    status: str = task.status
    if task.running and task.cancel_requested:
        status = "running (cancel requested)"
    print(f"{task.id} {status}")


async def _explain_none(client: CairnQ, task_id: str | None, key: str | None, allowed: str) -> str:
    found = await _find(client, task_id, key)
    if found is None:
        return _not_found(task_id, key)
    return f"task {found.id} is {found.status}; {allowed}"


def run_cancel(args: argparse.Namespace) -> int:
    task_id, key = _subject(args)

    async def cancel(client: CairnQ) -> Task:
        if task_id is not None:
            task = await client.cancel(task_id)
        else:
            task = await client.cancel_by_key(key)  # type: ignore[arg-type]
        if task is None:
            allowed = "only queued or running tasks can be canceled"
            raise CliError(await _explain_none(client, task_id, key, allowed))
        return task

    _print_changed(args, with_client(args, cancel))
    return EXIT_OK


def run_retry(args: argparse.Namespace) -> int:
    task_id, key = _subject(args)

    async def retry(client: CairnQ) -> Task:
        if task_id is not None:
            task = await client.retry(task_id, reset_attempt=args.reset_attempt)
        else:
            task = await client.retry_by_key(key, reset_attempt=args.reset_attempt)  # type: ignore[arg-type]
        if task is None:
            allowed = "only failed or canceled tasks can be retried"
            raise CliError(await _explain_none(client, task_id, key, allowed))
        return task

    _print_changed(args, with_client(args, retry))
    return EXIT_OK


def run_purge(args: argparse.Namespace) -> int:
    async def purge(client: CairnQ) -> int:
        total = 0
        while True:
            ids = await client.purge(
                older_than_ms=args.older_than_ms,
                queue=args.queue,
                status=args.status,
                name=args.name,
                limit=args.limit,
            )
            total += len(ids)
            if not args.all or len(ids) < args.limit:
                return total

    started = time.monotonic()
    total = with_client(args, purge)
    if args.json:
        emit_json({"purged": total})
    else:
        print(total)
    log.info("purged %d tasks in %.2fs", total, time.monotonic() - started)
    return EXIT_OK
