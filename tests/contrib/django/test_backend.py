"""Enqueue and get_result, without a worker: what a Django task becomes in
cairnq, and how a cairnq task reads back as Django's TaskResult."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from conftest import Site
from django.core.exceptions import ImproperlyConfigured
from django.tasks import TaskResultStatus, default_task_backend, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.test.utils import override_settings
from django.utils import timezone
from taskapp.tasks import add, send_mail

from cairnq.contrib.django import CairnQBackend
from cairnq.contrib.django.config import StoreSpec, store_spec


def row_of(task_id: str) -> Any:
    """The cairnq task itself, read through the backend's client."""
    return default_task_backend.portal.call(lambda client: client.get(task_id))


def test_the_backend_is_cairnqs(site: Site) -> None:
    backend = task_backends["default"]
    assert isinstance(backend, CairnQBackend)
    assert backend.supports_defer and backend.supports_async_task
    assert backend.supports_get_result and backend.supports_priority
    expected = "sqlite" if site.kind == "sqlite" else "postgres"
    assert backend.spec.dialect == expected
    assert backend.spec.schema == ("cairnq" if site.kind == "django-postgres" else None)


def test_enqueue_maps_priority_queue_and_run_after(site: Site) -> None:
    run_after = timezone.now() + timedelta(hours=1)
    result = send_mail.using(priority=-40, run_after=run_after).enqueue("ada@example.org")
    assert result.status == TaskResultStatus.READY
    assert result.args == ["ada@example.org"] and result.kwargs == {}
    assert result.enqueued_at is not None and result.started_at is None
    assert result.attempts == 0 and result.errors == []

    row = row_of(result.id)
    assert row.name == "taskapp.tasks.send_mail"
    assert row.queue == "emails"
    assert row.priority == -40
    assert row.max_attempts == 1
    assert row.payload["args"] == ["ada@example.org"] and row.payload["kwargs"] == {}
    # Due an hour after it was enqueued (the store's clock against ours: a second apart at most).
    assert abs(row.run_at_ms - row.created_at_ms - 3_600_000) < 1_000


def test_get_result_of_a_pending_task(site: Site) -> None:
    enqueued = add.using(queue_name="elsewhere", priority=100).enqueue(2, b=3)
    result = default_task_backend.get_result(enqueued.id)
    assert result.id == enqueued.id
    assert result.status == TaskResultStatus.READY
    assert not result.is_finished
    assert result.task.func is add.func
    assert result.task.queue_name == "elsewhere" and result.task.priority == 100
    assert result.args == [2] and result.kwargs == {"b": 3}
    assert result.enqueued_at == enqueued.enqueued_at
    assert result.started_at is None and result.finished_at is None
    assert result.worker_ids == [] and result.errors == []
    with pytest.raises(ValueError, match="not finished"):
        _ = result.return_value
    assert add.get_result(enqueued.id).id == enqueued.id  # the task's own look-up
    result.refresh()
    assert result.status == TaskResultStatus.READY


def test_run_after_reads_back(site: Site) -> None:
    run_after = (timezone.now() + timedelta(days=2)).replace(microsecond=0)
    enqueued = add.using(run_after=run_after).enqueue(1, 1)
    assert default_task_backend.get_result(enqueued.id).task.run_after == run_after


def test_a_canceled_task_reads_as_failed(site: Site) -> None:
    enqueued = add.enqueue(1, 2)
    default_task_backend.portal.call(lambda client: client.cancel(enqueued.id))
    result = default_task_backend.get_result(enqueued.id)
    assert result.status == TaskResultStatus.FAILED and result.finished_at is not None
    (error,) = result.errors
    assert error.exception_class_path == "cairnq.errors.TaskCanceled"
    assert error.exception_class.__name__ == "TaskCanceled"


def test_unknown_id(site: Site) -> None:
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result("task_01ZZZZZZZZZZZZZZZZZZZZZZZZ")


def test_validation_is_djangos(site: Site) -> None:
    with pytest.raises(InvalidTask, match="Queue 'nowhere'"):
        add.using(queue_name="nowhere")
    with pytest.raises(InvalidTask, match="priority"):
        add.using(priority=101)


def test_aenqueue_and_aget_result(site: Site) -> None:
    async def main() -> tuple[Any, Any]:
        enqueued = await add.aenqueue(4, 5)
        return enqueued, await add.aget_result(enqueued.id)

    enqueued, fetched = asyncio.run(main())
    assert fetched.id == enqueued.id and fetched.args == [4, 5]
    assert fetched.status == TaskResultStatus.READY


# -- configuration ---------------------------------------------------------------------

SQLITE_DEFAULT = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "x.sqlite3"}}
PG_DEFAULT = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "shop",
        "USER": "app",
        "PASSWORD": "s3cret word",
        "HOST": "db.internal",
        "PORT": 6543,
        "OPTIONS": {"sslmode": "require", "pool": True, "isolation_level": 1},
    }
}


def test_store_spec_from_options() -> None:
    assert store_spec({"db": "tasks.sqlite3"}, SQLITE_DEFAULT) == StoreSpec(
        "sqlite", "tasks.sqlite3"
    )
    dsn = "postgresql://postgres@127.0.0.1:5432/q"
    assert store_spec(
        {"db": dsn, "schema": "jobs", "max_attempts": 3}, SQLITE_DEFAULT
    ) == StoreSpec("postgres", dsn, "jobs", 3)


def test_store_spec_uses_djangos_postgres_database() -> None:
    from psycopg.conninfo import conninfo_to_dict

    spec = store_spec({}, PG_DEFAULT)
    assert spec.dialect == "postgres" and spec.schema == "cairnq"
    assert conninfo_to_dict(spec.target) == {
        "dbname": "shop", "user": "app", "password": "s3cret word", "host": "db.internal",
        "port": "6543", "sslmode": "require",
    }  # fmt: skip
    assert "s3cret" not in spec.describe()
    assert store_spec({"schema": "jobs"}, PG_DEFAULT).schema == "jobs"


@pytest.mark.parametrize(
    "options, message",
    [
        ({}, "OPTIONS\\['db'\\] is missing"),
        ({"db": "x.sqlite3", "schema": "s"}, "PostgreSQL only"),
        ({"db": "x.sqlite3", "max_attempts": 0}, "max_attempts"),
        ({"db": "x.sqlite3", "dbb": 1}, "unknown OPTIONS"),
    ],
)
def test_store_spec_refuses(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        store_spec(options, SQLITE_DEFAULT)


def test_a_misconfigured_backend_says_why() -> None:
    broken = {"default": {"BACKEND": "cairnq.contrib.django.CairnQBackend", "OPTIONS": {}}}
    with override_settings(TASKS=broken, DATABASES=SQLITE_DEFAULT):
        backend = task_backends["default"]  # built, as @task builds it while importing
        (error,) = backend.check()
        assert error.id == "cairnq.E001" and "OPTIONS['db'] is missing" in error.msg
        with pytest.raises(ImproperlyConfigured, match="OPTIONS\\['db'\\] is missing"):
            add.enqueue(1, 2)
