"""``/healthz``: is this worker process doing its job?

Healthy when all of these hold:

* the worker is running (between connecting its store and its drain);
* the store is reachable: the recorder's last ``stats()`` sample succeeded,
  and not longer ago than two sample intervals plus its timeout;
* the claim loop is alive: no claim round trip has been under way for longer
  than two poll intervals.

The check reads what the worker and the sampler already know: a scrape never
touches the database.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from cairnq.observability.recorder import Recorder
    from cairnq.worker import Worker

__all__ = ["Health", "check"]


class Health(NamedTuple):
    ok: bool
    reason: str  # "ok", or why not


def check(worker: "Worker", recorder: "Recorder") -> Health:
    load = worker.load()
    if not load.running:
        return Health(False, "worker not running")
    sampled_at, error = recorder.sampled_at, recorder.sample_error
    if error is not None:
        return Health(False, f"store unreachable: {error}")
    if sampled_at is None:
        return Health(False, "store not checked yet")
    interval = recorder.sample_interval_s
    age = time.monotonic() - sampled_at
    if age > 2 * interval + max(1.0, interval):
        return Health(False, f"store check stale: last success {age:.1f}s ago")
    limit_s = 2 * load.poll_interval_ms / 1000
    if load.claim_busy_s > limit_s:
        return Health(
            False, f"claim loop stuck: a claim has been under way for {load.claim_busy_s:.1f}s"
        )
    return Health(True, "ok")
