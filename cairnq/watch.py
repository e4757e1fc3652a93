"""``watch``: be told when tasks may have changed, without polling tables.

An addition to the 0.15.1 surface (the TypeScript SDK and the protocol's HEAD
have it). ``CairnQ.watch(on_signal, queues=..., poll_ms=...)`` calls
``on_signal(WatchSignal)``:

* ``reason="queued"`` (with ``queue``) when a task became claimable in one of
  ``queues`` (all queues when None), and ``reason="done"`` (with ``task_id``)
  when a task finished: pushed by drivers that have a channel (PostgreSQL
  LISTEN/NOTIFY);
* ``reason="change"`` when another connection committed to the SQLite file
  (its change counter moved): something changed, re-read what you show;
* ``reason="poll"`` every ``poll_ms`` regardless, the fallback that makes a
  lost notification cost one interval at most.

Exceptions from ``on_signal`` are swallowed (logged at debug). The returned
``Watch`` stops with ``stop()`` or by calling it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Literal, Optional, Sequence

from cairnq.store.ports import StoreWatchPort

if TYPE_CHECKING:
    from cairnq.store.base import TaskStore
    from cairnq.store.driver import PushReason

log = logging.getLogger("cairnq.watch")

__all__ = ["Watch", "WatchSignal", "DEFAULT_WATCH_POLL_MS"]

DEFAULT_WATCH_POLL_MS = 2_000


@dataclass(frozen=True)
class WatchSignal:
    reason: Literal["queued", "done", "change", "poll"]
    queue: Optional[str] = None
    task_id: Optional[str] = None


class Watch:
    """A running subscription; call it (or ``stop()``) to unsubscribe."""

    def __init__(
        self,
        store: TaskStore,
        on_signal: Callable[[WatchSignal], Any],
        queues: Optional[Sequence[str]],
        poll_ms: int,
    ) -> None:
        self._port = StoreWatchPort(store)
        self._on_signal = on_signal
        self._queues = None if queues is None else frozenset(queues)
        self._poll_s = max(1, poll_ms) / 1000
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def start(
        cls,
        store: TaskStore,
        on_signal: Callable[[WatchSignal], Any],
        *,
        queues: Optional[Sequence[str]] = None,
        poll_ms: Optional[int] = None,
    ) -> "Watch":
        watch = cls(store, on_signal, queues, DEFAULT_WATCH_POLL_MS if poll_ms is None else poll_ms)
        watch._task = asyncio.get_running_loop().create_task(watch._run())  # needs a running loop
        return watch

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    __call__ = stop

    def _emit(self, signal: WatchSignal) -> None:
        if signal.reason == "queued" and self._queues is not None:
            if signal.queue not in self._queues:
                return
        try:
            self._on_signal(signal)
        except Exception:
            log.debug("watch callback raised", exc_info=True)

    def _pushed(self, reason: PushReason, queue: Optional[str], task_id: Optional[str]) -> None:
        self._emit(WatchSignal(reason, queue=queue, task_id=task_id))

    async def _run(self) -> None:
        unsubscribe = await self._port.watch_push(self._pushed)
        try:
            while True:
                changed = await self._port.wait_for_change(self._poll_s)
                self._emit(WatchSignal("change" if changed else "poll"))
        finally:
            if unsubscribe is not None:
                unsubscribe()
