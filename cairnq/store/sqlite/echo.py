"""Rows rebuilt from what the store bound, instead of returned by SQLite.

* ``-- cairnq: echo-row ...`` (an insert): the statement writes a whole
  ``cairnq_tasks`` row from its parameters and constants; asking SQLite for
  RETURNING would cost more than the insert itself when writes are batched.
  The annotation says which parameter or constant fills each column;
  ``row_echo`` lays them out in table order, as ``select *`` would return
  them (the ``echo_row`` kernel).
* ``-- cairnq: fill-row ...`` (a claim): the update returns only the columns
  whose values the store does not know; the ones it sets (status, worker,
  lease, clock) or selects by (one queue, one name) are filled back in by
  ``row_filler`` (the ``fill_rows`` kernel). Every value SQLite copies into
  a RETURNING row costs it a record field written and read back, and the
  driver a Python object: for those six columns, about 2.5 % of the
  instructions of a task a worker drains (``python bench/instructions.py
  --ops worker``, before and after).

See ``cairnq._sql.ANNOTATIONS`` for both annotations.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable

from cairnq._speedups import echo_row, fill_rows
from cairnq._sql import AnnotationError, Statement
from cairnq.models import TASK_COLUMNS

__all__ = ["Echo", "Filler", "row_echo", "row_filler"]

#: Bound parameters (as the connection receives them) -> the inserted row.
Echo = Callable[[dict[str, Any]], tuple[Any, ...]]
#: (bound parameters, the rows the statement returned) -> the whole rows.
Filler = Callable[[dict[str, Any], list[Any]], list[tuple[Any, ...]]]


def row_echo(stmt: Statement) -> Echo | None:
    """The echo of ``stmt``, or None when it has no ``echo-row`` annotation.
    Raises AnnotationError when the annotation does not cover every column
    of the table exactly once (the echo would be a wrong row)."""
    if not stmt.echo_row:
        return None
    by_column = {c.column: c for c in stmt.echo_row}
    if sorted(by_column) != sorted(TASK_COLUMNS) or len(stmt.echo_row) != len(TASK_COLUMNS):
        raise AnnotationError(
            f"{stmt.name}: echo-row names {sorted(by_column)}, not the columns of cairnq_tasks"
        )
    template = tuple(by_column[column].value for column in TASK_COLUMNS)
    sources = tuple(by_column[column].param for column in TASK_COLUMNS)
    return partial(echo_row, template, sources)


def row_filler(stmt: Statement) -> Filler | None:
    """The filler of ``stmt``, or None when it has no ``fill-row`` annotation.
    Raises AnnotationError unless its RETURNING list and its annotation
    together name every column of the table exactly once."""
    if not stmt.fill_row:
        return None
    filled = {c.column: c for c in stmt.fill_row}
    named = [*stmt.returning, *filled]
    if sorted(named) != sorted(TASK_COLUMNS):
        raise AnnotationError(
            f"{stmt.name}: RETURNING {list(stmt.returning)} and fill-row {sorted(filled)} "
            "do not name each column of cairnq_tasks once"
        )
    position = {column: i for i, column in enumerate(stmt.returning)}
    template = tuple(filled[c].value if c in filled else None for c in TASK_COLUMNS)
    sources = tuple(filled[c].param if c in filled else position[c] for c in TASK_COLUMNS)
    return partial(fill_rows, template, sources)
