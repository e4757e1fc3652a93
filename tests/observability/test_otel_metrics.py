"""``cairnq.observability.otel_metrics.instrument_metrics`` read with the real
OpenTelemetry SDK (``MeterProvider`` + ``InMemoryMetricReader``): counts that
match a drain's outcomes, the table's names, units and attribute keys, a run
histogram per settlement, no task id among attribute values, nothing recorded
after close(), and no OpenTelemetry import from ``import cairnq``.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk.metrics")

from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader  # noqa: E402

from cairnq import CairnQ  # noqa: E402
from cairnq.observability.metrics import METRICS  # noqa: E402
from cairnq.observability.otel_metrics import instrument_metrics  # noqa: E402

FAST = {"poll_interval_ms": 20, "retry_backoff_ms": 0}


def collect(reader: InMemoryMetricReader) -> dict[str, Any]:
    """Metrics by name, from the one scope ``cairnq``."""
    data = reader.get_metrics_data()
    found: dict[str, Any] = {}
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            assert scope.scope.name == "cairnq"
            for metric in scope.metrics:
                found[metric.name] = metric
    return found


def point(metrics: dict[str, Any], name: str, **attributes: str) -> Any:
    for p in metrics[name].data.data_points:
        if all(p.attributes.get(k) == v for k, v in attributes.items()):
            return p
    raise AssertionError(f"no data point {name} {attributes}")


async def eventually(pred: Any, timeout: float = 15.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while not (result := await pred()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not met in time")
        await asyncio.sleep(0.05)
    return result


async def test_a_drain_is_counted_with_the_documented_names_and_attributes(backend) -> None:
    """12 tasks succeed, 5 fail twice (one retry, then failed)."""
    q: CairnQ = backend.client()
    w = backend.worker(concurrency=8, heartbeat_interval_ms=50, **FAST)

    @w.task("ok")
    async def ok(ctx: Any, payload: Any) -> None:
        await asyncio.sleep(0.01)

    @w.task("bad")
    async def bad(ctx: Any, payload: Any) -> None:
        raise ValueError("always")

    ids = [(await q.submit("ok", {"secret": "payload-value"})).id for _ in range(12)]
    ids += [(await q.submit("bad", {"i": i}, max_attempts=2)).id for i in range(5)]

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    handle = instrument_metrics(w, meter_provider=provider, statements=True, sample_interval_s=0.2)
    try:
        async with w.background():

            async def drained_and_sampled() -> dict[str, Any] | None:
                counts = (await q.stats()).get("default", {})
                if counts.get("succeeded", 0) != 12 or counts.get("failed", 0) != 5:
                    return None
                metrics = collect(reader)
                depth = [
                    p for p in metrics["cairnq.queue.depth"].data.data_points
                    if p.attributes.get("cairnq.task.status") == "succeeded" and p.value == 12
                ] if "cairnq.queue.depth" in metrics else []  # fmt: skip
                failed = [p.value for p in metrics["cairnq.tasks.failed"].data.data_points]
                return metrics if depth and 5 in failed else None

            metrics = await eventually(drained_and_sampled, what="the drain and a depth sample")
    finally:
        handle.close()
        provider.shutdown()

    def count(name: str, task: str) -> int:
        p = point(
            metrics, name, **{"cairnq.task.name": task, "messaging.destination.name": "default",
                              "messaging.system": "cairnq"},
        )  # fmt: skip
        return int(p.value)

    assert count("cairnq.tasks.succeeded", "ok") == 12
    assert count("cairnq.tasks.claimed", "ok") == 12
    assert count("cairnq.tasks.claimed", "bad") == 10
    assert count("cairnq.tasks.retried", "bad") == 5
    assert count("cairnq.tasks.failed", "bad") == 5
    assert count("cairnq.tasks.failed", "ok") == 0
    assert count("cairnq.tasks.canceled", "ok") == 0
    assert metrics["cairnq.tasks.succeeded"].data.is_monotonic

    # One run-time record per settlement: succeeded + retried + failed.
    run_ok = point(metrics, "cairnq.task.run.duration", **{"cairnq.task.name": "ok"})
    run_bad = point(metrics, "cairnq.task.run.duration", **{"cairnq.task.name": "bad"})
    assert isinstance(run_ok, HistogramDataPoint)
    assert run_ok.count == 12 and run_ok.sum >= 12 * 0.009
    assert run_bad.count == 10
    # The recorder's bucket bounds, passed as advice.
    assert tuple(run_ok.explicit_bounds)[:3] == (0.005, 0.01, 0.025)
    assert point(metrics, "cairnq.task.wait.duration", **{"cairnq.task.name": "ok"}).count == 12
    assert point(metrics, "cairnq.claims").value >= 1
    assert point(metrics, "cairnq.claim.duration").count >= 1
    assert point(metrics, "cairnq.queue.depth", **{"cairnq.task.status": "failed"}).value == 5
    statements = metrics["cairnq.store.statements"].data.data_points
    assert any(p.attributes["db.system.name"] == backend.dialect for p in statements)

    # Every metric of the table that has data is there with its unit and
    # exactly its attribute keys; no task id or payload among the values.
    listed = {m.name: m for m in METRICS}
    assert set(metrics) <= set(listed)
    for name, metric in metrics.items():
        expected = listed[name]
        assert metric.unit == expected.unit, name
        assert metric.description == expected.description, name
        for p in metric.data.data_points:
            assert set(p.attributes) == set(expected.labels), (name, p.attributes)
            assert p.attributes["messaging.system"] == "cairnq"
            for value in p.attributes.values():
                assert value not in ids and "payload-value" not in str(value)
    # Only a histogram with no record yet is absent (no heartbeat may have run).
    assert set(listed) - set(metrics) <= {"cairnq.heartbeat.duration"}


async def test_close_stops_recording(backend) -> None:
    q: CairnQ = backend.client()
    w = backend.worker(**FAST)

    @w.task("ok")
    async def ok(ctx: Any, payload: Any) -> None:
        return None

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    handle = instrument_metrics(w, meter_provider=provider)
    handle.close()
    handle.close()  # idempotent
    try:
        async with w.background():
            task = await q.submit("ok", None)
            await q.wait(task.id, timeout_ms=8_000, poll_ms=10)
        metrics = collect(reader)
        for name in ("cairnq.tasks.succeeded", "cairnq.task.run.duration", "cairnq.claims"):
            assert name not in metrics or metrics[name].data.data_points == [], name
    finally:
        provider.shutdown()


def test_import_cairnq_does_not_import_opentelemetry(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = """
import sys
import cairnq, cairnq.observability, cairnq.observability.recorder
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
assert loaded == [], loaded
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
