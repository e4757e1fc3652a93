"""ULID generation, pure Python. Twin of ``ids_c.pyx``.

A ULID is 48 bits of epoch milliseconds followed by 80 bits from the OS
CSPRNG, written as 26 Crockford base32 digits, most significant first (130
bits, the top two always zero), so ids sort by creation time.
"""

from __future__ import annotations

import os
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# 130 bits = 13 groups of 10 bits; a table of the 1024 digit pairs encodes one
# group per lookup.
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]
_urandom = os.urandom
_time = time.time


def new_ulid(ts_ms: int | None = None) -> str:
    return encode_ulid(int(_time() * 1000) if ts_ms is None else ts_ms, _urandom(10))


def encode_ulid(ts: int, rnd: bytes) -> str:
    """The 26 digits for a millisecond timestamp and 10 random bytes."""
    if not 0 <= ts < 1 << 48:
        raise ValueError(f"ULID timestamp out of range: {ts}")
    if len(rnd) != 10:
        raise ValueError("a ULID takes exactly 10 random bytes")
    value = (ts << 80) | int.from_bytes(rnd, "big")
    pairs = _PAIRS
    return "".join([pairs[(value >> shift) & 0x3FF] for shift in range(120, -1, -10)])
