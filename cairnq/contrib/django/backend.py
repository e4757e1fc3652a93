"""``CairnQBackend``: Django's task framework on a cairnq queue.

``enqueue`` submits a cairnq task (the mapping is in ``results.py``) and
``get_result`` reads it back as Django's ``TaskResult``, from any process.
``python manage.py cairnq_worker`` runs them.
"""

# mypy: disallow-subclassing-any=False

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from cairnq.client import CairnQ
from cairnq.contrib.django._django import (
    BaseTaskBackend,
    DjangoTask,
    InvalidTaskBackend,
    TaskResult,
    TaskResultDoesNotExist,
    checks,
    settings,
    task_enqueued,
    timezone,
)
from cairnq.contrib.django.config import StoreSpec, store_spec
from cairnq.contrib.django.portal import Portal, portal_for
from cairnq.contrib.django.results import ms_of, payload_of, task_result
from cairnq.models import Task

__all__ = ["CairnQBackend"]


class CairnQBackend(BaseTaskBackend):
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        # A configuration error is raised on first use and reported by Django's
        # checks, not here: @task builds the backend while a module imports.
        self._spec: StoreSpec | None = None
        self._problem = ""
        try:
            self._spec = store_spec(self.options, settings.DATABASES)
        except (ValueError, ImportError) as exc:
            self._problem = f"TASKS[{alias!r}]: {exc}"

    @property
    def spec(self) -> StoreSpec:
        """Where this backend's tasks are stored."""
        if self._spec is None:
            raise InvalidTaskBackend(self._problem)
        return self._spec

    @property
    def portal(self) -> Portal:
        return portal_for(self.spec)

    def worker_queues(self) -> list[str]:
        """The queues a worker of this backend claims by default: QUEUES."""
        return sorted(self.queues) or ["default"]

    # -- enqueue -----------------------------------------------------------------

    def _submission(self, task: DjangoTask, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        self.validate_task(task)
        delay_ms = 0
        if task.run_after is not None:
            wait_ms = ms_of(task.run_after) - ms_of(timezone.now())
            delay_ms = max(0, math.ceil(wait_ms))
        payload = payload_of(args, kwargs, task.run_after)
        spec = self.spec

        async def submit(client: CairnQ) -> Task:
            return await client.submit(
                task.module_path,
                payload,
                queue=task.queue_name,
                priority=task.priority,
                delay_ms=delay_ms,
                max_attempts=spec.max_attempts,
            )

        return submit

    def _enqueued(self, task: DjangoTask, row: Task) -> TaskResult:
        result = task_result(row, self.alias, task)
        task_enqueued.send(type(self), task_result=result)
        return result

    def enqueue(self, task: DjangoTask, args: Sequence[Any], kwargs: dict[str, Any]) -> TaskResult:
        row = self.portal.call(self._submission(task, args, kwargs))
        return self._enqueued(task, row)

    async def aenqueue(
        self, task: DjangoTask, args: Sequence[Any], kwargs: dict[str, Any]
    ) -> TaskResult:
        row = await self.portal.acall(self._submission(task, args, kwargs))
        return self._enqueued(task, row)

    # -- results -----------------------------------------------------------------

    def _found(self, result_id: str, row: Task | None) -> TaskResult:
        if row is None:
            raise TaskResultDoesNotExist(result_id)
        return task_result(row, self.alias)

    def get_result(self, result_id: str) -> TaskResult:
        return self._found(result_id, self.portal.call(lambda client: client.get(result_id)))

    async def aget_result(self, result_id: str) -> TaskResult:
        row = await self.portal.acall(lambda client: client.get(result_id))
        return self._found(result_id, row)

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        if self._spec is None:
            return [checks.Error(self._problem, id="cairnq.E001")]
        if self._spec.dialect != "postgres":
            return []
        try:
            import psycopg  # noqa: F401
        except ImportError:
            return [
                checks.Error(
                    f"TASKS[{self.alias!r}] stores tasks in PostgreSQL, which needs psycopg 3",
                    hint="pip install 'cairnq-fast[django,postgres]'",
                    id="cairnq.E002",
                )
            ]
        return []
