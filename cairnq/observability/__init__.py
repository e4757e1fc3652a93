"""Metrics, health checks and structured logs, fed by :mod:`cairnq.events`.

* ``metrics.py``    the table of every metric (name, type, unit, labels)
* ``recorder.py``   events -> plain numbers, and the queue-depth sampler
* ``prometheus.py`` ``/metrics`` and ``/healthz`` (needs ``cairnq[prometheus]``)
* ``health.py``     what ``/healthz`` checks
* ``logs.py``       JSON log lines with the task's fields
* ``tracing.py``    OpenTelemetry spans (needs ``cairnq[otel]``; ``instrument()``)
* ``otel_metrics.py`` the same metrics through OpenTelemetry (needs ``cairnq[otel]``;
  ``instrument_metrics()``)

``serve_metrics`` and ``instrument_metrics`` are imported lazily:
``prometheus_client`` and OpenTelemetry are loaded only when used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # "X as X": an explicit re-export, so mypy --strict lets importers name them.
    from cairnq.observability.otel_metrics import OtelMetrics as OtelMetrics
    from cairnq.observability.otel_metrics import instrument_metrics as instrument_metrics
    from cairnq.observability.prometheus import MetricsServer as MetricsServer
    from cairnq.observability.prometheus import serve_metrics as serve_metrics

# These resolve lazily (below), so they are not in __all__: a star import or a
# documentation tool would load prometheus_client or OpenTelemetry.
__all__: list[str] = []


def __getattr__(name: str) -> Any:
    if name in ("serve_metrics", "MetricsServer"):
        from cairnq.observability import prometheus

        return getattr(prometheus, name)
    if name in ("instrument_metrics", "OtelMetrics"):
        from cairnq.observability import otel_metrics

        return getattr(otel_metrics, name)
    raise AttributeError(f"module 'cairnq.observability' has no attribute {name!r}")
