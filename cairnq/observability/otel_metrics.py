"""OpenTelemetry metrics output: the metrics of :mod:`metrics`, under the same
names, units and attribute keys, through the OpenTelemetry metrics API.

Needs ``cairnq[otel]`` (``opentelemetry-api``), imported only by this module,
which nothing imports eagerly. We never configure a provider: instruments come
from ``meter_provider.get_meter(...)`` when one is given, else from the
global provider the application set up (``opentelemetry.metrics.get_meter``).
Which exporter, which temporality, which interval: the provider's business.

How each kind is fed:

* counters and gauges are asynchronous instruments (observable counter,
  observable gauge) whose callbacks read a :class:`Recorder`'s numbers at
  collection time, so an event costs nothing beyond the recorder's own work;
* histograms: the API has no asynchronous histogram, so a small event
  subscriber calls a synchronous ``Histogram.record`` with the same
  attributes as the counters (cached per series: one dict lookup and one
  ``record`` per event). The recorder's bucket bounds are passed as explicit
  bucket boundaries advice where the installed API accepts it (1.23 and
  later); older APIs use the SDK's default boundaries or the provider's views.

The queue-depth gauge is sampled by the recorder beside the worker, as for
``serve_metrics`` (``worker.run_beside(recorder.sample)``): call
:func:`instrument_metrics` before ``worker.serve()`` (or ``run()``).
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional

try:
    from opentelemetry import metrics as otel
    from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        'OpenTelemetry metrics need the OpenTelemetry API: pip install "cairnq-fast[otel]"'
    ) from exc

from cairnq import events
from cairnq.observability.metrics import BY_NAME, QUEUE, STATEMENT_METRICS, STATUS
from cairnq.observability.recorder import LATENCY_BUCKETS, WAIT_BUCKETS, Recorder

if TYPE_CHECKING:
    from cairnq.worker import Worker

__all__ = ["OtelMetrics", "instrument_metrics"]

SYSTEM = "cairnq"
_SYSTEM_ONLY = {"messaging.system": SYSTEM}

# Recorder.tasks[queue][name].counts, by position.
_TASK_COUNTER_METRICS = (
    "cairnq.tasks.claimed", "cairnq.tasks.succeeded", "cairnq.tasks.failed",
    "cairnq.tasks.retried", "cairnq.tasks.canceled", "cairnq.tasks.lease_lost",
)  # fmt: skip

Attributes = dict[str, str]
Callback = Callable[[CallbackOptions], Iterable[Observation]]


def _task_attributes(queue: str, name: str) -> Attributes:
    return {
        "messaging.system": SYSTEM, "messaging.destination.name": queue, "cairnq.task.name": name,
    }  # fmt: skip


def _statement_attributes(statement: str, dialect: str) -> Attributes:
    return {"messaging.system": SYSTEM, "db.operation.name": statement, "db.system.name": dialect}


class OtelMetrics:
    """What :func:`instrument_metrics` returns: the :class:`Recorder` it reads
    (``.recorder``) and ``close()``, which stops recording. The API cannot
    remove an instrument from a meter: once closed, the callbacks observe
    nothing and the histograms receive nothing more."""

    def __init__(self, recorder: Recorder, meter: Meter) -> None:
        self.recorder = recorder
        self.meter = meter
        self._closed = False
        self._task_attrs: dict[tuple[str, str], Attributes] = {}
        self._statement_attrs: dict[tuple[str, str], Attributes] = {}
        self._stops: list[Callable[[], None]] = []
        self._observe_all()
        self._record_histograms()

    # -- counters and gauges: read at collection time ---------------------------

    def _observe_all(self) -> None:
        for index, name in enumerate(_TASK_COUNTER_METRICS):
            self._observable(name, self._task_counter(index))
        rec = self.recorder
        for name, numbers, index in (
            ("cairnq.claims", rec.claims, 0),
            ("cairnq.claims.empty", rec.claims, 1),
            ("cairnq.claims.errors", rec.claims, 2),
            ("cairnq.heartbeat.rounds", rec.heartbeats, 0),
            ("cairnq.heartbeat.errors", rec.heartbeats, 1),
        ):
            self._observable(name, self._system_number(numbers, index))
        for name, field in (
            ("cairnq.worker.calls.in_flight", "calls_in_flight"),
            ("cairnq.worker.slots.free", "free_slots"),
            ("cairnq.worker.payload.in_flight", "payload_bytes_in_flight"),
        ):
            self._observable(name, self._load(field))
        self._observable("cairnq.queue.depth", self._depth)
        if rec.statements:
            self._observable(STATEMENT_METRICS[0], self._statements)

    def _observable(self, name: str, callback: Callback) -> None:
        metric = BY_NAME[name]
        create = (
            self.meter.create_observable_counter
            if metric.kind == "counter"
            else self.meter.create_observable_gauge
        )
        create(name, callbacks=[callback], unit=metric.unit, description=metric.description)

    def _task_counter(self, index: int) -> Callback:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            if self._closed:
                return []
            return [
                Observation(series.counts[index], self._task_attributes(queue, name))
                for queue, by_name in list(self.recorder.tasks.items())
                for name, series in list(by_name.items())
            ]

        return observe

    def _system_number(self, numbers: list[int], index: int) -> Callback:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            return [] if self._closed else [Observation(numbers[index], _SYSTEM_ONLY)]

        return observe

    def _load(self, field: str) -> Callback:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            worker = self.recorder.worker
            if self._closed or worker is None:
                return []
            return [Observation(getattr(worker.load(), field), _SYSTEM_ONLY)]

        return observe

    def _depth(self, options: CallbackOptions) -> Iterable[Observation]:
        if self._closed:
            return []
        return [
            Observation(count, {**_SYSTEM_ONLY, QUEUE: queue, STATUS: status})
            for (queue, status), count in sorted(self.recorder.depth.items())
        ]

    def _statements(self, options: CallbackOptions) -> Iterable[Observation]:
        if self._closed:
            return []
        return [
            Observation(ran[0], self._statement_attributes(statement, dialect))
            for (statement, dialect), (ran, _) in sorted(self.recorder.statement_series.items())
        ]

    # -- histograms: recorded per event ------------------------------------------

    def _record_histograms(self) -> None:
        wait = self._histogram("cairnq.task.wait.duration", WAIT_BUCKETS).record
        run = self._histogram("cairnq.task.run.duration", WAIT_BUCKETS).record
        claim = self._histogram("cairnq.claim.duration", LATENCY_BUCKETS).record
        heartbeat = self._histogram("cairnq.heartbeat.duration", LATENCY_BUCKETS).record
        task_attributes = self._task_attributes

        def on_claimed(event: events.TaskEvent) -> None:
            if event.wait_s is not None:
                wait(event.wait_s, task_attributes(event.queue, event.name))

        def on_settled(event: events.TaskEvent) -> None:
            if event.run_s is not None:
                run(event.run_s, task_attributes(event.queue, event.name))

        def on_claim(event: events.ClaimEvent) -> None:
            claim(event.duration_s, _SYSTEM_ONLY)

        def on_heartbeat(event: events.HeartbeatEvent) -> None:
            heartbeat(event.duration_s, _SYSTEM_ONLY)

        sub = events.subscribe
        self._stops = [
            sub(on_claimed, ("task.claimed",)),
            sub(on_settled, events.SETTLEMENT_KINDS),
            sub(on_claim, ("claim",)),
            sub(on_heartbeat, ("heartbeat",)),
        ]
        if self.recorder.statements:
            statement = self._histogram(STATEMENT_METRICS[1], LATENCY_BUCKETS).record
            statement_attributes = self._statement_attributes

            def on_statement(event: events.StatementEvent) -> None:
                statement(event.duration_s, statement_attributes(event.name, event.dialect))

            self._stops.append(sub(on_statement, ("statement",)))

    def _histogram(self, name: str, bounds: tuple[float, ...]) -> Any:
        metric = BY_NAME[name]
        advice: dict[str, Any] = {}
        if _ACCEPTS_BOUNDARIES:
            advice["explicit_bucket_boundaries_advisory"] = list(bounds)
        return self.meter.create_histogram(
            name, unit=metric.unit, description=metric.description, **advice
        )

    # -- attribute dicts, made once per series -----------------------------------

    def _task_attributes(self, queue: str, name: str) -> Attributes:
        key = (queue, name)
        attrs = self._task_attrs.get(key)
        if attrs is None:
            attrs = self._task_attrs[key] = _task_attributes(queue, name)
        return attrs

    def _statement_attributes(self, statement: str, dialect: str) -> Attributes:
        key = (statement, dialect)
        attrs = self._statement_attrs.get(key)
        if attrs is None:
            attrs = self._statement_attrs[key] = _statement_attributes(statement, dialect)
        return attrs

    # -- lifetime ------------------------------------------------------------------

    def close(self) -> None:
        """Stop recording (idempotent): unsubscribe the histograms and the
        recorder, end the queue-depth sampler at its next round, and make the
        callbacks observe nothing from now on."""
        self._closed = True
        stops, self._stops = self._stops, []
        for stop in stops:
            stop()
        self.recorder.stop()

    def __enter__(self) -> "OtelMetrics":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _accepts_boundaries() -> bool:
    try:
        parameters = inspect.signature(Meter.create_histogram).parameters
    except (TypeError, ValueError):  # pragma: no cover - an unusual API build
        return False
    return "explicit_bucket_boundaries_advisory" in parameters


_ACCEPTS_BOUNDARIES = _accepts_boundaries()


def instrument_metrics(
    worker: Optional["Worker"] = None,
    *,
    meter_provider: Optional[MeterProvider] = None,
    statements: bool = False,
    sample_interval_s: float = 5.0,
) -> OtelMetrics:
    """Export this process's cairnq metrics through OpenTelemetry; call before
    ``worker.serve()`` (or ``run()``). The same metrics as ``serve_metrics``
    (the table in :mod:`cairnq.observability.metrics`: names, units,
    attribute keys), on a meter named ``cairnq``.

    ``meter_provider``: an OpenTelemetry ``MeterProvider`` to take the meter
    from instead of the global one (never set as the global one).
    ``statements=True`` adds per-statement counts and latency (costs a clock
    read per statement). ``sample_interval_s``: how often queue depth is read
    through ``stats()`` while the worker runs. Returns an :class:`OtelMetrics`;
    ``close()`` it to stop.
    """
    from cairnq import __version__

    recorder = Recorder(worker, statements=statements, sample_interval_s=sample_interval_s)
    meter = otel.get_meter("cairnq", __version__, meter_provider)
    handle = OtelMetrics(recorder, meter)
    if worker is not None:
        worker.run_beside(recorder.sample)
    recorder.start()
    return handle
