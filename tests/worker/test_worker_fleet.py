"""A fleet of idle worker processes on one database (issue 13): what it costs
the database, and that it still finds the work nobody announces.

On PostgreSQL with the listener up, idle workers of the same queues and
names share the probing (a leader probes every poll interval, the others
now and then) and a ``cairnq_queued`` notification wakes the leader alone,
which opens its gate to the others when it has more work than it can take
(cairnq/store/postgres/fleet.py). Expired leases and delayed tasks
coming due are announced by nobody: the fleet's probe must still find them
within about a poll interval, on every dialect. Counts are statements the
worker processes ran (statement events), bounds generous.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from fleet_kit import FleetProcs, now_ms
from processes import Procs, procs  # noqa: F401  (the fixture)


@pytest.fixture
def fleet(procs: Procs, backend: Any, tmp_path: Path) -> FleetProcs:  # noqa: F811
    return FleetProcs(procs, backend, tmp_path)


def _postgres_only(backend: Any) -> None:
    if backend.dialect != "postgres":
        pytest.skip("about LISTEN/NOTIFY: PostgreSQL only")


def _summed(by_member: dict[str, dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for counts in by_member.values():
        for name, n in counts.items():
            total[name] = total.get(name, 0) + n
    return total


async def _formed(fleet: FleetProcs, interval_ms: int, timeout_s: float = 30.0) -> None:
    """Until a second passes in which no member but one (the leader) probes
    at a lone worker's rate. A member that does not see itself in the
    fleet's list yet acts alone and probes every interval (fleet.py); on a
    loaded host one may take seconds to. The fleet's cost is what the
    formed fleet does."""
    lone = 1000 / interval_ms  # a lone worker's probes in a second
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        by_member = await fleet.window_by_member(1.0)
        probes = sorted(counts.get("claimable_probe", 0) for counts in by_member.values())
        if len(probes) < 2 or probes[-2] < lone / 2:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"the fleet did not form within {timeout_s} s: {by_member}")


def _claims(counts: dict[str, int]) -> int:
    return sum(n for name, n in counts.items() if name.startswith("claim_"))


async def test_idle_workers_with_the_listener_up_share_one_probe_per_interval(
    backend: Any, fleet: FleetProcs
) -> None:
    _postgres_only(backend)
    await backend.client().stats()  # migrated before the workers race to it
    workers, interval_ms, seconds = 8, 100, 3.0
    for i in range(workers):
        fleet.start(f"w{i}", poll_interval_ms=interval_ms)
    await fleet.ready()
    await asyncio.sleep(2.0)  # everyone has heard everyone probe
    await _formed(fleet, interval_ms)
    by_member = await fleet.window_by_member(seconds)
    counts = _summed(by_member)
    polling = workers * seconds * 1000 / interval_ms  # one probe each per interval: 240
    total = sum(counts.values())
    # Shared: the leader's probe every interval, and each other member's
    # turn (three statements: the gate wait it ends, the list, the probe)
    # about every 8 intervals: ~3.6 per interval.
    assert total < polling / 2, (total, by_member)
    assert total > 0.5 * seconds * 1000 / interval_ms, (total, counts)  # the fleet does probe


async def test_a_burst_into_an_idle_fleet_wakes_about_one_claim_per_task(
    backend: Any, fleet: FleetProcs
) -> None:
    _postgres_only(backend)
    q = backend.client()
    await q.stats()
    workers, tasks = 6, 40
    for i in range(workers):
        fleet.start(f"w{i}", poll_interval_ms=500)
    await fleet.ready()
    await asyncio.sleep(2.0)
    before = fleet.counts()
    for i in range(tasks):  # each its own transaction: its own notification
        await q.submit("noop", {"i": i})
        await asyncio.sleep(0.02)

    async def all_done() -> None:
        while (await q.stats())["default"]["succeeded"] < tasks:
            await asyncio.sleep(0.05)

    await asyncio.wait_for(all_done(), 30)
    await asyncio.sleep(0.3)
    after = fleet.counts()
    claims = _claims(after) - _claims(before)
    # The leader alone listens and claims on every notification; the others
    # wait at its gate, which tasks arriving one at a time never open: one
    # claim a task (40-42 in 4 runs here). Every notification waking every
    # worker would be up to 6; a member that wrongly believes it leads (it
    # read the list before the others' marks were on it) adds about 1.
    by_worker = {label: fleet.counts([label]) for label in fleet.labels}
    assert claims <= 1.5 * tasks, (claims, after, by_worker)
    assert claims >= tasks / 4  # claims did run (up to 4 tasks each)


async def test_a_killed_workers_expired_lease_is_recovered_by_an_idle_fleet(
    backend: Any, fleet: FleetProcs
) -> None:
    q = backend.client()
    await q.stats()
    interval_ms = 200
    # The victim starts first and alone: it leads the fleet when it is
    # killed, and the others must take over the probing too.
    fleet.start("victim", poll_interval_ms=interval_ms, lease_ms=4_000)
    await fleet.ready(["victim"])
    task = await q.submit("stamp", {"hold": True})
    await fleet.stamp_of(task.id, 1, 30)  # the victim holds it
    for i in range(3):
        fleet.start(f"w{i}", poll_interval_ms=interval_ms)
    await fleet.ready()
    os.kill(fleet.popen["victim"].pid, signal.SIGKILL)
    fleet.popen["victim"].wait(10)
    held = await q.get(task.id)
    assert held.status == "running" and held.lease_until_ms is not None
    expires = held.lease_until_ms
    assert expires - now_ms() > 500, "the fleet should idle a while before the lease expires"
    rerun = await fleet.stamp_of(task.id, 2, 30)
    delay_ms = rerun["t"] * 1000 - expires
    assert rerun["label"] != "victim"
    # About one poll interval; a few, and scheduling noise, allowed.
    assert delay_ms < 10 * interval_ms, delay_ms


async def test_a_delayed_task_is_run_by_an_idle_fleet_near_its_due_time(
    backend: Any, fleet: FleetProcs
) -> None:
    q = backend.client()
    await q.stats()
    interval_ms = 200
    for i in range(3):
        fleet.start(f"w{i}", poll_interval_ms=interval_ms)
    await fleet.ready()
    await asyncio.sleep(1.0)  # idle, probing by turns
    tasks = [await q.submit("stamp", {}, delay_ms=1_000 + 250 * i) for i in range(3)]
    for task in tasks:
        ran = await fleet.stamp_of(task.id, 1, 30)
        assert task.run_at_ms is not None
        late_ms = ran["t"] * 1000 - task.run_at_ms
        assert -50 < late_ms < 10 * interval_ms, late_ms


async def test_when_the_leader_is_killed_the_others_run_new_work_and_one_takes_over_the_news(
    backend: Any, fleet: FleetProcs
) -> None:
    """The killed leader's session ends and its gate opens by itself: the
    others find it unkept, poll every interval until their turns, which come
    within about two intervals, and the next smallest id leads (listens)."""
    _postgres_only(backend)
    q = backend.client()
    await q.stats()
    interval_ms = 1_500
    fleet.start("leader", poll_interval_ms=interval_ms)  # the smallest worker id: it leads
    await fleet.ready(["leader"])
    for i in range(3):
        fleet.start(f"w{i}", poll_interval_ms=interval_ms)
    await fleet.ready()
    await asyncio.sleep(2.5)  # formed: the others wait at the leader's gate
    os.kill(fleet.popen["leader"].pid, signal.SIGKILL)
    fleet.popen["leader"].wait(10)
    submitted = now_ms()
    task = await q.submit("stamp", {})
    ran = await fleet.stamp_of(task.id, 1, 30)
    assert ran["label"] != "leader"
    assert ran["t"] * 1000 - submitted < 3 * interval_ms  # polled for, at worst
    await asyncio.sleep(3 * interval_ms / 1000 + 0.5)  # past everyone's early turn
    late = []
    for _ in range(3):  # news reaches the new leader: no wait for a poll
        submitted = now_ms()
        task = await q.submit("stamp", {})
        ran = await fleet.stamp_of(task.id, 1, 30)
        late.append(ran["t"] * 1000 - submitted)
        await asyncio.sleep(0.3)
    assert max(late) < 0.4 * interval_ms, late
