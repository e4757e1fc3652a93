"""``TaskStore``: every protocol operation, once, over named statements.

Each operation here is dialect-neutral: it validates its input, builds the
parameters the protocol defines for the statement, runs it through the
driver's seam and maps the rows. A driver (SQLite, Postgres) supplies only the
seam:

    _fetch(name, params)   run one statement on its own, return its rows
    _transaction()         async context manager yielding such a fetch bound
                           to one write transaction (commit on clean exit)
    connect(), close(), protocol_version()

Rows come back as sequences in table order (``select *`` / ``returning *``),
decoded to ``Task`` by the compiled kernel. Storage imports nothing above it:
backpressure and retention are handed in as objects with one method each, and
the gate class behind ``use_backpressure`` is installed by the package root
(``install_gate_factory``).
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import math
import re
from abc import ABC, abstractmethod
from contextlib import AbstractAsyncContextManager
from typing import Any, Awaitable, Callable, Literal, Mapping, Protocol, Sequence

from cairnq._ids import new_id
from cairnq._sql import specialize, statement_params
from cairnq._speedups import decode_beats, decode_task, decode_tasks, dumps
from cairnq.errors import (
    AlreadyExists,
    LostLease,
    ProtocolVersionMismatch,
    SerializationError,
    UnsupportedBackend,
)
from cairnq.models import STATUSES, Task, TaskRef, TaskStatus
from cairnq.store.validation import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    DURATION_MS_MAX,
    check_int,
    check_message,
    check_status,
    check_task_id,
    check_text,
    unique_names,
    validate_purge_input,
)

__all__ = [
    "TaskStore",
    "Conflict",
    "CONFLICTS",
    "Fetch",
    "ClaimDraw",
    "SUPPORTED_PROTOCOL_MAJOR",
    "check_protocol_version",
    "dump_json",
    "validate_purge_input",
    "LEASE_EXPIRED_ERROR_JSON",
    "claim_statement",
    "probe_statement",
    "specialize",
    "statement_params",
]

log = logging.getLogger("cairnq.store")

Conflict = Literal["reuse", "reuse-succeeded", "reject", "replace"]
CONFLICTS: tuple[Conflict, ...] = ("reuse", "reuse-succeeded", "reject", "replace")
SUPPORTED_PROTOCOL_MAJOR = 1

Row = Sequence[Any]
Fetch = Callable[[str, dict[str, Any]], Awaitable[list[Any]]]
ClaimDraw = Callable[[list[str] | None, int], Awaitable[list[Task]]]

# Written by recover_leases when a dead worker's task has no attempts left.
LEASE_EXPIRED_ERROR_JSON = (
    '{"type":"LeaseExpired","code":"lease_expired",'
    '"message":"task lease expired and max attempts reached","retryable":false,"details":{}}'
)



# What a driver with push notifications reports: new work in a queue, or a
# task that finished.
PushReason = Literal["queued", "done"]


class QueueGate(Protocol):
    """What the store needs from backpressure: wait for room in a queue."""

    async def acquire(self, queue: str) -> None: ...


# Builds the gate ``use_backpressure`` installs: cairnq.backpressure's
# QueueDepthGate, wired in by the package root (cairnq/__init__.py), so the
# policy can live above storage and the store's 0.15.1 method keeps working.
GateFactory = Callable[..., QueueGate]
_gate_factory: GateFactory | None = None


def install_gate_factory(factory: GateFactory) -> None:
    """Set what ``TaskStore.use_backpressure`` builds (done once by ``import cairnq``)."""
    global _gate_factory
    _gate_factory = factory


class Sweeper(Protocol):
    """What the store needs from retention: start once connected, stop on close."""

    def start(self) -> None: ...

    async def stop(self) -> None: ...


def check_protocol_version(version: int) -> None:
    if version != SUPPORTED_PROTOCOL_MAJOR:
        raise ProtocolVersionMismatch(
            f"storage protocol_version={version}, SDK supports {SUPPORTED_PROTOCOL_MAJOR}"
        )


def dump_json(value: Any) -> str:
    """Strict JSON text for a JSON column; SerializationError for anything else."""
    return dumps(value)


def claim_statement(queues: Sequence[str], names: Sequence[str] | None) -> str:
    """Which claim variant reaches its index for this draw (all mean the same)."""
    one_queue = len(queues) == 1
    if names is None:
        return "claim_one_queue_any_name" if one_queue else "claim_any_name"
    if len(names) == 1:
        return "claim_one_queue_one_name" if one_queue else "claim_one_name"
    return "claim_one_queue" if one_queue else "claim"


def probe_statement(queues: Sequence[str], names: Sequence[str] | None) -> str:
    """Which claimable-probe variant reaches its index (all mean the same)."""
    if names is None:
        return "claimable_probe_any_name"
    if len(queues) == 1 and len(names) == 1:
        return "claimable_probe_one_queue_one_name"
    return "claimable_probe"


class TaskStore(ABC):
    """Durable task storage: the protocol's operations over one database."""

    _gate: QueueGate | None = None
    _sweeper: Sweeper | None = None
    _json_is_text = True
    # Callbacks told of problems the store noticed and recovered from on its
    # own (a replaced SQLite file, say): a worker reports them to on_error.
    _survived_hooks: tuple[Callable[[BaseException], None], ...] = ()

    # -- the driver seam -------------------------------------------------

    @abstractmethod
    async def connect(self) -> None: ...

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def protocol_version(self) -> int: ...

    @abstractmethod
    async def _fetch(self, name: str, params: dict[str, Any]) -> builtins.list[Any]:
        """Run statement ``name`` on its own (autocommit) and return its rows.
        (0.15.1's hook, same signature: subclasses wrap it, for metrics say.)"""

    async def _fetch_deferred(self, name: str, params: dict[str, Any]) -> builtins.list[Any]:
        """``_fetch`` for a write nobody is waiting on (a worker's settlements
        and beats): a driver may hold it briefly to commit it with its next
        transaction instead of on its own. By default, plain ``_fetch``."""
        return await self._fetch(name, params)

    @abstractmethod
    def _transaction(self) -> AbstractAsyncContextManager[Fetch]:
        """One write transaction; yields a fetch bound to it."""

    def _transaction_with_session(self) -> AbstractAsyncContextManager[tuple[Fetch, Any]]:
        """A transaction that also exposes the driver's session (Postgres only)."""
        raise UnsupportedBackend(
            "this store cannot share a transaction with the caller — complete_in "
            f"requires a Postgres store (see PgExecutor); {type(self).__name__} has none"
        )

    def _register_wakeable(self, queues: Sequence[str]) -> None:
        """Drivers with push notifications buffer wakeups for these queues."""

    async def _probe(self, params: dict[str, Any]) -> tuple[bool, bool]:
        """(due, expired): is a task of these queues and names due; has any
        lease expired. Read-only."""
        names = params["names"]
        statement = probe_statement(params["queues"], names)
        if statement == "claimable_probe_one_queue_one_name":
            params = dict(params, name=names[0])
        rows = await self._fetch(statement, params)
        if not rows:
            return False, False
        return bool(rows[0][0]), bool(rows[0][1])

    async def _has_claimable_work(self, params: dict[str, Any]) -> bool:
        due, expired = await self._probe(params)
        return due or expired

    async def claim_wake(self, queues: builtins.list[str], timeout_ms: int) -> bool | None:
        """Sleep up to ``timeout_ms``; drivers that can, return early on new work
        (and return True when told of it: the claim loop then skips its probe)."""
        await asyncio.sleep(timeout_ms / 1000)
        return None

    @property
    def _claim_wake_pushed(self) -> bool:
        """``claim_wake`` is woken by pushed news of work, and news that lands
        before the wait begins is kept for it (PostgreSQL with its listener up)."""
        return False

    async def task_done_wake(self, task_id: str, timeout_ms: int) -> bool | None:
        """Sleep up to ``timeout_ms``; drivers that can, return early when it
        finishes (and return True when told so: waiters then read it at once)."""
        await asyncio.sleep(timeout_ms / 1000)
        return None

    async def _watch_push(
        self, emit: Callable[[PushReason, str | None, str | None], None]
    ) -> Callable[[], None] | None:
        """Subscribe ``emit(reason, queue, task_id)`` to pushed notifications
        ("queued" with its queue, "done" with its task id); returns an
        unsubscribe, or None when the driver pushes nothing."""
        return None

    def _subscribe_survived(self, hook: Callable[[BaseException], None]) -> Callable[[], None]:
        """Be told of problems the store recovered from; returns an unsubscribe."""
        self._survived_hooks = (*self._survived_hooks, hook)

        def unsubscribe() -> None:
            self._survived_hooks = tuple(h for h in self._survived_hooks if h is not hook)

        return unsubscribe

    def _survived(self, exc: BaseException) -> None:
        log.warning("%s", exc)
        for hook in self._survived_hooks:
            try:
                hook(exc)
            except Exception:
                log.debug("survived-problem hook raised", exc_info=True)

    async def _wait_for_change(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the database to change; True if it did."""
        await asyncio.sleep(timeout_s)
        return False

    async def schema_version(self) -> int:
        """``cairnq_meta.schema_version`` (0 if absent). Informational: the
        protocol major is what must match. (An addition to 0.15.1.)"""
        rows = await self._fetch("schema_version", {})
        return int(rows[0][0]) if rows else 0

    async def applied_migrations(self) -> builtins.list[tuple[str, int]]:
        """The migration ledger: ``(file name, applied at ms)``, by name. (An
        addition to 0.15.1.)"""
        return [(row[0], int(row[1])) for row in await self._fetch("applied_migrations", {})]

    # -- policies installed by the API layer ----------------------------

    def use_backpressure(
        self, max_queue_depth: Any, *, max_queue_wait_ms: int = 600_000
    ) -> None:
        if _gate_factory is None:  # only when cairnq/__init__.py has not run
            raise RuntimeError("no backpressure gate installed; import cairnq first")
        self._gate = _gate_factory(self, max_queue_depth, max_queue_wait_ms=max_queue_wait_ms)

    def use_retention(self, sweeper: Sweeper) -> None:
        self._sweeper = sweeper

    def _start_sweeper(self) -> None:
        if self._sweeper is not None:
            self._sweeper.start()

    # -- row mapping -----------------------------------------------------

    def _task(self, row: Row) -> Task:
        return decode_task(row, self._json_is_text)

    def _tasks(self, rows: builtins.list[Row]) -> builtins.list[Task]:
        return decode_tasks(rows, self._json_is_text)

    def _first(self, rows: builtins.list[Row]) -> Task | None:
        return decode_task(rows[0], self._json_is_text) if rows else None

    # -- submit ----------------------------------------------------------

    async def submit(
        self,
        *,
        name: str,
        payload: Any = None,
        queue: str = "default",
        key: str | None = None,
        conflict: Conflict = "reuse",
        max_attempts: int = 3,
        priority: int = 0,
        metadata: dict[str, Any] | None = None,
        parent_id: str | None = None,
        root_id: str | None = None,
        correlation_id: str | None = None,
        delay_ms: int = 0,
    ) -> Task:
        if conflict not in CONFLICTS:
            raise ValueError(f"unknown conflict strategy: {conflict!r}; expected one of {CONFLICTS}")
        # Exact-type fast path first: the full checks only run to explain a failure.
        if not (
            type(max_attempts) is int
            and 1 <= max_attempts <= INT32_MAX
            and type(delay_ms) is int
            and 0 <= delay_ms <= DURATION_MS_MAX
            and type(priority) is int
            and INT32_MIN <= priority <= INT32_MAX
        ):
            check_int("max_attempts", max_attempts, minimum=1, maximum=INT32_MAX)
            check_int("delay_ms", delay_ms, minimum=0, maximum=DURATION_MS_MAX)
            check_int("priority", priority, minimum=INT32_MIN, maximum=INT32_MAX)
        check_text("name", name)
        check_text("queue", queue)
        if key is not None or parent_id is not None or root_id is not None or correlation_id is not None:
            check_text("key", key, optional=True, empty=True)  # keys are opaque: "" is one
            check_text("parent_id", parent_id, optional=True)
            check_text("root_id", root_id, optional=True)
            check_text("correlation_id", correlation_id, optional=True)
        if metadata is not None and not isinstance(metadata, dict):
            raise TypeError(f"metadata must be a dict, got {type(metadata).__name__}")
        # Encoded before anything waits or writes: a bad value costs nothing.
        payload_json = "{}" if payload is None else self._encode(payload)
        metadata_json = self._encode(metadata) if metadata else "{}"

        if self._gate is not None:
            await self._gate.acquire(queue)
        task_id = new_id("task")
        params = {
            "id": task_id,
            "name": name,
            "queue": queue,
            "payload": payload_json,
            "metadata": metadata_json,
            "max_attempts": max_attempts,
            "priority": priority,
            "delay_ms": delay_ms,
            "parent_id": parent_id,
            "root_id": root_id or task_id,
            "correlation_id": correlation_id,
        }
        if key is None:
            rows = await self._fetch("insert_task", params)
            return decode_task(rows[0], self._json_is_text)
        return await self._submit_keyed(key, conflict, params)

    def _encode(self, value: Any) -> str:
        return dumps(value)

    async def _submit_keyed(self, key: str, conflict: Conflict, params: dict[str, Any]) -> Task:
        async with self._transaction() as fetch:
            await fetch("lock_key", {"key": key})
            existing = await self._keyed_task(fetch, key)
            if existing is not None:
                if conflict == "reject":
                    raise AlreadyExists(key)
                status = existing.status
                live = status == "queued" or status == "running"
                if (conflict == "reuse" and live) or (
                    conflict == "reuse-succeeded" and (live or status == "succeeded")
                ):
                    return existing
                if live:  # replace: the old task steps aside (a running one is flagged)
                    await fetch("cancel", {"id": existing.id})
            task = self._task((await fetch("insert_task", params))[0])
            await fetch("upsert_key", {"key": key, "task_id": task.id})
            return task

    async def _keyed_task(self, fetch: Fetch, key: str) -> Task | None:
        rows = await fetch("get_key", {"key": key})
        if not rows:
            return None
        # Re-read inside the transaction: a purge may have cascaded the key away
        # between snapshots, in which case the key is free.
        return self._first(await fetch("get", {"id": rows[0][0]}))

    # -- reads -----------------------------------------------------------

    async def get(self, task_id: str) -> Task | None:
        check_task_id(task_id)
        return self._first(await self._fetch("get", {"id": task_id}))

    async def get_by_key(self, key: str) -> Task | None:
        check_text("key", key, empty=True)
        return self._first(await self._fetch("get_by_key", {"key": key}))

    async def get_status(self, task_id: str) -> TaskRef | None:
        check_task_id(task_id)
        rows = await self._fetch("get_status", {"id": task_id})
        return TaskRef(rows[0][0], rows[0][1]) if rows else None

    async def get_status_by_key(self, key: str) -> TaskRef | None:
        check_text("key", key, empty=True)
        rows = await self._fetch("get_status_by_key", {"key": key})
        return TaskRef(rows[0][0], rows[0][1]) if rows else None

    async def list(
        self,
        *,
        status: TaskStatus | None = None,
        queue: str | None = None,
        name: str | None = None,
        root_id: str | None = None,
        correlation_id: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> builtins.list[Task]:
        check_status(status)
        check_text("queue", queue, optional=True)
        check_text("name", name, optional=True)
        check_text("root_id", root_id, optional=True)
        check_text("correlation_id", correlation_id, optional=True)
        check_int("limit", limit, maximum=INT64_MAX)
        check_int("offset", offset, maximum=INT64_MAX)
        if limit < 0 or offset < 0:
            raise ValueError(f"limit/offset must be >= 0, got limit={limit} offset={offset}")
        rows = await self._fetch(
            "list",
            {
                "status": status,
                "queue": queue,
                "name": name,
                "root_id": root_id,
                "correlation_id": correlation_id,
                "limit": limit,
                "offset": offset,
            },
        )
        return self._tasks(rows)

    async def stats(self, queue: str | None = None) -> dict[str, dict[TaskStatus, int]]:
        check_text("queue", queue, optional=True)
        rows = await self._fetch("stats", {"queue": queue})
        out: dict[str, dict[TaskStatus, int]] = {}
        if queue is not None:
            out[queue] = dict.fromkeys(STATUSES, 0)
        for q, status, count in rows:
            counts = out.get(q)
            if counts is None:
                counts = out[q] = dict.fromkeys(STATUSES, 0)
            counts[status] = int(count)
        return out

    async def queue_depth(self, queue: str, max_depth: int) -> int:
        check_text("queue", queue)
        check_int("max_depth", max_depth, minimum=0, maximum=INT64_MAX)
        rows = await self._fetch("queue_depth", {"queue": queue, "max_depth": max_depth})
        return int(rows[0][0]) if rows and rows[0][0] is not None else 0

    # -- client-side writes ----------------------------------------------

    async def cancel(self, task_id: str) -> Task | None:
        check_task_id(task_id)
        return self._first(await self._fetch("cancel", {"id": task_id}))

    async def retry(self, task_id: str, *, reset_attempt: bool = False) -> Task | None:
        check_task_id(task_id)
        params = {"id": task_id, "reset_attempt": bool(reset_attempt)}
        return self._first(await self._fetch("retry", params))

    async def cancel_by_key(self, key: str) -> Task | None:
        return await self._by_key(key, "cancel", {})

    async def retry_by_key(self, key: str, *, reset_attempt: bool = False) -> Task | None:
        return await self._by_key(key, "retry", {"reset_attempt": bool(reset_attempt)})

    async def _by_key(self, key: str, statement: str, extra: dict[str, Any]) -> Task | None:
        check_text("key", key, empty=True)
        async with self._transaction() as fetch:
            await fetch("lock_key", {"key": key})
            rows = await fetch("get_key", {"key": key})
            if not rows:
                return None
            return self._first(await fetch(statement, {"id": rows[0][0], **extra}))

    async def purge(
        self,
        *,
        older_than_ms: int = 0,
        queue: str | None = None,
        status: TaskStatus | None = None,
        name: str | None = None,
        limit: int = 1_000,
    ) -> builtins.list[str]:
        validate_purge_input(older_than_ms=older_than_ms, status=status, limit=limit)
        check_text("queue", queue, optional=True)
        check_text("name", name, optional=True)
        rows = await self._fetch(
            "purge",
            {
                "older_than_ms": older_than_ms,
                "queue": queue,
                "status": status,
                "name": name,
                "limit": limit,
            },
        )
        return [row[0] for row in rows]

    # -- claiming ----------------------------------------------------------

    def _claim_params(
        self,
        queues: Sequence[str],
        worker_id: str,
        lease_ms: int,
        names: Sequence[str] | None,
    ) -> dict[str, Any]:
        check_int("lease_ms", lease_ms, minimum=0, maximum=DURATION_MS_MAX)  # 0: expired at once
        check_text("worker_id", worker_id)
        queues = unique_names(queues, "queues")
        names = None if names is None else unique_names(names, "names")
        return {
            "queues": queues,
            "queue": queues[0] if len(queues) == 1 else None,
            "names": names,
            "name": None,
            "worker_id": worker_id,
            "lease_ms": lease_ms,
            "limit": 1,
            "lease_expired_error": LEASE_EXPIRED_ERROR_JSON,
        }

    async def claim_session(
        self,
        *,
        queues: Sequence[str],
        worker_id: str,
        lease_ms: int = 30_000,
        names: Sequence[str] | None,
        plan: Callable[[ClaimDraw], Awaitable[Any]],
    ) -> Any:
        """Probe, then one write transaction: recover expired leases, run ``plan``.

        ``plan`` receives ``draw(names, limit)`` and may call it several times
        (one draw per claim source); it must await nothing else, since it runs
        inside the transaction. Returns the plan's value, or None when the
        read-only probe found nothing to do (no transaction was opened).
        """
        return await self._claim_session(queues, worker_id, lease_ms, names, plan, probe=True, single_draw=False)

    def _lone_draw_fetch(self) -> Fetch | None:
        """How a claim with a single draw and nothing to recover runs its
        draw outside a transaction, for drivers where that is cheaper than
        BEGIN ... COMMIT (PostgreSQL: two round trips fewer); None: inside one."""
        return None

    async def _claim_session(
        self,
        queues: Sequence[str],
        worker_id: str,
        lease_ms: int,
        names: Sequence[str] | None,
        plan: Callable[[ClaimDraw], Awaitable[Any]],
        *,
        probe: bool,
        single_draw: bool,
    ) -> Any:
        """``claim_session``, as the worker drives it. ``probe=False``: the
        caller was just told of new work, so the read-only probe is skipped and
        so is lease recovery (the caller probes again within its poll
        interval). ``single_draw``: ``plan`` draws at most once, so with
        nothing to recover the draw may run on its own, in autocommit."""
        params = self._claim_params(queues, worker_id, lease_ms, names)
        self._register_wakeable(params["queues"])
        expired = False
        if probe:
            due, expired = await self._probe(params)
            if not (due or expired):
                return None
        if single_draw and not expired:
            alone = self._lone_draw_fetch()
            if alone is not None:
                return await plan(self._drawing(alone, params))
        async with self._transaction() as fetch:
            if expired:  # a lease expiring after the probe is recovered next poll
                await fetch("recover_leases", params)
            return await plan(self._drawing(fetch, params))

    def _drawing(self, fetch: Fetch, params: dict[str, Any]) -> ClaimDraw:
        """The ``draw(names, limit)`` a claim plan calls, over ``fetch``."""

        async def draw(draw_names: Sequence[str] | None, limit: int) -> builtins.list[Task]:
            if draw_names is not None:
                draw_names = unique_names(draw_names, "draw names")
            if limit <= 0 or (draw_names is not None and not draw_names):
                return []
            draw_params = dict(params)
            draw_params["names"] = draw_names
            draw_params["name"] = draw_names[0] if draw_names else None
            draw_params["limit"] = limit
            stmt = claim_statement(params["queues"], draw_names)
            return self._tasks(await fetch(stmt, draw_params))

        return draw

    async def claim(
        self,
        *,
        queues: Sequence[str],
        worker_id: str,
        lease_ms: int = 30_000,
        limit: int = 1,
        names: Sequence[str] | None = None,
    ) -> builtins.list[Task]:
        """One draw of up to ``limit`` tasks (probe, recovery and draw in one go)."""
        check_int("limit", limit)

        async def one_draw(draw: ClaimDraw) -> builtins.list[Task]:
            return await draw(None if names is None else builtins.list(names), limit)

        claimed = await self.claim_session(
            queues=queues, worker_id=worker_id, lease_ms=lease_ms, names=names, plan=one_draw
        )
        return claimed or []

    # -- worker-side writes (ownership-checked) ---------------------------

    async def _owned(self, task_id: str, statement: str, params: dict[str, Any]) -> Task:
        rows = await self._fetch(statement, params)
        if not rows:
            raise LostLease(task_id)
        return self._task(rows[0])

    async def heartbeat(self, *, task_id: str, worker_id: str, lease_ms: int = 30_000) -> Task:
        check_int("lease_ms", lease_ms, minimum=0, maximum=DURATION_MS_MAX)  # 0: expired at once
        check_task_id(task_id)
        check_text("worker_id", worker_id)
        params = {"id": task_id, "worker_id": worker_id, "lease_ms": lease_ms}
        return await self._owned(task_id, "heartbeat", params)

    async def heartbeat_batch(
        self, *, task_ids: Sequence[str], worker_id: str, lease_ms: int = 30_000
    ) -> dict[str, bool]:
        """Renew every lease in ``task_ids``: ``{id: cancel_requested}`` for each
        one still held. Absent ids lost their lease; this never raises LostLease."""
        check_int("lease_ms", lease_ms, minimum=0, maximum=DURATION_MS_MAX)  # 0: expired at once
        check_text("worker_id", worker_id)
        if isinstance(task_ids, str):
            raise TypeError("task_ids must be a list of str, not a str")
        for task_id in task_ids:
            check_task_id(task_id, "each of task_ids")
        return await self._heartbeat_batch(task_ids, worker_id, lease_ms, ride=False)

    async def _heartbeat_batch(
        self, task_ids: Sequence[str], worker_id: str, lease_ms: int, *, ride: bool
    ) -> dict[str, bool]:
        if not task_ids:
            return {}
        params = {"ids": builtins.list(task_ids), "worker_id": worker_id, "lease_ms": lease_ms}
        fetch = self._fetch_deferred if ride else self._fetch
        beats = decode_beats(await fetch("heartbeat_batch", params))
        if len(beats) < 2:
            return beats
        # In the order asked (as 0.15.1 gives it), not the statement's row order.
        return {task_id: beats[task_id] for task_id in task_ids if task_id in beats}

    async def progress(
        self,
        *,
        task_id: str,
        worker_id: str,
        progress: float | None,
        message: str | None,
    ) -> Task:
        if progress is not None:
            if isinstance(progress, bool) or not isinstance(progress, (int, float)):
                raise TypeError(f"progress must be a number, got {type(progress).__name__}")
            if not math.isfinite(progress):
                raise ValueError(f"progress must be finite, got {progress!r}")
        check_message("message", message)
        check_task_id(task_id)
        check_text("worker_id", worker_id)
        params = {
            "id": task_id,
            "worker_id": worker_id,
            "progress": None if progress is None else float(progress),
            "message": message,
        }
        return await self._owned(task_id, "progress", params)

    def _result_json(self, result: Any) -> str | None:
        return None if result is None else self._encode(result)

    async def succeed(self, *, task_id: str, worker_id: str, result: Any) -> Task:
        check_task_id(task_id)
        check_text("worker_id", worker_id)
        params = {
            "id": task_id,
            "worker_id": worker_id,
            "result": self._result_json(result),
            "message": None,
        }
        return await self._owned(task_id, "succeed", params)

    async def complete(self, *, task_id: str, worker_id: str, result: Any) -> Task:
        check_task_id(task_id)
        check_text("worker_id", worker_id)
        params = {"id": task_id, "worker_id": worker_id, "result": self._result_json(result)}
        return await self._owned(task_id, "complete", params)

    async def complete_many(
        self, *, task_ids: Sequence[str], worker_id: str, result: Any
    ) -> dict[str, TaskStatus]:
        """``complete`` for several tasks sharing one result, in one statement.
        Returns ``{id: final status}`` for the tasks settled ("succeeded", or
        "canceled" where a cancel won); a missing id lost its lease. (An
        addition to the 0.15.1 surface; the worker settles drains with it.)"""
        check_text("worker_id", worker_id)
        if isinstance(task_ids, str):
            raise TypeError("task_ids must be a list of str, not a str")
        for task_id in task_ids:
            check_task_id(task_id, "each of task_ids")
        return await self._complete_many_json(
            task_ids, worker_id, self._result_json(result), ride=False
        )

    async def _complete_many_json(
        self, task_ids: Sequence[str], worker_id: str, result_json: str | None, *, ride: bool
    ) -> dict[str, TaskStatus]:
        if not task_ids:
            return {}
        params = {"ids": builtins.list(task_ids), "worker_id": worker_id, "result": result_json}
        fetch = self._fetch_deferred if ride else self._fetch
        return {row[0]: row[1] for row in await fetch("complete_many", params)}

    async def _complete_each_json(
        self,
        task_ids: Sequence[str],
        worker_id: str,
        results_json: Sequence[str | None],
        *,
        ride: bool,
    ) -> dict[str, TaskStatus]:
        """complete for each id with the result at the same position (JSON
        text already encoded, or None): one statement. ``{id: final status}``
        for the settled ones; an id missing lost its lease."""
        if not task_ids:
            return {}
        params = {
            "ids": builtins.list(task_ids),
            "worker_id": worker_id,
            "results": builtins.list(results_json),
        }
        fetch = self._fetch_deferred if ride else self._fetch
        return {row[0]: row[1] for row in await fetch("complete_each", params)}

    async def complete_in(
        self,
        *,
        task_id: str,
        worker_id: str,
        write: Callable[[Any], Awaitable[Any]],
    ) -> tuple[Task, Any]:
        """Run ``write(session)`` and ``complete`` in one transaction (Postgres)."""
        async with self._transaction_with_session() as (fetch, session):
            value = await write(session)
            params = {"id": task_id, "worker_id": worker_id, "result": self._result_json(value)}
            rows = await fetch("complete", params)
            if not rows:
                raise LostLease(task_id)
            return self._task(rows[0]), value

    async def fail(
        self,
        *,
        task_id: str,
        worker_id: str,
        error: dict[str, Any],
        retryable: bool = True,
        delay_ms: int = 0,
    ) -> Task:
        check_int("delay_ms", delay_ms, minimum=0, maximum=DURATION_MS_MAX)
        check_task_id(task_id)
        check_text("worker_id", worker_id)
        params = {
            "id": task_id,
            "worker_id": worker_id,
            "error": self._error_json(error, retryable),
            "retryable": bool(retryable),
            "delay_ms": delay_ms,
        }
        return await self._owned(task_id, "fail", params)

    def _error_json(self, error: Any, retryable: bool) -> str:
        try:
            return self._encode(error)
        except SerializationError:
            pass
        try:
            # An exception's text often carries undecodable file names (lone
            # surrogates from os.listdir): the envelope keeps them as U+FFFD.
            return self._encode(_replace_surrogates(error))
        except SerializationError:
            pass
        # Keep what can be kept: the string fields, in a well-formed envelope.
        env = error if isinstance(error, Mapping) else {}
        return self._encode(
            {
                "type": _replace_surrogates(str(env.get("type", "TaskError"))),
                "code": _replace_surrogates(str(env.get("code", "task_error"))),
                "message": _replace_surrogates(str(env.get("message", ""))),
                "retryable": bool(retryable),
                "details": {},
            }
        )


_SURROGATES = re.compile("[\ud800-\udfff]")


def _replace_surrogates(value: Any) -> Any:
    """``value`` with every surrogate code point in its strings (keys
    included) replaced by U+FFFD; other values as they are."""
    if isinstance(value, str):
        return _SURROGATES.sub("\ufffd", value)
    if isinstance(value, Mapping):
        return {_replace_surrogates(k): _replace_surrogates(v) for k, v in value.items()}
    if isinstance(value, (builtins.list, tuple)):
        return [_replace_surrogates(v) for v in value]
    return value
