"""The worker's one way to its store: the store's worker port
(``cairnq/store/ports.py``), plus completions coalesced per loop turn.

The port decides, at every use, whether a private path may stand in for a
public store method (it is cairnq's own) or the method must be called (the
user wrapped or replaced it); see ``cairnq.store.ports``.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Optional, Sequence

from cairnq.store.base import TaskStore
from cairnq.store.ports import StoreWorkerPort
from cairnq.worker.completions import Completions, Outcome

__all__ = ["StorePort"]


class StorePort(StoreWorkerPort):
    def __init__(self, store: TaskStore, worker_id: str, lease_ms: int) -> None:
        super().__init__(store, worker_id, lease_ms)
        self._completions = Completions(self)

    def complete(self, task_id: str, result: Any) -> Awaitable[str]:
        """Settle one task the handler left: its final status ("succeeded", or
        "canceled" where a cancel won). Raises SerializationError (nothing
        written) or LostLease. (Hands back the awaitable: no frame of its own
        on the hot path.)"""
        if self.own("complete"):
            return self._completions.complete(task_id, result)
        return self.complete_publicly(task_id, result)

    def complete_later(self, task_id: str, result: Any, told: Outcome) -> bool:
        """Queue the completion of a task whose call has nothing left to do;
        ``told(status, exc)`` hears how it went. False (nothing queued) when
        the store's ``complete`` is not cairnq's own: the caller awaits
        ``complete`` instead. Raises SerializationError (nothing queued)."""
        if self.own("complete"):
            self._completions.complete_later(task_id, result, told)
            return True
        return False

    def completer(self) -> Optional[Completions]:
        """The coalesced completions, without asking each time whether the
        store's ``complete`` is cairnq's own: asked once here, for the quick
        calls of one claim (``quick.py``). None when it is not."""
        if self.own("complete"):
            return self._completions
        return None

    def complete_all_later(
        self, entries: Sequence[tuple[str, Any, Outcome]]
    ) -> Optional[list[tuple[int, Exception]]]:
        """``complete_later`` for many tasks at once (what a batch handler
        left), whether the store's ``complete`` is cairnq's own decided once
        for all of them: None (nothing queued) when it is not. Otherwise the
        entries that could not be queued, by index, each with what stopped it
        (SerializationError: its result cannot be stored); the others are."""
        if not self.own("complete"):
            return None
        later = self._completions.complete_later
        refused: list[tuple[int, Exception]] = []
        for i, (task_id, result, told) in enumerate(entries):
            try:
                later(task_id, result, told)
            except Exception as exc:
                refused.append((i, exc))
        return refused

    @property
    def completions_idle(self) -> bool:
        """No completion queued or on its way."""
        return self._completions.idle

    def queued_completions_written(self) -> "asyncio.Future[None]":
        """Done once the completions queued or on their way now are written
        (or refused); not the ones queued later."""
        return self._completions.queued_written()
