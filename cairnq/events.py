"""The instrumentation seam: what the store and the worker report as they work.

Metrics, tracing, logs and the dashboard all read this one surface, and so can
users. Each kind of event has a :class:`Channel`; a handler subscribes to the
kinds it wants and is called, synchronously and in order, with each event as
it happens::

    from cairnq import events

    def count(event: events.TaskEvent) -> None:
        counts[event.kind, event.queue] += 1

    stop = events.subscribe(count, kinds=events.TASK_KINDS)
    ...
    stop()

Rules of the surface (it is stable: fields are only ever added at the end):

* Events are named tuples, built only when some handler listens to their
  kind. An emitter asks ``channel.on`` (one attribute read) first, so a kind
  nobody listens to costs nothing more than that.
* An emitter that does one piece of work for several kinds (reads the clock
  once for every event that reports a duration) tests a :class:`Group` of
  them instead: ``group(*kinds).on`` is True while any of them has a handler.
* Handlers run inline, on the thread and event loop of the emitter: they must
  be quick and must not block (hand heavy work to a queue). A handler that
  raises is logged (``cairnq.events``) and the emitter goes on; it is never
  unsubscribed behind the user's back.
* Times are seconds, as floats: ``duration_s`` measured with
  ``time.perf_counter``, ``wait_s`` and ``run_s`` from the task's timestamps
  and the worker's monotonic clock.
* Kinds (the ``kind`` field, and the names to subscribe by):

  ``statement``        one protocol statement ran (StatementEvent)
  ``task.claimed``     a worker took a task (TaskEvent, ``wait_s`` set)
  ``task.started``     its handler was called
  ``task.succeeded``   settled as succeeded (``run_s`` set, as below)
  ``task.retried``     failed and queued for another attempt
  ``task.failed``      failed for good (no attempts left, or not retryable)
  ``task.canceled``    settled as canceled (a cancel request won)
  ``task.lease_lost``  the worker no longer holds it; nothing more is written
  ``batch.settled``    a batch handler's call ended (BatchEvent)
  ``heartbeat``        one heartbeat round for every lease held (HeartbeatEvent)
  ``claim``            one claim round trip of the worker's claim loop (ClaimEvent)
"""

# No `from __future__ import annotations`: the event tuples' annotations are
# evaluated here, so tools that read them (the API reference) resolve them.

import logging
from typing import Any, Callable, Iterable, NamedTuple, Optional

__all__ = [
    "StatementEvent",
    "TaskEvent",
    "BatchEvent",
    "HeartbeatEvent",
    "ClaimEvent",
    "Event",
    "Channel",
    "channel",
    "emit_task",
    "subscribe",
    "Group",
    "group",
    "KINDS",
    "TASK_KINDS",
    "SETTLEMENT_KINDS",
]

log = logging.getLogger("cairnq.events")


class StatementEvent(NamedTuple):
    """One protocol statement (``protocol/<dialect>/<name>.sql``) ran."""

    kind: str  # "statement"
    name: str  # the statement file's name, e.g. "claim_tasks"
    dialect: str  # "sqlite" | "postgres"
    rows: int  # rows it returned (0 for a failed statement)
    duration_s: float  # from hand-over to the driver to its answer, queueing included
    error: Optional[BaseException]  # what it raised, or None


class TaskEvent(NamedTuple):
    """A step in one attempt of one task, seen by a worker."""

    kind: str  # "task.claimed", "task.started", ... (see the module docs)
    task_id: str
    queue: str
    name: str
    attempt: int
    worker_id: str
    wait_s: Optional[float]  # task.claimed: claim time - due time (never negative)
    run_s: Optional[float]  # settlements and task.lease_lost: since the handler started
    error: Optional[dict[str, Any]]  # task.retried / task.failed: the error envelope


class BatchEvent(NamedTuple):
    """A batch handler's call ended; its tasks' own events follow or preceded."""

    kind: str  # "batch.settled"
    name: str
    queue: str
    size: int  # tasks in the call
    worker_id: str
    run_s: float
    error: Optional[BaseException]  # what the handler raised, or None


class HeartbeatEvent(NamedTuple):
    """One heartbeat round: every lease the worker holds, renewed at once."""

    kind: str  # "heartbeat"
    worker_id: str
    leases: int  # leases sent
    lost: int  # of those, no longer held
    cancel_requested: int  # of those, with a cancel request
    duration_s: float
    error: Optional[BaseException]  # the round failed as a whole (store down), or None


class ClaimEvent(NamedTuple):
    """One claim round trip of a worker's claim loop (found work or not)."""

    kind: str  # "claim"
    worker_id: str
    calls: int  # handler calls it started (0: it found nothing)
    tasks: int  # tasks it claimed
    duration_s: float
    error: Optional[BaseException]  # the claim failed (store down), or None


Event = Any  # one of the named tuples above
Handler = Callable[[Any], None]

SETTLEMENT_KINDS = ("task.succeeded", "task.retried", "task.failed", "task.canceled")
TASK_KINDS = (
    "task.claimed",
    "task.started",
    "task.succeeded",
    "task.retried",
    "task.failed",
    "task.canceled",
    "task.lease_lost",
)
KINDS = ("statement", *TASK_KINDS, "batch.settled", "heartbeat", "claim")


class Channel:
    """Where the events of one kind go. ``on`` is True while anyone listens."""

    __slots__ = ("kind", "on", "_handlers")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.on = False
        self._handlers: tuple[Handler, ...] = ()

    def emit(self, event: Event) -> None:
        """Hand ``event`` to every handler; emitters check ``on`` first."""
        for handler in self._handlers:
            try:
                handler(event)
            except Exception:
                log.exception("event handler %r failed on %s", handler, self.kind)

    def _set(self, handlers: tuple[Handler, ...]) -> None:
        self._handlers = handlers
        self.on = bool(handlers)
        for grouped in _groups:
            grouped._update()

    def __repr__(self) -> str:
        return f"<Channel {self.kind} handlers={len(self._handlers)}>"


class Group:
    """Several kinds at once: ``on`` is True while any of them has a handler.

    For an emitter that does one piece of work for several kinds (reads the
    clock once for every event that reports a duration): still one attribute
    read when nobody listens.
    """

    __slots__ = ("kinds", "on", "_members")

    def __init__(self, kinds: Iterable[str]) -> None:
        self.kinds = tuple(kinds)
        self._members = tuple(channel(kind) for kind in self.kinds)
        self.on = False
        self._update()

    def _update(self) -> None:
        self.on = any(ch.on for ch in self._members)

    def __repr__(self) -> str:
        return f"<Group {', '.join(self.kinds)} on={self.on}>"


_new_tuple = tuple.__new__  # a named tuple from a plain one, without its keyword-handling __new__


def emit_task(
    channel: Channel,
    kind: str,
    task: Any,
    worker_id: str,
    wait_s: Optional[float],
    run_s: Optional[float],
    error: Optional[dict[str, Any]],
) -> None:
    """Build the :class:`TaskEvent` of ``task`` (a ``Task``) and hand it to
    ``channel``'s handlers: ``Channel.emit`` in one frame, for the per-task
    events (emitters test ``channel.on`` first)."""
    event = _new_tuple(
        TaskEvent, (kind, task.id, task.queue, task.name, task.attempt, worker_id, wait_s, run_s, error)
    )
    for handler in channel._handlers:
        try:
            handler(event)
        except Exception:
            log.exception("event handler %r failed on %s", handler, kind)


_channels: dict[str, Channel] = {kind: Channel(kind) for kind in KINDS}
_groups: list[Group] = []  # every group ever made: they live as long as their emitters


def group(*kinds: str) -> Group:
    """A :class:`Group` of ``kinds``, kept current by every (un)subscribe."""
    made = Group(kinds)
    _groups.append(made)
    return made


def channel(kind: str) -> Channel:
    """The channel of ``kind``: emitters keep it and test ``.on`` per event."""
    try:
        return _channels[kind]
    except KeyError:
        raise ValueError(f"unknown event kind {kind!r}; known: {', '.join(KINDS)}") from None


def subscribe(handler: Handler, kinds: Optional[Iterable[str]] = None) -> Callable[[], None]:
    """Call ``handler(event)`` for every event of ``kinds`` (default: all).

    Returns a function that unsubscribes it (idempotent). The same handler
    subscribed twice is called twice.
    """
    if not callable(handler):
        raise TypeError(f"handler must be callable, got {type(handler).__name__}")
    if isinstance(kinds, str):
        kinds = (kinds,)
    chosen = [channel(kind) for kind in (KINDS if kinds is None else kinds)]
    for ch in chosen:
        ch._set((*ch._handlers, handler))
    done = False

    def unsubscribe() -> None:
        # Removes one occurrence per channel: a handler subscribed twice and
        # unsubscribed once is still called once.
        nonlocal done
        if done:
            return
        done = True
        for ch in chosen:
            handlers = list(ch._handlers)
            for i, h in enumerate(handlers):
                if h is handler:
                    del handlers[i]
                    break
            ch._set(tuple(handlers))

    return unsubscribe
