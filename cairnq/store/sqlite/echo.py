"""The row an insert wrote, rebuilt from its bound parameters (no RETURNING).

A statement whose file is annotated ``-- cairnq: echo-row ...`` (see
``cairnq._sql.ANNOTATIONS``) writes a whole ``cairnq_tasks`` row from its
parameters and constants; asking SQLite for RETURNING would cost more than
the insert itself when writes are batched. The annotation says which
parameter or constant fills each column; this module turns it into a function
that lays them out in table order, as ``select *`` would return them.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any, Callable

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
    template: list[Any] = []
    slots: list[int] = []
    params: list[str] = []
    for i, column in enumerate(TASK_COLUMNS):
        entry = by_column[column]
        template.append(entry.value)
        if entry.param is not None:
            slots.append(i)
            params.append(entry.param)
    pick: Callable[[dict[str, Any]], Any]
    if len(params) > 1:
        pick = itemgetter(*params)
    else:  # itemgetter of one name returns the value, not a tuple
        pick = lambda bound: tuple(bound[p] for p in params)  # noqa: E731

    def echo(bound: dict[str, Any]) -> tuple[Any, ...]:
        row = template.copy()
        for i, v in zip(slots, pick(bound)):
            row[i] = v
        return tuple(row)

    return echo
