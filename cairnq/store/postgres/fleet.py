"""Idle workers of one database sharing the watch.

Without this, every idle worker probes once per ``poll_interval_ms`` and
every ``cairnq_queued`` notification wakes every listening worker into a
claim: a fleet of N costs N times what one worker costs, idle or loaded.
With the listener up, the workers that claim the same queues and task names
of one installation (a **fleet**) share that work instead. They coordinate
through what PostgreSQL already shows, never through notifications (on
PostgreSQL 15 every notification costs a transaction in every listening
session of the database, whatever its channel) nor a connection more:

* each member's listening session last runs LISTEN on a channel of its own
  (``cairnq_fleet_<key>_<worker id>``; nothing is ever sent there), so
  ``pg_stat_activity`` lists the fleet's live members, and a killed
  worker's session, ending, takes it off the list;
* the member with the smallest worker id is the **leader**: it probes every
  poll interval (expired leases, delayed tasks come due) for the fleet, and
  claims on every notification, as a lone worker does;
* every member takes a **turn** (reads the list: ``fleet_turn``) about every
  ``min(size, TURN_ROUNDS)`` poll intervals (at least 2; jittered; the
  leader every ``TURN_ROUNDS``), and the others probe once at each turn.
  While the fleet forms, the list a member reads may still lack members
  whose marks are on their way (two of them may each believe it leads);
  so a member whose list changed turns again after 2 intervals, and the
  gap doubles with each turn that finds the same list, up to the above.
  Between turns they sleep until news of work, and claim on a notification
  with probability ``NEWS_SHARE / size``, so a burst is shared without every
  notification waking every worker.

Notifications only shorten sleeps: a notification no member claims on is
claimed by the leader's next claim or probe (at most one poll interval) or
the next notification's claim (which takes up to its free slots). A leader
whose slots are all busy does not probe meanwhile; the others' turns do. A
member that cannot see itself in the list (the role may not read other
sessions' commands, a second worker of the same store) acts alone: it
probes every interval and claims on every notification, as before. With
the listener down, nothing here applies: each worker polls every interval.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time
from typing import Callable, Optional, Sequence

__all__ = [
    "Fleet",
    "FleetMember",
    "fleet_key",
    "fleet_prefix",
    "member_channel",
    "TURN_ROUNDS",
    "NEWS_SHARE",
    "TURN_SPREAD",
]

TURN_ROUNDS = 16  # a member takes a turn about every min(size, 16) intervals
TURN_SPREAD = (0.5, 1.5)  # ... drawn in this multiple of it, so turns spread out
NEWS_SHARE = 0.5  # the members that are not the leader claim on 1 notification in 2 * size


def fleet_key(schema: Optional[str], queues: Sequence[str], names: Optional[Sequence[str]]) -> str:
    """The same for the workers of one installation that claim the same
    queues and task names (8 hex digits)."""
    shape = [schema, sorted(queues), None if names is None else sorted(names)]
    return hashlib.sha1(json.dumps(shape).encode()).hexdigest()[:8]


def fleet_prefix(key: str) -> str:
    """The members' channels are this followed by their worker id."""
    return f"cairnq_fleet_{key}_"


def member_channel(key: str, worker_id: str) -> Optional[str]:
    """The channel a member's listening session announces itself by; None
    for an id that is not ours to spell into a LISTEN (letters, digits and
    underscores, the whole name within PostgreSQL's 63 bytes)."""
    channel = fleet_prefix(key) + worker_id
    if len(channel) > 63 or not all(c.isascii() and (c.isalnum() or c == "_") for c in worker_id):
        return None
    return channel


class FleetMember:
    """A worker of this process in a fleet."""

    def __init__(self, worker_id: str, key: str, queues: frozenset[str], interval_s: float) -> None:
        self.id = worker_id
        self.key = key
        self.queues = queues
        self.interval_s = interval_s
        self.channel = member_channel(key, worker_id)
        self.leader = True  # until a turn says otherwise: alone
        self.size = 1
        self.next_turn = float("-inf")
        self.seen: tuple[str, ...] = ()  # the list its last turn read
        self.rounds = 2  # intervals to its next turn, before the spread
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
        self, worker_id: str, key: str, queues: Sequence[str], interval_s: float
    ) -> FleetMember:
        member = self.members.get(worker_id)
        if member is not None and member.key == key and member.interval_s == interval_s:
            return member
        self.leave(worker_id)
        member = self.members[worker_id] = FleetMember(
            worker_id, key, frozenset(queues), interval_s
        )
        return member

    def leave(self, worker_id: str) -> Optional[FleetMember]:
        member = self.members.pop(worker_id, None)
        if member is not None:
            _settle(member.waiter, False)
        return member

    def took_turn(self, member: FleetMember, members: Sequence[str]) -> None:
        """A turn's answer (the fleet's members, by worker id); the next
        turn is drawn."""
        present = member.id in members
        # Not in the list (not visible, or its session just started): alone.
        member.leader = not present or member.id == min(members)
        member.size = len(members) if present else 1
        low, high = TURN_SPREAD
        spread = low + (high - low) * self._draw()
        if not present:
            cap = 2  # look again soon
        elif member.leader:
            cap = TURN_ROUNDS
        else:
            cap = min(max(2, member.size), TURN_ROUNDS)  # a small fleet turns more often
        seen = tuple(sorted(members))
        if seen != member.seen:
            member.seen, member.rounds = seen, 2  # the fleet is changing: look again soon
        else:
            member.rounds = member.rounds * 2
        member.rounds = min(member.rounds, cap)
        member.next_turn = self._clock() + spread * member.rounds * member.interval_s

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
