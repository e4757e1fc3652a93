"""One poll's claim plan: which sources draw, how much, and how rows become calls.

Runs inside the claim transaction (``TaskStore.claim_session``), so it awaits
nothing but the draws. The call budget is spent against what each draw
actually claimed, and sources are visited in an order that rotates between
polls so no source is always first in line.
"""

from __future__ import annotations

from collections import defaultdict
from operator import attrgetter
from typing import Awaitable, Callable, Iterable, Optional, Sequence

from cairnq.models import Task
from cairnq.store.base import ClaimDraw
from cairnq.worker.registry import Registration, Registry, ClaimSource

__all__ = ["Call", "ClaimPlanner"]

# A call: the registration to run (None when no handler is registered for the
# name any more) and the tasks it receives.
Call = tuple[Optional[Registration], list[Task]]


# Claim order, as two stable sorts with C-level keys: (due time, id), then
# priority descending.
_due_then_id = attrgetter("run_at_ms", "id")
_priority = attrgetter("priority")
_name = attrgetter("name")


class ClaimPlanner:
    def __init__(self, registry: Registry, claim_batch: Optional[int]) -> None:
        self._registry = registry
        self._claim_batch = claim_batch
        self._start = 0
        # Set by each plan run: some draw came back with all the rows it asked
        # for, so its source may hold more due work right now.
        self.drew_full = False

    def plan(
        self, free_calls: int, in_use: Callable[[str], int]
    ) -> Callable[[ClaimDraw], Awaitable[list[Call]]]:
        """The plan for this poll. ``in_use(resource)`` counts the calls in flight
        holding a resource."""
        registry = self._registry
        sources = registry.claim_sources
        if sources:
            start = self._start % len(sources)
            self._start = start + 1
            sources = sources[start:] + sources[:start]

        async def run(draw: ClaimDraw) -> list[Call]:
            self.drew_full = False
            calls: list[Call] = []
            left = free_calls
            drawn: dict[str, int] = defaultdict(int)
            for source in sources:
                if left <= 0:
                    break
                quota = self._quota(source, left, in_use, drawn)
                if quota <= 0:
                    continue
                asked = source.batch * quota
                rows = await draw(list(source.names), asked)
                if len(rows) >= asked:
                    self.drew_full = True
                made = self._calls(rows)
                calls.extend(made)
                left -= len(made)
                for resource in source.resources:
                    drawn[resource] += len(made)
            return calls

        return run

    def _quota(
        self,
        source: ClaimSource,
        left: int,
        in_use: Callable[[str], int],
        drawn: dict[str, int],
    ) -> int:
        quota = left
        capacities = self._registry.capacities
        for resource in source.resources:
            headroom = capacities[resource] - in_use(resource) - drawn[resource]
            quota = min(quota, max(0, headroom))
        if self._claim_batch is not None:
            quota = min(quota, max(1, self._claim_batch // source.batch))
        return quota

    def _calls(self, rows: Sequence[Task]) -> list[Call]:
        """In claim order (priority, then due time, then id), grouped by name
        (first seen first), each name's tasks chunked by its batch size."""
        if len(rows) == 1:
            # A lone row (a call(), a quiet queue): its call, without the
            # sorts and the grouping (about 10 us of a cold claim's path).
            task = rows[0]
            return [(self._registry.by_name.get(task.name), [task])]
        ordered = sorted(rows, key=_due_then_id)
        ordered.sort(key=_priority, reverse=True)  # stable: ties keep due order
        names = list(map(_name, ordered))
        registrations = self._registry.by_name
        if names and names.count(names[0]) == len(names):  # one name: the usual draw
            groups: Iterable[tuple[str, list[Task]]] = ((names[0], ordered),)
        else:
            by_name: dict[str, list[Task]] = {}
            for name, task in zip(names, ordered):
                by_name.setdefault(name, []).append(task)
            groups = by_name.items()
        calls: list[Call] = []
        for name, tasks in groups:
            reg = registrations.get(name)
            size = reg.chunk if reg is not None else 1
            if size == 1:
                calls.extend([(reg, [task]) for task in tasks])
            else:
                for i in range(0, len(tasks), size):
                    calls.append((reg, tasks[i : i + size]))
        return calls

