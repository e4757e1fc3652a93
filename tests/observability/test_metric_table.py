"""The metric table (``cairnq/observability/metrics.py``) is what docs/observability.md
documents, with bounded labels only; JSON log lines from a batch handler."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path
from typing import Any

from cairnq.observability.logs import JsonFormatter, track_tasks
from cairnq.observability.metrics import METRICS, label_name, prometheus_name

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "observability.md"
BOUNDED = {
    "messaging.system", "messaging.destination.name", "cairnq.task.name", "cairnq.task.status",
    "db.operation.name", "db.system.name",
}  # fmt: skip


def test_every_metric_is_in_the_readme_table_with_its_labels() -> None:
    text = GUIDE.read_text()
    for metric in METRICS:
        name = prometheus_name(metric) + ("_total" if metric.kind == "counter" else "")
        rows = [line for line in text.splitlines() if line.startswith(f"| `{name}` |")]
        assert len(rows) == 1, name
        for attribute in metric.labels:
            assert f"`{label_name(attribute)}`" in rows[0], (name, attribute)


def test_labels_are_bounded_and_names_unique() -> None:
    assert len({m.name for m in METRICS}) == len(METRICS)
    for metric in METRICS:
        assert set(metric.labels) <= BOUNDED, metric.name
        assert metric.labels[0] == "messaging.system"


async def test_a_batch_handler_logs_its_first_task_and_the_batch_size(backend) -> None:
    q = backend.client()
    w = backend.worker(poll_interval_ms=20)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter(static={"service": "test"}))
    log = logging.getLogger("test.batch")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    done: list[Any] = []

    @w.task("items", batch=3)
    async def items(contexts: Any) -> None:
        log.info("got %d", len(contexts))
        log.info("explicit", extra={"task_id": "chosen"})
        done.append([ctx.task_id for ctx in contexts])

    ids = [(await q.submit("items", i)).id for i in range(3)]
    stop = track_tasks()
    try:
        async with w.background():
            for task_id in ids:
                await q.wait(task_id, timeout_ms=8_000, poll_ms=10)
    finally:
        stop()
        log.removeHandler(handler)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    calls = [line for line in lines if line["message"].startswith("got ")]
    assert calls, lines
    first = calls[0]
    batch = done[0]
    assert first["task_id"] == batch[0] and first["task_name"] == "items"
    assert first.get("batch_size", 1) == len(batch)
    assert first["service"] == "test" and first["logger"] == "test.batch"
    assert any(line["message"] == "explicit" and line["task_id"] == "chosen" for line in lines)
    # Outside any handler: no task fields.
    log.addHandler(handler)
    try:
        log.info("outside")
    finally:
        log.removeHandler(handler)
    outside = json.loads(stream.getvalue().splitlines()[-1])
    assert "task_id" not in outside
