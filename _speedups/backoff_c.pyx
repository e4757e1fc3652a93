# cython: language_level=3
"""Retry backoff with equal jitter, compiled. Twin of ``backoff.py``."""

import random

cdef object _random = random.random


cdef long long _LLONG_MAX = 0x7FFFFFFFFFFFFFFF


def retry_delay_ms(long long attempt, long long base_ms, long long max_ms, rand=_random):
    cdef long long window, floor, exponent
    if base_ms <= 0:
        return 0
    exponent = attempt - 1 if attempt > 1 else 0
    # A doubled window that overflows 64 bits is past any cap: the cap wins.
    if exponent >= 63 or base_ms > (_LLONG_MAX >> exponent):
        window = max_ms
    else:
        window = base_ms << exponent
        if window > max_ms:
            window = max_ms
    floor = window // 2  # floor division, as in Python (cdivision is off)
    return floor + <long long>(<double>rand() * <double>(window - floor))
