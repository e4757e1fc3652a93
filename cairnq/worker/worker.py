"""``Worker``: claims tasks and runs their handlers.

The pieces, each in its own module:

    registry.py    handlers, call conventions, claim sources
    claims.py      one poll's plan: quotas per source, rows -> calls
    starter.py     a claim's calls into asyncio tasks (shared until one suspends)
    book.py        the calls in flight: what each holds and gives back
    heartbeat.py   one heartbeat loop for every lease held
    execution.py   running a call and settling what it leaves
    lifecycle.py   serve() and background(): signals, shutdown, ownership

This module is the claim loop that ties them together, plus the public API.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import timedelta
from operator import attrgetter
from typing import (
    TYPE_CHECKING, Any, AsyncContextManager, Awaitable, Callable, NamedTuple, Optional, Sequence,
    TypeVar, Union, overload,
)  # fmt: skip

from cairnq._backoff import DEFAULT_RETRY_BACKOFF_MAX_MS, DEFAULT_RETRY_BACKOFF_MS
from cairnq._ids import new_id
from cairnq.backpressure import DEFAULT_MAX_WAIT_MS, QueueDepthLimit
from cairnq import events
from cairnq.context import RUN_TIMED, TaskContext, new_contexts, report_claimed
from cairnq.models import TaskDef
from cairnq.observability import tracing
from cairnq.store.base import TaskStore
from cairnq.store.factory import postgres_store, sqlite_store
from cairnq.store.validation import (
    DURATION_MS_MAX,
    check_callable,
    check_capacities,
    check_ints,
    check_max_run_ms,
    check_queue_names,
    check_worker_store,
)
from cairnq.worker import lifecycle
from cairnq.worker.book import CallBook, Hold, QuickHold
from cairnq.worker.claims import Call, ClaimPlanner
from cairnq.worker.completions import Completions
from cairnq.worker.execution import CallSettings, no_handler, run_call
from cairnq.worker.heartbeat import Heartbeats
from cairnq.worker.quick import QuickCall
from cairnq.worker.registry import Handler, Registry
from cairnq.worker.signals import Signal, first_of, unless
from cairnq.worker.starter import CallStarter, StartedCall
from cairnq.worker.store_port import StorePort

if TYPE_CHECKING:
    from cairnq.periodic.scheduler import Scheduler

log = logging.getLogger("cairnq.worker")

__all__ = ["Worker", "WorkerLoad", "OnError", "CLAIM_ERROR_BACKOFF_S"]

OnError = Callable[[BaseException, dict[str, Any]], None]
CLAIM_ERROR_BACKOFF_S = 0.25
F = TypeVar("F", bound=Callable[..., Any])
PeriodicSchedule = Union[str, timedelta]
_CLAIMED = events.channel("task.claimed")
_CLAIM = events.channel("claim")
_clock = time.perf_counter
_new_tuple = tuple.__new__
_task_id = attrgetter("id")
_quick_call = QuickCall.of
_TRACING = tracing.STATE


def _check_arguments(
    store: Any,
    queues: Any,
    max_run_ms: Any,
    resources: Any,
    on_error: Any,
    ints: Sequence[tuple[str, Any, int, Optional[int]]],
) -> tuple[list[str], dict[str, int]]:
    """Every argument check, in 0.15.1's order where it checked at all
    (max_run_ms, then resources). Returns the queues as a list and the
    resources' capacities."""
    check_max_run_ms(max_run_ms)
    capacities = check_capacities(resources)
    check_worker_store(store)
    names = check_queue_names(queues)
    check_ints(ints)
    check_callable("on_error", on_error)
    return names, capacities


class WorkerLoad(NamedTuple):
    """What a worker holds right now (``Worker.load()``): for gauges and health
    checks, read from any thread (plain attribute reads, no lock)."""

    running: bool  # run() is between connecting the store and its drain
    poll_interval_ms: int
    concurrency: int  # the run's call limit (0 while not running)
    calls_in_flight: int  # handler calls not yet returned
    free_slots: int  # concurrency - calls_in_flight (never negative)
    payload_bytes_in_flight: int  # JSON size of running payloads (0 unless max_in_flight_bytes)
    claim_busy_s: float  # how long the claim round trip under way has taken (0: none)


class Worker:
    """Runs handlers for the tasks of ``queues``.

    ``concurrency`` counts handler calls in flight (a batch call counts once).
    Additions to the 0.15.1 surface: ``heartbeat_interval_ms`` (default
    ``max(50, lease_ms // 3)``), ``claim_batch`` (cap on calls a source starts
    per poll), ``max_in_flight_bytes`` (stop claiming while the running
    payloads' JSON size reaches it), and ``concurrency=`` per task name.

    ``poll_interval_ms`` is how often an idle worker looks for work nobody
    announced (expired leases, delayed tasks come due), as in 0.15.1, on
    SQLite and on PostgreSQL while the listener is down. On PostgreSQL with
    the listener up, new work is announced (LISTEN/NOTIFY) and the idle
    workers of one database that claim the same queues and task names share
    the looking: one of them (the leader) probes every ``poll_interval_ms``
    for all of them and alone listens for news of work, the others about
    every N intervals (N workers) and wait at the leader's gate,
    which it opens when there is more work than it can take.
    ``poll_interval_ms`` is then how often that fleet probes, not each of
    its workers (see ``cairnq/store/postgres/fleet.py``).
    """

    def __init__(
        self,
        store: TaskStore,
        queues: Union[list[str], tuple[str, ...]],
        *,
        concurrency: int = 1,
        lease_ms: int = 30_000,
        poll_interval_ms: int = 500,
        retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS,
        retry_backoff_max_ms: int = DEFAULT_RETRY_BACKOFF_MAX_MS,
        max_run_ms: Optional[int] = None,
        resources: Optional[dict[str, int]] = None,
        max_queue_depth: Optional[QueueDepthLimit] = None,
        max_queue_wait_ms: int = DEFAULT_MAX_WAIT_MS,
        on_error: Optional[OnError] = None,
        heartbeat_interval_ms: Optional[int] = None,
        claim_batch: Optional[int] = None,
        max_in_flight_bytes: Optional[int] = None,
    ) -> None:
        queues, capacities = _check_arguments(
            store, queues, max_run_ms, resources, on_error,
            (
                ("concurrency", concurrency, 1, None),
                ("lease_ms", lease_ms, 1, DURATION_MS_MAX),
                ("poll_interval_ms", poll_interval_ms, 1, DURATION_MS_MAX),
                ("retry_backoff_ms", retry_backoff_ms, 0, DURATION_MS_MAX),
                ("retry_backoff_max_ms", retry_backoff_max_ms, 0, DURATION_MS_MAX),
                ("max_run_ms", max_run_ms, 1, DURATION_MS_MAX),
                ("heartbeat_interval_ms", heartbeat_interval_ms, 1, DURATION_MS_MAX),
                ("claim_batch", claim_batch, 1, None),
                ("max_in_flight_bytes", max_in_flight_bytes, 1, None),
            ),
        )  # fmt: skip
        # Last, so a refused Worker leaves the store as it found it.
        if max_queue_depth is not None:
            store.use_backpressure(max_queue_depth, max_queue_wait_ms=max_queue_wait_ms)

        # Settings, as given.
        self._store = store
        self._queues = queues
        self._concurrency = concurrency
        self._lease_ms = lease_ms
        self._poll_interval_ms = poll_interval_ms
        self._retry_backoff_ms = retry_backoff_ms
        self._retry_backoff_max_ms = retry_backoff_max_ms
        self._max_run_ms = max_run_ms
        self._on_error = on_error
        self._max_in_flight_bytes = max_in_flight_bytes
        self._heartbeat_interval_ms = heartbeat_interval_ms or max(50, lease_ms // 3)
        self._worker_id = new_id("worker")
        self._owns_store = False  # set by the factories that build the store
        self._scheduler: Optional["Scheduler"] = None  # made by the first periodic()
        self._scheduling = False  # run() has started the schedules

        self._wire(Registry(capacities), claim_batch)
        self._init_run_state()

    def _wire(self, registry: Registry, claim_batch: Optional[int]) -> None:
        """The parts the claim loop drives: handlers, claim plans, the store
        port, and what a call needs to run and settle."""
        self._registry = registry
        self._planner = ClaimPlanner(registry, claim_batch)
        self._port = StorePort(self._store, self._worker_id, self._lease_ms)
        self._call_settings = CallSettings(
            port=self._port,
            retry_backoff_ms=self._retry_backoff_ms,
            retry_backoff_max_ms=self._retry_backoff_max_ms,
            max_run_ms=self._max_run_ms,
            report=self._report,
        )

    def _init_run_state(self) -> None:
        """What a run keeps as it goes (each run() sets up its own events)."""
        self._stopping = False
        self._stop_event: Signal | None = None
        # The calls in flight and what they hold; each run() gives it the
        # signal a freed slot sets and the heartbeat loop for the leases.
        self._book = CallBook()
        self._starter: CallStarter  # each run() makes its own, on its loop
        self._avg_payload_bytes: float | None = None
        self._limit = 0  # the running call limit, for load()
        self._claim_began: Optional[float] = None  # monotonic start of the claim under way
        self._beside: list[Callable[["Worker"], Awaitable[None]]] = []

    # -- factories ------------------------------------------------------------

    @classmethod
    def sqlite(
        cls,
        path: str,
        *,
        queues: Union[list[str], tuple[str, ...]] = ("default",),
        concurrency: int = 1,
        lease_ms: int = 30_000,
        busy_timeout_ms: int = 5_000,
        **kwargs: Any,
    ) -> "Worker":
        synchronous = kwargs.pop("synchronous", None)
        store = sqlite_store(path, busy_timeout_ms=busy_timeout_ms, synchronous=synchronous)
        worker = cls(store, queues, concurrency=concurrency, lease_ms=lease_ms, **kwargs)
        worker._owns_store = True
        return worker

    @classmethod
    def postgres(
        cls,
        source: Any,
        *,
        queues: Union[list[str], tuple[str, ...]] = ("default",),
        concurrency: int = 1,
        lease_ms: int = 30_000,
        min_size: int = 1,
        max_size: int = 10,
        schema: Optional[str] = None,
        **kwargs: Any,
    ) -> "Worker":
        store = postgres_store(source, min_size=min_size, max_size=max_size, schema=schema)
        worker = cls(store, queues, concurrency=concurrency, lease_ms=lease_ms, **kwargs)
        worker._owns_store = True
        return worker

    # -- registration -----------------------------------------------------------

    @property
    def worker_id(self) -> str:
        return self._worker_id

    @property
    def store(self) -> TaskStore:
        return self._store

    @property
    def queues(self) -> list[str]:
        return list(self._queues)

    def load(self) -> WorkerLoad:
        """What this worker holds right now (see :class:`WorkerLoad`)."""
        began = self._claim_began
        limit = self._limit
        return WorkerLoad(
            running=self._stop_event is not None and limit > 0,
            poll_interval_ms=self._poll_interval_ms,
            concurrency=limit,
            calls_in_flight=self._book.running,
            free_slots=max(0, limit - self._book.running),
            payload_bytes_in_flight=self._book.in_flight_bytes,
            claim_busy_s=0.0 if began is None else max(0.0, time.monotonic() - began),
        )

    def run_beside(self, job: Callable[["Worker"], Awaitable[None]]) -> None:
        """Run ``job(worker)`` beside the claim loop on every run(), from the
        store's connect until the drain (it is cancelled then). For samplers
        that must use the store on the worker's event loop (queue depth for
        metrics, say). A job that raises is reported to on_error, once."""
        check_callable("job", job)
        self._beside.append(job)

    @overload
    def task(
        self,
        name: F,
        *,
        batch: Optional[int] = None,
        resource: Optional[str] = None,
        concurrency: Optional[int] = None,
        periodic: Optional[PeriodicSchedule] = None,
    ) -> F: ...

    @overload
    def task(
        self,
        name: Union[str, TaskDef[Any, Any], None] = None,
        *,
        batch: Optional[int] = None,
        resource: Optional[str] = None,
        concurrency: Optional[int] = None,
        periodic: Optional[PeriodicSchedule] = None,
    ) -> Callable[[F], F]: ...

    def task(
        self,
        name: Union[str, TaskDef[Any, Any], Handler, None] = None,
        *,
        batch: Optional[int] = None,
        resource: Optional[str] = None,
        concurrency: Optional[int] = None,
        periodic: Optional[PeriodicSchedule] = None,
    ) -> Any:
        """Register a handler: ``@worker.task``, ``@worker.task("name")``,
        ``@worker.task(task_def)``, ``@worker.task(batch=64)``, ... Returns the
        function itself. ``periodic=`` (a cron string or a timedelta) also
        enqueues the task on that schedule, as ``periodic()`` with its defaults."""
        if callable(name) and not isinstance(name, (str, TaskDef)):
            fn = name
            self.register(
                self._name_of(fn), fn,
                batch=batch, resource=resource, concurrency=concurrency, periodic=periodic,
            )  # fmt: skip
            return fn
        explicit = name.name if isinstance(name, TaskDef) else name

        def decorate(fn: Handler) -> Handler:
            task_name = explicit if explicit is not None else self._name_of(fn)
            self.register(
                task_name, fn,
                batch=batch, resource=resource, concurrency=concurrency, periodic=periodic,
            )  # fmt: skip
            return fn

        return decorate

    @staticmethod
    def _name_of(fn: Handler) -> str:
        name = getattr(fn, "__name__", "")
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(
                f"worker.task: cannot derive a task name from {name or fn!r}; pass one "
                "explicitly, e.g. @worker.task('summary.create')"
            )
        return name

    def register(
        self,
        name: str,
        fn: Handler,
        *,
        batch: Optional[int] = None,
        resource: Optional[str] = None,
        concurrency: Optional[int] = None,
        periodic: Optional[PeriodicSchedule] = None,
    ) -> None:
        """Register (or replace) the handler for ``name``; allowed while running.
        ``periodic=``: see ``task``."""
        if periodic is None:
            self._registry.register(
                name, fn, batch=batch, resource=resource, concurrency=concurrency
            )
            return
        from cairnq.periodic.declaration import declare

        declared = declare(periodic, name)  # checked before anything changes
        scheduler = self._periodic_scheduler()
        scheduler.ensure_new(declared.id)
        self._registry.register(name, fn, batch=batch, resource=resource, concurrency=concurrency)
        scheduler.add(declared)

    def periodic(
        self,
        schedule: PeriodicSchedule,
        name: Union[str, TaskDef[Any, Any]],
        payload: Any = None,
        *,
        queue: str = "default",
        timezone: str = "UTC",
        priority: int = 0,
        max_attempts: int = 3,
        metadata: Optional[dict[str, Any]] = None,
        catch_up: str = "latest",
        id: Optional[str] = None,
    ) -> None:
        """Enqueue ``name`` on ``schedule`` while this worker runs: a cron
        string (five fields or @hourly/@daily/..., in ``timezone``) or a
        ``timedelta`` (fires at its multiples since the Unix epoch). Every
        worker that declares the schedule runs it; each fire instant becomes
        exactly one task (keyed by schedule and instant). ``catch_up``:
        ``latest``, ``none`` or ``all`` fires missed while no worker ran.
        ``id`` names the schedule (default: the task name; give one to each
        further schedule of the same name). See ``cairnq/periodic/``."""
        from cairnq.periodic.declaration import declare

        declared = declare(
            schedule, name.name if isinstance(name, TaskDef) else name, payload,
            id=id, queue=queue, timezone=timezone, priority=priority,
            max_attempts=max_attempts, metadata=metadata, catch_up=catch_up,
        )  # fmt: skip
        self._periodic_scheduler().add(declared)

    def _periodic_scheduler(self) -> "Scheduler":
        if self._scheduler is None:
            from cairnq.periodic.scheduler import Scheduler

            self._scheduler = Scheduler(self._store, self._report)
            if self._scheduling:
                self._scheduler.start()  # the first schedule declared while running
        return self._scheduler

    # -- running ------------------------------------------------------------------

    def stop(self) -> None:
        """Stop claiming; ``run()`` returns once the calls in flight finish."""
        self._stopping = True
        if self._stop_event is not None:
            self._stop_event.set()

    async def close(self) -> None:
        """Close the store (always, whoever owns it)."""
        await self._store.close()

    async def run(self, *, concurrency: Optional[int] = None) -> None:
        """Claim and run tasks until ``stop()``. Connects the store; never closes it."""
        limit = max(1, concurrency or self._concurrency)
        # A stop() that came before this run started (background() whose body
        # never yielded, say) still counts: the flag is cleared on the way out.
        self._stop_event = Signal()
        if self._stopping:
            self._stop_event.set()
        book = self._book
        book.call_done = Signal()
        self._starter = CallStarter(asyncio.get_running_loop())
        heartbeats = book.heartbeats = Heartbeats(self._port, self._heartbeat_interval_ms, self._report)
        unsubscribe = self._port.subscribe_survived(lambda exc: self._report(exc, {"phase": "store"}))
        try:
            await self._store.connect()
            self._scheduling = True
            if self._scheduler is not None:
                self._scheduler.start()  # beside the claim loop, until it ends
            beside = [asyncio.ensure_future(self._run_job(job)) for job in self._beside]
            self._limit = limit
            try:
                await self._poll_loop(limit)
            finally:
                self._limit = 0
                for job_task in beside:
                    job_task.cancel()
                await asyncio.gather(*beside, return_exceptions=True)
        finally:
            self._scheduling = False
            if self._scheduler is not None:
                await self._scheduler.stop()
            unsubscribe()
            await book.settled()
            await heartbeats.stop()
            self._stopping = False  # the worker can run again

    async def _run_job(self, job: Callable[["Worker"], Awaitable[None]]) -> None:
        try:
            await job(self)
        except Exception as exc:
            self._report(exc, {"phase": "beside"})

    def serve(self, *, concurrency: Optional[int] = None) -> None:
        """Run in this process until SIGINT/SIGTERM (the first drains, a second
        one acts as usual); closes the store if the worker built it."""
        lifecycle.serve(self, concurrency, close_store=self._owns_store)

    def background(self, *, concurrency: Optional[int] = None) -> AsyncContextManager["Worker"]:
        """``async with worker.background():`` runs the worker beside other work."""
        return lifecycle.background(self, concurrency, close_store=self._owns_store)

    # -- the claim loop --------------------------------------------------------------

    async def _poll_loop(self, limit: int) -> None:
        try:
            await self._claim_loop(limit)
        finally:
            self._port.leave()

    async def _claim_loop(self, limit: int) -> None:
        stop = self._stop_event
        call_done = self._book.call_done
        assert stop is not None and call_done is not None
        news_of_work = False  # the store just told of new work: claim without probing
        probed_at = float("-inf")  # ... unless a probe (it also finds expired leases) is due
        book = self._book
        while not self._stopping:
            free = limit - book.running
            if free > 0 and self._max_in_flight_bytes is not None:
                free = min(free, self._calls_within_byte_budget())
            if free <= 0:
                call_done.clear()
                await first_of(call_done, stop)
                continue
            if not self._registry.claim_sources:
                await self._idle(resource_wake=False)
                continue
            probe = not news_of_work or self._probe_due(probed_at)
            news_of_work = False
            began = _clock() if _CLAIM.on else None
            self._claim_began = time.monotonic()
            try:
                plan = self._planner.plan(free, book.in_use.__getitem__)
                calls, probed = await self._port.claim(
                    self._queues, self._registry.names, plan,
                    probe=probe, single_draw=len(self._registry.claim_sources) == 1,
                )  # fmt: skip
            except Exception as exc:
                self._claim_began = None
                if began is not None:
                    self._report_claim(began, (), exc)
                self._report(exc, {"phase": "claim"})
                await first_of(stop, future=asyncio.ensure_future(asyncio.sleep(CLAIM_ERROR_BACKOFF_S)))
                continue
            self._claim_began = None
            if began is not None:
                self._report_claim(began, calls, None)
            if probed:
                probed_at = time.monotonic()
            self._port.claimed(bool(calls) and self._planner.drew_full)
            if calls:
                if book.calls and (RUN_TIMED.on or _TRACING.on):
                    # Earlier calls' settlements may have ridden in this claim's
                    # transaction and been committed with it (SQLite), a retried
                    # task claimed again by it: those calls report their outcome
                    # (task.retried, ...) before this claim's calls report theirs.
                    # (Where nothing listens, they report nothing: no loop turn.)
                    await asyncio.sleep(0)
                self._dispatch(calls)
                # A draw came back full: more is due, so the next claim needs
                # no probe to know it (the probe still runs once its interval
                # is up: it also finds expired leases).
                news_of_work = self._planner.drew_full
            rest = not calls or (
                len(calls) < free and not self._planner.drew_full and self._port.wake_pushed
            )
            if calls and self._starter.eager and not rest:
                # Calls that started eagerly and wrote inline resume (and
                # report their settlements) before this loop claims again.
                # (Before a rest they do so anyway, ahead of any wake-up; and
                # the rest begins first, so their completions go at once
                # instead of waiting to ride with a claim that is not coming.)
                await asyncio.sleep(0)
            if rest:
                # Nothing more was due when this claim ran (every source drawn
                # came back short, and slots are left): wait for news of work
                # rather than probe at once. Only where news is pushed: a
                # notification that lands meanwhile is kept for the wait.
                news_of_work = await self._idle(resource_wake=True, after_dispatch=bool(calls))

    def _report_claim(
        self, began: float, calls: Optional[Sequence[Call]], error: Optional[BaseException]
    ) -> None:
        if _CLAIM.on:  # still: a handler may have unsubscribed meanwhile
            calls = calls or ()  # (a claim that found nothing may answer None)
            tasks = sum(len(call[1]) for call in calls)
            _CLAIM.emit(
                _new_tuple(
                    events.ClaimEvent,
                    ("claim", self._worker_id, len(calls), tasks, _clock() - began, error),
                )
            )

    def _probe_due(self, probed_at: float) -> bool:
        """Whether this claim probes first though told of work: once per poll
        interval, or, in a fleet, when this worker's turn has come."""
        due = self._port.probe_due(self._queues, self._registry.names, self._poll_interval_ms)
        if due is None:
            return time.monotonic() >= probed_at + self._poll_interval_ms / 1000
        return due

    async def _idle(self, *, resource_wake: bool, after_dispatch: bool = False) -> bool:
        """Sleep until there may be work; True on news of work from the store.
        (In a fleet, the sleep lasts until news for this worker or its turn to
        probe: see ``Worker``'s ``poll_interval_ms``.)

        ``after_dispatch``: this claim just started calls. They take their
        first step before the sleep does: its first step (the change counter
        read and the file watch armed, a fleet's turn) runs in this task, and
        would otherwise hold their handlers back. Where the store holds
        deferred writes for the next claim (SQLite), none is coming now: the
        completions of calls that returned at once are written first too.

        The sleep runs in this task (``signals.unless``), so news of work
        resumes the claim loop on the next turn of the loop; a stop (or a
        finished call, where resources are capped) interrupts it."""
        call_done = self._book.call_done
        assert self._stop_event is not None and call_done is not None
        with self._port.resting() as writes_wait_for_claims:
            if after_dispatch and not self._starter.eager:  # (eager: taken within the dispatch)
                await asyncio.sleep(0)
            if after_dispatch and writes_wait_for_claims:
                await self._port.queued_completions_written()
            wait = self._port.idle_wait(self._queues, self._registry.names, self._poll_interval_ms)
            if resource_wake and self._registry.capacities:
                call_done.clear()  # a finished call frees its resource units
                done, news = await unless(wait, self._stop_event, call_done)
            else:
                done, news = await unless(wait, self._stop_event)
        return done and news is True

    def _calls_within_byte_budget(self) -> int:
        """How many calls the next claim may start under max_in_flight_bytes.

        Payload sizes are unknown until claimed, so the quota comes from the
        running average size of the payloads seen so far (one call when there
        is no average yet): a claim overshoots the budget by about one
        payload, not by a whole claim's worth.
        """
        assert self._max_in_flight_bytes is not None
        room = self._max_in_flight_bytes - self._book.in_flight_bytes
        if room <= 0:
            return 0
        if self._avg_payload_bytes is None:
            return 1
        return max(1, int(room // max(1.0, self._avg_payload_bytes)))

    def _dispatch(self, calls: list[Call]) -> None:
        """Start the calls of one claim (``starter.CallStarter``: they share
        an asyncio task until one suspends)."""
        store, worker_id, lease_ms = self._store, self._worker_id, self._lease_ms
        backoff_ms, backoff_max_ms = self._retry_backoff_ms, self._retry_backoff_max_ms
        settings, book = self._call_settings, self._book
        heartbeats = book.heartbeats
        assert heartbeats is not None
        measure = self._max_in_flight_bytes is not None
        in_flight, in_use = book.calls, book.in_use
        starts: list[StartedCall] = []
        claimed = [task for _, tasks in calls for task in tasks]
        contexts = new_contexts(store, claimed, worker_id, lease_ms, backoff_ms, backoff_max_ms)
        if _CLAIMED.on:
            report_claimed(contexts)
        unhandled = False  # some name has no handler now: its tasks are failed, not leased
        quick_completer = self._quick_completer()
        starter = self._starter
        suspending = starter.suspending
        quick: Optional[QuickHold] = None
        quick_calls = 0
        at = 0  # where the call's contexts begin
        book.running += len(calls)
        for reg, tasks in calls:
            if quick_completer is not None and reg is not None and reg.quick and reg.name not in suspending:
                if quick is None:
                    quick = QuickHold(book, settings, quick_completer, self._port.writes_ride_claims)
                    in_flight[quick] = None
                starts.append((quick, _quick_call(quick, reg, tasks[0], contexts[at]), reg.name))
                quick_calls += 1
                at += 1
                continue
            mine = contexts[at : at + len(tasks)]
            at += len(tasks)
            held = reg.resources if reg is not None else ()
            for resource in held:
                in_use[resource] += 1
            size = self._payload_bytes(tasks) if measure else 0
            book.in_flight_bytes += size
            hold = Hold(book, tasks, mine, held, size)
            in_flight[hold] = None
            if reg is not None:
                starts.append((hold, run_call(settings, reg, mine, hold), reg.name))
            else:
                unhandled = True
                starts.append((hold, no_handler(settings, mine, hold), None))
        if quick is not None:
            quick.expect(quick_calls)
        if not unhandled:
            heartbeats.hold(contexts, map(_task_id, claimed))  # (as one lot)
        else:
            self._hold_handled(calls, contexts)
        starter.start(starts)

    def _hold_handled(self, calls: list[Call], contexts: list[TaskContext]) -> None:
        """Lease the tasks of ``calls`` that have a handler (``contexts``:
        every task's, in order)."""
        heartbeats = self._book.heartbeats
        assert heartbeats is not None
        leased: list[TaskContext] = []
        ids: list[str] = []
        at = 0
        for reg, tasks in calls:
            if reg is not None:
                leased += contexts[at : at + len(tasks)]
                ids += map(_task_id, tasks)
            at += len(tasks)
        if leased:
            heartbeats.hold(leased, ids)

    def _quick_completer(self) -> Optional[Completions]:
        """Where this claim's quick calls (``quick.py``) queue their
        completions; None where its calls cannot start quick: a max_run_ms or
        a byte budget, tracing or a timed event on, or a store whose
        ``complete`` is not cairnq's own."""
        if self._max_run_ms is not None or self._max_in_flight_bytes is not None:
            return None
        if _TRACING.on or RUN_TIMED.on:
            return None
        return self._port.completer()

    def _payload_bytes(self, tasks: Sequence[Any]) -> int:
        import orjson

        total = 0
        for task in tasks:
            size = len(orjson.dumps(task.payload))
            total += size
            avg = self._avg_payload_bytes
            self._avg_payload_bytes = size if avg is None else 0.8 * avg + 0.2 * size
        return total

    def _report(self, exc: BaseException, info: dict[str, Any]) -> None:
        """Errors the loop survived go to on_error (whose own errors are swallowed)."""
        hook = self._on_error
        if hook is None:
            log.debug("worker error (%s): %r", info, exc)
            return
        try:
            hook(exc, info)
        except Exception:
            log.debug("on_error hook raised", exc_info=True)

