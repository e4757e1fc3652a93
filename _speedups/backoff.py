"""Retry backoff with equal jitter, pure Python. Twin of ``backoff_c.pyx``.

The window doubles per attempt up to ``max_ms`` and the delay lands uniformly in
its upper half, ``[window // 2, window)``: jitter keeps a fleet that failed
together from retrying in lockstep, and the floor keeps it from retrying sooner
than half of what plain exponential backoff asks for.
"""

from __future__ import annotations

import random
from typing import Callable

_random = random.random


def retry_delay_ms(
    attempt: int, base_ms: int, max_ms: int, rand: Callable[[], float] = _random
) -> int:
    if base_ms <= 0:
        return 0
    exponent = max(0, attempt - 1)
    # From 2**63 on the doubled window exceeds any 64-bit cap: the cap wins.
    window = max_ms if exponent >= 63 else min(max_ms, base_ms << exponent)
    floor = window // 2
    return floor + int(rand() * (window - floor))
