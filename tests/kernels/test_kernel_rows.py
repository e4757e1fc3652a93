"""Kernels, compiled and pure Python on the same vectors: rows."""

from __future__ import annotations

import copy
import dataclasses
import decimal
import gc
import pickle
import random
import sys
import weakref
from types import SimpleNamespace
from typing import Any

import pytest
from kernel_kit import (  # noqa: F401 (fixtures)
    COMPILED,
    FIELD_ORDER,
    JSON_COLUMNS,
    MS_COLUMNS,
    PURE,
    MyInt,
    impl,
    needs_compiled,
    outcome,
    run_isolated,
    stdlib_dumps,
)

from cairnq import Task
from cairnq.models import TASK_COLUMNS

# rows
# ---------------------------------------------------------------------------

PAYLOAD = {"a": [1, 2, {"b": None}], "u": "é\U0001f600", "big": 2**64, "f": 1.5}
RESULT = {"ok": True, "items": [1, "two"]}
ERROR = {"type": "ValueError", "code": "bad", "message": "m", "retryable": False, "details": {}}
METADATA = {"tenant": "t1", "tags": ["x"]}

ROW_VALUES: dict[str, Any] = {
    "id": "task_01HZY3K6J8V4Q2W9X5T7R3M1NB",
    "name": "emails.send",
    "queue": "default",
    "status": "running",
    "payload": PAYLOAD,
    "result": RESULT,
    "error": ERROR,
    "metadata": METADATA,
    "progress": 0.25,
    "message": "half way",
    "attempt": 2,
    "max_attempts": 5,
    "priority": -3,
    "worker_id": "worker_01HZY3K6J8V4Q2W9X5T7R3M1NC",
    "lease_until_ms": 1_700_000_030_000,
    "run_at_ms": 1_700_000_000_000,
    "cancel_requested_at_ms": None,
    "parent_id": "task_01HZY3K6J8V4Q2W9X5T7R3M1ND",
    "root_id": "task_01HZY3K6J8V4Q2W9X5T7R3M1NE",
    "correlation_id": "corr-1",
    "created_at_ms": 1_699_999_999_000,
    "updated_at_ms": 1_700_000_001_000,
    "completed_at_ms": None,
}


def make_row(json_is_text: bool = True, **overrides: Any) -> tuple[Any, ...]:
    values = {**ROW_VALUES, **overrides}
    out = []
    for column in TASK_COLUMNS:
        v = values[column]
        if json_is_text and column in JSON_COLUMNS and column not in overrides and v is not None:
            v = stdlib_dumps(v)
        out.append(v)
    return tuple(out)


def expected_task(**overrides: Any) -> Task:
    return Task(**{**ROW_VALUES, **overrides})


def test_task_columns_layout() -> None:
    assert len(TASK_COLUMNS) == 23
    assert sorted(TASK_COLUMNS) == sorted(FIELD_ORDER)


def test_decode_task_text_json(impl: SimpleNamespace) -> None:
    task = impl.rows.decode_task(make_row())
    assert type(task) is Task
    for column in TASK_COLUMNS:
        assert getattr(task, column) == ROW_VALUES[column], column
    assert task.payload["big"] == 2**64 and type(task.payload["big"]) is int
    assert task == expected_task()
    assert list(vars(task)) == FIELD_ORDER
    assert task.running and not task.is_terminal and not task.cancel_requested


def test_decode_task_default_is_text(impl: SimpleNamespace) -> None:
    assert impl.rows.decode_task(make_row()) == impl.rows.decode_task(make_row(), True)


def test_decode_task_decoded_json(impl: SimpleNamespace) -> None:
    row = make_row(json_is_text=False)
    task = impl.rows.decode_task(row, json_is_text=False)
    assert task == expected_task()
    # already-decoded values are used as-is, not copied or re-parsed
    assert task.payload is row[TASK_COLUMNS.index("payload")]
    assert task.metadata is row[TASK_COLUMNS.index("metadata")]
    # a str JSON value with json_is_text=False stays a str
    t2 = impl.rows.decode_task(make_row(json_is_text=False, payload='{"a":1}'), False)
    assert t2.payload == '{"a":1}'
    t3 = impl.rows.decode_task(make_row(json_is_text=False, metadata="{}"), False)
    assert t3.metadata == "{}"
    assert list(vars(task)) == FIELD_ORDER


@pytest.mark.parametrize("json_is_text", [True, False])
def test_decode_task_null_json_stays_none(impl: SimpleNamespace, json_is_text: bool) -> None:
    row = make_row(json_is_text, payload=None, result=None, error=None, metadata=None)
    task = impl.rows.decode_task(row, json_is_text)
    assert task.payload is None and task.result is None
    assert task.error is None and task.metadata is None


def test_decode_task_empty_metadata(impl: SimpleNamespace) -> None:
    t1 = impl.rows.decode_task(make_row(metadata="{}"))
    t2 = impl.rows.decode_task(make_row(metadata="{}"))
    assert t1.metadata == {} and type(t1.metadata) is dict
    t1.metadata["x"] = 1  # each task gets its own dict
    assert t2.metadata == {}


@pytest.mark.parametrize(
    "column,text,value",
    [
        ("payload", "null", None),
        ("payload", "[1,2]", [1, 2]),
        ("payload", '"s"', "s"),
        ("payload", "42", 42),
        ("payload", str(2**64), 2**64),
        ("payload", '"\\ud800"', "\ud800"),
        ("payload", '{"k":"\\u00e9\\ud83d\\ude00"}', {"k": "é\U0001f600"}),
        ("result", "{}", {}),
        ("result", "1.5", 1.5),
        ("error", '{"a":{}}', {"a": {}}),
        ("metadata", '{"a":1}', {"a": 1}),
        ("metadata", "{ }", {}),
        ("metadata", "[]", []),
        # What orjson refuses or might misread goes to the stdlib reader,
        # from a decoded row as from jsoncodec's loads.
        ("payload", "[Infinity,-Infinity]", [float("inf"), float("-inf")]),
        ("payload", '{"a":1,"a":2}', {"a": 2}),
        ("payload", '{"n":[1,' + "9" * 25 + ',"x"]}', {"n": [1, int("9" * 25), "x"]}),
        ("result", "-" + "1" * 19, -int("1" * 19)),
        ("result", "1234567890123456789.5", float("1234567890123456789.5")),
    ],
)
def test_decode_task_json_values(impl: SimpleNamespace, column: str, text: str, value: Any) -> None:
    task = impl.rows.decode_task(make_row(**{column: text}))
    assert getattr(task, column) == value
    assert type(getattr(task, column)) is type(value)


def test_decode_task_bytes_json(impl: SimpleNamespace) -> None:
    task = impl.rows.decode_task(make_row(payload=b'{"a":1}', metadata=b"{}"))
    assert task.payload == {"a": 1} and task.metadata == {}


def test_decode_task_invalid_json_raises(impl: SimpleNamespace) -> None:
    with pytest.raises(ValueError):
        impl.rows.decode_task(make_row(payload="{not json"))


@pytest.mark.parametrize(
    "raw,want",
    [
        ("1700000000000", 1_700_000_000_000),
        ("-5", -5),
        ("0", 0),
        (" 42 ", 42),
        (str(2**70), 2**70),
        (1.7e12, 1_700_000_000_000),
        (1700000000000.9, 1_700_000_000_000),
        (decimal.Decimal("1700000000000"), 1_700_000_000_000),
        (True, 1),
        (MyInt(5), 5),
        (None, None),
        (123, 123),
    ],
)
def test_decode_task_ms_conversion(impl: SimpleNamespace, raw: Any, want: Any) -> None:
    task = impl.rows.decode_task(make_row(**{c: raw for c in MS_COLUMNS}))
    for column in MS_COLUMNS:
        got = getattr(task, column)
        assert got == want
        assert type(got) is type(want), column


@pytest.mark.parametrize("raw", ["1.7e12", "1700000000000.0", "abc", ""])
def test_decode_task_ms_bad_string(impl: SimpleNamespace, raw: str) -> None:
    # int() refuses float-spelled strings; both twins raise the same ValueError
    with pytest.raises(ValueError):
        impl.rows.decode_task(make_row(created_at_ms=raw))


def test_decode_task_other_columns_untouched(impl: SimpleNamespace) -> None:
    # only *_ms (int) and progress (float) are converted; attempt/priority pass through
    task = impl.rows.decode_task(make_row(attempt="3", priority="1", message=7))
    assert task.attempt == "3" and task.priority == "1" and task.message == 7


@pytest.mark.parametrize(
    "raw,want", [(None, None), (0.25, 0.25), (1, 1.0), (0, 0.0), (True, 1.0), ("0.5", 0.5)]
)
def test_decode_progress_is_float(impl: SimpleNamespace, raw: Any, want: Any) -> None:
    # SQLite's RETURNING hands a whole-valued REAL back as an int; progress is a float
    for task in (
        impl.rows.decode_task(make_row(progress=raw)),
        impl.rows.decode_mapping(_mapping(progress=raw)),
    ):
        assert task.progress == want and type(task.progress) is type(want)


def test_decode_task_list_row(impl: SimpleNamespace) -> None:
    row = list(make_row())
    task = impl.rows.decode_task(row)
    assert task == expected_task()
    assert list(vars(task)) == FIELD_ORDER


def test_decode_task_other_sequences(impl: SimpleNamespace) -> None:
    class RowSeq:
        def __init__(self, values: tuple[Any, ...]) -> None:
            self.values = values

        def __getitem__(self, i: int) -> Any:
            return self.values[i]

    class TupleSub(tuple):  # type: ignore[type-arg]
        pass

    assert impl.rows.decode_task(RowSeq(make_row())) == expected_task()
    assert impl.rows.decode_task(TupleSub(make_row())) == expected_task()
    # a longer row: the first 23 columns are read
    assert impl.rows.decode_task(make_row() + ("extra",)) == expected_task()


SHORT_ROWS = [
    "decode_task(())",
    "decode_task([])",
    "decode_task(tuple(range(5)), False)",
    "decode_task(tuple(range(22)), False)",
    "decode_task(list(range(22)), False)",
    "decode_tasks([tuple(range(23)), tuple(range(22))], False)",
]


@pytest.mark.parametrize("call", SHORT_ROWS)
def test_decode_task_short_row(impl: SimpleNamespace, call: str) -> None:
    # a row with fewer than 23 columns is an IndexError (not a read past its end)
    assert run_isolated(impl.name, "rows", call) == "raise:IndexError"


def test_decode_tasks(impl: SimpleNamespace) -> None:
    rows = [
        make_row(),
        list(make_row(id="task_2", metadata="{}", created_at_ms="5")),
        make_row(id="task_3", payload=None, status="succeeded", completed_at_ms=9),
    ]
    tasks = impl.rows.decode_tasks(rows)
    assert [t.id for t in tasks] == [ROW_VALUES["id"], "task_2", "task_3"]
    assert tasks[0] == expected_task()
    assert tasks[1].metadata == {} and tasks[1].created_at_ms == 5
    assert tasks[2].payload is None and tasks[2].succeeded and tasks[2].completed_at_ms == 9
    assert all(list(vars(t)) == FIELD_ORDER for t in tasks)
    assert impl.rows.decode_tasks([]) == []
    assert impl.rows.decode_tasks(iter(rows)) == tasks
    decoded = impl.rows.decode_tasks([make_row(json_is_text=False)], json_is_text=False)
    assert decoded == [expected_task()]


def test_a_decoded_task_is_one_its_init_could_have_made(impl: SimpleNamespace) -> None:
    """Everything a user can do with a Task, done to a decoded one and to one
    made by the dataclass's ``__init__``, gives the same answers; and each
    decoded Task's dict is its own (the compiled decoder starts every one
    from a copy of the same template)."""
    first, second = impl.rows.decode_tasks([make_row(), make_row(id="task_2")])
    made = expected_task()
    assert first == made and vars(first) == vars(made) and list(vars(first)) == list(vars(made))
    assert type(first) is Task and gc.is_tracked(first)
    assert dataclasses.asdict(first) == dataclasses.asdict(made)
    assert dataclasses.replace(first, status="succeeded") == dataclasses.replace(made, status="succeeded")
    assert copy.copy(first) == first and copy.deepcopy(first) == first
    assert pickle.loads(pickle.dumps(first)) == first
    assert repr(first) == repr(made)
    # Writes to one task touch no other, nor the tasks decoded after it.
    first.status = "changed"
    first.extra = "an attribute of its own"
    del first.message
    vars(first)["payload"] = "replaced"
    assert second.status == "running" and second.message == "half way" and not hasattr(second, "extra")
    (third,) = impl.rows.decode_tasks([make_row(id="task_3")])
    assert third == expected_task(id="task_3") and list(vars(third)) == FIELD_ORDER
    assert not hasattr(third, "extra")
    assert first.extra == "an attribute of its own" and first.payload == "replaced"
    # The decoded values are the row's, not the template's placeholders.
    assert all(value is not None for key, value in vars(third).items() if ROW_VALUES[key] is not None)


def test_decoded_tasks_go_when_their_last_reference_does(impl: SimpleNamespace) -> None:
    message = "a message of its own " * 3  # (one object, in every row)
    before = sys.getrefcount(message)
    tasks = impl.rows.decode_tasks([make_row(id=f"task_{i}", message=message) for i in range(100)])
    assert sys.getrefcount(message) == before + 100
    refs = [weakref.ref(t) for t in tasks]
    del tasks
    gc.collect()
    assert not any(ref() for ref in refs)
    assert sys.getrefcount(message) == before


def _mapping(json_is_text: bool = True, **overrides: Any) -> dict[str, Any]:
    return dict(zip(TASK_COLUMNS, make_row(json_is_text, **overrides)))


def test_decode_mapping(impl: SimpleNamespace) -> None:
    row = _mapping()
    task = impl.rows.decode_mapping(row)
    assert task == expected_task()
    assert list(vars(task)) == FIELD_ORDER


def test_decode_mapping_any_order_and_unknown_columns(impl: SimpleNamespace) -> None:
    items = list(_mapping(created_at_ms="7", metadata="{}").items())
    random.Random(1).shuffle(items)
    row = dict(items)
    row["unknown"] = "dropped"
    row["payload_text"] = "{"
    task = impl.rows.decode_mapping(row)
    assert task == expected_task(created_at_ms=7, metadata={})
    assert "unknown" not in vars(task) and "payload_text" not in vars(task)
    assert list(vars(task)) == FIELD_ORDER


def test_decode_mapping_decoded_json_and_nulls(impl: SimpleNamespace) -> None:
    assert impl.rows.decode_mapping(_mapping(False), False) == expected_task()
    row = _mapping(payload=None, result=None, error=None, metadata=None, lease_until_ms=None)
    task = impl.rows.decode_mapping(row)
    assert task.payload is None and task.result is None and task.error is None
    assert task.metadata is None and task.lease_until_ms is None


def test_decode_mapping_minimal_uses_defaults(impl: SimpleNamespace) -> None:
    row = {"id": "task_x", "name": "n", "queue": "q", "status": "queued",
           "payload": "{}", "metadata": "{}", "run_at_ms": "12", "extra": 1}  # fmt: skip
    task = impl.rows.decode_mapping(row)
    assert task == Task("task_x", "n", "q", "queued", {}, {}, run_at_ms=12)
    assert list(vars(task)) == FIELD_ORDER
    with pytest.raises(TypeError):  # a required field missing
        impl.rows.decode_mapping({"id": "x"})


def test_decode_mapping_ms_conversion(impl: SimpleNamespace) -> None:
    task = impl.rows.decode_mapping(_mapping(**{c: "1700000000001" for c in MS_COLUMNS}))
    for c in MS_COLUMNS:
        assert getattr(task, c) == 1_700_000_000_001 and type(getattr(task, c)) is int
    with pytest.raises(ValueError):
        impl.rows.decode_mapping(_mapping(run_at_ms="1.5"))


def test_task_from_row() -> None:
    row = _mapping()
    task = Task.from_row(row)
    assert task == expected_task()
    assert list(vars(task)) == FIELD_ORDER
    assert Task.from_row(list(row.items())) == expected_task()  # anything dict() takes
    assert Task.from_row(_mapping(False), json_is_text=False) == expected_task()
    assert Task.from_row({**row, "junk": 1, "created_at_ms": "3"}).created_at_ms == 3


@needs_compiled
@pytest.mark.parametrize("json_is_text", [True, False])
def test_twins_rows_agree(json_is_text: bool) -> None:
    assert COMPILED is not None
    rng = random.Random(7)
    rows = [make_row(json_is_text)]
    for i in range(200):
        over: dict[str, Any] = {"id": f"task_{i}"}
        if rng.random() < 0.3:
            over["metadata"] = "{}" if json_is_text else {}
        if rng.random() < 0.3:
            over["payload"] = None
        if rng.random() < 0.3:
            over["created_at_ms"] = str(rng.randrange(2**50))
        if rng.random() < 0.3:
            over["lease_until_ms"] = float(rng.randrange(2**40))
        if rng.random() < 0.3:
            over["result"] = stdlib_dumps([i, "é"]) if json_is_text else [i, "é"]
        rows.append(make_row(json_is_text, **over))
    py_tasks = PURE["rows"].decode_tasks(rows, json_is_text)
    c_tasks = COMPILED["rows"].decode_tasks(rows, json_is_text)
    assert c_tasks == py_tasks
    for a, b in zip(py_tasks, c_tasks):
        assert list(vars(a)) == list(vars(b)) == FIELD_ORDER
        assert [type(v) for v in vars(a).values()] == [type(v) for v in vars(b).values()]
    for row in rows:
        assert COMPILED["rows"].decode_task(list(row), json_is_text) == PURE["rows"].decode_task(
            row, json_is_text
        )
        m = dict(zip(TASK_COLUMNS, row))
        assert COMPILED["rows"].decode_mapping(m, json_is_text) == PURE["rows"].decode_mapping(
            m, json_is_text
        )


@needs_compiled
@pytest.mark.parametrize(
    "row",
    [
        make_row(payload="{bad"),
        make_row(metadata="{bad"),
        make_row(run_at_ms="x"),
        make_row(completed_at_ms=[1]),
        make_row(payload="{bad", run_at_ms="x"),
    ],
    ids=["bad-payload", "bad-metadata", "bad-ms", "ms-list", "two-errors"],
)
def test_twins_rows_same_exceptions(row: Any) -> None:
    assert COMPILED is not None
    assert outcome(COMPILED["rows"].decode_task, row) == outcome(PURE["rows"].decode_task, row)


# echo_row: an insert's row from its bound values
# ---------------------------------------------------------------------------


def ref_echo(template: tuple[Any, ...], sources: tuple[Any, ...], bound: Any) -> tuple[Any, ...]:
    row = []
    for constant, source in zip(template, sources):
        row.append(constant if source is None else bound[source])
    return tuple(row)


def test_echo_row_vectors(impl: SimpleNamespace) -> None:
    rng = random.Random(11)
    values: list[Any] = [None, 0, -1, 2**63, 1.5, "", "é", "{}", b"x", [1], {"a": 1}, True]
    for _ in range(500):
        n = rng.randrange(0, 30)
        template = tuple(rng.choice(values) for _ in range(n))
        sources = tuple(None if rng.random() < 0.4 else f"p{rng.randrange(8)}" for _ in range(n))
        bound = {f"p{i}": rng.choice(values) for i in range(8)}
        bound["unused"] = object()  # (names the statement does not use are ignored)
        row = impl.rows.echo_row(template, sources, bound)
        assert type(row) is tuple
        assert row == ref_echo(template, sources, bound)
        for got, want in zip(row, ref_echo(template, sources, bound)):
            assert got is want  # the very objects, not copies


def test_echo_row_any_mapping(impl: SimpleNamespace) -> None:
    from types import MappingProxyType

    bound = MappingProxyType({"a": 1, "b": "x"})
    assert impl.rows.echo_row((0, 0, 9), ("a", "b", None), bound) == (1, "x", 9)


def test_echo_row_missing_parameter_is_a_key_error(impl: SimpleNamespace) -> None:
    with pytest.raises(KeyError, match="b"):
        impl.rows.echo_row((0, 0), ("a", "b"), {"a": 1})


def test_echo_row_template_shorter_than_sources(impl: SimpleNamespace) -> None:
    with pytest.raises(IndexError):
        impl.rows.echo_row((0,), (None, None), {})
    assert impl.rows.echo_row((0, 1, 2), (None,), {}) == (0,)  # (extra constants unused)


# fill_rows: a claim's whole rows from the columns it returned and the values it set
# ---------------------------------------------------------------------------


def ref_fill(template: tuple[Any, ...], sources: tuple[Any, ...], bound: Any, rows: Any) -> list[Any]:
    out = []
    for row in rows:
        whole = []
        for constant, source in zip(template, sources):
            if type(source) is int:
                whole.append(row[source])
            else:
                whole.append(constant if source is None else bound[source])
        out.append(tuple(whole))
    return out


def test_fill_rows_vectors(impl: SimpleNamespace) -> None:
    rng = random.Random(12)
    values: list[Any] = [None, 0, -1, 2**63, 1.5, "", "é", "{}", b"x", [1], {"a": 1}, True]
    for _ in range(500):
        n = rng.randrange(0, 30)
        width = rng.randrange(0, n + 1)  # how many columns each row brings
        template = tuple(rng.choice(values) for _ in range(n))
        sources = tuple(
            rng.randrange(width) if width and rng.random() < 0.6
            else None if rng.random() < 0.5 else f"p{rng.randrange(8)}"
            for _ in range(n)
        )  # fmt: skip
        bound = {f"p{i}": rng.choice(values) for i in range(8)}
        bound["unused"] = object()
        rows = [tuple(rng.choice(values) for _ in range(width)) for _ in range(rng.randrange(0, 5))]
        got = impl.rows.fill_rows(template, sources, bound, rows)
        want = ref_fill(template, sources, bound, rows)
        assert type(got) is list and all(type(row) is tuple for row in got)
        assert got == want
        for got_row, want_row in zip(got, want):
            for a, b in zip(got_row, want_row):
                assert a is b  # the very objects, not copies


def test_fill_rows_takes_any_rows_and_mapping(impl: SimpleNamespace) -> None:
    from types import MappingProxyType

    bound = MappingProxyType({"a": 1})
    rows = iter([[10, 11], (20, 21)])  # lists, tuples, from any iterable
    assert impl.rows.fill_rows((0, 0, 9, 0), (1, "a", None, -2), bound, rows) == [
        (11, 1, 9, 10),
        (21, 1, 9, 20),
    ]


def test_fill_rows_errors(impl: SimpleNamespace) -> None:
    with pytest.raises(KeyError, match="b"):
        impl.rows.fill_rows((0, 0), (0, "b"), {}, [(1,)])
    with pytest.raises(KeyError, match="b"):  # (a missing parameter, even with no rows)
        impl.rows.fill_rows((0, 0), (0, "b"), {}, [])
    with pytest.raises(IndexError):
        impl.rows.fill_rows((0, 0), (0, 2), {}, [(1, 2)])  # a row too short
    with pytest.raises(IndexError):
        impl.rows.fill_rows((0, 0), (0, -3), {}, [(1, 2)])
    with pytest.raises(IndexError):
        impl.rows.fill_rows((0,), (0, None), {}, [(1,)])  # a template too short
    assert impl.rows.fill_rows((), (), {}, [(1,), ()]) == [(), ()]


@needs_compiled
@pytest.mark.parametrize(
    "args",
    [
        ((0, 0, 5), (1, "a", None), {"a": 3}, [(1, 2), (3, 4)]),
        ((0, 0), (0, "b"), {"a": 3}, [(1,)]),
        ((0, 0), (0, 1), {}, [(1,)]),
        ((0,), (None, 0), {}, [(1,)]),
        ((0, 0), (-1, -2), {}, [(1, 2)]),
        ((), (), {}, []),
        ((0,), (0,), {}, [None]),
    ],
    ids=["ok", "missing", "short-row", "short-template", "from-the-end", "empty", "not-a-row"],
)
def test_twins_fill_rows_agree(args: Any) -> None:
    assert COMPILED is not None
    assert outcome(COMPILED["rows"].fill_rows, *args) == outcome(PURE["rows"].fill_rows, *args)


@needs_compiled
@pytest.mark.parametrize(
    "args",
    [
        ((1, 2), ("a", None), {"a": 3}),
        ((1, 2), ("a", "b"), {"a": 3}),
        ((1,), (None, "a"), {"a": 3}),
        ((), (), {}),
        ((1,), ("a",), {}),
    ],
    ids=["ok", "missing", "short-template", "empty", "missing-only"],
)
def test_twins_echo_row_agree(args: Any) -> None:
    assert COMPILED is not None
    assert outcome(COMPILED["rows"].echo_row, *args) == outcome(PURE["rows"].echo_row, *args)
