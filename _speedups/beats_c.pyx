# cython: language_level=3, boundscheck=False, wraparound=False
"""Batch heartbeat marshalling, compiled. Twin of ``beats.py``.

``encode_ids``: task ids are short plain ASCII, so the JSON array is written
straight into one preallocated string; anything that would need an escape
goes to the general encoder (with the twin's exact output).

``decode_beats`` is the twin's own function: building the result dict is all
its cost, and a compiled loop measured under 2x faster (bench/RESULTS.md), so
it is not kept as a kernel.
"""

from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from libc.string cimport memcpy

from cairnq._speedups.beats import decode_beats  # not compiled: see the docstring
from cairnq._speedups.jsoncodec_c import dumps as _dumps

cdef extern from "Python.h":
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    bint PyUnicode_IS_ASCII(object o)
    Py_ssize_t PyUnicode_GET_LENGTH(object o)
    unsigned char* PyUnicode_1BYTE_DATA(object o)

# Bytes that may appear in a JSON string as they are: printable ASCII but " and \.
cdef unsigned char _PLAIN[128]
for _c in range(128):
    _PLAIN[_c] = 0x20 <= _c < 0x7F and _c != 0x22 and _c != 0x5C


def encode_ids(ids):
    """A JSON array of strings."""
    cdef list items = ids if type(ids) is list else list(ids)
    cdef Py_ssize_t n = PyList_GET_SIZE(items)
    cdef Py_ssize_t i, j, length, total = 2 + (n - 1 if n > 0 else 0)
    cdef object item
    cdef unsigned char* src
    for i in range(n):
        item = <object>PyList_GET_ITEM(items, i)
        if type(item) is not str or not PyUnicode_IS_ASCII(item):
            return _dumps(items)
        length = PyUnicode_GET_LENGTH(item)
        src = PyUnicode_1BYTE_DATA(item)
        for j in range(length):
            if not _PLAIN[src[j]]:  # needs an escape: the general encoder
                return _dumps(items)
        total += length + 2
    out = PyUnicode_New(total, 127)
    cdef unsigned char* dst = PyUnicode_1BYTE_DATA(out)
    cdef Py_ssize_t pos = 1
    dst[0] = 0x5B  # [
    for i in range(n):
        if i:
            dst[pos] = 0x2C  # ,
            pos += 1
        item = <object>PyList_GET_ITEM(items, i)
        length = PyUnicode_GET_LENGTH(item)
        dst[pos] = 0x22
        memcpy(dst + pos + 1, PyUnicode_1BYTE_DATA(item), length)
        dst[pos + 1 + length] = 0x22
        pos += length + 2
    dst[pos] = 0x5D  # ]
    return out
