# cython: language_level=3, boundscheck=False, wraparound=False
"""ULID generation, compiled. Twin of ``ids.py``: same layout, same sources
(``time.time()`` and ``os.urandom``), the base32 encoding done in C on two
64-bit words."""

from libc.stdint cimport uint64_t
from cpython.bytes cimport PyBytes_AS_STRING
from cpython.unicode cimport PyUnicode_DecodeASCII

import os
import time

from cairnq._speedups.ids import encode_ulid as _twin

cdef object _urandom = os.urandom
cdef object _time = time.time
cdef const char* _ALPHABET = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_ulid(ts_ms=None):
    if ts_ms is None:
        return encode_ulid(<long long>(<double>_time() * 1000.0), _urandom(10))
    return encode_ulid(ts_ms, _urandom(10))


def encode_ulid(ts, rnd):
    """The 26 digits for a millisecond timestamp and 10 random bytes."""
    if not (type(ts) is int and 0 <= ts < (1 << 48) and type(rnd) is bytes and len(<bytes>rnd) == 10):
        return _twin(ts, rnd)  # other types, or out of range: the twin's answer or error
    return _encode(ts, rnd)


cdef str _encode(long long ts, bytes rnd):
    cdef const unsigned char* r = <const unsigned char*>PyBytes_AS_STRING(rnd)
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
