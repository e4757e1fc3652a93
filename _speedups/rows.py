"""Row decoding, pure Python: database rows -> Task objects.

Twin of ``rows_c.pyx``; both are held to the same test vectors.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from cairnq._speedups.jsoncodec import loads
from cairnq.models import EPOCH_MS_COLUMNS as _MS_COLUMNS
from cairnq.models import JSON_COLUMNS as _JSON_COLUMNS
from cairnq.models import Task

_new = object.__new__
_setattr = object.__setattr__


def _json(value: Any, json_is_text: bool) -> Any:
    if value is None or not json_is_text:
        return value
    return loads(value)


def _ms(value: Any) -> Any:
    # Some drivers hand bigint back as str; None stays None.
    if value is None or type(value) is int:
        return value
    return int(value)


def _real(value: Any) -> Any:
    # SQLite's RETURNING hands back a whole-valued REAL as an int (1 for 1.0).
    if value is None or type(value) is float:
        return value
    return float(value)


def decode_task(row: Any, json_is_text: bool = True) -> Task:
    """One full cairnq_tasks row, columns in table order, to a Task.

    The column indices and kinds below are ``models.TASK_LAYOUT`` written
    out (a dict display is the fastest pure-Python build);
    tests/store/test_row_layout.py holds them to it, column by column.
    """
    task = _new(Task)
    _setattr(
        task,
        "__dict__",
        {
            "id": row[0],
            "name": row[1],
            "queue": row[2],
            "status": row[3],
            "payload": _json(row[4], json_is_text),
            "metadata": _json(row[7], json_is_text),
            "result": _json(row[5], json_is_text),
            "error": _json(row[6], json_is_text),
            "progress": _real(row[8]),
            "message": row[9],
            "attempt": row[10],
            "max_attempts": row[11],
            "priority": row[12],
            "worker_id": row[13],
            "lease_until_ms": _ms(row[14]),
            "run_at_ms": _ms(row[15]),
            "cancel_requested_at_ms": _ms(row[16]),
            "parent_id": row[17],
            "root_id": row[18],
            "correlation_id": row[19],
            "created_at_ms": _ms(row[20]),
            "updated_at_ms": _ms(row[21]),
            "completed_at_ms": _ms(row[22]),
        },
    )
    return task


def decode_tasks(rows: Iterable[Any], json_is_text: bool = True) -> list[Task]:
    return [decode_task(row, json_is_text) for row in rows]


def decode_mapping(row: Mapping[str, Any], json_is_text: bool = True) -> Task:
    """A row given as a mapping (any column order; unknown columns dropped)."""
    fields = {}
    for name in Task.__dataclass_fields__:
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
    return Task(**fields)


def echo_row(template: tuple[Any, ...], sources: tuple[Any, ...], bound: Mapping[str, Any]) -> tuple[Any, ...]:
    """The row an insert wrote, from its bound values: column i is
    ``bound[sources[i]]`` where ``sources[i]`` names a parameter, else the
    constant ``template[i]`` (``sources[i]`` None). KeyError for a missing
    parameter. (See ``cairnq/store/sqlite/echo.py``.)"""
    return tuple([template[i] if source is None else bound[source] for i, source in enumerate(sources)])


def fill_rows(
    template: tuple[Any, ...], sources: tuple[Any, ...], bound: Mapping[str, Any], rows: Iterable[Any]
) -> list[tuple[Any, ...]]:
    """Whole rows from the columns a statement returned and the values it
    set: column i of each row is ``row[sources[i]]`` where ``sources[i]`` is
    an int (a returned column), ``bound[sources[i]]`` where it names a
    parameter, else the constant ``template[i]`` (``sources[i]`` None).
    KeyError for a missing parameter, IndexError for a row too short.
    (See ``cairnq/store/sqlite/echo.py``.)"""
    known = [
        None if type(source) is int else template[i] if source is None else bound[source]
        for i, source in enumerate(sources)
    ]
    returned = [(i, source) for i, source in enumerate(sources) if type(source) is int]
    out = []
    for row in rows:
        whole = known.copy()
        for i, source in returned:
            whole[i] = row[source]
        out.append(tuple(whole))
    return out
