# cython: language_level=3, boundscheck=False, wraparound=False
"""Row decoding, compiled: database rows -> Task objects. Twin of ``rows.py``.

The hot path of every claim and every read: 23 columns per row, four of them
JSON (the layout: ``models.TASK_LAYOUT``, read into C tables at import). The
win over the twin is building the Task's instance dict directly (no
23-argument __init__, no per-field setattr) and reading the row through the
tuple C API.

A Task's dict starts as a copy of one made by the dataclass's own
``__init__`` (``_TEMPLATE``), whose values are then each replaced: such a
dict shares its keys with every Task's, so the copy allocates only the
values (a few hundred bytes, from Python's small-object allocator) instead
of a whole table of its own (about 1 KB, from malloc), and it is laid out
as ``__init__`` would lay it out. The Task itself is allocated bare
(``PyType_GenericAlloc``) and handed the dict (``PyObject_GenericSetDict``):
``object.__new__`` would first give it room for inline values, freed again
as the dict replaces them. Both are public C API; a Task made here is one
``__init__`` could have made (``tests/kernels/test_kernel_rows.py``).
"""

from cpython.dict cimport PyDict_Copy, PyDict_SetItem
from cpython.object cimport PyTypeObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM

cdef extern from "Python.h":
    object PyType_GenericAlloc(PyTypeObject *type, Py_ssize_t nitems)
    int PyObject_GenericSetDict(object obj, object value, void *context) except -1

from cairnq._speedups.jsoncodec_c import loads as _loads
from cairnq.models import EPOCH_MS_COLUMNS, JSON_COLUMNS, TASK_COLUMN_KINDS, TASK_COLUMNS
from cairnq.models import KIND_EPOCH_MS, KIND_JSON, KIND_REAL
from cairnq.models import Task as _Task


# The tables the decoder reads, built at import from models.TASK_LAYOUT (the
# one written copy of the row layout).
cdef enum:
    _MAX_COLUMNS = 64
cdef tuple _NAMES = tuple(TASK_COLUMNS)
cdef Py_ssize_t _N = len(_NAMES)
cdef int _JSON = KIND_JSON
cdef int _EPOCH_MS = KIND_EPOCH_MS
cdef int _REAL = KIND_REAL
# Kind of each column, in table order.
cdef int _KINDS[_MAX_COLUMNS]
# Columns in the Task's field order (metadata moves up beside payload), so the
# instance dict is laid out exactly as the dataclass __init__ would lay it out.
cdef Py_ssize_t _ORDER[_MAX_COLUMNS]
cdef object _FIELDS = tuple(_Task.__dataclass_fields__)
cdef object _MS_COLUMNS = tuple(EPOCH_MS_COLUMNS)
cdef object _JSON_COLUMNS = tuple(JSON_COLUMNS)
cdef object _EMPTY_OBJECT = "{}"


cdef int _build_tables() except -1:
    # A RuntimeError, not an ImportError: a layout the kernel cannot hold must
    # fail the import loudly, never fall back to the pure twin unnoticed.
    cdef Py_ssize_t i
    if _N > _MAX_COLUMNS or sorted(_FIELDS) != sorted(_NAMES):
        raise RuntimeError("models.TASK_LAYOUT does not match the Task fields (or is too long)")
    for i in range(_N):
        _KINDS[i] = TASK_COLUMN_KINDS[i]
        _ORDER[i] = _NAMES.index(_FIELDS[i])
    return 0


_build_tables()


def _template():
    """A Task's instance dict as its dataclass ``__init__`` makes it: every
    field, in field order (the values are placeholders, each replaced in
    every copy)."""
    return _Task(*[None] * len(_FIELDS)).__dict__


cdef dict _TEMPLATE = _template()


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
    cdef dict fields
    cdef Py_ssize_t j, i
    cdef object value
    cdef int kind
    if type(row) is not tuple:
        row = tuple(row)  # lists, driver row types: one copy, then the fast path
    if PyTuple_GET_SIZE(row) < _N:
        raise IndexError("tuple index out of range")  # as the twin's row[i] would
    fields = PyDict_Copy(_TEMPLATE)  # (every field's value is replaced below)
    for j in range(_N):
        i = _ORDER[j]
        value = <object>PyTuple_GET_ITEM(row, i)
        kind = _KINDS[i]
        if kind == _JSON:
            value = _json(value, json_is_text)
        elif kind == _EPOCH_MS:
            value = _ms(value)
        elif kind == _REAL:
            value = _real(value)
        PyDict_SetItem(fields, <object>PyTuple_GET_ITEM(_NAMES, i), value)
    task = PyType_GenericAlloc(<PyTypeObject *>_Task, 0)
    PyObject_GenericSetDict(task, fields, NULL)
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
    for name in _JSON_COLUMNS:
        if name in fields:
            fields[name] = _json(fields[name], json_is_text)
    for name in _MS_COLUMNS:
        if name in fields:
            fields[name] = _ms(fields[name])
    if "progress" in fields:
        fields["progress"] = _real(fields["progress"])
    return _Task(**fields)


cdef inline object _set_value(tuple template, Py_ssize_t i, object source, bound):
    """Column i's value where a statement sets it: ``bound[source]`` for a
    parameter, else the constant ``template[i]`` (``source`` None)."""
    if source is None:
        if i >= PyTuple_GET_SIZE(template):
            raise IndexError("tuple index out of range")  # as the twin's template[i] would
        return <object>PyTuple_GET_ITEM(template, i)
    return bound[source]


def echo_row(tuple template, tuple sources, bound):
    """The row an insert wrote, from its bound values: column i is
    ``bound[sources[i]]`` where ``sources[i]`` names a parameter, else the
    constant ``template[i]`` (``sources[i]`` None). KeyError for a missing
    parameter. (See ``cairnq/store/sqlite/echo.py``.)"""
    cdef Py_ssize_t n = PyTuple_GET_SIZE(sources)
    cdef Py_ssize_t i
    cdef object value
    cdef tuple out = PyTuple_New(n)
    for i in range(n):
        value = _set_value(template, i, <object>PyTuple_GET_ITEM(sources, i), bound)
        Py_INCREF(value)  # (SET_ITEM takes a reference it was given)
        PyTuple_SET_ITEM(out, i, value)
    return out


def fill_rows(tuple template, tuple sources, bound, rows):
    """Whole rows from the columns a statement returned and the values it
    set: column i of each row is ``row[sources[i]]`` where ``sources[i]`` is
    an int (a returned column), ``bound[sources[i]]`` where it names a
    parameter, else the constant ``template[i]`` (``sources[i]`` None).
    KeyError for a missing parameter, IndexError for a row too short.
    (See ``cairnq/store/sqlite/echo.py``.)"""
    cdef Py_ssize_t n = PyTuple_GET_SIZE(sources)
    cdef Py_ssize_t i, width, at
    cdef object source, value
    cdef tuple known = PyTuple_New(n)  # the set values; None where a column is returned
    cdef tuple whole
    cdef list out = []
    for i in range(n):
        source = <object>PyTuple_GET_ITEM(sources, i)
        value = None if type(source) is int else _set_value(template, i, source, bound)
        Py_INCREF(value)  # (SET_ITEM takes a reference it was given)
        PyTuple_SET_ITEM(known, i, value)
    for row in rows:
        if type(row) is not tuple:
            row = tuple(row)
        width = PyTuple_GET_SIZE(row)
        whole = PyTuple_New(n)
        for i in range(n):
            source = <object>PyTuple_GET_ITEM(sources, i)
            if type(source) is int:
                at = <Py_ssize_t>source
                if at < 0:
                    at += width  # (from the end, as the twin's row[source])
                if at >= width or at < 0:
                    raise IndexError("tuple index out of range")  # as the twin's row[source] would
                value = <object>PyTuple_GET_ITEM(row, at)
            else:
                value = <object>PyTuple_GET_ITEM(known, i)
            Py_INCREF(value)
            PyTuple_SET_ITEM(whole, i, value)
        out.append(whole)
    return out
