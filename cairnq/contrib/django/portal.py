"""Synchronous (and foreign-loop) access to one cairnq client.

Django calls ``enqueue`` and ``get_result`` from plain threads (views, the
shell) and ``aenqueue`` from whatever loop serves an async view. A client
belongs to one event loop, so each process keeps one portal per store: an
event loop in a daemon thread that owns the client, connected once, and runs
every call handed to it. Callers block on (or await) a future.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import TypeVar

from cairnq.client import CairnQ
from cairnq.contrib.django.config import StoreSpec

__all__ = ["Portal", "portal_for"]

T = TypeVar("T")
log = logging.getLogger("cairnq.django")
_CLOSE_TIMEOUT_S = 5.0

_lock = threading.Lock()
_portals: dict[tuple[int, StoreSpec], Portal] = {}


class Portal:
    def __init__(self, spec: StoreSpec) -> None:
        self._client = CairnQ(spec.open())
        self._loop = asyncio.new_event_loop()
        self._connected: asyncio.Future[None] | None = None
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="cairnq-django", daemon=True
        )
        self._thread.start()

    def _submit(self, call: Callable[[CairnQ], Awaitable[T]]) -> Future[T]:
        async def run() -> T:
            if self._connected is None:  # the first call connects; others wait for it
                self._connected = asyncio.ensure_future(self._client.connect())
            await asyncio.shield(self._connected)
            return await call(self._client)

        return asyncio.run_coroutine_threadsafe(run(), self._loop)

    def call(self, call: Callable[[CairnQ], Awaitable[T]]) -> T:
        """Run ``call(client)`` on the portal's loop and wait for its value."""
        return self._submit(call).result()

    async def acall(self, call: Callable[[CairnQ], Awaitable[T]]) -> T:
        """The same, awaited from another event loop."""
        return await asyncio.wrap_future(self._submit(call))

    def close(self) -> None:
        async def closing() -> None:
            await self._client.close()

        try:
            asyncio.run_coroutine_threadsafe(closing(), self._loop).result(_CLOSE_TIMEOUT_S)
        except Exception:  # exiting anyway: the database keeps what was committed
            log.debug("closing the cairnq client failed", exc_info=True)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(_CLOSE_TIMEOUT_S)


def portal_for(spec: StoreSpec) -> Portal:
    """This process's portal for ``spec`` (a forked child makes its own: threads
    and connections do not survive a fork)."""
    key = (os.getpid(), spec)
    with _lock:
        portal = _portals.get(key)
        if portal is None:
            portal = _portals[key] = Portal(spec)
        return portal


@atexit.register
def _close_all() -> None:
    pid = os.getpid()
    with _lock:
        mine = [p for (owner, _), p in _portals.items() if owner == pid]
        _portals.clear()
    for portal in mine:
        portal.close()
