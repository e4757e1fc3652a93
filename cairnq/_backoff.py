"""Retry backoff shared by the worker and ``ctx.fail`` (the kernel is compiled)."""

from __future__ import annotations

import random
from typing import Callable

from cairnq._speedups import retry_delay_ms as _retry_delay_ms

__all__ = [
    "DEFAULT_RETRY_BACKOFF_MS",
    "DEFAULT_RETRY_BACKOFF_MAX_MS",
    "retry_delay_ms",
    "fail_delay_ms",
]

DEFAULT_RETRY_BACKOFF_MS = 1_000
DEFAULT_RETRY_BACKOFF_MAX_MS = 30_000


def retry_delay_ms(
    attempt: int, *, base_ms: int, max_ms: int, rand: Callable[[], float] = random.random
) -> int:
    """Equal-jitter exponential backoff: uniform in ``[w // 2, w)`` where
    ``w = min(max_ms, base_ms * 2 ** (attempt - 1))``; 0 when ``base_ms <= 0``."""
    return _retry_delay_ms(attempt, base_ms, max_ms, rand)


def fail_delay_ms(
    attempt: int,
    *,
    retryable: bool,
    base_ms: int,
    max_ms: int,
    rand: Callable[[], float] = random.random,
) -> int:
    """The delay a ``fail`` write carries: the backoff, or 0 for a permanent failure."""
    return _retry_delay_ms(attempt, base_ms, max_ms, rand) if retryable else 0
