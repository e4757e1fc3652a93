"""The worker: claims tasks and runs their handlers. See ``worker.py``."""

from cairnq._distribution import refuse_unless_ours

# Named like a module of the reference SDK: refuse under its package (docs/install.md).
refuse_unless_ours("cairnq/worker/")

from cairnq._backoff import (
    DEFAULT_RETRY_BACKOFF_MAX_MS,
    DEFAULT_RETRY_BACKOFF_MS,
    fail_delay_ms,
    retry_delay_ms,
)
from cairnq.worker.registry import Handler
from cairnq.worker.worker import CLAIM_ERROR_BACKOFF_S, OnError, Worker, WorkerLoad

from typing import Literal

# 0.15.1's two phases, and ours: a store that survived an error ("store"),
# a periodic schedule's enqueue ("periodic"), a job run beside the claim loop ("beside").
ErrorPhase = Literal["claim", "execute", "store", "periodic", "beside"]

__all__ = [
    "Worker",
    "WorkerLoad",
    "Handler",
    "ErrorPhase",
    "OnError",
    "CLAIM_ERROR_BACKOFF_S",
    "retry_delay_ms",
    "fail_delay_ms",
    "DEFAULT_RETRY_BACKOFF_MS",
    "DEFAULT_RETRY_BACKOFF_MAX_MS",
]
