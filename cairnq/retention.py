"""Retention: delete finished tasks on a schedule, in bounded batches.

Nothing else in CairnQ deletes rows. A ``RetentionSweeper`` owned by the API
handle (``CairnQ(retention=...)``) starts when the store connects, sleeps one
interval, then purges each rule's rows ``limit`` at a time until a batch comes
back short, and repeats for as long as the handle is open.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping, Optional, Sequence, Union

from cairnq.models import TaskStatus
from cairnq.store.validation import check_int, validate_purge_input

if TYPE_CHECKING:
    from cairnq.store.base import TaskStore

log = logging.getLogger("cairnq.retention")

__all__ = ["Retention", "RetentionRule", "RetentionSweeper", "DEFAULT_INTERVAL_MS", "DEFAULT_LIMIT"]

DEFAULT_INTERVAL_MS = 3_600_000
DEFAULT_LIMIT = 1_000


@dataclass(frozen=True)
class RetentionRule:
    """Purge's filters: terminal tasks finished more than ``older_than_ms`` ago."""

    older_than_ms: int
    queue: Optional[str] = None
    status: Optional[TaskStatus] = None
    name: Optional[str] = None


@dataclass(frozen=True)
class Retention:
    """``older_than_ms``: one cutoff for every terminal row, a ``{status: ms}``
    mapping (unlisted statuses are kept forever), or a list of rules."""

    older_than_ms: Union[int, Mapping[TaskStatus, int], Sequence[RetentionRule]]
    interval_ms: int = DEFAULT_INTERVAL_MS
    limit: int = DEFAULT_LIMIT
    on_error: Optional[Callable[[BaseException], None]] = None

    def __post_init__(self) -> None:
        # 0.15.1's checks and words (purge's own rules, per rule), types first.
        rules = self.rules()
        if not rules:
            raise ValueError("retention older_than_ms must name at least one rule")
        check_int("retention interval_ms", self.interval_ms, minimum=1)
        for rule in rules:
            validate_purge_input(
                older_than_ms=rule.older_than_ms, status=rule.status, limit=self.limit
            )

    def rules(self) -> list[RetentionRule]:
        spec = self.older_than_ms
        if isinstance(spec, int):
            return [RetentionRule(spec)]
        if isinstance(spec, Mapping):
            return [RetentionRule(ms, status=status) for status, ms in spec.items()]
        return list(spec)


class RetentionSweeper:
    def __init__(self, store: TaskStore, retention: Retention) -> None:
        self.store = store
        self.retention = retention
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    def start(self) -> None:
        """Schedule the loop (first sweep after one interval). Idempotent; a
        no-op outside a running event loop."""
        if self._task is not None and not self._task.done():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._stop = asyncio.Event()
        self._task = loop.create_task(self._run())

    async def stop(self) -> None:
        """Stop, waiting for a sweep in flight; the sweeper can be started again."""
        self._stop.set()
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            await asyncio.gather(task, return_exceptions=True)
        self._stop = asyncio.Event()

    async def _run(self) -> None:
        interval = self.retention.interval_ms / 1000
        stop = self._stop
        while True:
            try:
                await asyncio.wait_for(stop.wait(), interval)
                return
            except asyncio.TimeoutError:
                pass
            try:
                await self.sweep()
            except Exception as exc:
                self._report(exc)
            if stop.is_set():
                return

    def _report(self, exc: BaseException) -> None:
        hook = self.retention.on_error
        if hook is None:
            log.warning("retention sweep failed: %s", exc)
            return
        try:
            hook(exc)
        except Exception:
            log.debug("retention on_error hook raised", exc_info=True)

    async def sweep(self) -> int:
        """Sweep every rule now; returns the number of tasks deleted."""
        limit = self.retention.limit
        deleted = 0
        for rule in self.retention.rules():
            while True:
                ids = await self.store.purge(
                    older_than_ms=rule.older_than_ms,
                    queue=rule.queue,
                    status=rule.status,
                    name=rule.name,
                    limit=limit,
                )
                deleted += len(ids)
                if len(ids) < limit or self._stop.is_set():
                    break
                await asyncio.sleep(0)  # let the application breathe between batches
        return deleted
