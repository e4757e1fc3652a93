"""The dashboard's writes: cancel, retry and purge, each one ordinary client
operation, each logged on ``cairnq.dashboard.audit`` (INFO) with who asked,
from where, and what came of it."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Optional

from cairnq.client import CairnQ
from cairnq.models import TERMINAL, Task, TaskStatus

__all__ = ["Actor", "Outcome", "cancel", "retry", "purge", "PURGE_BATCH", "audit"]

audit = logging.getLogger("cairnq.dashboard.audit")
PURGE_BATCH = 1_000


@dataclass(frozen=True)
class Actor:
    """Who acted: the basic-auth user, "token", or "local" (no auth); and
    the client's address."""

    who: str
    address: str


@dataclass(frozen=True)
class Outcome:
    flash: str  # a code the pages map to a fixed text
    task: Optional[Task] = None
    count: int = 0


def _log(actor: Actor, action: str, outcome: str) -> None:
    audit.info(
        "%s by %s from %s: %s",
        action,
        actor.who,
        actor.address,
        outcome,
        extra={"actor": actor.who, "address": actor.address, "action": action},
    )


async def cancel(client: CairnQ, actor: Actor, task_id: str) -> Outcome:
    task = await client.cancel(task_id)
    if task is None:
        _log(actor, f"cancel {task_id}", "not cancelable (missing or finished)")
        return Outcome("cancel_refused")
    if task.status == "canceled":
        _log(actor, f"cancel {task_id}", "canceled")
        return Outcome("canceled", task)
    _log(actor, f"cancel {task_id}", f"cancel requested ({task.status})")
    return Outcome("cancel_requested", task)


async def retry(client: CairnQ, actor: Actor, task_id: str, *, reset_attempt: bool) -> Outcome:
    task = await client.retry(task_id, reset_attempt=reset_attempt)
    what = f"retry {task_id} (reset_attempt={reset_attempt})"
    if task is None:
        _log(actor, what, "not retryable (missing, or not failed or canceled)")
        return Outcome("retry_refused")
    _log(actor, what, f"queued, attempt {task.attempt}/{task.max_attempts}")
    return Outcome("retried", task)


async def purge(
    client: CairnQ,
    actor: Actor,
    *,
    older_than_ms: int,
    queue: Optional[str],
    status: Optional[TaskStatus],
    name: Optional[str],
) -> Outcome:
    """Delete matching finished tasks in batches until a batch comes back short."""
    if status is not None and status not in TERMINAL:
        raise ValueError("only finished tasks (succeeded, failed, canceled) can be purged")
    what = f"purge older_than_ms={older_than_ms} queue={queue!r} status={status!r} name={name!r}"
    deleted = 0
    try:
        while True:
            ids = await client.purge(
                older_than_ms=older_than_ms,
                queue=queue,
                status=status,
                name=name,
                limit=PURGE_BATCH,
            )
            deleted += len(ids)
            if len(ids) < PURGE_BATCH:
                break
    except Exception:
        _log(actor, what, f"failed after deleting {deleted}")
        raise
    _log(actor, what, f"deleted {deleted}")
    return Outcome("purged", count=deleted)
