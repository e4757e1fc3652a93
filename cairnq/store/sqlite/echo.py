"""The row an insert wrote, rebuilt from its bound parameters (no RETURNING).

A statement whose file is annotated ``-- cairnq: echo-row ...`` (see
``cairnq._sql.ANNOTATIONS``) writes a whole ``cairnq_tasks`` row from its
parameters and constants; asking SQLite for RETURNING would cost more than
the insert itself when writes are batched. The annotation says which
parameter or constant fills each column; this module turns it into a function
that lays them out in table order, as ``select *`` would return them (the
``echo_row`` kernel, given each column's constant or parameter).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable

from cairnq._speedups import echo_row
from cairnq._sql import AnnotationError, Statement
from cairnq.models import TASK_COLUMNS

__all__ = ["Echo", "row_echo"]

#: Bound parameters (as the connection receives them) -> the inserted row.
Echo = Callable[[dict[str, Any]], tuple[Any, ...]]


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
