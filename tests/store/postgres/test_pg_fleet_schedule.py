"""The fleet's bookkeeping (cairnq/store/postgres/fleet.py) on its own: who
leads, which members news of work reaches, when turns come. A clock and a
draw of our own; no database (tests/store/postgres/test_pg_fleet.py and
tests/worker/test_worker_fleet.py run the real thing)."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from cairnq.store.postgres.fleet import (
    OPEN_AFTER,
    TURN_ROUNDS,
    TURN_SPREAD,
    Fleet,
    FleetMember,
    fleet_key,
    fleet_prefix,
    member_mark,
)
from cairnq.store.postgres.fleet_session import gate_of

QUEUES = ["default"]


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class Draws:
    """random.random's stand-in: the values given, in turn."""

    def __init__(self, *values: float) -> None:
        self.values = list(values)
        self.i = 0

    def __call__(self) -> float:
        value = self.values[self.i % len(self.values)]
        self.i += 1
        return value


def told(fleet: Fleet, worker_id: str) -> bool:
    member = fleet.members[worker_id]
    was, member.pending = member.pending, False
    return was


def test_the_key_is_that_of_one_installation_and_one_set_of_queues_and_names() -> None:
    key = fleet_key(None, ["b", "a"], ["y", "x"])
    assert key == fleet_key(None, ["a", "b"], ["x", "y"])
    assert len(key) == 8 and int(key, 16) >= 0
    assert key != fleet_key("tenant", ["a", "b"], ["x", "y"])
    assert key != fleet_key(None, ["a", "b"], None)
    assert fleet_key(None, ["a"], None) != fleet_key(None, ["a"], [])


def test_a_remembered_key_follows_the_lists_it_is_given() -> None:
    # Keys are remembered (a worker asks on every claim): a list changed
    # after it was asked for must not get its old key back.
    queues, names = ["a"], ["x"]
    first = fleet_key(None, queues, names)
    assert fleet_key(None, ("a",), ("x",)) == first
    queues.append("b")
    names.append("y")
    assert fleet_key(None, queues, names) == fleet_key(None, ["b", "a"], ["y", "x"]) != first


async def test_news_of_work_reaches_the_leaders_only() -> None:
    fleet = Fleet(Clock(), Draws(0.5))
    members = ["a-lead", "b", "c", "other"]
    leader = fleet.join("a-lead", "k1", QUEUES, 0.5)
    other = fleet.join("other", "k2", QUEUES, 0.5)
    fleet.took_turn(leader, members)
    fleet.took_turn(other, members)
    assert leader.leader and not other.leader and other.size == 4
    for _ in range(3):
        fleet.heard_queued("default")
        assert told(fleet, "a-lead") and not told(fleet, "other")
    fleet.heard_queued("elsewhere")
    assert not told(fleet, "a-lead")


async def test_a_leader_behind_a_while_calls_in_the_others_and_one_keeping_up_never() -> None:
    interval = 0.2  # OPEN_AFTER of it: 10 ms
    fleet = Fleet(draw=Draws(0.5))
    called: list[str] = []
    fleet.overflow = lambda member: called.append(member.id)
    probed: list[str] = []
    fleet.verify = lambda member: probed.append(member.id)
    leader = fleet.join("a", "k", QUEUES, interval)
    other = fleet.join("b", "k2", QUEUES, interval)
    fleet.took_turn(leader, ["a", "b"])
    fleet.took_turn(other, ["a", "b"])
    after = OPEN_AFTER * interval

    for _ in range(10):  # full claims now and then, each followed by a short one
        fleet.claimed(leader, True)
        await asyncio.sleep(after / 4)
        fleet.claimed(leader, False)
    await asyncio.sleep(2 * after)
    assert called == []
    for _ in range(8):  # full claims for four times OPEN_AFTER
        fleet.claimed(leader, True)
        await asyncio.sleep(after / 2)
    assert called and set(called) == {"a"}
    assert len(called) <= 4  # about once per OPEN_AFTER while behind
    fleet.claimed(leader, False)
    del called[:]
    fleet.heard_queued("default")  # news while it does not wait for it (busy)
    await asyncio.sleep(2 * after)
    assert called == ["a"]
    assert told(fleet, "a")  # the news is kept for the leader too
    fleet.heard_queued("default")
    fleet.claimed(leader, False)  # ... but it claimed, short: caught up
    await asyncio.sleep(2 * after)
    assert called == ["a"]
    for _ in range(4):  # one that does not lead never calls
        fleet.claimed(other, True)
        await asyncio.sleep(after)
    assert called == ["a"]
    assert probed == []
    fleet.claimed(leader, False)
    fleet.claimed(leader, True)  # one full claim, then no claim for a while (busy):
    await asyncio.sleep(2 * after)  # more may be due; the store is asked to look
    assert called == ["a"] and probed == ["a"]
    fleet.claimed(leader, True)
    fleet.leave("a")  # nor one that left
    await asyncio.sleep(2 * after)
    assert called == ["a"] and probed == ["a"]
    alone = fleet.join("c", "k3", QUEUES, interval)
    fleet.took_turn(alone, ["c"])  # a fleet of one: nobody to call in
    for _ in range(4):
        fleet.claimed(alone, True)
        await asyncio.sleep(after)
    assert called == ["a"] and probed == ["a"]


def test_a_member_that_finds_the_gate_unkept_turns_within_two_intervals() -> None:
    clock = Clock()
    fleet = Fleet(clock, Draws(1.0))  # the longest spread
    member = fleet.join("b", "k", QUEUES, 0.5)
    many = ["a", "b", "c", "d", "e"]
    for _ in range(4):
        fleet.took_turn(member, many)
    assert member.next_turn - clock.now == TURN_SPREAD[1] * 5 * 0.5
    fleet.turn_soon(member)
    assert member.next_turn - clock.now == TURN_SPREAD[1] * 2 * 0.5
    clock.now = member.next_turn
    fleet.took_turn(member, many)  # the same list: the gaps widen again from 2
    assert member.next_turn - clock.now == TURN_SPREAD[1] * 4 * 0.5
    fleet.turn_soon(member)
    fleet.turn_soon(member)  # never later than it was
    assert member.next_turn - clock.now == TURN_SPREAD[1] * 2 * 0.5


def test_each_fleet_has_a_gate_of_its_own_in_32_bits() -> None:
    keys = {fleet_key(None, [f"q{i}"], None) for i in range(2_000)}
    gates = {gate_of(k) for k in keys}
    assert len(gates) == len(keys)
    assert all(-(2**31) <= g < 2**31 for g in gates)
    assert gate_of("k") == gate_of("k") != gate_of("k2")
    assert FleetMember("w", "0a0b0c0d", frozenset(QUEUES), 0.5).gate == gate_of("0a0b0c0d")


def test_a_member_missing_from_the_list_acts_alone_and_looks_again_soon() -> None:
    clock = Clock()
    fleet = Fleet(clock, Draws(0.0))
    member = fleet.join("w5", "k", QUEUES, 0.5)
    assert member.leader  # before any turn: alone
    fleet.took_turn(member, ["w1", "w2"])  # its mark not seen (yet)
    assert member.leader and member.size == 1
    assert member.next_turn == clock.now + TURN_SPREAD[0] * 2 * 0.5
    fleet.took_turn(member, ["w1", "w5"])
    assert not member.leader and member.size == 2
    fleet.took_turn(member, ["w5", "w7"])
    assert member.leader
    # The list changed: soon again, then further apart while it holds.
    gaps = []
    for _ in range(5):
        gaps.append(member.next_turn - clock.now)
        fleet.took_turn(member, ["w5", "w7"])
    assert gaps == [TURN_SPREAD[0] * r * 0.5 for r in (2, 4, 8, TURN_ROUNDS, TURN_ROUNDS)]


def test_two_members_that_each_believed_they_lead_agree_within_a_few_intervals() -> None:
    """Started together, each read the list before the other's mark was on
    it: both lead (both claim on every notification) until their next turns,
    which come after 2 intervals, not TURN_ROUNDS."""
    clock = Clock()
    fleet = Fleet(clock, Draws(1.0))  # the longest spread
    a = fleet.join("a", "k", QUEUES, 0.5)
    b = fleet.join("b", "k", QUEUES, 0.5)
    fleet.took_turn(a, ["a", "c"])
    fleet.took_turn(b, ["b", "c"])
    assert a.leader and b.leader
    latest = max(a.next_turn, b.next_turn)
    assert latest - clock.now <= TURN_SPREAD[1] * 2 * 0.5
    clock.now = latest
    for member in (a, b):
        assert fleet.turn_due(member)
        fleet.took_turn(member, ["a", "b", "c"])
    assert a.leader and not b.leader


def test_a_members_mark_is_ours_to_spell() -> None:
    assert member_mark("0a0b0c0d", "worker_01ABC") == fleet_prefix("0a0b0c0d") + "worker_01ABC"
    for odd in ['w"; drop table x; --', "w x", "é", "w" * 60, "w'", "w%", ""]:
        if odd:
            assert member_mark("0a0b0c0d", odd) is None, odd


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_a_members_mark_never_spells_hostile_text(worker_id: str) -> None:
    mark = member_mark("0a0b0c0d", worker_id)
    if mark is not None:
        assert mark == fleet_prefix("0a0b0c0d") + worker_id and len(mark.encode()) <= 63
        assert all(c.isascii() and (c.isalnum() or c == "_") for c in mark)


def test_turns_come_about_every_turn_rounds_intervals_spread_out() -> None:
    clock = Clock()
    draws = Draws(0.0, 1.0)
    fleet = Fleet(clock, draws)
    member = fleet.join("w", "k", QUEUES, 0.5)
    assert fleet.turn_due(member)  # a newcomer takes its turn at once
    many = ["a"] + [f"w{i}" for i in range(29)] + ["w"]
    for _ in range(3):  # settling in: 2, 4, 8 intervals
        fleet.took_turn(member, many)
    fleet.took_turn(member, many)
    assert member.next_turn == clock.now + TURN_SPREAD[1] * 16 * 0.5
    fleet.took_turn(member, many)  # one of 30 others: about every 31 intervals
    assert member.next_turn == clock.now + TURN_SPREAD[0] * 31 * 0.5
    fleet.took_turn(member, many)
    assert member.next_turn == clock.now + TURN_SPREAD[1] * 31 * 0.5
    lead = fleet.join("a", "k", QUEUES, 0.5)  # the leader: every TURN_ROUNDS at most
    for _ in range(6):
        fleet.took_turn(lead, many)
    gap = lead.next_turn - clock.now
    assert gap in (TURN_SPREAD[0] * TURN_ROUNDS * 0.5, TURN_SPREAD[1] * TURN_ROUNDS * 0.5)
    small = ["a", "b", "w"]
    for _ in range(3):
        draws.i = 0
        fleet.took_turn(member, small)  # a small fleet: about every 3 intervals
    assert member.next_turn == clock.now + TURN_SPREAD[0] * 3 * 0.5
    pair = ["a", "w"]
    for _ in range(3):
        draws.i = 0
        fleet.took_turn(member, pair)  # at least every 2
    assert member.next_turn == clock.now + TURN_SPREAD[0] * 2 * 0.5
    assert not fleet.turn_due(member)
    clock.now = member.next_turn
    assert fleet.turn_due(member)


def test_the_others_read_the_list_at_one_turn_in_four_or_after_finding_the_gate_unkept() -> None:
    clock = Clock()
    fleet = Fleet(clock, Draws(0.5))
    member = fleet.join("b", "k", QUEUES, 0.5)
    assert fleet.list_due(member)  # nothing read yet
    fleet.took_turn(member, ["a", "b", "c"])
    reads = []
    for _ in range(8):
        due = fleet.list_due(member)
        reads.append(due)
        fleet.took_turn(member, ["a", "b", "c"] if due else None)
    assert reads == [False, False, False, True] * 2
    assert not member.leader and member.size == 3  # as last read
    fleet.turn_soon(member)
    assert fleet.list_due(member)
    fleet.took_turn(member, ["b", "c"])  # "a" is gone: it leads, and always reads
    assert member.leader and fleet.list_due(member)


def test_a_member_joining_again_with_other_queues_or_interval_starts_afresh() -> None:
    fleet = Fleet(Clock(), Draws(0.5))
    member = fleet.join("w", "k", QUEUES, 0.5)
    fleet.took_turn(member, ["v", "w"])
    assert not member.leader
    assert fleet.join("w", "k", QUEUES, 0.5) is member
    again = fleet.join("w", "k2", QUEUES, 0.5)
    assert again is not member and again.leader
    assert fleet.leave("w") is again and fleet.leave("w") is None


async def test_a_wait_ends_on_news_for_this_member_or_at_its_timeout() -> None:
    fleet = Fleet()
    member = fleet.join("w", "k", QUEUES, 0.05)
    fleet.took_turn(member, ["w"])
    assert await fleet.wait(member, 0.02) is False
    waiting = asyncio.ensure_future(fleet.wait(member, 30))
    await asyncio.sleep(0)
    fleet.heard_queued("default")
    assert await asyncio.wait_for(waiting, 5) is True
    fleet.heard_queued("default")  # nobody waiting: kept for the next wait
    assert await fleet.wait(member, 30) is True
    waiting = asyncio.ensure_future(fleet.wait(member, 30))
    await asyncio.sleep(0)
    fleet.release()  # the listener went down
    assert await asyncio.wait_for(waiting, 5) is False
