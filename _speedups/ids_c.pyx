# cython: language_level=3, boundscheck=False, wraparound=False
"""ULID generation, compiled. Twin of ``ids.py``: same layout, same sources
(``time.time()`` and ``os.urandom``), the base32 encoding done in C on two
64-bit words.

The random part comes from a pool of ``os.urandom`` bytes, refilled every
``_POOL_IDS`` ids: the system call cost more than the rest of an id (276
against about 120 ns). Taking 10 bytes from the pool runs without letting
another thread in (no Python code between reading the offset and moving
it), so no two ids share their random bytes; a refill, which may let
another thread in, takes from its own fresh pool. A child process made
by ``os.fork`` starts with an empty pool (``os.register_at_fork``): it
must never draw the bytes its parent draws next."""

from libc.stdint cimport uint64_t
from cpython.bytes cimport PyBytes_AS_STRING
from cpython.unicode cimport PyUnicode_DecodeASCII

import os
import time

from cairnq._speedups.ids import encode_ulid as _twin

cdef object _urandom = os.urandom
cdef object _time = time.time
cdef const char* _ALPHABET = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ"

cdef enum:
    _RANDOM_BYTES = 10
cdef Py_ssize_t _POOL_IDS = 256
cdef Py_ssize_t _POOL_BYTES = _POOL_IDS * _RANDOM_BYTES
cdef bytes _pool = b""
cdef Py_ssize_t _taken = _POOL_BYTES  # bytes of the pool used up: empty at first


def _forget_pool():
    """Empty the pool (a forked child's: its parent draws these bytes next)."""
    global _taken
    _taken = _POOL_BYTES


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


cdef const unsigned char* _random_bytes() except NULL:
    """10 bytes of the pool no other id has, refilling it first if need be."""
    global _pool, _taken
    cdef Py_ssize_t at = _taken
    cdef bytes fresh
    if at + _RANDOM_BYTES > _POOL_BYTES:
        fresh = _urandom(_POOL_BYTES)  # (may let another thread run: it refills its own)
        _pool = fresh
        at = 0
    _taken = at + _RANDOM_BYTES
    return <const unsigned char*>PyBytes_AS_STRING(_pool) + at


def new_ulid(ts_ms=None):
    cdef long long ts
    if ts_ms is None:
        ts = <long long>(<double>_time() * 1000.0)
    elif type(ts_ms) is int and 0 <= ts_ms < (1 << 48):
        ts = ts_ms
    else:
        return _twin(ts_ms, _urandom(_RANDOM_BYTES))  # the twin's answer or error
    return _encode_raw(ts, _random_bytes())


def encode_ulid(ts, rnd):
    """The 26 digits for a millisecond timestamp and 10 random bytes."""
    if not (type(ts) is int and 0 <= ts < (1 << 48) and type(rnd) is bytes and len(<bytes>rnd) == 10):
        return _twin(ts, rnd)  # other types, or out of range: the twin's answer or error
    return _encode(ts, rnd)


cdef str _encode(long long ts, bytes rnd):
    return _encode_raw(ts, <const unsigned char*>PyBytes_AS_STRING(rnd))


cdef str _encode_raw(long long ts, const unsigned char* r):
    # value = ts (48 bits) . r[0..9] (80 bits) = hi (64 bits) . lo (64 bits)
    cdef uint64_t hi = (<uint64_t>ts << 16) | (<uint64_t>r[0] << 8) | r[1]
    cdef uint64_t lo = 0
    cdef int i
    for i in range(2, 10):
        lo = (lo << 8) | r[i]
    cdef char out[26]
    cdef int shift
    for i in range(26):
        shift = 5 * (25 - i)  # bit offset of digit i within the 130-bit value
        if shift >= 64:
            out[i] = _ALPHABET[(hi >> (shift - 64)) & 31]
        elif shift > 59:  # the digit straddles the two words
            out[i] = _ALPHABET[((lo >> shift) | (hi << (64 - shift))) & 31]
        else:
            out[i] = _ALPHABET[(lo >> shift) & 31]
    return PyUnicode_DecodeASCII(out, 26, NULL)
