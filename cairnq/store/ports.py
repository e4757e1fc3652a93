"""What code above the store may use of it beyond the public methods: the
worker port (claim sessions, deferred beats and settlements, wakeups, the
problems a store survived) and the watch port (pushed notifications, waiting
for a change). Nothing outside ``cairnq/store/`` touches a store's
underscore names except through these (``tests/test_layers.py`` checks).

Users wrap or replace store methods (on the instance, or in a subclass) for
instrumentation and fault injection, and 0.15.1's worker goes through them:
``claim_session``, ``claim_wake``, ``complete``, ``fail``,
``heartbeat_batch``, and every statement through ``_fetch``. The worker port
claims, settles and beats over private paths that skip work or send
statements deferred; a private path is taken only while the public method it
stands for is cairnq's own (``own.is_own``: not set on the instance, and
resolving on the store's class to a function cairnq defines). Anything else
gets the public method, with 0.15.1's keywords. Asked at every use (a
dictionary lookup, an attribute lookup and a tuple membership test; no cache,
so a class patched while a worker runs is honoured from its next call too).
"""

from __future__ import annotations

import contextlib
from typing import (
    TYPE_CHECKING,
    Any,
    Awaitable,
    Callable,
    ContextManager,
    Optional,
    Protocol,
    Sequence,
)

from cairnq.store.driver import Emit
from cairnq.store.own import OWN_CHECKED, is_own, register_own

if TYPE_CHECKING:
    from cairnq.models import TaskStatus
    from cairnq.store.base import TaskStore
    from cairnq.store.ops.claims import ClaimDraw

__all__ = [
    "WatchPort",
    "WorkerPort",
    "StoreWatchPort",
    "StoreWorkerPort",
    "OWN_CHECKED",
    "register_own",
    "is_own",
]

class WatchPort(Protocol):
    """What ``watch`` needs: pushed news, and a wait for any change."""

    async def watch_push(self, emit: Emit) -> Optional[Callable[[], None]]:
        """Subscribe ``emit(reason, queue, task_id)`` to pushed notifications;
        an unsubscribe, or None when the store pushes nothing."""

    def wait_for_change(self, timeout_s: float) -> Awaitable[bool]:
        """Wait up to ``timeout_s`` for the database to change; True if it did."""


class WorkerPort(WatchPort, Protocol):
    """What a worker needs of its store, for one worker id and lease."""

    store: Any

    def own(self, name: str) -> bool:
        """Whether the store's ``name`` is cairnq's own (see ``is_own``)."""

    async def claim(
        self,
        queues: list[str],
        names: Sequence[str],
        plan: Callable[[ClaimDraw], Awaitable[Any]],
        *,
        probe: bool,
        single_draw: bool,
    ) -> tuple[Any, bool]:
        """One claim session: (what ``plan`` returned, or None; whether it probed)."""

    def wake(self, queues: list[str], timeout_ms: int) -> Awaitable[Optional[bool]]:
        """Sleep until news of work or the timeout (``claim_wake``)."""

    @property
    def wake_pushed(self) -> bool:
        """News of work is pushed to ``wake`` and kept until it waits."""

    @property
    def writes_ride_claims(self) -> bool:
        """Deferred writes wait to ride with the next claim's transaction
        while the claim loop is not resting (SQLite); elsewhere they go at
        once."""

    def resting(self) -> ContextManager[bool]:
        """The claim loop is about to sleep: until it leaves this block no
        claim is coming, so deferred writes that would wait to ride with the
        next claim go at once. Enters as True where the store does hold them
        for a claim (SQLite), False where deferred writes never wait."""

    def idle_wait(
        self, queues: list[str], names: Optional[Sequence[str]], poll_interval_ms: int
    ) -> Awaitable[Optional[bool]]:
        """An idle claim loop's sleep: until news of work (True) or its next
        probe is due. In a fleet (PostgreSQL, listener up) the idle workers
        of the same queues and names share the probing and the news of work;
        otherwise ``wake`` for ``poll_interval_ms``."""

    def probe_due(
        self, queues: list[str], names: Optional[Sequence[str]], poll_interval_ms: int
    ) -> Optional[bool]:
        """In a fleet: whether this worker's turn to probe has come; None when
        there is no fleet (the worker probes every ``poll_interval_ms``)."""

    def claimed(self, full: bool) -> None:
        """A claim came back: ``full`` (a draw got all it asked for: more may
        be due) or short. In a fleet, a leader whose claims stay full a while
        calls in the others (PostgreSQL)."""

    def leave(self) -> None:
        """The claim loop stopped: no more a member of a fleet."""

    async def beat(self, task_ids: list[str]) -> dict[str, bool]:
        """Renew these leases (deferred): ``{id: cancel_requested}`` for each one held."""

    async def fail(
        self, task_id: str, error: dict[str, Any], *, retryable: bool, delay_ms: int
    ) -> Any:
        """Record a failed attempt through the store's ``fail``; its answer
        (the Task, whose status says retried or failed; a wrapper may answer
        something else)."""

    async def complete_publicly(self, task_id: str, result: Any) -> str:
        """Settle through the store's ``complete``: the final status."""

    def encode(self, value: Any) -> str:
        """JSON text as the store writes it (SerializationError otherwise)."""

    def complete_many_deferred(
        self, task_ids: list[str], result_json: Optional[str]
    ) -> Awaitable[dict[str, TaskStatus]]:
        """Complete these tasks with one result (JSON text), deferred:
        ``{id: final status}`` for those settled, a missing id lost its lease."""

    def complete_each_deferred(
        self, task_ids: list[str], results_json: list[Optional[str]]
    ) -> Awaitable[dict[str, TaskStatus]]:
        """Complete each task with the result at its position, deferred."""

    def subscribe_survived(self, hook: Callable[[BaseException], None]) -> Callable[[], None]:
        """Be told of problems the store recovered from (a replaced SQLite
        file); returns an unsubscribe."""


class StoreWatchPort:
    """``WatchPort`` over a ``TaskStore``."""

    def __init__(self, store: TaskStore) -> None:
        self.store = store

    async def watch_push(self, emit: Emit) -> Optional[Callable[[], None]]:
        return await self.store._watch_push(emit)

    def wait_for_change(self, timeout_s: float) -> Awaitable[bool]:
        return self.store._wait_for_change(timeout_s)


def _ignore(worker_id: str, full: bool) -> None:
    """A store with no fleet: what its claims drew is nobody's concern."""


class StoreWorkerPort(StoreWatchPort):
    """``WorkerPort`` over a ``TaskStore`` (hands back awaitables where it can:
    no coroutine frame of its own on the hot path)."""

    def __init__(self, store: TaskStore, worker_id: str, lease_ms: int) -> None:
        super().__init__(store)
        self.worker_id = worker_id
        self.lease_ms = lease_ms
        self._claimed: Optional[Callable[[str, bool], None]] = None  # found on first use

    def own(self, name: str) -> bool:
        return is_own(self.store, name)

    # -- claiming ------------------------------------------------------------------

    async def claim(
        self,
        queues: list[str],
        names: Sequence[str],
        plan: Callable[[ClaimDraw], Awaitable[Any]],
        *,
        probe: bool,
        single_draw: bool,
    ) -> tuple[Any, bool]:
        """Only cairnq's claim may skip the probe (and with it lease
        recovery) on news of work, or draw outside a transaction."""
        store, worker_id, lease_ms = self.store, self.worker_id, self.lease_ms
        if is_own(store, "claim_session"):
            calls = await store._claim_session(
                queues, worker_id, lease_ms, names, plan, probe=probe, single_draw=single_draw
            )
            return calls, probe
        calls = await store.claim_session(
            queues=queues, worker_id=worker_id, lease_ms=lease_ms, names=list(names), plan=plan
        )
        return calls, True

    def wake(self, queues: list[str], timeout_ms: int) -> Awaitable[Optional[bool]]:
        return self.store.claim_wake(queues, timeout_ms)

    @property
    def wake_pushed(self) -> bool:
        return bool(getattr(self.store, "_claim_wake_pushed", False))

    def _fleet(self, name: str) -> Any:
        """The store's fleet operation ``name``, while its claim_wake is its own
        (a wrapped or replaced claim_wake is called as 0.15.1 called it)."""
        found = getattr(self.store, name, None)
        return found if found is not None and is_own(self.store, "claim_wake") else None

    @property
    def writes_ride_claims(self) -> bool:
        return getattr(self.store, "_claims_resting", None) is not None

    def resting(self) -> ContextManager[bool]:
        rest = getattr(self.store, "_claims_resting", None)
        return rest() if rest is not None else contextlib.nullcontext(False)

    def idle_wait(
        self, queues: list[str], names: Optional[Sequence[str]], poll_interval_ms: int
    ) -> Awaitable[Optional[bool]]:
        wait = self._fleet("_fleet_wait")
        if wait is None:
            return self.store.claim_wake(queues, poll_interval_ms)
        return wait(self.worker_id, queues, names, poll_interval_ms)  # type: ignore[no-any-return]

    def probe_due(
        self, queues: list[str], names: Optional[Sequence[str]], poll_interval_ms: int
    ) -> Optional[bool]:
        due = self._fleet("_fleet_probe_due")
        answer = None if due is None else due(self.worker_id, queues, names, poll_interval_ms)
        return None if answer is None else bool(answer)

    def claimed(self, full: bool) -> None:
        claimed = self._claimed
        if claimed is None:
            claimed = self._claimed = self._fleet("_fleet_claimed") or _ignore
        claimed(self.worker_id, full)

    def leave(self) -> None:
        leave = getattr(self.store, "_fleet_leave", None)
        if leave is not None:
            leave(self.worker_id)

    # -- beating and settling -------------------------------------------------------

    async def beat(self, task_ids: list[str]) -> dict[str, bool]:
        store, worker_id, lease_ms = self.store, self.worker_id, self.lease_ms
        if is_own(store, "heartbeat_batch"):
            return await store._heartbeat_batch(task_ids, worker_id, lease_ms, deferred=True)
        return await store.heartbeat_batch(task_ids=task_ids, worker_id=worker_id, lease_ms=lease_ms)

    async def fail(
        self, task_id: str, error: dict[str, Any], *, retryable: bool, delay_ms: int
    ) -> Any:
        return await self.store.fail(
            task_id=task_id,
            worker_id=self.worker_id,
            error=error,
            retryable=retryable,
            delay_ms=delay_ms,
        )

    async def complete_publicly(self, task_id: str, result: Any) -> str:
        task = await self.store.complete(task_id=task_id, worker_id=self.worker_id, result=result)
        status = getattr(task, "status", None)  # a wrapper may not hand the Task back
        return status if isinstance(status, str) else "succeeded"

    def encode(self, value: Any) -> str:
        return self.store._encode(value)

    def complete_many_deferred(
        self, task_ids: list[str], result_json: Optional[str]
    ) -> Awaitable[dict[str, TaskStatus]]:
        return self.store._complete_many_json(task_ids, self.worker_id, result_json, deferred=True)

    def complete_each_deferred(
        self, task_ids: list[str], results_json: list[Optional[str]]
    ) -> Awaitable[dict[str, TaskStatus]]:
        return self.store._complete_each_json(task_ids, self.worker_id, results_json, deferred=True)

    def subscribe_survived(self, hook: Callable[[BaseException], None]) -> Callable[[], None]:
        return self.store._subscribe_survived(hook)


if TYPE_CHECKING:  # the implementations satisfy their protocols (checked by mypy)

    def _is_worker_port(port: StoreWorkerPort) -> WorkerPort:
        return port

    def _is_watch_port(port: StoreWatchPort) -> WatchPort:
        return port
