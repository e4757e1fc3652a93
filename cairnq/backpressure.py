"""Backpressure: hold submits while a queue is at its depth limit.

A soft limit enforced by each producer: a local grant of headroom per queue
(at most ``MAX_GRANT``) is spent one submit at a time and refilled by probing
``queue_depth``; concurrent submits share one probe. N producers may therefore
overshoot by up to (N - 1) x MAX_GRANT.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Union

from cairnq.errors import QueueFull

if TYPE_CHECKING:
    from cairnq.store.base import TaskStore

__all__ = [
    "QueueDepthGate",
    "QueueDepthLimit",
    "MAX_GRANT",
    "INITIAL_PROBE_INTERVAL_MS",
    "MAX_PROBE_INTERVAL_MS",
    "DEFAULT_MAX_WAIT_MS",
]

QueueDepthLimit = Union[int, dict[str, int]]

MAX_GRANT = 64
INITIAL_PROBE_INTERVAL_MS = 250
MAX_PROBE_INTERVAL_MS = 5_000
DEFAULT_MAX_WAIT_MS = 600_000


def _check_limit(queue: str, limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"max_queue_depth for {queue!r} must be an int >= 1, got {limit!r}")
    return limit


class QueueDepthGate:
    def __init__(
        self,
        store: TaskStore,
        max_queue_depth: QueueDepthLimit,
        *,
        max_queue_wait_ms: int = DEFAULT_MAX_WAIT_MS,
    ) -> None:
        if isinstance(max_queue_depth, dict):
            self._limits: dict[str, int] | None = {
                q: _check_limit(q, v) for q, v in max_queue_depth.items()
            }
            self._default: int | None = None
        else:
            self._limits = None
            self._default = _check_limit("*", max_queue_depth)
        if isinstance(max_queue_wait_ms, bool) or not isinstance(max_queue_wait_ms, int):
            kind = type(max_queue_wait_ms).__name__
            raise TypeError(f"max_queue_wait_ms must be an int, got {kind}")
        self._store = store
        self.max_queue_wait_ms = max_queue_wait_ms
        self._grants: dict[str, int] = {}
        self._probes: dict[str, asyncio.Future[int]] = {}

    def limit_for(self, queue: str) -> int | None:
        if self._limits is None:
            return self._default
        return self._limits.get(queue)

    async def acquire(self, queue: str) -> None:
        """Take one unit of headroom in ``queue``, waiting (then QueueFull) if none."""
        limit = self.limit_for(queue)
        if limit is None:
            return
        started = time.monotonic()
        wait_ms = INITIAL_PROBE_INTERVAL_MS
        while True:
            if self._grants.get(queue, 0) > 0:
                self._grants[queue] -= 1
                return
            if await self._probe(queue, limit) > 0:
                continue  # refilled; take from it (unless others beat us to it)
            waited_ms = int((time.monotonic() - started) * 1000)
            if waited_ms >= self.max_queue_wait_ms:
                raise QueueFull(queue, max_depth=limit, waited_ms=waited_ms)
            await asyncio.sleep(min(wait_ms, self.max_queue_wait_ms - waited_ms) / 1000)
            wait_ms = min(wait_ms * 2, MAX_PROBE_INTERVAL_MS)

    async def _probe(self, queue: str, limit: int) -> int:
        pending = self._probes.get(queue)
        if pending is None or pending.done():
            pending = asyncio.ensure_future(self._refill(queue, limit))
            self._probes[queue] = pending
        return await asyncio.shield(pending)

    async def _refill(self, queue: str, limit: int) -> int:
        headroom = await self._store.queue_depth(queue, limit)
        self._grants[queue] = min(headroom, MAX_GRANT)
        return headroom
