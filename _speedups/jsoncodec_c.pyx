# cython: language_level=3, boundscheck=False, wraparound=False
"""Strict JSON, compiled. Twin of ``jsoncodec.py``.

Output is byte-identical to the stdlib encoder the reference SDK uses. orjson
writes the document when a walk over the value proves the two agree on it:
exact builtin types only, integers within 64 bits, floats whose repr orjson
spells the same way, nesting well inside orjson's limit. orjson writes UTF-8
where the stdlib writes \\uXXXX escapes for everything from U+007F up; that
difference is fixed afterwards by escaping the finished text. Anything else
(subclasses, NaN, sets, lone surrogates, deep nesting) goes to the stdlib
path, which raises SerializationError for what is not strict JSON.
"""

from cpython.unicode cimport PyUnicode_GET_LENGTH, PyUnicode_READ_CHAR

import json

import orjson

from cairnq._speedups.jsoncodec import dumps as _stdlib_dumps
from cairnq._speedups.jsoncodec import loads as _pure_loads

cdef object _orjson_dumps = orjson.dumps
cdef object _orjson_loads = orjson.loads
cdef object _stdlib_loads = json.loads
cdef object _JSONEncodeError = orjson.JSONEncodeError
cdef object _JSONDecodeError = orjson.JSONDecodeError
cdef int _MAX_DEPTH = 200
cdef object _INT_MIN = -(2 ** 63)
cdef object _INT_MAX = 2 ** 64 - 1
cdef double _FIXED_MIN = 1e-4  # below this the stdlib pads exponents: 1e-05 vs 1e-5
cdef str _HEX = "0123456789abcdef"


cdef bint _agrees(object value, int depth) except -1:
    """True when orjson writes the same document as the stdlib for value."""
    cdef type t = type(value)
    cdef double f
    if t is str or value is None or t is bool:
        return True
    if t is int:
        return _INT_MIN <= value <= _INT_MAX
    if t is float:
        f = value
        if f != f or f == float("inf") or f == float("-inf"):
            return False
        return f == 0.0 or f >= _FIXED_MIN or f <= -_FIXED_MIN
    if depth >= _MAX_DEPTH:
        return False
    if t is dict:
        for k, v in (<dict>value).items():
            if type(k) is not str or not _agrees(v, depth + 1):
                return False
        return True
    if t is list:
        for v in <list>value:
            if not _agrees(v, depth + 1):
                return False
        return True
    if t is tuple:
        for v in <tuple>value:
            if not _agrees(v, depth + 1):
                return False
        return True
    return False


cdef str _escape_non_ascii(str text):
    """Write every code point from U+007F up as \\uXXXX (surrogate pairs above U+FFFF)."""
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text)
    cdef Py_ssize_t i
    cdef Py_UCS4 ch
    cdef unsigned int c, hi, lo
    parts = []
    cdef Py_ssize_t start = 0
    for i in range(n):
        ch = PyUnicode_READ_CHAR(text, i)
        c = <unsigned int>ch  # arithmetic on Py_UCS4 itself would be str arithmetic
        if c < 0x7F:
            continue
        if i > start:
            parts.append(text[start:i])
        if c > 0xFFFF:
            hi = 0xD800 + ((c - 0x10000) >> 10)
            lo = 0xDC00 + ((c - 0x10000) & 0x3FF)
            parts.append(_u(hi))
            parts.append(_u(lo))
        else:
            parts.append(_u(c))
        start = i + 1
    if start < n:
        parts.append(text[start:])
    return "".join(parts)


cdef inline str _u(unsigned int c):
    return "\\u" + _HEX[(c >> 12) & 15] + _HEX[(c >> 8) & 15] + _HEX[(c >> 4) & 15] + _HEX[c & 15]


cdef enum:
    _RUN = 19  # digits in a row that orjson might not read exactly


cdef inline bint _digit_at(str text, Py_ssize_t i):
    cdef Py_UCS4 ch = PyUnicode_READ_CHAR(text, i)
    return ch >= 48 and ch <= 57


cdef bint _has_long_digit_run(str text):
    """A run of 19+ ASCII digits: a number orjson might not read exactly.

    Only every 19th character is read (each 19 past the last one known to
    be no digit), and any 19 positions in a row include one of them; where
    one is a digit, its whole run is measured and the stride goes on from
    the run's end. About one read in 19 on ordinary text, not one a
    character."""
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text)
    cdef Py_ssize_t i = _RUN - 1, lo, hi
    while i < n:
        if not _digit_at(text, i):
            i += _RUN
            continue
        lo = i
        while lo > 0 and _digit_at(text, lo - 1):
            lo -= 1
        hi = i + 1
        while hi < n and _digit_at(text, hi):
            hi += 1
        if hi - lo >= _RUN:
            return True
        i = hi + _RUN  # text[hi] is no digit: a longer run starts after it
    return False


def loads(text):
    """JSON text to a value, exactly as the stdlib reads it (see jsoncodec.py)."""
    if type(text) is not str:
        return _pure_loads(text)
    if _has_long_digit_run(<str>text):
        return _stdlib_loads(text)
    try:
        return _orjson_loads(text)
    except _JSONDecodeError:
        return _stdlib_loads(text)


def dumps(value):
    """Strict compact JSON text, identical to the stdlib encoder's."""
    if not _agrees(value, 0):
        return _stdlib_dumps(value)
    try:
        raw = _orjson_dumps(value)
    except _JSONEncodeError:  # e.g. a lone surrogate, which only the stdlib writes
        return _stdlib_dumps(value)
    cdef bytes data = raw
    cdef str text = data.decode("utf-8")
    if PyUnicode_GET_LENGTH(text) != len(data) or b"\x7f" in data:
        return _escape_non_ascii(text)
    return text
