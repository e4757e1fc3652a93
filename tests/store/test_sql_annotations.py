"""Statement files carry their own shape (``-- cairnq:`` header annotations).

A file reformatted, or an annotation dropped or mistyped, must either keep
its fast path or fail here (or at load, loudly): never lose it silently. The
sets below are pinned on purpose: changing one is a decision, made here.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from cairnq._sql import (
    ANNOTATIONS,
    CODE,
    LINE_COMMENT,
    QUOTED,
    AnnotationError,
    EchoColumn,
    find_protocol_root,
    load_statements,
    read_annotations,
    sql_tokens,
)
from cairnq.models import TASK_COLUMNS
from cairnq.store.sqlite.echo import row_echo, row_filler
from cairnq.store.sqlite.store import SQLiteStore

# Planned for their queue and name values on PostgreSQL (see the ANNOTATIONS
# entry): the statements and the parameters written in as literals.
PLANNED_PER_VALUE = {
    "claim": ("queues", "names"),
    "claim_any_name": ("queues",),
    "claim_one_name": ("queues", "name"),
    "claim_one_queue": ("names", "queue"),
    "claim_one_queue_any_name": ("queue",),
    "claim_one_queue_one_name": ("queue", "name"),
    "claimable_probe": ("queues", "names"),
    "claimable_probe_any_name": ("queues",),
    "claimable_probe_one_queue_one_name": ("queue", "name"),
    # the dashboard's pages: filters and bounds; the finished orders' cursor too
    **{
        f"browse_{order}": ("status", "queue", "name", "id_above", "id_below")
        for order in ("newest", "oldest", "unfinished_newest", "unfinished_oldest")
    },
    **{
        f"browse_finished_{order}{one}": (
            "status", "queue", "name", "id_above", "id_below", "after_completed_ms", "after_id",
        )
        for order in ("newest", "oldest")
        for one in ("", "_one_status")
    },
}
# The parameters params.selective_literal knows how to write (text, text
# lists, and the integer page position).
LITERAL_PARAMS = {
    "queues", "names", "queue", "name", "status", "id_above", "id_below", "after_id",
    "after_completed_ms",
}
# SQLite inserts whose row is rebuilt from the bound values.
ECHOED = {"insert_task"}
# SQLite claims that return only the columns whose values the store does not
# know, and the columns it fills back in.
_SET = ("status", "worker_id", "lease_until_ms", "updated_at_ms")
FILLED = {
    "claim": _SET,
    "claim_any_name": _SET,
    "claim_one_name": (*_SET, "name"),
    "claim_one_queue": (*_SET, "queue"),
    "claim_one_queue_any_name": (*_SET, "queue"),
    "claim_one_queue_one_name": (*_SET, "queue", "name"),
}


def _annotated(dialect: str, field: str) -> dict[str, Any]:
    return {n: getattr(s, field) for n, s in load_statements(dialect).items() if getattr(s, field)}


def test_the_statements_planned_per_value_are_pinned() -> None:
    assert _annotated("postgres", "plan_per_value") == PLANNED_PER_VALUE
    assert _annotated("sqlite", "plan_per_value") == {}


def test_every_value_planned_per_value_is_a_text_parameter_of_its_statement() -> None:
    statements = load_statements("postgres")
    for name, params in PLANNED_PER_VALUE.items():
        assert set(params) <= set(statements[name].params), name
        assert set(params) <= LITERAL_PARAMS, name


# PostgreSQL statements sent unprepared (plan-custom), and the values their plans depend on.
PLANNED_CUSTOM = {"complete_each": ("ids",)}


def test_the_statements_planned_with_their_values_are_pinned() -> None:
    assert _annotated("postgres", "plan_custom") == PLANNED_CUSTOM
    assert _annotated("sqlite", "plan_custom") == {}


def test_the_echoed_inserts_are_pinned() -> None:
    assert set(_annotated("sqlite", "echo_row")) == ECHOED
    assert _annotated("postgres", "echo_row") == {}


def test_the_filled_claims_are_pinned() -> None:
    filled = _annotated("sqlite", "fill_row")
    assert {name: tuple(c.column for c in entries) for name, entries in filled.items()} == FILLED
    assert _annotated("postgres", "fill_row") == {}


def _code(text: str) -> str:
    return " ".join("".join(piece for kind, piece in sql_tokens(text) if kind != LINE_COMMENT).split())


@pytest.mark.parametrize("name", sorted(FILLED))
def test_fill_row_is_what_the_claim_sets_or_selects_by(name: str) -> None:
    """Each filled column is assigned that very value in the SET list, or
    (queue, name) compared for equality with that parameter in the draw; the
    RETURNING list is every other column, in table order."""
    stmt = load_statements("sqlite")[name]
    code = _code(stmt.text).lower()
    assignments = dict(re.findall(r"(\w+) = ([^,]+?)(?:,| where )", code.split(" set ", 1)[1]))
    for entry in stmt.fill_row:
        if entry.column in ("queue", "name"):
            assert re.search(rf"\b(?:\w+\.)?{entry.column} = :{entry.param}\b", code), entry
        else:
            assert assignments[entry.column] == _as_sql(entry), entry
    filled = {c.column for c in stmt.fill_row}
    assert stmt.returning == tuple(c for c in TASK_COLUMNS if c not in filled)
    assert code.endswith("returning " + ", ".join(stmt.returning))


@pytest.mark.parametrize(
    "queues, names",
    [
        (["q"], ["n"]),
        (["q"], ["n", "other"]),
        (["q"], None),
        (["q", "r"], ["n"]),
        (["q", "r"], ["n", "other"]),
        (["q", "r"], None),
    ],
    ids=lambda v: "any" if v is None else str(len(v)),
)
async def test_a_filled_claim_is_the_row_the_database_holds(
    tmp_path: Path, queues: list[str], names: list[str] | None
) -> None:
    """On a real file, for every claim variant: the tasks a claim returns
    (their set and selected columns filled in by the store) are what
    ``select *`` reads back, column for column; a retried task's attempt and
    error come back too."""
    from cairnq.store.ops.claims import claim_statement

    path = tmp_path / "fill.db"
    store = SQLiteStore(str(path))
    try:
        first = await store.submit(name="n", payload={"x": 1}, queue="q", priority=2, metadata={"m": 1})
        await store.submit(name="n", payload=[2], queue="q", correlation_id="c")
        # One retried once: its attempt and error are not what a fresh task has.
        [task] = await store.claim(queues=["q"], worker_id="w0", limit=1, names=["n"])
        assert task.id == first.id
        await store.progress(task_id=task.id, worker_id="w0", progress=0.5, message="half")
        await store.fail(task_id=task.id, worker_id="w0", error={"type": "E"}, retryable=True)
        claimed = await store.claim(queues=queues, worker_id="w1", limit=5, names=names)
        assert len(claimed) == 2, claim_statement(queues, names)
        again = [await store.get(t.id) for t in claimed]
    finally:
        await store.close()
    assert claimed == again
    conn = sqlite3.connect(path)
    try:
        for task in claimed:
            row = conn.execute("select * from cairnq_tasks where id = ?", (task.id,)).fetchone()
            assert tuple(row[TASK_COLUMNS.index(c)] for c in ("status", "worker_id", "queue", "name")) == (
                task.status, task.worker_id, task.queue, task.name,
            )  # fmt: skip
            assert (row[TASK_COLUMNS.index("lease_until_ms")], row[TASK_COLUMNS.index("updated_at_ms")]) == (
                task.lease_until_ms, task.updated_at_ms,
            )  # fmt: skip
    finally:
        conn.close()
    retried = next(t for t in claimed if t.id == first.id)
    assert (retried.attempt, retried.error["type"]) == (2, "E")  # (not a fresh task's values)


def test_a_filler_puts_returned_and_filled_columns_in_table_order() -> None:
    stmt = load_statements("sqlite")["claim_one_queue_one_name"]
    fill = row_filler(stmt)
    assert fill is not None
    returned = tuple(f"<{c}>" for c in stmt.returning)
    bound = {"worker_id": "w", "lease_until_ms": 7, "now_ms": 5, "queue": "q", "name": "n", "limit": 3}
    [row] = fill(bound, [returned])
    expected = {c: f"<{c}>" for c in stmt.returning}
    expected.update(status="running", worker_id="w", lease_until_ms=7, updated_at_ms=5, queue="q", name="n")
    assert row == tuple(expected[c] for c in TASK_COLUMNS)


def _insert_lists(text: str) -> tuple[list[str], list[str]]:
    """(columns, values) of ``insert into t (...) values (...)`` as the lexer
    reads it: words and quoted strings, commas and parentheses."""
    items: list[str] = []
    for kind, piece in sql_tokens(text):
        if kind == CODE:
            items += re.findall(r":?\w+|[(),]", piece)
        elif kind == QUOTED:
            items.append(piece)
    lowered = [item.lower() for item in items]
    assert lowered[:3] == ["insert", "into", "cairnq_tasks"], text
    close = items.index(")")
    columns = items[4:close]
    assert lowered[close + 1 : close + 3] == ["values", "("], text
    values = items[close + 3 :]
    assert values[-1] == ")", "an echoed insert returns nothing and ends with its values"
    return [c for c in columns if c != ","], [v for v in values[:-1] if v != ","]


def _as_sql(entry: EchoColumn) -> str:
    if entry.param is not None:
        return ":" + entry.param
    if entry.value is None:
        return "null"
    return f"'{entry.value}'" if isinstance(entry.value, str) else str(entry.value)


@pytest.mark.parametrize("name", sorted(ECHOED))
def test_echo_row_is_the_inserts_column_and_value_lists(name: str) -> None:
    stmt = load_statements("sqlite")[name]
    columns, values = _insert_lists(stmt.text)
    assert [c.column for c in stmt.echo_row] == columns
    assert [_as_sql(c) for c in stmt.echo_row] == [v.lower() for v in values]
    assert sorted(columns) == sorted(TASK_COLUMNS)


async def test_the_echo_is_the_row_the_database_holds(tmp_path: Path) -> None:
    """On a real file: what the store returns for an echoed insert (no
    RETURNING) is what ``select *`` reads back, column for column."""
    path = tmp_path / "echo.db"
    store = SQLiteStore(str(path))
    try:
        task = await store.submit(
            name="echo", payload={"x": 1}, queue="q", priority=3, metadata={"m": True},
            correlation_id="c",
        )
        again = await store.get(task.id)
    finally:
        await store.close()
    assert task == again
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("select * from cairnq_tasks where id = ?", (task.id,)).fetchone()
    finally:
        conn.close()
    stmt = load_statements("sqlite")["insert_task"]
    echo = row_echo(stmt)
    assert echo is not None
    bound = {c.param: row[TASK_COLUMNS.index(c.column)] for c in stmt.echo_row if c.param}
    assert echo(bound) == row


# -- a reformatted or mis-annotated file ----------------------------------------------------


@pytest.fixture
def protocol_copy(tmp_path: Path) -> Path:
    root = tmp_path / "protocol"
    shutil.copytree(find_protocol_root(), root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _edit(root: Path, dialect: str, name: str, edit: Any) -> None:
    path = root / "sql" / dialect / f"{name}.sql"
    path.write_text(edit(path.read_text(encoding="utf-8")), encoding="utf-8")


def _one_line(text: str) -> str:
    """The code below the header on one line, blanks collapsed."""
    lines = text.splitlines(keepends=True)
    header = "".join(line for line in lines if line.startswith("--"))
    code = " ".join("".join(line for line in lines if not line.startswith("--")).split())
    return header + code + "\n"


def test_a_reformatted_file_keeps_its_fast_path(protocol_copy: Path) -> None:
    _edit(protocol_copy, "sqlite", "insert_task", _one_line)
    _edit(protocol_copy, "postgres", "claim", lambda t: "\n" + t.replace("\n", "\n\n"))
    copied = load_statements("sqlite", protocol_copy)["insert_task"]
    assert "\n" not in copied.text
    original = load_statements("sqlite")["insert_task"]
    assert copied.echo_row == original.echo_row
    assert _insert_lists(copied.text) == _insert_lists(original.text)
    assert row_echo(copied) is not None
    claim = load_statements("postgres", protocol_copy)["claim"]
    assert claim.plan_per_value == PLANNED_PER_VALUE["claim"]


@pytest.mark.parametrize(
    "dialect, name, edit, message",
    [
        ("postgres", "claim", lambda t: t.replace("plan-per-value", "plan-per-valu"), "unknown annotation"),
        ("postgres", "claim", lambda t: t.replace("plan-per-value queues", "plan-per-value queue"), "not parameters"),
        ("postgres", "claim", lambda t: t.replace("plan-per-value queues names", "plan-per-value"), "no values"),
        ("sqlite", "claim", lambda t: "-- cairnq: plan-per-value queues\n" + t, "applies to"),
        ("postgres", "complete_each", lambda t: t.replace("plan-custom ids", "plan-custom id"), "not parameters"),
        ("postgres", "complete_each", lambda t: t.replace("plan-custom ids", "plan-custom ids ids"), "twice"),
        ("sqlite", "complete_each", lambda t: "-- cairnq: plan-custom ids\n" + t, "applies to"),
        ("postgres", "insert_task", lambda t: "-- cairnq: echo-row id\n" + t, "applies to"),
        ("sqlite", "insert_task", lambda t: t.replace("attempt=0", "attempt=0+1"), "echo-row entry"),
        ("sqlite", "insert_task", lambda t: t.replace("root_id correlation_id", "root_id root_id"), "twice"),
        ("sqlite", "get", lambda t: t + "\n-- cairnq: echo-row id\n", "below the first line of code"),
        ("postgres", "claim", lambda t: "-- cairnq: fill-row status='running'\n" + t, "applies to"),
        ("sqlite", "claim", lambda t: t.replace("returning id,", "returning *, id,"), "RETURNING <columns>"),
        ("sqlite", "claim", lambda t: t.replace("completed_at_ms\n", "completed_at_ms + 0\n"), "RETURNING <columns>"),
        ("sqlite", "claim", lambda t: t.replace("returning id,", "returning id, status,"), "twice"),
        ("sqlite", "claim", lambda t: t.replace("lease_until_ms updated", "lease_until_ms=:lease updated"), "not parameters"),
        ("sqlite", "claim", lambda t: t.replace("status='running'", "status=running'"), "fill-row entry"),
    ],
)  # fmt: skip
def test_a_wrong_annotation_fails_at_load(
    protocol_copy: Path, dialect: str, name: str, edit: Any, message: str
) -> None:
    _edit(protocol_copy, dialect, name, edit)
    with pytest.raises(AnnotationError, match=message):
        load_statements(dialect, protocol_copy)


def test_an_echo_row_missing_a_column_is_refused(protocol_copy: Path) -> None:
    _edit(protocol_copy, "sqlite", "insert_task", lambda t: t.replace(" completed_at_ms=null", ""))
    stmt = load_statements("sqlite", protocol_copy)["insert_task"]
    with pytest.raises(AnnotationError, match="not the columns of cairnq_tasks"):
        row_echo(stmt)


def test_a_fill_row_missing_a_column_is_refused(protocol_copy: Path) -> None:
    _edit(protocol_copy, "sqlite", "claim", lambda t: t.replace(" updated_at_ms=:now_ms", ""))
    stmt = load_statements("sqlite", protocol_copy)["claim"]
    with pytest.raises(AnnotationError, match="do not name each column"):
        row_filler(stmt)


def test_annotations_are_read_from_comments_only() -> None:
    text = "-- cairnq: plan-per-value a\n-- see cairnq: x\nselect '-- cairnq: echo-row x' as t"
    assert read_annotations(text) == {"plan-per-value": ("a",)}
    assert set(ANNOTATIONS) == {"echo-row", "fill-row", "plan-per-value", "plan-custom"}
