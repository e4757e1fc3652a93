"""A fleet member's session: its mark, and the gate the others wait at.

A store whose worker is a member of a fleet (fleet.py) opens one connection
of its own for it (the executor's ``dedicated``), named by the member's mark
(its ``application_name``), so ``pg_stat_activity`` lists the live members.
What runs on it depends on the member's role:

* the **leader keeps the gate**: a session-level advisory lock. It alone
  listens for news of work and claims on it, as a lone worker does; when
  there is more than it can take (it has been behind a while: fleet.py,
  ``Fleet.claimed``) it **opens** the gate: lets go of the lock and takes it
  again at once, at most once per ``OPEN_GAP`` poll intervals;
* the others **wait at the gate**: a shared lock request, queued behind the
  leader's lock until it opens (then they claim) or until their next turn
  (then they take it: read the list, probe). They do not listen: on
  PostgreSQL 15 every notification, whatever its channel, costs a
  transaction in every listening session of the database, so a fleet of N
  listeners pays N for each, where a waiting session pays nothing.

When the leader's session ends (its process killed, say), its lock goes with
it and the gate opens by itself; the members that come back to it find it
unkept, poll every interval and take their turns early, so the next smallest
id leads within about two intervals. Correctness never depends on the gate:
a member that misses an opening finds the work at its turn, as the leader's
probe does every interval.

One wait at the gate is in flight at most: a caller that gives up on it (its
worker woke for another reason) leaves it running, and the next wait takes
its outcome, so a wait never has to be cancelled on the server except when
the session closes or the member starts to lead.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from typing import Any, Awaitable, Callable, Literal, Optional

from cairnq.store.driver import STATEMENTS, observed

log = logging.getLogger("cairnq.store")

__all__ = ["FleetSession", "GateOutcome", "GATE_CLASS", "gate_of", "OPEN_GAP"]

#: The first key of every fleet gate (two-key advisory locks: a space of their
#: own, apart from the one-key locks keyed submits take). "cq" and "fl".
GATE_CLASS = 0x6371_666C
#: The leader opens the gate at most once per this many poll intervals.
OPEN_GAP = 0.25
SESSION_RETRY_S = 1.0
SESSION_RETRY_MAX_S = 30.0

#: opened: the leader opened the gate (or its session ended); unkept: nobody
#: keeps it; turn: the wait lasted until the member's next turn; down: no
#: session (the member acts alone until one is back).
GateOutcome = Literal["opened", "unkept", "turn", "down"]

_TIMED_OUT = frozenset({"55P03", "57014"})  # lock_not_available, query_canceled

Bind = Callable[[str, dict[str, Any]], tuple[str, list[Any]]]


def gate_of(key: str) -> int:
    """The fleet's gate: a signed 32-bit number drawn from its key."""
    return int.from_bytes(hashlib.sha1(key.encode()).digest()[:4], "big", signed=True)


class FleetSession:
    """The dedicated session of one store's fleet member (see the module)."""

    def __init__(
        self, executor: Any, bind: Bind, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._dedicated = getattr(executor, "dedicated", None)
        self._bind = bind
        self._clock = clock
        self._session: Any = None
        self._mark: Optional[str] = None  # the mark of the session up or on its way
        self._connecting: Optional[asyncio.Task[None]] = None
        self._retry_at = float("-inf")
        self._retry_s = SESSION_RETRY_S
        self._lock: Optional[asyncio.Lock] = None  # one statement at a time
        self._waiting: Optional[asyncio.Task[GateOutcome]] = None
        self._waiting_gate: Optional[int] = None
        self._opening: Optional[asyncio.Task[None]] = None
        self._background: set[asyncio.Task[None]] = set()  # sessions dropped, closing
        self._opened_at = float("-inf")
        self._closed = False
        #: The gate this session keeps (the leader's), or None.
        self.keeping: Optional[int] = None

    @property
    def available(self) -> bool:
        """Whether the executor can open a session of its own at all."""
        return self._dedicated is not None and not self._closed

    @property
    def up(self) -> bool:
        return self._session is not None and not self._session.closed

    def start(self, mark: str) -> None:
        """Open the session with ``mark`` (in the background), or start it
        over when it carries another one; no-op while one is on its way, or
        before the retry delay after a failure is up."""
        if not self.available:
            return
        if self._mark == mark and (self.up or self._connecting is not None):
            return
        if self._mark != mark and self._session is not None:
            self._drop()  # another member's mark now: a session of its own
        if self._connecting is not None or self._clock() < self._retry_at:
            return
        self._mark = mark
        self._connecting = asyncio.get_running_loop().create_task(self._connect(mark))

    async def _connect(self, mark: str) -> None:
        try:
            session = await self._dedicated(mark)  # type: ignore[misc]
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.debug("fleet session failed to open, retrying in %.0f s: %s", self._retry_s, exc)
            self._back_off()
            self._mark = None
            return
        finally:
            self._connecting = None
        if self._closed or self._mark != mark:
            await session.close()
            return
        self._session = session
        self.keeping = None  # (a session that went keeps no lock)
        self._opened_at = float("-inf")

    def seen(self) -> None:
        """The member found its mark in the list: the session is well."""
        self._retry_s = SESSION_RETRY_S

    def lost(self) -> None:
        """The member did not find its mark in the list: the server ended
        the session (its locks with it) though no statement has told us yet,
        or its mark cannot be seen. It is closed, and another opened after a
        delay that doubles while this keeps happening."""
        if self._session is None:
            return
        self._drop()
        self._back_off()

    def _back_off(self) -> None:
        """No new session before the delay is up; the next delay doubles."""
        self._retry_at = self._clock() + self._retry_s
        self._retry_s = min(self._retry_s * 2, SESSION_RETRY_MAX_S)

    # -- the leader's side -----------------------------------------------------------

    async def keep(self, gate: int) -> bool:
        """Start keeping ``gate``; False when another session keeps it (or
        there is no session)."""
        if self.keeping == gate:
            return True
        if self.keeping is not None:
            await self.let_go()
        await self._end_wait()
        rows = await self._run("fleet_gate_keep", self._gate_params(gate))
        if rows and rows[0][0]:
            self.keeping = gate
            return True
        return False

    async def let_go(self) -> None:
        """Stop keeping the gate (the waiters are granted)."""
        gate, self.keeping = self.keeping, None
        if gate is not None:
            await self._run("fleet_gate_let_go", self._gate_params(gate))

    def open(self, interval_s: float) -> None:
        """Open the gate kept, at most once per ``OPEN_GAP`` intervals (in the
        background: the caller goes on at once)."""
        gate = self.keeping
        now = self._clock()
        if gate is None or now - self._opened_at < OPEN_GAP * interval_s:
            return
        if self._opening is not None and not self._opening.done():
            return
        self._opened_at = now
        self._opening = asyncio.get_running_loop().create_task(self._open(gate, interval_s))

    async def _open(self, gate: int, interval_s: float) -> None:
        params = self._gate_params(gate)
        params["timeout_ms"] = max(1, int(interval_s * 1000))
        try:
            await self._run("fleet_gate_open", params)
        except Exception as exc:
            if self.keeping == gate:
                self.keeping = None  # let go, and not taken again in time
            log.debug("fleet gate not taken again after opening it: %s", exc)

    # -- the others' side ------------------------------------------------------------

    async def wait(self, gate: int, timeout_s: float) -> GateOutcome:
        """Wait at ``gate`` until it opens or for ``timeout_s``. A caller that
        gives up leaves the wait running; the next call takes its outcome."""
        waiting = self._waiting
        if waiting is not None and self._waiting_gate != gate:
            await self._end_wait()
            waiting = None
        if waiting is None:
            if not self.up:
                return "down"
            timeout_ms = int(timeout_s * 1000)
            if timeout_ms < 1:
                return "turn"
            waiting = self._waiting = asyncio.get_running_loop().create_task(
                self._wait(gate, timeout_ms)
            )
            self._waiting_gate = gate
        try:
            return await asyncio.shield(waiting)
        finally:
            if waiting.done() and self._waiting is waiting:
                self._waiting = None
                self._waiting_gate = None

    async def _wait(self, gate: int, timeout_ms: int) -> GateOutcome:
        params = self._gate_params(gate)
        params["timeout_ms"] = timeout_ms
        try:
            rows = await self._run("fleet_gate_wait", params)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if getattr(exc, "sqlstate", None) in _TIMED_OUT:
                return "turn"
            return "down"  # (_run dropped a session that failed)
        return "unkept" if rows and rows[0][0] == "unkept" else "opened"

    async def _end_wait(self) -> None:
        waiting, self._waiting = self._waiting, None
        self._waiting_gate = None
        if waiting is not None and not waiting.done():
            waiting.cancel()
            await asyncio.gather(waiting, return_exceptions=True)

    # -- statements ------------------------------------------------------------------

    def _gate_params(self, gate: int) -> dict[str, Any]:
        return {"gate_class": GATE_CLASS, "gate": gate}

    async def _run(self, name: str, params: dict[str, Any]) -> list[Any]:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            session = self._session
            if session is None or session.closed:
                raise ConnectionError("the fleet session is down")
            text, values = self._bind(name, params)
            try:
                pending: Awaitable[list[Any]] = session.query(text, values)
                if STATEMENTS.on:
                    pending = observed(name, "postgres", pending)
                return await pending
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if getattr(exc, "sqlstate", None) not in _TIMED_OUT:
                    log.debug("fleet session: %s failed, the session goes", name, exc_info=True)
                    self._drop()
                raise

    def _drop(self) -> None:
        """Close the session (its locks and its mark go with it)."""
        session, self._session = self._session, None
        self._mark = None
        self.keeping = None
        self._opened_at = float("-inf")
        if session is not None and not session.closed:
            closing = asyncio.get_running_loop().create_task(session.close())
            self._background.add(closing)
            closing.add_done_callback(self._background.discard)

    async def close(self) -> None:
        self._closed = True
        if self._connecting is not None:
            self._connecting.cancel()
            await asyncio.gather(self._connecting, return_exceptions=True)
        await self._end_wait()
        if self._opening is not None:
            self._opening.cancel()
            await asyncio.gather(self._opening, return_exceptions=True)
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        session, self._session = self._session, None
        self.keeping = None
        if session is not None and not session.closed:
            await session.close()
