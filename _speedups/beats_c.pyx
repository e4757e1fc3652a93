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
    cdef tuple pair
    for row in rows:
        pair = row if type(row) is tuple else tuple(row)
        if len(pair) < 2:
            raise IndexError("tuple index out of range")  # as the twin's row[1] would
        out[<object>PyTuple_GET_ITEM(pair, 0)] = <object>PyTuple_GET_ITEM(pair, 1) is not None
    return out
