"""Prometheus output: a collector over a :class:`Recorder`, and a small HTTP
server with ``/metrics`` and ``/healthz``. Needs ``cairnq[prometheus]``
(``prometheus_client``), imported only here.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Iterator, Optional

try:
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric as Family,
    )
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "Prometheus metrics need the prometheus extra: pip install 'cairnq-fast[prometheus]'"
    ) from exc

from cairnq.observability import health
from cairnq.observability.endpoint import handler_class
from cairnq.observability.metrics import BY_NAME, STATEMENT_METRICS, label_name, prometheus_name
from cairnq.observability.recorder import TASK_COUNTERS, Histogram, Recorder

if TYPE_CHECKING:
    from cairnq.worker import Worker


__all__ = ["CairnqCollector", "MetricsServer", "serve_metrics"]

SYSTEM = "cairnq"
_TASK_COUNTER_METRICS = (
    "cairnq.tasks.claimed", "cairnq.tasks.succeeded", "cairnq.tasks.failed",
    "cairnq.tasks.retried", "cairnq.tasks.canceled", "cairnq.tasks.lease_lost",
)  # fmt: skip
assert len(_TASK_COUNTER_METRICS) == len(TASK_COUNTERS)


def _family(name: str) -> tuple[str, str, list[str]]:
    metric = BY_NAME[name]
    return prometheus_name(metric), metric.description, [label_name(a) for a in metric.labels]


def _counter(name: str) -> CounterMetricFamily:
    base, doc, labels = _family(name)
    return CounterMetricFamily(base, doc, labels=labels)


def _histogram(name: str) -> HistogramMetricFamily:
    base, doc, labels = _family(name)
    return HistogramMetricFamily(base, doc, labels=labels)


def _gauge(name: str) -> GaugeMetricFamily:
    base, doc, labels = _family(name)
    return GaugeMetricFamily(base, doc, labels=labels)


def _add_histogram(family: HistogramMetricFamily, labels: list[str], hist: Histogram) -> None:
    family.add_metric(labels, hist.cumulative(), hist.sum)


class CairnqCollector:
    """Reads a :class:`Recorder` at scrape time (a prometheus_client collector)."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def describe(self) -> list[Family]:
        return []  # collected on demand; nothing to check at registration

    def collect(self) -> Iterator[Family]:
        rec = self.recorder
        counters = [_counter(name) for name in _TASK_COUNTER_METRICS]
        wait = _histogram("cairnq.task.wait.duration")
        run = _histogram("cairnq.task.run.duration")
        for queue, by_name in list(rec.tasks.items()):
            for name, series in list(by_name.items()):
                labels = [SYSTEM, queue, name]
                for family, count in zip(counters, series.counts):
                    family.add_metric(labels, count)
                _add_histogram(wait, labels, series.wait)
                _add_histogram(run, labels, series.run)
        yield from counters
        yield wait
        yield run

        system = [SYSTEM]
        for counter_name, total in (
            ("cairnq.claims", rec.claims[0]),
            ("cairnq.claims.empty", rec.claims[1]),
            ("cairnq.claims.errors", rec.claims[2]),
            ("cairnq.heartbeat.rounds", rec.heartbeats[0]),
            ("cairnq.heartbeat.errors", rec.heartbeats[1]),
        ):
            counter = _counter(counter_name)
            counter.add_metric(system, total)
            yield counter
        for histogram_name, hist in (
            ("cairnq.claim.duration", rec.claim_latency),
            ("cairnq.heartbeat.duration", rec.heartbeat_latency),
        ):
            histogram = _histogram(histogram_name)
            _add_histogram(histogram, system, hist)
            yield histogram

        worker = rec.worker
        if worker is not None:
            load = worker.load()
            for name, value in (
                ("cairnq.worker.calls.in_flight", load.calls_in_flight),
                ("cairnq.worker.slots.free", load.free_slots),
                ("cairnq.worker.payload.in_flight", load.payload_bytes_in_flight),
            ):
                gauge = _gauge(name)
                gauge.add_metric(system, value)
                yield gauge

        depth = _gauge("cairnq.queue.depth")
        for (queue, status), count in sorted(rec.depth.items()):
            depth.add_metric([SYSTEM, queue, status], count)
        yield depth

        if rec.statements:
            count_name, latency_name = STATEMENT_METRICS
            statements, latency = _counter(count_name), _histogram(latency_name)
            for (statement, dialect), (ran, timed) in sorted(rec.statement_series.items()):
                statements.add_metric([SYSTEM, statement, dialect], ran[0])
                _add_histogram(latency, [SYSTEM, statement, dialect], timed)
            yield statements
            yield latency


class MetricsServer:
    """``/metrics`` and ``/healthz`` on a background thread; ``close()`` ends it."""

    def __init__(
        self,
        recorder: Recorder,
        registry: CollectorRegistry,
        host: str,
        port: int,
    ) -> None:
        self.recorder = recorder
        self.registry = registry
        self._http = ThreadingHTTPServer((host, port), _handler_class(self))
        self._http.daemon_threads = True
        self._thread = threading.Thread(
            target=self._http.serve_forever, name="cairnq-metrics", daemon=True
        )
        self._thread.start()

    @property
    def host(self) -> str:
        return str(self._http.server_address[0])

    @property
    def port(self) -> int:
        return int(self._http.server_address[1])

    def health(self) -> health.Health:
        worker = self.recorder.worker
        if worker is None:
            return health.Health(True, "ok")
        return health.check(worker, self.recorder)

    def close(self) -> None:
        """Stop serving and unsubscribe the recorder (idempotent)."""
        self.recorder.stop()
        if self._thread.is_alive():
            self._http.shutdown()
            self._thread.join()
        self._http.server_close()

    def __enter__(self) -> "MetricsServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _handler_class(server: MetricsServer) -> type[BaseHTTPRequestHandler]:
    def health() -> tuple[bool, str]:
        state = server.health()
        return state.ok, state.reason

    return handler_class(lambda: (CONTENT_TYPE_LATEST, generate_latest(server.registry)), health)


def serve_metrics(
    worker: Optional["Worker"] = None,
    *,
    port: int = 9464,
    host: str = "127.0.0.1",
    statements: bool = False,
    sample_interval_s: float = 5.0,
    registry: Optional[CollectorRegistry] = None,
) -> MetricsServer:
    """Serve this process's cairnq metrics on ``http://host:port/metrics`` and
    the health of ``worker`` on ``/healthz``; call before ``worker.serve()``
    (or ``run()``). ``port=0`` picks a free port (``.port`` tells which).
    ``statements=True`` adds per-statement counts and latency (costs a clock
    read per statement). ``registry``: a prometheus_client registry to add
    the collector to (default: a new one of its own)."""
    recorder = Recorder(worker, statements=statements, sample_interval_s=sample_interval_s)
    if worker is not None:
        worker.run_beside(recorder.sample)
    registry = registry if registry is not None else CollectorRegistry(auto_describe=False)
    collector = CairnqCollector(recorder)
    registry.register(collector)
    recorder.start()
    try:
        return MetricsServer(recorder, registry, host, port)
    except BaseException:
        recorder.stop()
        registry.unregister(collector)
        raise
