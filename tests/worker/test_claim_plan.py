"""How a claim plan turns drawn rows into calls (``ClaimPlanner``), with
no database: the draw is a function returning the rows a claim would."""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from cairnq.models import Task
from cairnq.worker.claims import ClaimPlanner
from cairnq.worker.registry import Registry


async def _handler(ctx: Any) -> None:
    return None


async def _batch_handler(contexts: Any) -> None:
    return None


def _task(task_id: str, name: str, *, priority: int = 0, run_at_ms: int = 0) -> Task:
    return Task(
        id=task_id, name=name, queue="default", status="running", payload=None, metadata={},
        priority=priority, run_at_ms=run_at_ms,
    )  # fmt: skip


def _registry() -> Registry:
    registry = Registry({})
    registry.register("single", _handler)
    registry.register("batched", _batch_handler, batch=4)
    return registry


def _plan(registry: Registry, rows: list[Task], free: int = 64) -> list[tuple[Optional[str], list[str]]]:
    """The calls of one poll whose every draw returns ``rows`` (once), as
    (registered name or None, task ids)."""
    left = [rows]

    async def draw(names: Optional[list[str]], limit: int) -> list[Task]:
        return left.pop() if left else []

    run = ClaimPlanner(registry, None).plan(free, lambda resource: 0)
    calls = asyncio.run(run(draw))
    return [(reg.name if reg is not None else None, [t.id for t in tasks]) for reg, tasks in calls]


def test_a_lone_row_becomes_one_call_of_its_handler() -> None:
    assert _plan(_registry(), [_task("t1", "single")]) == [("single", ["t1"])]


def test_a_lone_row_of_a_batch_handler_is_a_call_of_one_task() -> None:
    assert _plan(_registry(), [_task("t1", "batched")]) == [("batched", ["t1"])]


def test_a_lone_row_of_a_name_no_longer_registered_has_no_handler() -> None:
    assert _plan(_registry(), [_task("t1", "gone")]) == [(None, ["t1"])]


def test_rows_go_by_priority_then_due_time_then_id_grouped_by_name_in_chunks() -> None:
    rows = [
        _task("t3", "single", run_at_ms=5),
        _task("t1", "batched", run_at_ms=9),
        _task("t2", "single", priority=2, run_at_ms=7),
        _task("t0", "single", run_at_ms=5),
        _task("t4", "batched", run_at_ms=1),
    ]
    # Order: t2 (priority 2), then t4, t0, t3, t1 by due time and id; each
    # name's calls together, the name first drawn first.
    assert _plan(_registry(), rows) == [
        ("single", ["t2"]),
        ("single", ["t0"]),
        ("single", ["t3"]),
        ("batched", ["t4", "t1"]),
    ]


def test_a_lone_row_plans_as_the_same_row_among_others_would() -> None:
    # The lone-row path and the general one agree on what a row becomes.
    registry = _registry()
    for name in ("single", "batched", "gone"):
        alone = _plan(registry, [_task("t1", name)])
        among = [call for call in _plan(registry, [_task("t1", name), _task("t9", "other")]) if "t1" in call[1]]
        assert alone == among
