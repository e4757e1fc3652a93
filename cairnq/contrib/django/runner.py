"""The worker side: Django tasks as cairnq handlers.

A cairnq worker claims the task names it has handlers for, and Django keeps
no registry of tasks, so the names are found:

* at start, among the modules of the project: every installed app's
  ``tasks`` module and the URLconf are imported (as ``runserver`` would),
  then every loaded module of an installed app or of the project is read
  for ``django.tasks.Task`` objects;
* while running, in the queues: every ``discover_interval_s`` the newest
  queued tasks of each queue are read, and a name nobody handles that
  imports as a Django task is registered from then on (a name that does not
  is left to whichever worker handles it).

Each handler looks its task up by import path on its first call. A sync task
function runs in a thread of the runner's pool (Django's ORM is sync), with
``close_old_connections()`` before and after, as Django's own request cycle
does; an ``async def`` task runs on the worker's loop.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from importlib import import_module
from inspect import iscoroutinefunction
from traceback import format_exception
from typing import Any

from cairnq.context import TaskContext
from cairnq.contrib.django._django import (
    DjangoContext,
    DjangoTask,
    InvalidTask,
    TaskResult,
    TaskResultStatus,
    apps,
    autodiscover_modules,
    close_old_connections,
    normalize_json,
    settings,
    task_finished,
    task_started,
)
from cairnq.contrib.django.results import error_details, resolve_task, success_result, when
from cairnq.errors import TaskError
from cairnq.worker import Worker

__all__ = ["DISCOVER_INTERVAL_S", "DISCOVER_LIMIT", "DjangoRunner", "discover_tasks"]

log = logging.getLogger("cairnq.django")

DISCOVER_INTERVAL_S = 2.0
DISCOVER_LIMIT = 100  # newest queued tasks read per queue and round


def discover_tasks() -> list[DjangoTask]:
    """Every Django task defined in a module of the project (see above)."""
    autodiscover_modules("tasks")
    urlconf = getattr(settings, "ROOT_URLCONF", None)
    roots = {config.name for config in apps.get_app_configs()}
    if isinstance(urlconf, str):
        try:
            import_module(urlconf)
        except Exception:  # the worker needs no URLs; tasks found elsewhere still run
            log.warning("could not import ROOT_URLCONF %r", urlconf, exc_info=True)
        roots.add(urlconf.partition(".")[0])
    found: dict[str, DjangoTask] = {}
    for name, module in list(sys.modules.items()):
        if module is None or not any(name == r or name.startswith(r + ".") for r in roots):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, DjangoTask):
                found.setdefault(value.module_path, value)
    return list(found.values())


class DjangoRunner:
    """Registers Django tasks on a cairnq worker and runs them."""

    def __init__(self, worker: Worker, alias: str, threads: int) -> None:
        self.worker = worker
        self.alias = alias
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="cairnq-task")
        self._tasks: dict[str, DjangoTask] = {}
        self._foreign: set[str] = set()  # queued names that are no Django task of ours
        self._registered: set[str] = set()

    @property
    def names(self) -> list[str]:
        """The task names registered so far."""
        return sorted(self._registered)

    def register(self, names: Iterable[str]) -> None:
        for name in names:
            if name not in self._registered:
                self.worker.register(name, self._handler(name))
                self._registered.add(name)
                log.info("running Django task %s", name)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- discovery while running ---------------------------------------------------

    async def discover(self, worker: Worker, interval_s: float = DISCOVER_INTERVAL_S) -> None:
        """Beside the claim loop: register queued names nobody handles yet."""
        from cairnq.client import CairnQ

        client = CairnQ(worker.store)
        while True:
            try:
                for queue in worker.queues:
                    rows = await client.list(status="queued", queue=queue, limit=DISCOVER_LIMIT)
                    fresh = {r.name for r in rows} - self._registered - self._foreign
                    self.register([name for name in sorted(fresh) if self._importable(name)])
            except Exception:  # the store's trouble is the claim loop's to report
                log.debug("looking for new task names failed", exc_info=True)
            await asyncio.sleep(interval_s)

    def _importable(self, name: str) -> bool:
        try:
            self._tasks[name] = resolve_task(name)
            return True
        except ValueError:
            self._foreign.add(name)
            return False
        except Exception:  # the module itself raised while importing
            log.warning("importing task %s failed", name, exc_info=True)
            self._foreign.add(name)
            return False

    # -- running -----------------------------------------------------------------

    def _handler(self, name: str) -> Callable[[TaskContext, Any], Awaitable[Any]]:
        async def run(ctx: TaskContext, payload: Any) -> Any:
            return await self._run(name, ctx, payload)

        run.__qualname__ = run.__name__ = f"run[{name}]"
        return run

    def _task(self, name: str) -> DjangoTask:
        task = self._tasks.get(name)
        if task is None:
            try:
                task = self._tasks[name] = resolve_task(name)
            except ValueError as exc:
                raise TaskError(str(exc), code="not_a_django_task", type="ImportError") from exc
        return task

    async def _run(self, name: str, ctx: TaskContext, payload: Any) -> Any:
        started_ms = int(time.time() * 1000)
        task = self._task(name)
        args = list(payload.get("args", ())) if isinstance(payload, dict) else []
        kwargs = dict(payload.get("kwargs", {})) if isinstance(payload, dict) else {}
        running = self._running_result(task, ctx, args, kwargs, started_ms)
        if task.takes_context:
            args.insert(0, DjangoContext(task_result=running))
        task_started.send(sender=type(self), task_result=running)
        try:
            if iscoroutinefunction(task.func):
                value = await task.func(*args, **kwargs)
            else:
                loop = asyncio.get_running_loop()
                value = await loop.run_in_executor(
                    self._pool, partial(_call_sync, task.func, args, kwargs)
                )
            value = normalize_json(value)
        except Exception as exc:
            kind = type(exc)
            details = error_details(
                f"{kind.__module__}.{kind.__qualname__}",
                "".join(format_exception(exc)),
                started_ms,
                ctx.worker_id,
            )
            self._finished(running, TaskResultStatus.FAILED)
            raise TaskError(
                str(exc), code="django_task_error", type=kind.__name__, retryable=True,
                details=details,
            ) from exc  # fmt: skip
        self._finished(running, TaskResultStatus.SUCCESSFUL, value)
        return success_result(value, started_ms)

    def _running_result(
        self, task: DjangoTask, ctx: TaskContext, args: list[Any], kwargs: dict[str, Any],
        started_ms: int,
    ) -> TaskResult:  # fmt: skip
        started = when(started_ms)
        if task.queue_name != ctx.queue or task.backend != self.alias:
            try:
                task = task.using(queue_name=ctx.queue, backend=self.alias)
            except InvalidTask:  # a queue this worker claims but QUEUES does not list
                pass
        return TaskResult(
            task=task,
            id=ctx.task_id,
            status=TaskResultStatus.RUNNING,
            enqueued_at=None,  # not in the claimed context; get_result() has it
            started_at=started,
            finished_at=None,
            last_attempted_at=started,
            args=list(args),
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[ctx.worker_id] * ctx.attempt,
        )

    def _finished(
        self, result: TaskResult, status: TaskResultStatus, value: Any | None = None
    ) -> None:
        object.__setattr__(result, "status", status)
        object.__setattr__(result, "finished_at", when(int(time.time() * 1000)))
        if status == TaskResultStatus.SUCCESSFUL:
            object.__setattr__(result, "_return_value", value)
        task_finished.send(sender=type(self), task_result=result)


def _call_sync(func: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]) -> Any:
    close_old_connections()
    try:
        return func(*args, **kwargs)
    finally:
        close_old_connections()
