"""Claiming: a read-only probe, then one write transaction that recovers
expired leases and runs the caller's plan of draws."""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Sequence

from cairnq.models import Task
from cairnq.store.driver import Fetch
from cairnq.store.ops.core import LEASE_EXPIRED_ERROR_JSON, StoreCore
from cairnq.store.validation import check_int, check_lease_ms, check_text, unique_names

__all__ = ["ClaimOps", "ClaimDraw", "claim_statement", "probe_statement"]

# ``draw(names, limit)``: claim up to ``limit`` due tasks of these names (None:
# any name) from the session's queues.
ClaimDraw = Callable[[list[str] | None, int], Awaitable[list[Task]]]


def claim_statement(queues: Sequence[str], names: Sequence[str] | None) -> str:
    """Which claim variant reaches its index for this draw (all mean the same)."""
    one_queue = len(queues) == 1
    if names is None:
        return "claim_one_queue_any_name" if one_queue else "claim_any_name"
    if len(names) == 1:
        return "claim_one_queue_one_name" if one_queue else "claim_one_name"
    return "claim_one_queue" if one_queue else "claim"


def probe_statement(queues: Sequence[str], names: Sequence[str] | None) -> str:
    """Which claimable-probe variant reaches its index (all mean the same)."""
    if names is None:
        return "claimable_probe_any_name"
    if len(queues) == 1 and len(names) == 1:
        return "claimable_probe_one_queue_one_name"
    return "claimable_probe"


class ClaimOps(StoreCore):
    async def claim_session(
        self,
        *,
        queues: Sequence[str],
        worker_id: str,
        lease_ms: int = 30_000,
        names: Sequence[str] | None,
        plan: Callable[[ClaimDraw], Awaitable[Any]],
    ) -> Any:
        """Probe, then one write transaction: recover expired leases, run ``plan``.

        ``plan`` receives ``draw(names, limit)`` and may call it several times
        (one draw per claim source); it must await nothing else, since it runs
        inside the transaction. Returns the plan's value, or None when the
        read-only probe found nothing to do (no transaction was opened).
        """
        return await self._claim_session(queues, worker_id, lease_ms, names, plan, probe=True, single_draw=False)

    async def claim(
        self,
        *,
        queues: Sequence[str],
        worker_id: str,
        lease_ms: int = 30_000,
        limit: int = 1,
        names: Sequence[str] | None = None,
    ) -> list[Task]:
        """One draw of up to ``limit`` tasks (probe, recovery and draw in one go)."""
        check_int("limit", limit)

        async def one_draw(draw: ClaimDraw) -> list[Task]:
            return await draw(None if names is None else list(names), limit)

        claimed = await self.claim_session(
            queues=queues, worker_id=worker_id, lease_ms=lease_ms, names=names, plan=one_draw
        )
        return claimed or []

    async def _claim_session(
        self,
        queues: Sequence[str],
        worker_id: str,
        lease_ms: int,
        names: Sequence[str] | None,
        plan: Callable[[ClaimDraw], Awaitable[Any]],
        *,
        probe: bool,
        single_draw: bool,
    ) -> Any:
        """``claim_session``, as the worker drives it. ``probe=False``: the
        caller was just told of new work, so the read-only probe is skipped and
        so is lease recovery (the caller probes again within its poll
        interval). ``single_draw``: ``plan`` draws at most once, so with
        nothing to recover the draw may run alone, in autocommit."""
        params = self._claim_params(queues, worker_id, lease_ms, names)
        self._register_wakeable(params["queues"])
        expired = False
        if probe:
            due, expired = await self._probe(params)
            if not (due or expired):
                return None
        if single_draw and not expired:
            alone = self._lone_draw_fetch()
            if alone is not None:
                return await plan(self._drawing(alone, params))
        async with self._claim_transaction() as fetch:
            if expired:  # a lease expiring after the probe is recovered next poll
                await fetch("recover_leases", params)
            return await plan(self._drawing(fetch, params))

    def _claim_params(
        self,
        queues: Sequence[str],
        worker_id: str,
        lease_ms: int,
        names: Sequence[str] | None,
    ) -> dict[str, Any]:
        check_lease_ms(lease_ms)
        check_text("worker_id", worker_id)
        queues = unique_names(queues, "queues")
        names = None if names is None else unique_names(names, "names")
        return {
            "queues": queues,
            "queue": queues[0] if len(queues) == 1 else None,
            "names": names,
            "name": None,
            "worker_id": worker_id,
            "lease_ms": lease_ms,
            "limit": 1,
            "lease_expired_error": LEASE_EXPIRED_ERROR_JSON,
        }

    async def _probe(self, params: dict[str, Any]) -> tuple[bool, bool]:
        """(due, expired): is a task of these queues and names due; has any
        lease expired. Read-only."""
        names = params["names"]
        statement = probe_statement(params["queues"], names)
        if statement == "claimable_probe_one_queue_one_name":
            params = dict(params, name=names[0])
        rows = await self._fetch(statement, params)
        if not rows:
            return False, False
        return bool(rows[0][0]), bool(rows[0][1])

    async def _has_claimable_work(self, params: dict[str, Any]) -> bool:
        due, expired = await self._probe(params)
        return due or expired

    def _drawing(self, fetch: Fetch, params: dict[str, Any]) -> ClaimDraw:
        """The ``draw(names, limit)`` a claim plan calls, over ``fetch``."""

        async def draw(draw_names: Sequence[str] | None, limit: int) -> list[Task]:
            if draw_names is not None:
                draw_names = unique_names(draw_names, "draw names")
            if limit <= 0 or (draw_names is not None and not draw_names):
                return []
            draw_params = dict(params)
            draw_params["names"] = draw_names
            draw_params["name"] = draw_names[0] if draw_names else None
            draw_params["limit"] = limit
            stmt = claim_statement(params["queues"], draw_names)
            return self._tasks(await fetch(stmt, draw_params))

        return draw
