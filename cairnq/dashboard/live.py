"""Live updates: one shared ``client.watch(...)`` for every open event stream.

The hub holds no subscription and reads nothing while nobody listens. The
first listener starts the watch and a refresher; each watch signal marks the
overview stale, and the refresher re-reads it at most once per
``min_interval_s`` however many signals arrive, then hands the same JSON
text to every listener (a slow listener keeps only the newest). The last
listener to leave stops both.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import AsyncIterator, Awaitable, Callable, Optional

from cairnq.client import CairnQ
from cairnq.watch import Watch, WatchSignal

__all__ = ["LiveHub", "Inbox"]

log = logging.getLogger("cairnq.dashboard")

Reader = Callable[[CairnQ], Awaitable[dict[str, object]]]


class Inbox:
    """One listener's mailbox: holds the newest message only. ``None`` means
    the hub is closing: the stream should end."""

    def __init__(self) -> None:
        self._latest: Optional[str] = None
        self._closed = False
        self._ready = asyncio.Event()

    def put(self, message: str) -> None:
        self._latest = message
        self._ready.set()

    def close(self) -> None:
        self._closed = True
        self._ready.set()

    async def get(self) -> Optional[str]:
        while True:
            await self._ready.wait()
            self._ready.clear()
            if self._closed:
                return None
            if self._latest is not None:
                message, self._latest = self._latest, None
                return message


class LiveHub:
    def __init__(
        self,
        client: Callable[[], Awaitable[CairnQ]],
        read: Reader,
        *,
        min_interval_s: float = 1.0,
        watch_poll_ms: Optional[int] = None,
    ) -> None:
        self._client = client
        self._read = read
        self._min_interval_s = min_interval_s
        self._watch_poll_ms = watch_poll_ms
        self._inboxes: set[Inbox] = set()
        self._watch: Optional[Watch] = None
        self._refresher: Optional[asyncio.Task[None]] = None
        self._stale = asyncio.Event()
        self._latest: Optional[str] = None
        self._lock = asyncio.Lock()
        self.reads = 0  # overview reads so far (for tests and curiosity)

    @property
    def listeners(self) -> int:
        return len(self._inboxes)

    @property
    def active(self) -> bool:
        """True while the watch and the refresher run."""
        return self._watch is not None or self._refresher is not None

    @contextlib.asynccontextmanager
    async def listen(self) -> AsyncIterator[Inbox]:
        inbox = Inbox()
        async with self._lock:
            self._inboxes.add(inbox)
            try:
                if len(self._inboxes) == 1:
                    await self._start()
            except BaseException:
                self._inboxes.discard(inbox)
                raise
            if self._latest is not None:
                inbox.put(self._latest)  # something to show at once; fresher follows
        self._stale.set()
        try:
            yield inbox
        finally:
            async with self._lock:
                self._inboxes.discard(inbox)
                if not self._inboxes:
                    await self._stop()

    async def close(self) -> None:
        """End every stream (server shutdown) and stop watching."""
        async with self._lock:
            for inbox in self._inboxes:
                inbox.close()
            self._inboxes.clear()
            await self._stop()

    async def _start(self) -> None:
        client = await self._client()
        self._latest = None
        self._stale.set()
        self._watch = client.watch(self._signal, poll_ms=self._watch_poll_ms)
        self._refresher = asyncio.get_running_loop().create_task(self._refresh(client))
        log.debug("live updates: watching")

    async def _stop(self) -> None:
        if self._watch is not None:
            self._watch.stop()
            self._watch = None
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._refresher
            self._refresher = None
        self._latest = None
        log.debug("live updates: stopped (nobody listening)")

    def _signal(self, signal: WatchSignal) -> None:
        self._stale.set()

    async def _refresh(self, client: CairnQ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._stale.wait()
            self._stale.clear()
            started = loop.time()
            try:
                data = await self._read(client)
            except Exception:
                log.warning("live updates: reading the overview failed", exc_info=True)
            else:
                self.reads += 1
                self._latest = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
                for inbox in self._inboxes:
                    inbox.put(self._latest)
            # Coalesce: signals during the read and the pause make one more read.
            await asyncio.sleep(max(0.0, self._min_interval_s - (loop.time() - started)))
