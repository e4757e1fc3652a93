# cython: language_level=3
"""Retry backoff with equal jitter, compiled. Twin of ``backoff.py``."""

import random

from cairnq._speedups.backoff import retry_delay_ms as _twin

cdef object _random = random.random
cdef long long _LLONG_MAX = 0x7FFFFFFFFFFFFFFF
cdef object _LIMIT = 2 ** 62


def retry_delay_ms(attempt, base_ms, max_ms, rand=_random):
    # The C path takes exact ints of sane size; anything else (floats, ints
    # past 62 bits) gets the twin's exact Python semantics, errors included.
    if not (
        type(attempt) is int and type(base_ms) is int and type(max_ms) is int
        and -_LIMIT < attempt < _LIMIT and -_LIMIT < base_ms < _LIMIT and -_LIMIT < max_ms < _LIMIT
    ):
        return _twin(attempt, base_ms, max_ms, rand)
    return _delay(attempt, base_ms, max_ms, rand)


cdef object _delay(long long attempt, long long base_ms, long long max_ms, object rand):
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
