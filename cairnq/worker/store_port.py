"""The worker's one way to its store: the public methods, as 0.15.1's worker
calls them, unless they are provably cairnq's own.

Users wrap or replace store methods (on the instance, or in a subclass) for
instrumentation and fault injection, and 0.15.1's worker goes through them:
``claim_session``, ``claim_wake``, ``complete``, ``fail``,
``heartbeat_batch`` (and, from ``TaskContext``, ``get``, ``heartbeat``,
``progress``, ``submit``, ``complete_in``). Ours claims, settles and beats
over private paths that skip work or batch statements (coalesced
completions, heartbeats and settlements a driver may commit with its next
claim). A private path is taken only while the public method it stands for
is stock: not set on the instance, and resolving on the store's class to the
function cairnq defines. Anything else gets the public method, with 0.15.1's
keywords. Asked at every use (two dictionary lookups), so a method replaced
while the worker runs is honoured from its next call.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Optional, Sequence

from cairnq.store.base import ClaimDraw, TaskStore
from cairnq.store.postgres import PostgresStore
from cairnq.store.sqlite import SQLiteStore
from cairnq.worker.completions import Completions

__all__ = ["StorePort"]

# The public methods the worker has a private path for, and the functions
# cairnq itself defines for each (captured at import, before any user code
# can patch a class).
_DRIVERS = (TaskStore, SQLiteStore, PostgresStore)
_STOCK: dict[str, tuple[Any, ...]] = {
    name: tuple({getattr(cls, name) for cls in _DRIVERS})
    for name in ("claim_session", "complete", "heartbeat_batch")
}
_NO_ATTRIBUTES: dict[str, Any] = {}


class StorePort:
    def __init__(self, store: TaskStore, worker_id: str, lease_ms: int) -> None:
        self.store = store
        self._worker_id = worker_id
        self._lease_ms = lease_ms
        self._completions = Completions(store, worker_id)

    def stock(self, name: str) -> bool:
        """Whether ``store.<name>`` is cairnq's own, unwrapped and unreplaced."""
        store = self.store
        if name in getattr(store, "__dict__", _NO_ATTRIBUTES):
            return False
        return getattr(type(store), name, None) in _STOCK[name]  # functions compare by identity

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
        """One claim session: ``(what plan returned, or None; whether it
        probed)``. Only the stock claim may skip the probe (and with it lease
        recovery) on news of work, or draw outside a transaction."""
        store, worker_id, lease_ms = self.store, self._worker_id, self._lease_ms
        if self.stock("claim_session"):
            calls = await store._claim_session(
                queues, worker_id, lease_ms, names, plan, probe=probe, single_draw=single_draw
            )
            return calls, probe
        calls = await store.claim_session(
            queues=queues, worker_id=worker_id, lease_ms=lease_ms, names=list(names), plan=plan
        )
        return calls, True

    async def wake(self, queues: list[str], timeout_ms: int) -> Optional[bool]:
        return await self.store.claim_wake(queues, timeout_ms)

    @property
    def wake_pushed(self) -> bool:
        """News of work is pushed to ``wake`` and kept until it waits."""
        return bool(getattr(self.store, "_claim_wake_pushed", False))

    # -- settling and beating ------------------------------------------------------------

    def complete(self, task_id: str, result: Any) -> Awaitable[str]:
        """Settle one task the handler left: its final status ("succeeded", or
        "canceled" where a cancel won). Raises SerializationError (nothing
        written) or LostLease. (Hands back the awaitable: no frame of its own
        on the hot path.)"""
        if self.stock("complete"):
            return self._completions.complete(task_id, result)
        return self._complete_publicly(task_id, result)

    async def _complete_publicly(self, task_id: str, result: Any) -> str:
        task = await self.store.complete(task_id=task_id, worker_id=self._worker_id, result=result)
        status = getattr(task, "status", None)  # a wrapper may not hand the Task back
        return status if isinstance(status, str) else "succeeded"

    async def fail(
        self, task_id: str, error: dict[str, Any], *, retryable: bool, delay_ms: int
    ) -> None:
        await self.store.fail(
            task_id=task_id,
            worker_id=self._worker_id,
            error=error,
            retryable=retryable,
            delay_ms=delay_ms,
        )

    async def beat(self, task_ids: list[str]) -> dict[str, bool]:
        """Renew these leases: ``{id: cancel_requested}`` for each one still held."""
        store, worker_id, lease_ms = self.store, self._worker_id, self._lease_ms
        if self.stock("heartbeat_batch"):
            return await store._heartbeat_batch(task_ids, worker_id, lease_ms, ride=True)
        return await store.heartbeat_batch(task_ids=task_ids, worker_id=worker_id, lease_ms=lease_ms)
