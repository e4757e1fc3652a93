# cython: language_level=3, boundscheck=False, wraparound=False
"""Batch heartbeat marshalling, compiled. Twin of ``beats.py``."""

from cpython.tuple cimport PyTuple_GET_ITEM

from cairnq._speedups.jsoncodec_c import dumps as _dumps


def encode_ids(ids):
    """A JSON array of strings."""
    cdef list items = list(ids)
    for item in items:
        if type(item) is not str:
            return _dumps(items)
        # Task ids are plain ASCII; anything needing an escape takes the general path.
        if not (<str>item).isascii() or '"' in item or "\\" in item or not (<str>item).isprintable():
            return _dumps(items)
    if not items:
        return "[]"
    return '["' + '","'.join(items) + '"]'


def decode_beats(rows):
    """``{task_id: cancel_requested}`` for the renewed rows."""
    cdef dict out = {}
    for row in rows:
        if type(row) is tuple and len(<tuple>row) == 2:
            out[<object>PyTuple_GET_ITEM(row, 0)] = <object>PyTuple_GET_ITEM(row, 1) is not None
        else:
            out[row[0]] = row[1] is not None
    return out
