"""Idle workers of one database sharing the watch.

Without this, every idle worker probes once per ``poll_interval_ms`` and
every ``cairnq_queued`` notification wakes every listening worker into a
claim: a fleet of N costs N times what one worker costs, idle or loaded.
With the listener up, the workers that claim the same queues and task names
of one installation (a **fleet**) share that work instead, coordinated by
advisory locks that each member holds on a connection of its own (its
**fleet connection**: a session that ends with the process, however it
ends), never by notifications (on PostgreSQL before 17 every notification
costs a transaction in every listening session of the database):

* every member holds a shared lock ``(key, 0)``: the fleet's size is the
  number of holders;
* one member, the **leader**, holds ``(key, 1)``: it probes every poll
  interval (expired leases, delayed tasks come due) for the fleet, and
  claims on every notification, as a lone worker does;
* the others take a **turn** every ``TURN_ROUNDS`` poll intervals or so
  (jittered): they try for the leader's lock (free again once a leader's
  session ends), read the fleet's size, and probe once. Between turns they
  sleep until news of work, and claim on a notification with probability
  ``NEWS_SHARE / size``, so a burst is shared without every notification
  waking every worker.

Notifications only shorten sleeps: a notification no member claims on is
claimed by the leader's next claim or probe (at most one poll interval) or
the next notification's claim (which takes up to its free slots). A leader
whose slots are all busy does not probe meanwhile; the others' turns do.
With the listener down, or no fleet connection (a store built on a
``PgExecutor``), nothing here applies: each worker polls every interval.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time
from typing import Callable, Optional, Sequence

__all__ = ["Fleet", "FleetMember", "fleet_key", "TURN_ROUNDS", "NEWS_SHARE", "TURN_SPREAD"]

TURN_ROUNDS = 16  # a member that is not the leader takes a turn about every 16 intervals
TURN_SPREAD = (0.5, 1.5)  # ... drawn in this multiple of it, so turns spread out
NEWS_SHARE = 0.5  # the members that are not the leader claim on 1 notification in 2 * size


def fleet_key(schema: Optional[str], queues: Sequence[str], names: Optional[Sequence[str]]) -> int:
    """The advisory lock key (a positive int4) of the workers of one
    installation that claim the same queues and task names."""
    shape = [schema, sorted(queues), None if names is None else sorted(names)]
    digest = hashlib.sha1(json.dumps(shape).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFF_FFFF


class FleetMember:
    """A worker of this process in a fleet."""

    def __init__(self, worker_id: str, key: int, queues: frozenset[str], interval_s: float) -> None:
        self.id = worker_id
        self.key = key
        self.queues = queues
        self.interval_s = interval_s
        self.joined = False  # its fleet connection holds (key, 0)
        self.leader = False
        self.size = 1
        self.next_turn = float("-inf")
        self.waiter: Optional[asyncio.Future[bool]] = None
        self.pending = False  # told of work while not waiting: kept for the next wait


class Fleet:
    """This process's members, and which of them a notification wakes."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, draw: Callable[[], float] = random.random
    ) -> None:
        self._clock = clock
        self._draw = draw
        self.members: dict[str, FleetMember] = {}

    def join(
        self, worker_id: str, key: int, queues: Sequence[str], interval_s: float
    ) -> FleetMember:
        member = self.members.get(worker_id)
        if member is not None and member.key == key and member.interval_s == interval_s:
            return member
        self.leave(worker_id)
        member = self.members[worker_id] = FleetMember(worker_id, key, frozenset(queues), interval_s)
        return member

    def leave(self, worker_id: str) -> Optional[FleetMember]:
        member = self.members.pop(worker_id, None)
        if member is not None:
            _settle(member.waiter, False)
        return member

    def took_turn(self, member: FleetMember, leader: bool, size: int) -> None:
        """A turn's answer; the next turn is drawn."""
        # Two workers of one process in one fleet share its session's lock:
        # only one of them leads.
        others = [m for m in self.members.values() if m is not member and m.key == member.key]
        member.leader = leader and not any(m.leader for m in others)
        member.size = max(1, size)
        low, high = TURN_SPREAD
        spread = low + (high - low) * self._draw()
        member.next_turn = self._clock() + spread * TURN_ROUNDS * member.interval_s

    def turn_due(self, member: FleetMember) -> bool:
        return self._clock() >= member.next_turn

    def heard_queued(self, queue: str) -> None:
        for member in self.members.values():
            if queue not in member.queues:
                continue
            if member.leader or self._draw() < NEWS_SHARE / member.size:
                waiter = member.waiter
                if waiter is not None and not waiter.done():
                    waiter.set_result(True)
                else:
                    member.pending = True

    def release(self) -> None:
        """The listener went down: every wait ends (the workers poll)."""
        for member in self.members.values():
            _settle(member.waiter, False)

    async def wait(self, member: FleetMember, timeout_s: float) -> bool:
        """Until news of work for this member (True) or the timeout (False;
        also when the listener goes down or the member leaves)."""
        if member.pending:
            member.pending = False
            return True
        if timeout_s <= 0:
            return False
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        member.waiter = waiter
        timer = loop.call_later(timeout_s, _settle, waiter, False)
        try:
            return await waiter
        finally:
            timer.cancel()
            if member.waiter is waiter:
                member.waiter = None


def _settle(waiter: Optional[asyncio.Future[bool]], value: bool) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(value)
