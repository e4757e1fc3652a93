"""LISTEN/NOTIFY wakeups: one listening connection per store.

``cairnq_queued`` (payload: queue) and ``cairnq_done`` (payload: task id) are
raised by the 0003 trigger for every writer, whatever its SDK (the queued
ones also go to ``fleet``: its leaders hear them). Notifications
only shorten sleeps; correctness never depends on them. The connection is
started by the first wait that needs it, and listens only to the channels
some wait needs: a store that only submits listens to nothing (every submit
raises ``cairnq_queued``, which a listening session would have to take in:
a third of a sequential submit's throughput), and one that only waits for
results does not hear of new work. A new need starts the session over with
the channel added. It runs in the background and is re-established with
backoff (1 s doubling to 30 s) when it drops; an executor that can never LISTEN (no ``listen``, or
``ListenUnavailable``) leaves the store a plain poller.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from typing import Any, Callable, Iterable, Optional

from cairnq.store.postgres.executor import ListenUnavailable, PgExecutor
from cairnq.store.postgres.fleet import Fleet

log = logging.getLogger("cairnq.store")

__all__ = ["Listener", "QUEUED_CHANNEL", "DONE_CHANNEL", "LISTENER_RETRY_MS", "LISTENER_RETRY_MAX_MS"]

QUEUED_CHANNEL = "cairnq_queued"
DONE_CHANNEL = "cairnq_done"
LISTENER_RETRY_MS = 1_000
LISTENER_RETRY_MAX_MS = 30_000
# How many ids of finished tasks nobody was waiting on are kept for a wait
# that is about to begin (a waiter reads the status, then registers; a
# notification landing in between is found here instead of slept through).
RECENT_DONE = 2_048


class Listener:
    def __init__(self, executor: Any, dsn: Optional[str]) -> None:
        self._executor = executor
        listen = getattr(executor, "listen", None)
        if getattr(listen, "__func__", None) is PgExecutor.listen:
            listen = None  # only the protocol's declaration, inherited: nothing to call
        self._listen = listen
        self._disabled = self._listen is None
        self._connected = False
        #: Listening sessions begun so far: a waiter that saw this change while
        #: it was not waiting may have missed what was raised in between.
        self.sessions = 0
        self._stop: Optional[Callable[[], None]] = None
        self._task: Optional[asyncio.Task[None]] = None
        self._retry_ms = LISTENER_RETRY_MS
        self._closed = False
        self._queues: set[str] = set()
        self._pending_queues: set[str] = set()
        self._queued_waiters: dict[str, set[asyncio.Future[bool]]] = {}
        self._done_waiters: dict[str, set[asyncio.Future[bool]]] = {}
        # Waits begun while no session listens: they end when one does (or at
        # their timeout), so the waiter checks once and its next wait is pushed.
        self._connect_waiters: set[asyncio.Future[bool]] = set()
        self._recent_done: OrderedDict[str, None] = OrderedDict()  # oldest first
        self._subscribers: list[Callable[[str, Optional[str]], None]] = []
        self.fleet = Fleet()
        self._wanted: set[str] = set()  # of QUEUED_CHANNEL, DONE_CHANNEL: what waits need
        self._session_channels: set[str] = set()  # what the live (or starting) session listens to

    @property
    def connected(self) -> bool:
        return self._connected

    @property
    def available(self) -> bool:
        """Whether LISTEN can work here at all (an executor with ``listen``
        that never said ``ListenUnavailable``)."""
        return not self._disabled

    def start(self) -> None:
        if self._disabled or self._closed:
            return
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        self._closed = True
        self._end_session()

    def _end_session(self) -> None:
        """No session listens (one connecting stops), and every wait ends."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self._stop is not None:
            self._stop()
            self._stop = None
        self._connected = False
        self._session_channels = set()
        self._release_all()

    def watch_queues(self, queues: Iterable[str]) -> None:
        self._queues.update(queues)

    def want(self, *channels: str) -> None:
        """Listen to ``channels`` from now on (of QUEUED_CHANNEL and
        DONE_CHANNEL): starts the session, or starts it over with them added."""
        if self._wanted.issuperset(channels):
            if not self._connected:
                self.start()  # (no-op while it connects)
            return
        self._wanted.update(channels)
        if self._task is not None and not self._task.done():
            return  # still connecting: it reads the wanted channels once connected
        if self._stop is not None:
            self._restart()
        else:
            self.start()

    def drop(self, channel: str) -> None:
        """Stop listening to ``channel`` (no wait of this store needs it now:
        a fleet member that does not lead). The session starts over with the
        channels still wanted, or ends when none is: a session that listens
        pays a transaction for every notification of the database."""
        if channel not in self._wanted:
            return
        self._wanted.discard(channel)
        if self._wanted:
            if channel in self._session_channels:
                self._restart()
            return
        self._end_session()

    def _restart(self) -> None:
        """Start the listening session over (its channels changed). Waits
        begun meanwhile end once it is back (see ``_wait``)."""
        if self._stop is not None:
            self._stop()
            self._stop = None
            self._connected = False
            self.start()

    def subscribe(self, callback: Callable[[str, Optional[str]], None]) -> Callable[[], None]:
        self.want(QUEUED_CHANNEL, DONE_CHANNEL)
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback) if callback in self._subscribers else None

    async def _run(self) -> None:
        while not self._closed:
            try:
                assert self._listen is not None
                wanted = [c for c in (QUEUED_CHANNEL, DONE_CHANNEL) if c in self._wanted]
                channels = wanted or [QUEUED_CHANNEL, DONE_CHANNEL]  # started with no need named
                self._session_channels = set(channels)
                self._stop = await self._listen(channels, self._on_notify, self._on_close)
                if not self._session_channels.issuperset(self._wanted):
                    # A need came while this session was connecting: once more, with it.
                    self._stop()
                    self._stop = None
                    continue
            except ListenUnavailable as exc:
                log.info("LISTEN unavailable, polling only: %s", exc)
                self._disabled = True
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.debug("listener connect failed, retrying in %d ms: %s", self._retry_ms, exc)
                await asyncio.sleep(self._retry_ms / 1000)
                self._retry_ms = min(self._retry_ms * 2, LISTENER_RETRY_MAX_MS)
                continue
            self._retry_ms = LISTENER_RETRY_MS
            self._connected = True
            self.sessions += 1
            # Whatever was raised while no session listened went unheard:
            # every wait begun meanwhile ends now, and its waiter checks once.
            self._release_all()
            return

    def _on_close(self) -> None:
        self._connected = False
        self._stop = None
        self._release_all()  # waiters fall back to polling, re-armed on the next wake

    def _on_notify(self, channel: str, payload: Optional[str]) -> None:
        if channel == QUEUED_CHANNEL and payload is not None:
            if payload in self._queues:
                self._pending_queues.add(payload)
                for waiter in self._queued_waiters.pop(payload, ()):
                    _wake(waiter, True)
            if self.fleet.members:
                self.fleet.heard_queued(payload)
        elif channel == DONE_CHANNEL and payload is not None:
            waiters = self._done_waiters.pop(payload, None)
            if waiters:
                for waiter in waiters:
                    _wake(waiter, True)  # told: the waiter reads the whole row at once
            else:
                # Nobody waits on it yet; a wait that begins shortly (its
                # caller's status read raced this commit) finds it here.
                recent = self._recent_done
                recent[payload] = None
                if len(recent) > RECENT_DONE:
                    recent.popitem(last=False)
        for callback in list(self._subscribers):
            try:
                callback(channel, payload)
            except Exception:
                log.debug("watch subscriber raised", exc_info=True)

    def _release_all(self) -> None:
        self.fleet.release()
        for waiters in (
            *self._queued_waiters.values(), *self._done_waiters.values(), self._connect_waiters
        ):
            for waiter in waiters:
                _wake(waiter)
        self._queued_waiters.clear()
        self._done_waiters.clear()
        self._connect_waiters.clear()

    async def wait_queued(self, queues: Iterable[str], timeout_s: float) -> bool:
        """True when told of new work in one of ``queues``; False after the
        timeout (or when the listener went down)."""
        queues = list(queues)
        self._queues.update(queues)
        self.want(QUEUED_CHANNEL)
        # A notification that arrived between polls counts: consume it now.
        if any(q in self._pending_queues for q in queues):
            self._pending_queues.difference_update(queues)
            return True
        told = await self._wait(self._queued_waiters, queues, timeout_s)
        self._pending_queues.difference_update(queues)
        return told

    async def wait_done(self, task_id: str, timeout_s: float) -> bool:
        """True when told the task finished (also when told shortly before
        this wait began); False after the timeout."""
        self.want(DONE_CHANNEL)
        recent = self._recent_done
        if task_id in recent:  # checked and registered in one step of the loop
            del recent[task_id]
            return True
        return await self._wait(self._done_waiters, [task_id], timeout_s)

    async def _wait(
        self, table: dict[str, set[asyncio.Future[bool]]], keys: list[str], timeout_s: float
    ) -> bool:
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        connected = self._connected
        if connected:
            for key in keys:
                table.setdefault(key, set()).add(waiter)
        else:
            # Not up (yet): until a session listens or the timeout, then False
            # (nothing was heard, so the caller looks for itself).
            self._connect_waiters.add(waiter)
            self.start()
        timer = loop.call_later(timeout_s, _wake, waiter, False)
        try:
            return await waiter
        finally:
            timer.cancel()
            self._connect_waiters.discard(waiter)
            for key in keys:
                waiters = table.get(key)
                if waiters is not None:
                    waiters.discard(waiter)
                    if not waiters:
                        del table[key]


def _wake(waiter: asyncio.Future[bool], told: bool = False) -> None:
    if not waiter.done():
        waiter.set_result(told)
