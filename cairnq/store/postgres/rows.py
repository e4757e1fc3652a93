"""Rows from any executor, as the tuples the decoders take."""

from __future__ import annotations

from typing import Any

__all__ = ["rows_of"]


def rows_of(executor: Any) -> Any:
    """The executor's fastest row source, ``rows(text, values, prepare)``:
    tuples straight from ours; any PgExecutor's mapping rows otherwise."""
    raw = getattr(executor, "_query_raw", None)
    if raw is not None:
        return raw

    async def as_tuples(text: str, values: list[Any], prepare: bool = True) -> list[tuple[Any, ...]]:
        rows = await executor.query(text, values)
        return [row if type(row) is tuple else tuple(dict(row).values()) for row in rows]

    return as_tuples
