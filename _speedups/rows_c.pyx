# cython: language_level=3, boundscheck=False, wraparound=False
"""Row decoding, compiled: database rows -> Task objects. Twin of ``rows.py``.

The hot path of every claim and every read: 23 columns per row, four of them
JSON. The win over the twin is building the Task's instance dict directly (no
23-argument __init__, no per-field setattr) and reading the row through the
tuple C API.
"""

from cpython.dict cimport PyDict_New, PyDict_SetItem
from cpython.object cimport PyObject_SetAttr
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE

from cairnq._speedups.jsoncodec_c import loads as _loads
from cairnq.models import Task as _Task

cdef object _new = object.__new__
cdef object _setattr = object.__setattr__
cdef tuple _NAMES = (
    "id", "name", "queue", "status", "payload", "result", "error", "metadata",
    "progress", "message", "attempt", "max_attempts", "priority", "worker_id",
    "lease_until_ms", "run_at_ms", "cancel_requested_at_ms", "parent_id", "root_id",
    "correlation_id", "created_at_ms", "updated_at_ms", "completed_at_ms",
)
# Kind of each column: 0 plain, 1 JSON, 2 epoch-ms bigint, 3 real.
cdef int _KINDS[23]
_KINDS[:] = [0, 0, 0, 0, 1, 1, 1, 1, 3, 0, 0, 0, 0, 0, 2, 2, 2, 0, 0, 0, 2, 2, 2]
# Columns in the Task's field order (metadata moves up beside payload), so the
# instance dict is laid out exactly as the dataclass __init__ would lay it out.
cdef Py_ssize_t _ORDER[23]
_ORDER[:] = [0, 1, 2, 3, 4, 7, 5, 6, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22]
cdef object _MS_COLUMNS = (
    "lease_until_ms", "run_at_ms", "cancel_requested_at_ms",
    "created_at_ms", "updated_at_ms", "completed_at_ms",
)
cdef object _FIELDS = tuple(_Task.__dataclass_fields__)
cdef object _EMPTY_OBJECT = "{}"


cdef inline object _json(object value, bint json_is_text):
    if value is None or not json_is_text:
        return value
    if value == _EMPTY_OBJECT:  # metadata's default; skip the parser
        return {}
    return _loads(value)


cdef inline object _ms(object value):
    if value is None or type(value) is int:
        return value
    return int(value)


cdef inline object _real(object value):
    # SQLite's RETURNING hands back a whole-valued REAL as an int (1 for 1.0).
    if value is None or type(value) is float:
        return value
    return float(value)


cdef object _decode(object row, bint json_is_text):
    cdef dict fields = PyDict_New()
    cdef Py_ssize_t j, i
    cdef object value
    cdef int kind
    if type(row) is not tuple:
        row = tuple(row)  # lists, driver row types: one copy, then the fast path
    if PyTuple_GET_SIZE(row) < 23:
        raise IndexError("tuple index out of range")  # as the twin's row[i] would
    for j in range(23):
        i = _ORDER[j]
        value = <object>PyTuple_GET_ITEM(row, i)
        kind = _KINDS[i]
        if kind == 1:
            value = _json(value, json_is_text)
        elif kind == 2:
            value = _ms(value)
        elif kind == 3:
            value = _real(value)
        PyDict_SetItem(fields, <object>PyTuple_GET_ITEM(_NAMES, i), value)
    task = _new(_Task)
    _setattr(task, "__dict__", fields)
    return task


def decode_task(row, bint json_is_text=True):
    """One full cairnq_tasks row, columns in table order, to a Task."""
    return _decode(row, json_is_text)


def decode_tasks(rows, bint json_is_text=True):
    cdef list out = []
    for row in rows:
        out.append(_decode(row, json_is_text))
    return out


def decode_mapping(row, bint json_is_text=True):
    """A row given as a mapping (any column order; unknown columns dropped)."""
    cdef dict fields = {}
    for name in _FIELDS:
        if name in row:
            fields[name] = row[name]
    for name in ("payload", "result", "error", "metadata"):
        if name in fields:
            fields[name] = _json(fields[name], json_is_text)
    for name in _MS_COLUMNS:
        if name in fields:
            fields[name] = _ms(fields[name])
    if "progress" in fields:
        fields["progress"] = _real(fields["progress"])
    return _Task(**fields)
