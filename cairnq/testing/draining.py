"""``drain(worker)``: run a worker until nothing it handles is due, then stop it.

The worker runs for real (its claim loop, its settlement path, its
schedules); drain only decides when to stop it. It listens on the
instrumentation seam (``cairnq.events``) for this worker's claims and
settlements and stops once a claim that *began after the last settlement*
found nothing, with no task of the worker claimed and unsettled and no
handler running. A claim that began later than every settlement saw every
task those settlements (and the handlers before them) enqueued or requeued,
so nothing due is left behind; tasks not yet due (``delay_ms``, a retry's
backoff) stay queued and are reported as such.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import cairnq.events as events
from cairnq.testing.outcome import Outcome
from cairnq.worker import Worker

__all__ = ["drain", "DrainTimeout"]

_SETTLED = (*events.SETTLEMENT_KINDS, "task.lease_lost")
_KINDS = ("task.claimed", *_SETTLED, "claim")
_clock = time.perf_counter  # the clock the claim loop times its claims with


class DrainTimeout(TimeoutError):
    """Work was still due or running when ``timeout_s`` ran out. The worker
    was stopped (its calls in flight finished); ``outcomes`` is what ran."""

    def __init__(self, message: str, outcomes: list[Outcome]) -> None:
        super().__init__(message)
        self.outcomes = outcomes


class _Watch:
    """This worker's claims and settlements, as they happen."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.worker_id = worker.worker_id
        self.seen: dict[str, None] = {}  # task ids in the order first claimed
        self.unsettled: set[str] = set()
        self.last_change = _clock()
        self.quiet = asyncio.Event()

    def __call__(self, event: Any) -> None:
        if event.worker_id != self.worker_id:
            return
        if event.kind == "claim":
            began = _clock() - event.duration_s
            if (
                event.error is None
                and event.calls == 0
                and not self.unsettled
                and began >= self.last_change
                and self.worker.load().calls_in_flight == 0
            ):
                self.quiet.set()
        elif event.kind == "task.claimed":
            self.seen.setdefault(event.task_id)
            self.unsettled.add(event.task_id)
        else:  # a settlement, or a lease this worker no longer holds
            self.unsettled.discard(event.task_id)
            self.last_change = _clock()


async def drain(worker: Worker, *, timeout_s: float = 30.0) -> list[Outcome]:
    """Run ``worker`` until no task it handles is due, then stop it and return
    one :class:`Outcome` per task it ran, in the order first claimed (each as
    it stands at the end: a task retried within the drain appears once).

    Runs what is due when called, what the handlers enqueue, and retries whose
    backoff has passed before the drain ends (a worker built with
    ``retry_backoff_ms=0`` retries at once: the ``cairnq_worker`` fixture's
    default). Periodic schedules run while it does. Raises
    :class:`DrainTimeout` (the worker stopped, calls in flight finished) if
    work is still due after ``timeout_s``; a task that is not yet due does not
    hold the drain. The worker must not be running already."""
    if worker.load().running:
        raise RuntimeError("drain() runs the worker itself: stop its run() or background() first")
    watch = _Watch(worker)
    unsubscribe = events.subscribe(watch, kinds=_KINDS)
    timed_out = False
    try:
        run = asyncio.ensure_future(worker.run())
        quiet = asyncio.ensure_future(watch.quiet.wait())
        try:
            done, _ = await asyncio.wait(
                (run, quiet), timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
            timed_out = not done
        finally:
            quiet.cancel()
            worker.stop()
            await run  # the calls in flight finish; a run() that failed raises here
    finally:
        unsubscribe()
    outcomes = await _outcomes(worker, watch.seen)
    if timed_out:
        left = sorted(watch.unsettled)
        raise DrainTimeout(
            f"drain: work still due or running after {timeout_s}s "
            f"({len(left)} claimed and unsettled: {', '.join(left[:5]) or 'none'}); "
            "is a handler stuck, or does one keep enqueueing work?",
            outcomes,
        )
    return outcomes


async def _outcomes(worker: Worker, ids: dict[str, None]) -> list[Outcome]:
    found = []
    for task_id in ids:
        task = await worker.store.get(task_id)
        if task is not None:  # (purged meanwhile by a retention sweep)
            found.append(Outcome.of(task))
    return found
