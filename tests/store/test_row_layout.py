"""The row layout is written once (``models.TASK_LAYOUT``); every other copy
is held to it here, and it is held to the tables the migrations build.

Copies: the compiled kernel builds its tables from it at import; the pure
twin writes its indices out (fastest in pure Python), checked column by
column below; the SQLite insert's echo-row annotation names every column
(tests/store/test_sql_annotations.py).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest

from cairnq import _speedups
from cairnq.models import (
    EPOCH_MS_COLUMNS,
    JSON_COLUMNS,
    KIND_EPOCH_MS,
    KIND_JSON,
    KIND_PLAIN,
    KIND_REAL,
    TASK_COLUMN_KINDS,
    TASK_COLUMNS,
    TASK_LAYOUT,
    Task,
)

# The declared type a migration gives a column of each kind (PLAIN: text or an integer).
SQLITE_TYPES = {KIND_JSON: {"text"}, KIND_EPOCH_MS: {"integer"}, KIND_REAL: {"real"},
                KIND_PLAIN: {"text", "integer"}}  # fmt: skip
POSTGRES_TYPES = {KIND_JSON: {"jsonb"}, KIND_EPOCH_MS: {"bigint"}, KIND_REAL: {"double precision"},
                  KIND_PLAIN: {"text", "integer"}}  # fmt: skip

IMPLS = {"pure": _speedups.pure["rows"]}
if _speedups.compiled is not None:
    IMPLS["compiled"] = _speedups.compiled["rows"]


def test_the_derived_names_follow_the_layout() -> None:
    assert TASK_COLUMNS == tuple(name for name, _ in TASK_LAYOUT)
    assert TASK_COLUMN_KINDS == tuple(kind for _, kind in TASK_LAYOUT)
    assert JSON_COLUMNS == ("payload", "result", "error", "metadata")
    assert len(EPOCH_MS_COLUMNS) == 6 and all(c.endswith("_ms") for c in EPOCH_MS_COLUMNS)
    assert sorted(TASK_COLUMNS) == sorted(Task.__dataclass_fields__)


async def test_the_migrated_table_has_the_layout(backend: Any) -> None:
    """Column names in table order, and each column's declared type matches
    its kind, on a real migrated database of each dialect."""
    store = backend.store()
    await store.connect()
    if backend.dialect == "sqlite":
        conn = sqlite3.connect(backend.target)
        try:
            rows = conn.execute("pragma table_info(cairnq_tasks)").fetchall()
        finally:
            conn.close()
        found = [(name, declared.lower()) for _, name, declared, *_ in rows]
        types = SQLITE_TYPES
    else:
        import psycopg

        with psycopg.connect(backend.target) as conn:
            found = conn.execute(
                "select column_name, data_type from information_schema.columns"
                " where table_name = 'cairnq_tasks' and table_schema = current_schema()"
                " order by ordinal_position"
            ).fetchall()
        types = POSTGRES_TYPES
    assert [name for name, _ in found] == list(TASK_COLUMNS)
    wrong = [(name, declared) for (name, declared), kind in zip(found, TASK_COLUMN_KINDS)
             if declared not in types[kind]]  # fmt: skip
    assert wrong == []


def _marked_row() -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A row whose every cell is distinct and of its column's kind, and the
    Task field each must land in: a swapped index or kind shows."""
    row: list[Any] = []
    expected: dict[str, Any] = {}
    for i, (name, kind) in enumerate(TASK_LAYOUT):
        if kind == KIND_JSON:
            value: Any = {"column": name}
            row.append(json.dumps(value))
        elif kind == KIND_EPOCH_MS:
            value = 1_700_000_000_000 + i
            row.append(str(value))  # as some drivers hand bigint back: decoded to int
        elif kind == KIND_REAL:
            value = float(i)
            row.append(i)  # a whole-valued REAL read back as int: decoded to float
        else:
            value = f"{name}-{i}"
            row.append(value)
        expected[name] = value
    return tuple(row), expected


@pytest.mark.parametrize("impl", sorted(IMPLS))
def test_each_decoder_puts_every_column_in_its_field(impl: str) -> None:
    rows = IMPLS[impl]
    row, expected = _marked_row()
    for task in (rows.decode_task(row), rows.decode_mapping(dict(zip(TASK_COLUMNS, row)))):
        got = {name: getattr(task, name) for name in TASK_COLUMNS}
        assert got == expected
        assert [type(got[n]) for n in TASK_COLUMNS] == [type(expected[n]) for n in TASK_COLUMNS]
        assert list(vars(task)) == list(Task.__dataclass_fields__)

