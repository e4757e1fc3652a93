"""``manage.py cairnq_worker`` as a real process runs what Django enqueued,
and get_result() reads the outcome: return values, exception details,
context, async tasks, names met only in the queue, and ``--processes``."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from conftest import Site, wait_for
from django.tasks import TaskResult, TaskResultStatus, default_task_backend
from django.test.utils import override_settings
from django.utils import timezone
from taskapp import late
from taskapp.tasks import (
    Boom,
    add,
    async_double,
    explode,
    flaky,
    introspect,
    rendezvous,
    send_mail,
)  # fmt: skip
from tasksite.settings import configure


def finished(result_id: str) -> TaskResult:
    def check() -> TaskResult | None:
        result = default_task_backend.get_result(result_id)
        return result if result.is_finished else None

    found: TaskResult = wait_for(check, f"task {result_id} to finish")
    return found


def test_worker_runs_tasks_and_results_read_back(site: Site) -> None:
    ok = add.enqueue(2, 3)
    bad = explode.enqueue("no luck")
    ctx = introspect.enqueue("t1")
    coro = async_double.enqueue(21)
    mail = send_mail.enqueue("ada@example.org")  # queue "emails"
    later = add.using(run_after=timezone.now() + timedelta(days=1)).enqueue(1, 1)
    shout = late.shout.enqueue("hi")  # a module the worker never imported at start
    site.start_worker("--queue", "default,emails")

    result = finished(ok.id)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.enqueued_at is not None and result.started_at is not None
    assert result.finished_at is not None
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.last_attempted_at == result.started_at
    assert result.attempts == 1 and result.worker_ids[0].startswith("worker_")
    assert result.errors == []

    failed = finished(bad.id)
    assert failed.status == TaskResultStatus.FAILED
    (error,) = failed.errors
    assert error.exception_class_path == "taskapp.tasks.Boom"
    assert error.exception_class is Boom
    assert "raise Boom(message)" in error.traceback
    assert error.traceback.rstrip().endswith("taskapp.tasks.Boom: no luck")
    assert failed.attempts == 1 and failed.finished_at is not None

    seen = finished(ctx.id).return_value
    assert seen == {"id": ctx.id, "attempt": 1, "tag": "t1"}
    assert finished(coro.id).return_value == 42
    assert finished(mail.id).return_value == "sent to ada@example.org"
    assert finished(shout.id).return_value == "HI"
    assert default_task_backend.get_result(later.id).status == TaskResultStatus.READY

    (output,) = site.stop_workers()
    assert "stopped" in output


def test_a_queue_the_worker_does_not_claim_waits(site: Site) -> None:
    mail = send_mail.enqueue("bob@example.org")
    ok = add.enqueue(1, 2)
    site.start_worker("--queue", "default")  # without it: QUEUES (default, emails, elsewhere)
    assert finished(ok.id).return_value == 3
    site.stop_workers()
    assert default_task_backend.get_result(mail.id).status == TaskResultStatus.READY
    site.start_worker("--queue", "emails")
    assert finished(mail.id).status == TaskResultStatus.SUCCESSFUL


def test_two_processes(site: Site, tmp_path: Path) -> None:
    # Two tasks that finish only once both run at once: one process of
    # concurrency 1 cannot run them, two can.
    meeting = tmp_path / "meeting"
    meeting.mkdir()
    first = rendezvous.enqueue(str(meeting), "first", 2)
    second = rendezvous.enqueue(str(meeting), "second", 2)
    site.start_worker("--processes", "2", "--concurrency", "1", ready="supervising 2")
    one, two = finished(first.id), finished(second.id)
    assert one.status == two.status == TaskResultStatus.SUCCESSFUL
    assert one.return_value != two.return_value  # two process ids
    assert one.worker_ids != two.worker_ids
    (output,) = site.stop_workers()
    assert output.count("stopped") == 2  # both children drained on the supervisor's signal


def test_more_attempts_retry_a_task_that_raised(site: Site, tmp_path: Path) -> None:
    site.env["TASKSITE_MAX_ATTEMPTS"] = "2"
    with override_settings(**configure(site.env)):
        enqueued = flaky.enqueue(str(tmp_path / "tried"))
        site.start_worker()
        result = finished(enqueued.id)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == "second attempt"
    assert result.attempts == 2
    (error,) = result.errors  # the attempt before: cairnq keeps the latest error
    assert error.exception_class is Boom and "first attempt" in error.traceback
