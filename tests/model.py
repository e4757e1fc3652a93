"""A small pure-Python model of the CairnQ protocol's task state machine.

Written from OPERATIONS.md (§3 client operations, §4 worker operations, §4.10
the summary state machine), independently of the library, so that a real store
can be checked against it step by step (tests/api/test_properties.py).

What is modelled, per task: status, attempt, max_attempts, priority, queue and
name (claim filters), the owning worker (the ``worker_id`` column), whether a
lease is held and whether it is still valid, the cancel flag, whether the task
is delayed (``run_at_ms`` in the future), ``completed_at_ms`` presence, the
error code and the result. Per key: which task it points at.

What is deliberately *not* modelled: clocks. Time enters only as

* "delayed": a task submitted (or failed) with a delay far beyond the test's
  length is never due; everything else is due at once;
* "expired": the test makes a lease run out on purpose (a heartbeat with a
  1 ms lease, then a short sleep) and tells the model with ``expire``;
* claim order within a priority: it depends on ``run_at_ms`` and ids, which
  the real store assigns. ``claim_candidates`` returns every task that may be
  drawn, and ``claim_order`` ranks them given the real ``run_at_ms`` values.

Every method mirrors one protocol operation and returns what the real
operation would return (a status, a task id, None for "no row matched"), or
raises ``ModelLostLease`` / ``ModelAlreadyExists``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence

STATUSES = ("queued", "running", "succeeded", "failed", "canceled")
TERMINAL = frozenset(("succeeded", "failed", "canceled"))
CONFLICTS = ("reuse", "reuse-succeeded", "reject", "replace")
LEASE_EXPIRED_CODE = "lease_expired"

# Lease states (``lease_until_ms`` is non-null exactly while running).
NO_LEASE, VALID, EXPIRED = "none", "valid", "expired"


class ModelLostLease(Exception):
    """The ownership check would match no row (the SDK raises LostLease)."""


class ModelAlreadyExists(Exception):
    """A keyed submit with conflict="reject" found the key taken."""


@dataclass
class MTask:
    id: str
    name: str
    queue: str
    max_attempts: int
    priority: int
    status: str = "queued"
    attempt: int = 0
    worker_id: Optional[str] = None
    lease: str = NO_LEASE
    cancel_requested: bool = False
    delayed: bool = False
    completed: bool = False
    error_code: Optional[str] = None
    result: Any = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


@dataclass
class Model:
    tasks: dict[str, MTask] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)

    # -- helpers ------------------------------------------------------------------

    def _owned(self, task_id: str, worker_id: str) -> MTask:
        """OPERATIONS.md §4.1: running, same worker, lease still valid."""
        t = self.tasks.get(task_id)
        if t is None or t.status != "running" or t.worker_id != worker_id or t.lease != VALID:
            raise ModelLostLease(task_id)
        return t

    @staticmethod
    def _requeue(t: MTask, *, delayed: bool) -> None:
        t.status = "queued"
        t.worker_id = None
        t.lease = NO_LEASE
        t.delayed = delayed
        t.completed = False

    @staticmethod
    def _finish(t: MTask, status: str) -> None:
        t.status = status
        t.lease = NO_LEASE
        t.completed = True

    def _cancel(self, t: MTask) -> Optional[str]:
        """§3.6: queued -> canceled; running -> cancel flag; else no row."""
        if t.status == "queued":
            self._finish(t, "canceled")
            return "canceled"
        if t.status == "running":
            t.cancel_requested = True
            return "running"
        return None

    # -- client side ----------------------------------------------------------------

    def submit(
        self,
        new_id: Optional[str],
        *,
        name: str,
        queue: str = "default",
        key: Optional[str] = None,
        conflict: str = "reuse",
        max_attempts: int = 3,
        priority: int = 0,
        delayed: bool = False,
    ) -> str:
        """§3.1. Returns the id the submit returns: ``new_id`` when a task is
        created, the existing task's id when it is reused. ``new_id`` is the id
        the real store generated (None if the real submit created nothing)."""
        if conflict not in CONFLICTS:
            raise ValueError(conflict)
        if key is not None and key in self.keys:
            existing = self.tasks[self.keys[key]]
            if conflict == "reject":
                raise ModelAlreadyExists(key)
            live = existing.status in ("queued", "running")
            if (conflict == "reuse" and live) or (
                conflict == "reuse-succeeded" and (live or existing.status == "succeeded")
            ):
                return existing.id
            if live:  # replace: the old task steps aside
                self._cancel(existing)
        if new_id is None or new_id in self.tasks:
            raise AssertionError(f"model expected a new task for key {key!r}, store gave {new_id!r}")
        self.tasks[new_id] = MTask(
            id=new_id,
            name=name,
            queue=queue,
            max_attempts=max_attempts,
            priority=priority,
            delayed=delayed,
        )
        if key is not None:
            self.keys[key] = new_id
        return new_id

    def cancel(self, task_id: str) -> Optional[str]:
        t = self.tasks.get(task_id)
        return None if t is None else self._cancel(t)

    def retry(self, task_id: str, *, reset_attempt: bool = False) -> Optional[str]:
        """§3.7: failed/canceled -> queued, due now; the result survives."""
        t = self.tasks.get(task_id)
        if t is None or t.status not in ("failed", "canceled"):
            return None
        self._requeue(t, delayed=False)
        t.error_code = None
        t.cancel_requested = False
        if reset_attempt:
            t.attempt = 0
        return "queued"

    def cancel_by_key(self, key: str) -> Optional[str]:
        task_id = self.keys.get(key)
        return None if task_id is None else self.cancel(task_id)

    def retry_by_key(self, key: str, *, reset_attempt: bool = False) -> Optional[str]:
        task_id = self.keys.get(key)
        return None if task_id is None else self.retry(task_id, reset_attempt=reset_attempt)

    def purge(self, *, status: Optional[str] = None, queue: Optional[str] = None) -> set[str]:
        """§3.8, with every finished task older than the cutoff (the test waits
        a few ms first, and purges with a limit above the table size)."""
        gone = {
            t.id
            for t in self.tasks.values()
            if t.terminal
            and t.completed
            and (status is None or t.status == status)
            and (queue is None or t.queue == queue)
        }
        for task_id in gone:
            del self.tasks[task_id]
        for key in [k for k, v in self.keys.items() if v in gone]:  # FK cascade
            del self.keys[key]
        return gone

    # -- claiming -------------------------------------------------------------------------

    def has_expired(self) -> bool:
        return any(t.status == "running" and t.lease == EXPIRED for t in self.tasks.values())

    def recover_leases(self) -> set[str]:
        """§4.9, run first in every claim transaction (when the probe saw an
        expired lease; any expired lease, whatever its queue or name)."""
        recovered = set()
        for t in self.tasks.values():
            if t.status != "running" or t.lease != EXPIRED:
                continue
            recovered.add(t.id)
            if t.cancel_requested:
                self._finish(t, "canceled")
            elif t.attempt < t.max_attempts:
                self._requeue(t, delayed=False)
            else:
                self._finish(t, "failed")
                t.error_code = LEASE_EXPIRED_CODE
        return recovered

    def claim_candidates(self, queues: Sequence[str], names: Optional[Sequence[str]]) -> list[MTask]:
        """Tasks a draw may take (after recovery): queued, due, queue and name match."""
        return [
            t
            for t in self.tasks.values()
            if t.status == "queued"
            and not t.delayed
            and t.queue in queues
            and (names is None or t.name in names)
        ]

    @staticmethod
    def claim_order(candidates: Iterable[MTask], run_at_ms: dict[str, int]) -> list[str]:
        """§4.2: ``priority DESC, run_at_ms ASC, id ASC``."""
        return [
            t.id for t in sorted(candidates, key=lambda t: (-t.priority, run_at_ms[t.id], t.id))
        ]

    def apply_claim(self, task_ids: Iterable[str], worker_id: str) -> None:
        for task_id in task_ids:
            t = self.tasks[task_id]
            assert t.status == "queued" and not t.delayed, t
            t.status = "running"
            t.worker_id = worker_id
            t.lease = VALID
            t.attempt += 1

    # -- worker side -------------------------------------------------------------------------

    def heartbeat(self, task_id: str, worker_id: str) -> bool:
        """§4.3; returns whether a cancel was requested."""
        t = self._owned(task_id, worker_id)
        return t.cancel_requested

    def heartbeat_batch(self, task_ids: Sequence[str], worker_id: str) -> dict[str, bool]:
        """§4.4: the renewed ones only; never raises."""
        out = {}
        for task_id in task_ids:
            try:
                out[task_id] = self.heartbeat(task_id, worker_id)
            except ModelLostLease:
                pass
        return out

    def expire(self, task_id: str, worker_id: str) -> None:
        """The lease is renewed with a 1 ms lease and left to run out."""
        t = self._owned(task_id, worker_id)
        t.lease = EXPIRED

    def complete(self, task_id: str, worker_id: str, result: Any) -> str:
        """§4.7: succeeded with the result, unless a cancel was requested."""
        t = self._owned(task_id, worker_id)
        if t.cancel_requested:
            self._finish(t, "canceled")
        else:
            self._finish(t, "succeeded")
            t.result = result
        return t.status

    def complete_many(self, task_ids: Sequence[str], worker_id: str, result: Any) -> dict[str, str]:
        """``complete`` for each id still owned (an addition of this SDK)."""
        out = {}
        for task_id in dict.fromkeys(task_ids):
            try:
                out[task_id] = self.complete(task_id, worker_id, result)
            except ModelLostLease:
                pass
        return out

    def succeed(self, task_id: str, worker_id: str, result: Any) -> str:
        """§4.6: raw succeed, ignores any cancel request."""
        t = self._owned(task_id, worker_id)
        self._finish(t, "succeeded")
        t.result = result
        return t.status

    def fail(
        self, task_id: str, worker_id: str, *, code: str, retryable: bool, delayed: bool
    ) -> str:
        """§4.8: A cancel requested -> canceled; B retryable with attempts left
        -> queued (after the delay); C -> failed. The error is written in all."""
        t = self._owned(task_id, worker_id)
        t.error_code = code
        if t.cancel_requested:
            self._finish(t, "canceled")
        elif retryable and t.attempt < t.max_attempts:
            self._requeue(t, delayed=delayed)
        else:
            self._finish(t, "failed")
        return t.status

    # -- what the store must agree with ----------------------------------------------------------

    def snapshot(self) -> dict[str, tuple[Any, ...]]:
        """Per task: (status, attempt, owner, lease held, cancel flag, completed,
        error code, result) — the columns the checker compares."""
        return {
            t.id: (
                t.status,
                t.attempt,
                t.worker_id,
                t.lease != NO_LEASE,
                t.cancel_requested,
                t.completed,
                t.error_code,
                t.result,
            )
            for t in self.tasks.values()
        }
