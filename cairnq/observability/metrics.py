"""Every metric cairnq exports, in one table.

Names and attributes follow the OpenTelemetry semantic conventions for
messaging where one applies (``messaging.system`` is always ``cairnq``,
``messaging.destination.name`` is the queue); the rest are ``cairnq.*``.
A Prometheus exporter turns a name into its own spelling with
:func:`prometheus_name` (dots become underscores, the unit a suffix, counters
end in ``_total``).

Label values are bounded: queues, task names, statuses, statement names and
dialects. Task ids, keys and payloads are never labels.
"""

# No `from __future__ import annotations`: Metric's annotations are evaluated
# here, so tools that read them (the API reference) resolve them.

from typing import Literal, NamedTuple

__all__ = ["Metric", "METRICS", "BY_NAME", "prometheus_name", "label_name", "STATEMENT_METRICS"]

Kind = Literal["counter", "histogram", "gauge"]

SYSTEM = "messaging.system"
QUEUE = "messaging.destination.name"
TASK_NAME = "cairnq.task.name"
STATUS = "cairnq.task.status"
STATEMENT = "db.operation.name"
DIALECT = "db.system.name"
TASK_LABELS = (SYSTEM, QUEUE, TASK_NAME)


class Metric(NamedTuple):
    name: str
    kind: Kind
    unit: str  # UCUM, as OpenTelemetry writes it: "s", "By", "{task}", ...
    labels: tuple[str, ...]
    description: str


METRICS: tuple[Metric, ...] = (
    Metric("cairnq.tasks.claimed", "counter", "{task}", TASK_LABELS, "Tasks claimed by this worker."),
    Metric("cairnq.tasks.succeeded", "counter", "{task}", TASK_LABELS, "Tasks settled as succeeded."),
    Metric("cairnq.tasks.failed", "counter", "{task}", TASK_LABELS, "Tasks failed for good (no attempts left, or not retryable)."),
    Metric("cairnq.tasks.retried", "counter", "{task}", TASK_LABELS, "Failed attempts queued for another attempt."),
    Metric("cairnq.tasks.canceled", "counter", "{task}", TASK_LABELS, "Tasks settled as canceled."),
    Metric("cairnq.tasks.lease_lost", "counter", "{task}", TASK_LABELS, "Attempts whose lease this worker lost (nothing more was written)."),
    Metric("cairnq.task.wait.duration", "histogram", "s", TASK_LABELS, "Queue wait: claim time minus due time."),
    Metric("cairnq.task.run.duration", "histogram", "s", TASK_LABELS, "Run time: from the handler's start to the settlement."),
    Metric("cairnq.worker.calls.in_flight", "gauge", "{call}", (SYSTEM,), "Handler calls running now (a batch call counts once)."),
    Metric("cairnq.worker.slots.free", "gauge", "{call}", (SYSTEM,), "Concurrency slots free now (0 while the worker is not running)."),
    Metric("cairnq.worker.payload.in_flight", "gauge", "By", (SYSTEM,), "JSON size of the running payloads (measured only with max_in_flight_bytes; else 0)."),
    Metric("cairnq.heartbeat.rounds", "counter", "{round}", (SYSTEM,), "Heartbeat rounds (one renews every lease held)."),
    Metric("cairnq.heartbeat.errors", "counter", "{round}", (SYSTEM,), "Heartbeat rounds that failed as a whole (store unreachable)."),
    Metric("cairnq.heartbeat.duration", "histogram", "s", (SYSTEM,), "Heartbeat round latency."),
    Metric("cairnq.claims", "counter", "{claim}", (SYSTEM,), "Claim round trips of the claim loop."),
    Metric("cairnq.claims.empty", "counter", "{claim}", (SYSTEM,), "Claim round trips that found nothing."),
    Metric("cairnq.claims.errors", "counter", "{claim}", (SYSTEM,), "Claim round trips that failed."),
    Metric("cairnq.claim.duration", "histogram", "s", (SYSTEM,), "Claim round-trip latency."),
    Metric("cairnq.queue.depth", "gauge", "{task}", (SYSTEM, QUEUE, STATUS), "Tasks per queue and status, sampled from stats() on an interval (one reader per process)."),
    Metric("cairnq.store.statements", "counter", "{statement}", (SYSTEM, STATEMENT, DIALECT), "Protocol statements run (opt-in: statements=True)."),
    Metric("cairnq.store.statement.duration", "histogram", "s", (SYSTEM, STATEMENT, DIALECT), "Protocol statement latency, queueing included (opt-in: statements=True)."),
)  # fmt: skip

BY_NAME = {metric.name: metric for metric in METRICS}
STATEMENT_METRICS = ("cairnq.store.statements", "cairnq.store.statement.duration")

_UNIT_SUFFIX = {"s": "seconds", "By": "bytes"}


def label_name(attribute: str) -> str:
    """An attribute's Prometheus label name: ``messaging.system`` -> ``messaging_system``."""
    return attribute.replace(".", "_")


def prometheus_name(metric: Metric) -> str:
    """The base name a Prometheus client is given (it adds ``_total`` to
    counters and ``_bucket``/``_sum``/``_count`` to histograms itself)."""
    base = metric.name.replace(".", "_")
    suffix = _UNIT_SUFFIX.get(metric.unit)
    return base if suffix is None else f"{base}_{suffix}"
