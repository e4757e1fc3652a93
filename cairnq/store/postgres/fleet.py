"""Idle workers of one database sharing the watch.

Without this, every idle worker probes once per ``poll_interval_ms`` and
listens for ``cairnq_queued``: a fleet of N costs N times what one worker
costs, idle or loaded, and on PostgreSQL 15 every notification, whatever its
channel, costs a transaction in every listening session of the database. With
the listener up, the workers that claim the same queues and task names of one
installation (a **fleet**) share that work instead, through what PostgreSQL
already offers, never through notifications:

* each member opens a session of its own (``fleet_session.py``) whose
  ``application_name`` is its **mark** (``cairnq_fleet_<key>_<worker id>``),
  so ``pg_stat_activity`` lists the fleet's live members, and a killed
  worker's session, ending, takes it off the list;
* the member with the smallest worker id is the **leader**: it alone
  listens, claims on every notification and probes every poll interval
  (expired leases, delayed tasks come due) for the fleet, as a lone worker
  does, and it keeps the **gate** the others wait at. When there is more
  work than it can take (its claims have come back full, or news has come
  while it could not wait for it, for ``OPEN_AFTER`` intervals together) it
  opens the gate and the others claim too;
* every member takes a **turn**: the leader about every ``TURN_ROUNDS``
  poll intervals, to read the list (``fleet_turn``: has a smaller id
  come?); the others about every ``size`` intervals (at least 2), to probe
  once, so the fleet still probes about once an interval while its leader
  has no free slot, and they read the list at one turn in ``LIST_EVERY``
  (turns are jittered). While the fleet forms, the list a member reads may
  still lack members whose marks are on their way (two of them may each
  believe it leads); so a member whose list changed turns again after 2
  intervals, and the gap doubles with each turn that finds the same list,
  up to the above. A member that finds the gate unkept (its leader gone,
  or not keeping yet) polls every interval until its next turn, which
  comes within 2 intervals and reads the list.

Notifications and the gate only shorten sleeps: work no member is told of is
claimed by the leader's next probe (at most one poll interval) or a member's
turn. A member that cannot see itself in the list (a second worker of the
same store: the store's session carries its first member's mark only) acts
alone: it listens, probes every interval and claims on every notification, as
before. With the listener down, or an executor that cannot open a session of
its own, nothing here applies: each worker polls every interval.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import random
import time
from typing import Callable, Optional, Sequence

from cairnq.store.postgres.fleet_session import gate_of

__all__ = [
    "Fleet",
    "FleetMember",
    "fleet_key",
    "fleet_prefix",
    "member_mark",
    "TURN_ROUNDS",
    "TURN_SPREAD",
    "LIST_EVERY",
    "OPEN_AFTER",
]

TURN_ROUNDS = 16  # the leader takes a turn about every 16 intervals, the others every size
LIST_EVERY = 4  # a member that does not lead reads the list at one turn in this many
OPEN_AFTER = 0.05  # intervals a leader is behind before the others are called in
TURN_SPREAD = (0.5, 1.5)  # ... drawn in this multiple of it, so turns spread out
MARK_MAX_BYTES = 63  # PostgreSQL keeps this much of an application_name


def fleet_key(schema: Optional[str], queues: Sequence[str], names: Optional[Sequence[str]]) -> str:
    """The same for the workers of one installation that claim the same
    queues and task names (8 hex digits)."""
    return _fleet_key(schema, tuple(queues), None if names is None else tuple(names))


# Asked for on every claim told of work, between the news and the claim:
# hashed anew each time, it took about 30 us of every PostgreSQL call() on
# one host (the code runs cold after the idle wait; bench/RESULTS.md §8).
@functools.lru_cache(maxsize=64)
def _fleet_key(schema: Optional[str], queues: tuple[str, ...], names: Optional[tuple[str, ...]]) -> str:
    shape = [schema, sorted(queues), None if names is None else sorted(names)]
    return hashlib.sha1(json.dumps(shape).encode()).hexdigest()[:8]


def fleet_prefix(key: str) -> str:
    """The members' marks are this followed by their worker id."""
    return f"cairnq_fleet_{key}_"


def member_mark(key: str, worker_id: str) -> Optional[str]:
    """The application_name a member's session carries; None for an id that
    would not survive as one (letters, digits and underscores only, the whole
    within what PostgreSQL keeps: a longer one would be cut, and read back as
    another member)."""
    mark = fleet_prefix(key) + worker_id
    spelled = all(c.isascii() and (c.isalnum() or c == "_") for c in worker_id)
    if len(mark) > MARK_MAX_BYTES or not spelled:
        return None
    return mark


class FleetMember:
    """A worker of this process in a fleet."""

    def __init__(self, worker_id: str, key: str, queues: frozenset[str], interval_s: float) -> None:
        self.id = worker_id
        self.key = key
        self.queues = queues
        self.names: Optional[list[str]] = None  # the task names it claims (None: any)
        self.interval_s = interval_s
        self.mark = member_mark(key, worker_id)
        self.gate = gate_of(key)
        self.leader = True  # until a turn says otherwise: alone
        self.size = 1
        self.next_turn = float("-inf")
        self.seen: tuple[str, ...] = ()  # the list its last turn read
        self.rounds = 2  # intervals to its next turn, before the spread
        self.turns_unread = 0  # turns taken on the list read before them
        self.recheck = False  # found the gate unkept: read the list at the next turn
        self.waiter: Optional[asyncio.Future[bool]] = None
        self.pending = False  # told of work while not waiting: kept for the next wait
        self.last_full = False  # its last claim came back full
        self.sure = False  # ... and so did the one before, or news came while it was busy
        #: Armed while it is behind (work it has not taken): whether it still is, soon.
        self.check: Optional[asyncio.TimerHandle] = None


class Fleet:
    """This process's members: who leads, when turns come, and which of them
    news of work wakes (the leaders; see the module)."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, draw: Callable[[], float] = random.random
    ) -> None:
        self._clock = clock
        self._draw = draw
        self.members: dict[str, FleetMember] = {}
        #: Called with a leader that has been behind (work it has not taken)
        #: for OPEN_AFTER intervals (the store opens the gate) ...
        self.overflow: Callable[[FleetMember], None] = lambda member: None
        #: ... or that may have been (the store probes, and opens it if so).
        self.verify: Callable[[FleetMember], None] = lambda member: None

    def join(
        self,
        worker_id: str,
        key: str,
        queues: Sequence[str],
        interval_s: float,
        names: Optional[Sequence[str]] = None,
    ) -> FleetMember:
        member = self.members.get(worker_id)
        if member is not None and member.key == key and member.interval_s == interval_s:
            return member
        self.leave(worker_id)
        member = self.members[worker_id] = FleetMember(
            worker_id, key, frozenset(queues), interval_s
        )
        member.names = None if names is None else list(names)
        return member

    def leave(self, worker_id: str) -> Optional[FleetMember]:
        member = self.members.pop(worker_id, None)
        if member is not None:
            _settle(member.waiter, False)
            self._caught_up(member)
        return member

    def marked(self) -> Optional[FleetMember]:
        """The member whose mark this process's session carries: the first
        one that has a mark (the others act alone)."""
        return next((m for m in self.members.values() if m.mark is not None), None)

    def list_due(self, member: FleetMember) -> bool:
        """Whether this turn reads the list. The leader's always do (has a
        smaller id come?); the others' only now and then (``LIST_EVERY``), or
        after finding the gate unkept: whether they lead changes only when
        the leader goes, and its gate going unkept tells them so."""
        if member.leader or member.recheck or not member.seen:
            return True
        return member.turns_unread + 1 >= LIST_EVERY

    def took_turn(self, member: FleetMember, members: Optional[Sequence[str]] = None) -> None:
        """A turn's answer (the fleet's members, by worker id; None: the list
        was not read, the last one holds); the next turn is drawn."""
        if members is None:
            members = member.seen
            member.turns_unread += 1
        else:
            member.turns_unread = 0
            member.recheck = False
        present = member.id in members
        # Not in the list (not visible, or its session just started): alone.
        member.leader = not present or member.id == min(members)
        member.size = len(members) if present else 1
        if not present:
            cap = 2  # look again soon
        elif member.leader:
            cap = TURN_ROUNDS
        else:
            # About one of the others' turns per interval in all: they probe
            # for the fleet while its leader has no free slot.
            cap = max(2, member.size)
        seen = tuple(sorted(members))
        if seen != member.seen:
            member.seen, member.rounds = seen, 2  # the fleet is changing: look again soon
        else:
            member.rounds = member.rounds * 2
        member.rounds = min(member.rounds, cap)
        member.next_turn = self._clock() + self._spread() * member.rounds * member.interval_s

    def turn_soon(self, member: FleetMember) -> None:
        """Something is amiss with the gate (a member found nobody keeping
        it: its leader may be gone; the leader could not take it: another
        session still keeps it): the next turn comes within 2 intervals and
        reads the list, and the turns after it close together until the list
        holds again."""
        member.rounds = 2
        member.recheck = True
        soon = self._clock() + self._spread() * 2 * member.interval_s
        member.next_turn = min(member.next_turn, soon)

    def _spread(self) -> float:
        low, high = TURN_SPREAD
        return low + (high - low) * self._draw()

    def turn_due(self, member: FleetMember) -> bool:
        return self._clock() >= member.next_turn

    def heard_queued(self, queue: str) -> None:
        """News of work in ``queue``: the leaders of its fleets are told (one
        that is not waiting for news may be behind: ``claimed``)."""
        for member in self.members.values():
            if not member.leader or queue not in member.queues:
                continue
            waiter = member.waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(True)
                continue
            member.pending = True
            member.sure = True  # work it has not taken, told
            self._behind(member)  # claiming or busy: caught up once a claim comes back short

    def claimed(self, member: FleetMember, full: bool) -> None:
        """A claim of the member's worker came back: ``full`` (a draw got all
        it asked for: more may be due) or short (it has caught up). A
        leader that stays behind for ``OPEN_AFTER`` intervals is handed to
        ``overflow`` (the others are called in) when that is sure (two full
        claims in a row, or news heard while it was not waiting for it), else
        to ``verify`` (a full claim alone says only that more *may* be due:
        the store probes). One that keeps up alone never is, whatever its
        claims' sizes."""
        if not member.leader:
            return
        if full:
            member.sure = member.sure or member.last_full
            member.last_full = True
            self._behind(member)
        else:
            self._caught_up(member)

    def _behind(self, member: FleetMember) -> None:
        if member.check is None:
            member.check = asyncio.get_running_loop().call_later(
                OPEN_AFTER * member.interval_s, self._still_behind, member
            )

    def _caught_up(self, member: FleetMember) -> None:
        member.last_full = member.sure = False
        if member.check is not None:
            member.check.cancel()
            member.check = None

    def _still_behind(self, member: FleetMember) -> None:
        member.check = None  # from now on, behind anew
        sure, member.sure = member.sure, False
        if not member.leader or self.members.get(member.id) is not member:
            return
        if member.size > 1:  # (a fleet of one: nobody to call in)
            (self.overflow if sure else self.verify)(member)

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
