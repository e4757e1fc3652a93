"""The fleet's bookkeeping (cairnq/store/postgres/fleet.py) on its own: which
notifications wake which member, when turns come. A clock and a draw of our
own; no database (tests/worker/test_worker_fleet.py runs the real thing)."""

from __future__ import annotations

import asyncio

from cairnq.store.postgres.fleet import NEWS_SHARE, TURN_ROUNDS, TURN_SPREAD, Fleet, fleet_key

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
    assert 0 <= key < 2**31
    assert key != fleet_key("tenant", ["a", "b"], ["x", "y"])
    assert key != fleet_key(None, ["a", "b"], None)
    assert fleet_key(None, ["a"], None) != fleet_key(None, ["a"], [])


def test_the_leader_is_told_of_every_notification_the_others_of_a_share() -> None:
    draws = Draws(0.0, 0.99)  # for the others: claim, pass, claim, pass...
    fleet = Fleet(Clock(), draws)
    leader = fleet.join("lead", 7, QUEUES, 0.5)
    other = fleet.join("other", 8, QUEUES, 0.5)
    fleet.took_turn(leader, True, 4)
    fleet.took_turn(other, False, 4)
    results = []
    for _ in range(6):
        fleet.heard_queued("default")
        results.append((told(fleet, "lead"), told(fleet, "other")))
    assert all(lead for lead, _ in results)
    assert sum(o for _, o in results) == 3  # the draws, against NEWS_SHARE / 4
    fleet.heard_queued("elsewhere")
    assert not told(fleet, "lead") and not told(fleet, "other")


def test_the_others_claim_on_about_one_notification_in_two_times_the_fleet() -> None:
    import random

    fleet = Fleet(Clock(), random.Random(7).random)
    members = [fleet.join(f"w{i}", 7, QUEUES, 0.5) for i in range(24)]
    for member in members:
        fleet.took_turn(member, False, 24)
    wakes = 0
    for _ in range(2_000):
        fleet.heard_queued("default")
        wakes += sum(told(fleet, m.id) for m in members)
    assert 0.7 * NEWS_SHARE * 2_000 < wakes < 1.3 * NEWS_SHARE * 2_000


def test_two_workers_of_one_process_in_one_fleet_do_not_both_lead() -> None:
    fleet = Fleet(Clock(), Draws(0.5))
    first = fleet.join("a", 7, QUEUES, 0.5)
    second = fleet.join("b", 7, QUEUES, 0.5)
    fleet.took_turn(first, True, 2)
    fleet.took_turn(second, True, 2)  # the session's lock answers yes to both
    assert first.leader and not second.leader


def test_turns_come_about_every_turn_rounds_intervals_spread_out() -> None:
    clock = Clock()
    fleet = Fleet(clock, Draws(0.0, 1.0))
    member = fleet.join("w", 7, QUEUES, 0.5)
    assert fleet.turn_due(member)  # a newcomer takes its turn at once
    fleet.took_turn(member, False, 3)
    assert member.next_turn == clock.now + TURN_SPREAD[0] * TURN_ROUNDS * 0.5
    fleet.took_turn(member, False, 3)
    assert member.next_turn == clock.now + TURN_SPREAD[1] * TURN_ROUNDS * 0.5
    assert not fleet.turn_due(member)
    clock.now = member.next_turn
    assert fleet.turn_due(member)


def test_a_member_joining_again_with_other_queues_or_interval_starts_afresh() -> None:
    fleet = Fleet(Clock(), Draws(0.5))
    member = fleet.join("w", 7, QUEUES, 0.5)
    fleet.took_turn(member, True, 1)
    assert fleet.join("w", 7, QUEUES, 0.5) is member
    again = fleet.join("w", 9, QUEUES, 0.5)
    assert again is not member and not again.leader
    assert fleet.leave("w") is again and fleet.leave("w") is None


async def test_a_wait_ends_on_news_for_this_member_or_at_its_timeout() -> None:
    fleet = Fleet()
    member = fleet.join("w", 7, QUEUES, 0.05)
    fleet.took_turn(member, True, 1)
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
