"""The hot-path kernels in ``cairnq._speedups``: compiled (Cython) and pure-Python twins.

Contract: each compiled kernel behaves exactly like its pure-Python twin -- same
outputs, same exception types -- on every input, and both follow the spec
(OPERATIONS.md §1.2 JSON, §1.4 ULIDs, §5.4 backoff; API.md §7.1 Task.from_row).

Most tests take the ``impl`` fixture, parametrized over "python" and "cython"
(the latter skipped when the extensions were not built); the ``test_twins_*``
tests feed the same inputs to both sets and compare them directly.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import faulthandler
import json
import os
import random
import subprocess
import sys
import time
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cairnq
from cairnq import SerializationError, Task
from cairnq import _speedups
from cairnq.models import TASK_COLUMNS

PURE = _speedups.pure
COMPILED = _speedups.compiled
NO_COMPILED = "Cython kernels not built (cairnq._speedups.compiled is None)"
needs_compiled = pytest.mark.skipif(COMPILED is None, reason=NO_COMPILED)

ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
FIELD_ORDER = [f.name for f in dataclasses.fields(Task)]
MS_COLUMNS = (
    "lease_until_ms", "run_at_ms", "cancel_requested_at_ms",
    "created_at_ms", "updated_at_ms", "completed_at_ms",
)  # fmt: skip
JSON_COLUMNS = ("payload", "result", "error", "metadata")


def stdlib_dumps(value: Any) -> str:
    """The reference encoding (OPERATIONS.md §1.2)."""
    return json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(",", ":"))


def _kernels(mods: dict[str, Any], name: str) -> SimpleNamespace:
    return SimpleNamespace(name=name, loads=mods["jsoncodec"].loads, **mods)


@pytest.fixture(
    scope="module",
    params=[
        "python",
        pytest.param("cython", marks=pytest.mark.skipif(COMPILED is None, reason=NO_COMPILED)),
    ],
)
def impl(request: pytest.FixtureRequest) -> SimpleNamespace:
    if request.param == "python":
        return _kernels(PURE, "python")
    assert COMPILED is not None
    return _kernels(COMPILED, "cython")


def outcome(fn: Any, *args: Any, **kwargs: Any) -> tuple[str, Any]:
    """("ok", value) or ("raise", exception type): what a call does, comparably."""
    try:
        return ("ok", fn(*args, **kwargs))
    except Exception as exc:  # noqa: BLE001 - the type is the thing compared
        return ("raise", type(exc))


# ---------------------------------------------------------------------------
# jsoncodec.dumps
# ---------------------------------------------------------------------------


class MyInt(int):
    pass


class MyFloat(float):
    pass


class MyStr(str):
    pass


class MyDict(dict):  # type: ignore[type-arg]
    pass


class MyList(list):  # type: ignore[type-arg]
    pass


class Color(enum.IntEnum):
    RED = 1
    BLUE = 2


def nested_list(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def nested_dict(depth: int) -> Any:
    value: Any = "leaf"
    for i in range(depth):
        value = {"k": value, "i": i}
    return value


def nested_mixed(depth: int) -> Any:
    value: Any = None
    for i in range(depth):
        value = [{"d": value}] if i % 2 else ({"t": value}, i)
    return value


CONTROL = "".join(chr(i) for i in range(0x20))

DUMPS_VECTORS: list[tuple[str, Any]] = [
    # scalars and empty containers
    ("none", None),
    ("true", True),
    ("false", False),
    ("zero", 0),
    ("empty-str", ""),
    ("empty-list", []),
    ("empty-dict", {}),
    ("empty-tuple", ()),
    ("empties-nested", {"a": [], "b": {}, "c": [[], {}], "d": ()}),
    ("list-of-empties", [[], {}, "", ()]),
    # nested
    ("nested", {"a": [1, 2, {"b": None, "c": [True, False]}], "d": {"e": {"f": "g"}}}),
    ("spec-example", {"x": "é", "f": 1.5, "t": (1, 2), 3: "k"}),
    ("key-order", {"z": 1, "a": 2, "m": 3}),
    ("mixed-list", [None, True, 1, -1.5, "s", [], {}, (1,)]),
    # unicode
    ("ascii", "hello world ~"),
    ("latin1", "é"),
    ("cjk", "日本語"),
    ("bmp-top", "\uffff"),
    ("bom", "\ufeff"),
    ("u2028", "\u2028"),
    ("u2029", "\u2029"),
    ("u007f", "\x7f"),
    ("u0080", "\x80"),
    ("u00ff", "\xff"),
    ("del-mixed", "a\x7fb\x80c"),
    ("astral-first", "\U00010000"),
    ("astral-last", "\U0010ffff"),
    ("emoji", "\U0001f600"),
    ("emoji-in-text", "a\U0001f600b"),
    ("emoji-family", "\U0001f468\u200d\U0001f469\u200d\U0001f467"),
    ("emoji-key", {"\U0001f600": "\U0001f389"}),
    ("astral-and-bmp", ["é", "\U0001d11e", "\u2028"]),
    ("pair-codepoints", "\ud83d\ude00"),  # two code points that make one pair: valid JSON
    # control characters, quotes, backslashes
    *[(f"ctrl-{i:02x}", chr(i)) for i in range(0x20)],
    ("ctrl-all", CONTROL),
    ("ctrl-key", {CONTROL: CONTROL}),
    ("ctrl-with-unicode", "\x00é\n\U0001f600\t"),
    ("quote", '"'),
    ("backslash", "\\"),
    ("slash", "/"),
    ("escaped-quote", '\\"'),
    ("quotes-mix", 'say "hi" \\ back\\slash'),
    ("quote-key", {'"k"': "\\v"}),
    # integers
    ("int-2**63-1", 2**63 - 1),
    ("int-2**63", 2**63),
    ("int-2**63+1", 2**63 + 1),
    ("int--2**63", -(2**63)),
    ("int--2**63-1", -(2**63) - 1),
    ("int--2**63+1", -(2**63) + 1),
    ("int-2**64-1", 2**64 - 1),
    ("int-2**64", 2**64),
    ("int-2**64+1", 2**64 + 1),
    ("int--2**64", -(2**64)),
    ("int--2**64-1", -(2**64) - 1),
    ("int-10**30", 10**30),
    ("int--10**30", -(10**30)),
    ("int-10**300", 10**300),
    ("ints-in-list", [2**63, 2**64, -(2**64), 2**64 - 1]),
    # floats
    ("f-0.0", 0.0),
    ("f--0.0", -0.0),
    ("f-1.0", 1.0),
    ("f-1e-05", 1e-05),
    ("f--1e-05", -1e-05),
    ("f-1e-4", 1e-4),
    ("f--1e-4", -1e-4),
    ("f-1.5e-4", 1.5e-4),
    ("f-9.99e-5", 9.99e-5),
    ("f-1.5e-7", 1.5e-7),
    ("f-1e15", 1e15),
    ("f-1e16", 1e16),
    ("f--1e16", -1e16),
    ("f-1e22", 1e22),
    ("f-1e100", 1e100),
    ("f-0.1", 0.1),
    ("f-0.1+0.2", 0.1 + 0.2),
    ("f-1/3", 1 / 3),
    ("f-2.5", 2.5),
    ("f-123456789.125", 123456789.125),
    ("f-9007199254740993", 9007199254740993.0),
    ("f-5e-324", 5e-324),
    ("f--5e-324", -5e-324),
    ("f-min-normal", 2.2250738585072014e-308),
    ("f-max", 1.7976931348623157e308),
    ("f--max", -1.7976931348623157e308),
    ("floats-in-dict", {"a": 1e16, "b": 1e-05, "c": -0.0, "d": 5e-324}),
    # tuples
    ("tuple", (1, "a", None)),
    ("tuple-nested", ((1, (2, (3,))), [()])),
    # non-str keys
    ("key-int", {1: "a", -2: "b"}),
    ("key-bigint", {2**70: 1}),
    ("key-float", {1.5: "a", 0.1: "b", 1e16: "c", -0.0: "d"}),
    ("key-bool", {True: 1, False: 0}),
    ("key-none", {None: 1}),
    ("key-mixed", {"s": 1, 2: 2, 3.5: 3, True: 4, None: 5}),
    ("key-nested", {"o": {1: {2.5: {None: [True]}}}}),
    # subclasses
    ("sub-int", MyInt(7)),
    ("sub-int-big", MyInt(2**70)),
    ("sub-float", MyFloat(1.5)),
    ("sub-float-small", MyFloat(1e-05)),
    ("sub-str", MyStr("abc\u00e9")),
    ("sub-str-key", {MyStr("k"): 1}),
    ("sub-dict", MyDict(a=1, b=[2])),
    ("sub-list", MyList([1, "x", None])),
    ("sub-nested", {"l": MyList([MyDict(x=MyInt(1))])}),
    ("intenum", Color.RED),
    ("intenum-list", [Color.RED, Color.BLUE]),
    ("intenum-key", {Color.BLUE: "b"}),
    ("bool-list", [True, False, True]),
    # deep nesting
    ("list-150", nested_list(150)),
    ("list-300", nested_list(300)),
    ("dict-150", nested_dict(150)),
    ("dict-300", nested_dict(300)),
    ("mixed-150", nested_mixed(150)),
    ("mixed-300", nested_mixed(300)),
    ("list-199", nested_list(199)),
    ("list-200", nested_list(200)),
    ("list-201", nested_list(201)),
    ("list-254", nested_list(254)),
    ("list-256", nested_list(256)),
]


@pytest.mark.parametrize("value", [v for _, v in DUMPS_VECTORS], ids=[i for i, _ in DUMPS_VECTORS])
def test_dumps_matches_stdlib(impl: SimpleNamespace, value: Any) -> None:
    out = impl.jsoncodec.dumps(value)
    assert type(out) is str
    assert out == stdlib_dumps(value)


def _circular_list() -> Any:
    a: list[Any] = [1]
    a.append(a)
    return a


def _circular_dict() -> Any:
    d: dict[str, Any] = {}
    d["self"] = [d]
    return d


NAN, INF = float("nan"), float("inf")

# Lone surrogates: the stdlib would write them as escapes PostgreSQL refuses.
LONE_SURROGATES: list[tuple[str, Any]] = [
    ("lone-high", "\ud800"),
    ("lone-low", "\udfff"),
    ("lone-in-text", "a\ud800b"),
    ("reversed-pair", "\udc00\ud800"),
    ("lone-key", {"\ud800": 1}),
    ("lone-in-list", ["ok", "\udbff"]),
    ("high-then-text-then-low", "\ud800x\udc00"),
    ("after-escaped-backslash", "\\\ud800"),
]

DUMPS_ERRORS: list[tuple[str, Any]] = [
    ("nan", NAN),
    ("inf", INF),
    ("-inf", -INF),
    ("nan-in-list", [1, NAN]),
    ("inf-in-dict", {"a": INF}),
    ("-inf-in-tuple", (1, -INF)),
    ("nan-deep", {"a": [1, {"b": [2, (3, {"c": NAN})]}]}),
    ("inf-deep-300", [nested_list(299), [INF]]),
    ("nan-key", {NAN: 1}),
    ("inf-key", {INF: 1}),
    ("float-sub-nan", MyFloat("nan")),
    ("set", {1, 2}),
    ("empty-set", set()),
    ("frozenset", frozenset({1})),
    ("set-nested", {"a": [{"b": {1}}]}),
    ("bytes", b"abc"),
    ("bytes-nested", ["x", b""]),
    ("bytearray", bytearray(b"abc")),
    ("memoryview", memoryview(b"abc")),
    ("datetime", datetime.datetime(2024, 1, 2, 3, 4, 5)),
    ("date", datetime.date(2024, 1, 2)),
    ("time", datetime.time(1, 2)),
    ("datetime-nested", {"when": datetime.datetime(2024, 1, 2)}),
    ("decimal", decimal.Decimal("1.5")),
    ("decimal-nested", [decimal.Decimal("1")]),
    ("uuid", uuid.UUID(int=1)),
    ("uuid-nested", {"id": uuid.UUID(int=2)}),
    ("object", object()),
    ("object-nested", [1, {"o": object()}]),
    ("complex", 1j),
    ("tuple-key", {(1, 2): "x"}),
    ("bytes-key", {b"k": 1}),
    ("circular-list", _circular_list()),
    ("circular-dict", _circular_dict()),
    ("too-deep-list", nested_list(100_000)),
]


@pytest.mark.parametrize("value", [v for _, v in DUMPS_ERRORS], ids=[i for i, _ in DUMPS_ERRORS])
def test_dumps_rejects_with_serialization_error(impl: SimpleNamespace, value: Any) -> None:
    with pytest.raises(Exception):  # the stdlib expression refuses it too
        stdlib_dumps(value)
    with pytest.raises(SerializationError):
        impl.jsoncodec.dumps(value)


def test_serialization_error_is_cairnq_error() -> None:
    assert issubclass(SerializationError, cairnq.CairnQError)


@needs_compiled
@pytest.mark.parametrize(
    "value",
    [v for _, v in DUMPS_VECTORS + DUMPS_ERRORS + LONE_SURROGATES],
    ids=[i for i, _ in DUMPS_VECTORS + DUMPS_ERRORS + LONE_SURROGATES],
)
def test_twins_dumps_agree(value: Any) -> None:
    assert COMPILED is not None
    assert outcome(COMPILED["jsoncodec"].dumps, value) == outcome(PURE["jsoncodec"].dumps, value)


# Text over the whole code space: lone surrogates and astral characters included.
try:
    _any_char = st.characters(codec=None)
except TypeError:  # older hypothesis without ``codec``: exclude nothing
    _any_char = st.characters(exclude_categories=())
_text = st.text(_any_char, max_size=12)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64 - 1, 2**64])
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text
)
json_values = st.recursive(
    _scalars,
    lambda children: (
        st.lists(children, max_size=5)
        | st.lists(children, max_size=5).map(tuple)
        | st.dictionaries(_text, children, max_size=5)
    ),
    max_leaves=25,
)


@settings(
    max_examples=500,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(value=json_values)
def test_dumps_property_matches_stdlib_and_twin(value: Any) -> None:
    # One property run covers both sets: compiled == pure == stdlib on each example
    # (or both refuse the lone surrogates the stdlib would write).
    expected = stdlib_dumps(value)
    if _has_lone_surrogate(value):
        for twin in [PURE] + ([COMPILED] if COMPILED is not None else []):
            with pytest.raises(SerializationError, match="lone surrogate"):
                twin["jsoncodec"].dumps(value)
        return
    read_back = repr(json.loads(expected))
    assert PURE["jsoncodec"].dumps(value) == expected
    assert repr(PURE["jsoncodec"].loads(expected)) == read_back
    if COMPILED is not None:
        assert COMPILED["jsoncodec"].dumps(value) == expected
        assert repr(COMPILED["jsoncodec"].loads(expected)) == read_back


def _has_lone_surrogate(value: Any) -> bool:
    """Whether the UTF-16 spelling of the value's strings has an unpaired
    surrogate (an adjacent high-low pair of code points spells one character)."""
    if isinstance(value, str):
        units = value.encode("utf-16-le", "surrogatepass")
        try:
            units.decode("utf-16-le")
        except UnicodeDecodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_has_lone_surrogate(v) for v in value)
    return False


# ---------------------------------------------------------------------------
# jsoncodec.loads
# ---------------------------------------------------------------------------


def _normalize(value: Any) -> Any:
    """What a value reads back as: tuples become lists, keys become strings."""
    return json.loads(stdlib_dumps(value))


LOADS_ROUND_TRIP = [
    v
    for name, v in DUMPS_VECTORS
    if not name.startswith(("list-", "dict-", "mixed-")) or name.endswith("150")
]


@pytest.mark.parametrize("value", LOADS_ROUND_TRIP)
def test_loads_round_trip(impl: SimpleNamespace, value: Any) -> None:
    text = impl.jsoncodec.dumps(value)
    back = impl.loads(text)
    assert back == _normalize(value)
    # bytes in, same value out
    assert impl.loads(text.encode("ascii")) == back


LOADS_TEXTS = [
    "{}",
    "[]",
    "null",
    "true",
    "0",
    "-0",
    "-0.0",
    '"\\ud800"',
    '"\\udfff"',
    '"a\\ud800b"',
    '"\\ud83d\\ude00"',
    '{"\\ud800":1}',
    '"\\u00e9\\u2028"',
    '"\\u0000\\u001f"',
    str(2**63 - 1),
    str(2**63),
    str(2**64 - 1),
    str(2**64),
    str(-(2**63)),
    str(-(2**63) - 1),
    str(-(2**64)),
    str(10**40),
    str(-(10**40)),
    f'{{"n":{2**64},"m":[{-(2**70)}]}}',
    "1e400",
    "-1e400",
    "1e-400",
    "5e-324",
    "1.7976931348623157e308",
    "123456789012345678901234567890.5",
    '{"a":[1,2,{"b":null}],"c":"\\"\\\\"}',
    ' [1 , 2] ',
]


@pytest.mark.parametrize("text", LOADS_TEXTS)
def test_loads_matches_stdlib(impl: SimpleNamespace, text: str) -> None:
    got = impl.loads(text)
    want = json.loads(text)
    assert repr(got) == repr(want)  # repr: keeps -0.0 vs 0.0 and int vs float apart
    assert repr(PURE["jsoncodec"].loads(text)) == repr(want)


def test_loads_big_int_exact(impl: SimpleNamespace) -> None:
    for n in (2**64, 2**64 + 1, -(2**63) - 1, 10**50, -(10**50)):
        got = impl.loads(str(n))
        assert type(got) is int and got == n
        assert impl.loads(impl.jsoncodec.dumps({"n": n})) == {"n": n}


def test_loads_lone_surrogate_escape(impl: SimpleNamespace) -> None:
    # Never written by us, but another SDK's SQLite rows may hold them: read as the stdlib does.
    assert impl.loads('"\\ud800"') == "\ud800"
    assert impl.loads(stdlib_dumps(["\ud800", "x\udfff"])) == ["\ud800", "x\udfff"]


@pytest.mark.parametrize("value", [v for _, v in LONE_SURROGATES], ids=[i for i, _ in LONE_SURROGATES])
def test_dumps_refuses_lone_surrogates(impl: SimpleNamespace, value: Any) -> None:
    with pytest.raises(SerializationError, match="lone surrogate"):
        impl.jsoncodec.dumps(value)
    with pytest.raises(SerializationError, match="lone surrogate"):
        impl.jsoncodec.dumps([1, {"nested": value}])


def test_encode_ids_refuses_lone_surrogates(impl: SimpleNamespace) -> None:
    with pytest.raises(SerializationError, match="lone surrogate"):
        impl.beats.encode_ids(["task_1", "\ud800"])


@needs_compiled
@pytest.mark.parametrize(
    "text",
    LOADS_TEXTS
    + [t.encode() for t in LOADS_TEXTS]
    + ['"\ud800"', "NaN", "[Infinity]", "\ufeff[1]", '"a\tb"', '{"a":1,"a":2}', "[" * 1100]
    + [b"\xff", b'"\xed\xa0\x80"', bytearray(b"[1]"), memoryview(b"[2]"), None, 5],
)
def test_twins_loads_agree(text: Any) -> None:
    assert COMPILED is not None
    c = outcome(COMPILED["jsoncodec"].loads, text)
    p = outcome(PURE["jsoncodec"].loads, text)
    assert repr(c) == repr(p)


@pytest.mark.parametrize("text", ["", "{", "[1,]", "{'a':1}", "nul", '"\\x"', "01"])
def test_loads_rejects_invalid(impl: SimpleNamespace, text: str) -> None:
    with pytest.raises(ValueError):
        impl.loads(text)


# ---------------------------------------------------------------------------
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


def run_isolated(impl_name: str, module: str, call: str) -> str:
    """Evaluate ``<kernels>[module].<call>`` in a forked child, so a crash (a read
    past the end of a row) fails one test instead of killing the session.
    Returns "ok:<repr>", "raise:<ExcType>" or "crash:<signal/status>"."""
    mods = PURE if impl_name == "python" else COMPILED
    assert mods is not None
    target = mods[module]
    if not hasattr(os, "fork"):  # pragma: no cover - POSIX only; run it in-process
        try:
            return "ok:" + repr(eval(f"m.{call}", {"m": target}))
        except Exception as exc:  # noqa: BLE001
            return "raise:" + type(exc).__name__
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: no pytest teardown, just the answer and out
        code = 0
        try:
            faulthandler.disable()  # the crash is the expected failure, not a traceback dump
            os.close(read_fd)
            try:
                out = "ok:" + repr(eval(f"m.{call}", {"m": target}))
            except Exception as exc:  # noqa: BLE001
                out = "raise:" + type(exc).__name__
            os.write(write_fd, out.encode())
        except BaseException:  # noqa: BLE001
            code = 1
        finally:
            os._exit(code)
    os.close(write_fd)
    chunks = []
    while True:
        chunk = os.read(read_fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"crash:signal {os.WTERMSIG(status)}"
    if os.WEXITSTATUS(status) != 0:
        return f"crash:exit {os.WEXITSTATUS(status)}"
    return b"".join(chunks).decode()


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


# ---------------------------------------------------------------------------
# beats
# ---------------------------------------------------------------------------

ID_LISTS: list[tuple[str, list[Any]]] = [
    ("empty", []),
    ("one", ["task_01HZY3K6J8V4Q2W9X5T7R3M1NB"]),
    ("many", [f"task_{i:026d}" for i in range(50)]),
    ("space", ["a b", " "]),
    ("empty-id", [""]),
    ("quote", ['ta"sk']),
    ("backslash", ["ta\\sk"]),
    ("slash", ["a/b"]),
    ("non-ascii", ["tâsk", "日本"]),
    ("astral", ["task_\U0001f600"]),
    ("control", ["a\nb", "\x00", "\t", "\x1f"]),
    ("del", ["a\x7fb"]),
    ("u2028", ["\u2028"]),
    ("mixed", ["plain", 'q"', "plain2"]),
    ("str-subclass", [MyStr("abc")]),
]


@pytest.mark.parametrize("ids", [v for _, v in ID_LISTS], ids=[i for i, _ in ID_LISTS])
def test_encode_ids(impl: SimpleNamespace, ids: list[Any]) -> None:
    assert impl.beats.encode_ids(ids) == stdlib_dumps(ids)
    assert impl.beats.encode_ids(tuple(ids)) == stdlib_dumps(ids)
    assert impl.beats.encode_ids(iter(ids)) == stdlib_dumps(ids)


def test_encode_ids_round_trip(impl: SimpleNamespace) -> None:
    ids = [f"task_{i}" for i in range(100)] + ['x"\\\n\u00e9']
    assert json.loads(impl.beats.encode_ids(ids)) == ids


@pytest.mark.parametrize("ids", [[b"x"], [float("nan")], [{1}]])
def test_encode_ids_rejects(impl: SimpleNamespace, ids: list[Any]) -> None:
    with pytest.raises(SerializationError):
        impl.beats.encode_ids(ids)


def test_decode_beats(impl: SimpleNamespace) -> None:
    rows = [("a", None), ("b", 1_700_000_000_000), ("c", 0), ("d", None)]
    want = {"a": False, "b": True, "c": True, "d": False}
    assert impl.beats.decode_beats(rows) == want
    assert impl.beats.decode_beats([list(r) for r in rows]) == want
    assert impl.beats.decode_beats(iter(rows)) == want
    assert impl.beats.decode_beats([]) == {}
    mixed = [("a", None), ["b", 5]]
    assert impl.beats.decode_beats(mixed) == {"a": False, "b": True}
    # a wider row: the first two columns are read
    assert impl.beats.decode_beats([("a", None, "x"), ("b", 3, None)]) == {"a": False, "b": True}
    # last row wins for a repeated id
    assert impl.beats.decode_beats([("a", None), ("a", 1)]) == {"a": True}
    out = impl.beats.decode_beats(rows)
    assert all(type(v) is bool for v in out.values())


@pytest.mark.parametrize(
    "call",
    [
        "decode_beats([('a',)])",
        "decode_beats([['a']])",
        "decode_beats([()])",
        "decode_beats([[]])",
        "decode_beats([('a', None), ('b',)])",
    ],
)
def test_decode_beats_short_row(impl: SimpleNamespace, call: str) -> None:
    # a row without its cancel column is an IndexError, not a guess from stray memory
    assert run_isolated(impl.name, "beats", call) == "raise:IndexError"


@needs_compiled
def test_twins_beats_agree() -> None:
    assert COMPILED is not None
    rng = random.Random(3)
    pool = ["a", 'b"', "c\\", "é", "\n", "\x7f", "task_01HZ", "", " "]
    for _ in range(300):
        ids = [rng.choice(pool) + str(rng.randrange(100)) for _ in range(rng.randrange(8))]
        assert COMPILED["beats"].encode_ids(ids) == PURE["beats"].encode_ids(ids)
        rows = [(i, rng.choice([None, 1, 0])) for i in ids]
        assert COMPILED["beats"].decode_beats(rows) == PURE["beats"].decode_beats(rows)


# ---------------------------------------------------------------------------
# backoff
# ---------------------------------------------------------------------------


def ref_delay(attempt: int, base_ms: int, max_ms: int, r: float) -> int:
    """OPERATIONS.md §5.4, literally."""
    if base_ms <= 0:
        return 0
    exponent = max(0, attempt - 1)
    if exponent > max(max_ms, 0).bit_length():
        window = max_ms  # base_ms * 2**exponent > max_ms (without building 2**2**70)
    else:
        window = min(max_ms, base_ms * 2**exponent)
    floor = window // 2
    return floor + int(r * (window - floor))


BASES = [-1000, -1, 0, 1, 3, 250, 1000, 2**40]
CAPS = [0, 1, 7, 1000, 30000, 2**40, 2**62, 2**63 - 1]
RANDS = [0.0, 0.5, 0.999999]


@pytest.mark.parametrize("r", RANDS)
def test_backoff_exact_grid(impl: SimpleNamespace, r: float) -> None:
    fn = impl.backoff.retry_delay_ms
    for attempt in range(0, 71):
        for base in BASES:
            for cap in CAPS:
                got = fn(attempt, base, cap, lambda: r)
                assert got == ref_delay(attempt, base, cap, r), (attempt, base, cap, r)
                assert type(got) is int


def test_backoff_spec_windows(impl: SimpleNamespace) -> None:
    fn = impl.backoff.retry_delay_ms
    lo, hi = 0.0, 0.999999
    assert fn(1, 1000, 30000, lambda: lo) == 500
    assert fn(1, 1000, 30000, lambda: hi) == 999
    assert fn(2, 1000, 30000, lambda: lo) == 1000
    assert fn(2, 1000, 30000, lambda: hi) == 1999
    assert fn(3, 1000, 30000, lambda: lo) == 2000
    assert fn(3, 1000, 30000, lambda: hi) == 3999
    assert fn(0, 1000, 30000, lambda: lo) == 500  # attempt 0 behaves as 1
    assert fn(-5, 1000, 30000, lambda: lo) == 500
    for attempt in (6, 7, 10, 30, 62, 63, 64, 70):
        assert fn(attempt, 1000, 30000, lambda: lo) == 15000
        assert fn(attempt, 1000, 30000, lambda: hi) == 29999
    assert fn(5, 1000, 30000, lambda: 0.5) == 12000  # window 16000: 8000 + 4000


@pytest.mark.parametrize("base", [0, -1, -(2**62)])
def test_backoff_non_positive_base_is_zero(impl: SimpleNamespace, base: int) -> None:
    calls = []

    def rand() -> float:
        calls.append(1)
        return 0.5

    for attempt in (0, 1, 5, 100):
        assert impl.backoff.retry_delay_ms(attempt, base, 30000, rand) == 0
    assert impl.backoff.retry_delay_ms(1, base, 30000) == 0
    assert calls == []  # no jitter drawn for a zero delay


def test_backoff_huge_attempt_does_not_hang(impl: SimpleNamespace) -> None:
    t0 = time.perf_counter()
    for attempt in (1000, 10_000, 2**31, 2**62):
        assert impl.backoff.retry_delay_ms(attempt, 1000, 30000, lambda: 0.0) == 15000
    assert time.perf_counter() - t0 < 1.0


@pytest.mark.parametrize(
    "attempt,base,cap",
    [
        (2**63 - 1, 1000, 30000),
        (2**63, 1000, 30000),
        (2**70, 1000, 30000),
        (-(2**70), 1000, 30000),
        (3, 1000, 2**64),
        (70, 1000, 2**70),
        (3, 2**64, 30000),
    ],
    ids=["attempt-2**63-1", "attempt-2**63", "attempt-2**70", "attempt--2**70",
         "cap-2**64", "cap-2**70", "base-2**64"],  # fmt: skip
)
def test_backoff_beyond_64_bits(impl: SimpleNamespace, attempt: int, base: int, cap: int) -> None:
    # Python ints are unbounded; the formula is too. Both twins must follow it.
    got = impl.backoff.retry_delay_ms(attempt, base, cap, lambda: 0.5)
    assert got == ref_delay(attempt, base, cap, 0.5)


def test_backoff_default_rand_bounds(impl: SimpleNamespace) -> None:
    fn = impl.backoff.retry_delay_ms
    seen = set()
    for _ in range(3000):
        d = fn(3, 1000, 30000)
        assert 2000 <= d < 4000
        seen.add(d)
        assert 15000 <= fn(20, 1000, 30000) < 30000
        assert 500 <= fn(1, 1000, 30000) < 1000
    assert len(seen) > 100  # actually random


def test_backoff_rand_is_called_once(impl: SimpleNamespace) -> None:
    calls = []

    def rand() -> float:
        calls.append(1)
        return 0.25

    assert impl.backoff.retry_delay_ms(2, 1000, 30000, rand) == 1250
    assert len(calls) == 1


@needs_compiled
def test_twins_backoff_agree() -> None:
    assert COMPILED is not None
    rng = random.Random(11)
    c, p = COMPILED["backoff"].retry_delay_ms, PURE["backoff"].retry_delay_ms
    for attempt in list(range(-3, 80)) + [100, 1000, 2**31, 2**62]:
        for base in BASES + [7, 999, 2**50]:
            for cap in CAPS + [-5, 31, 2**50]:
                for r in RANDS + [rng.random()]:
                    assert c(attempt, base, cap, lambda: r) == p(attempt, base, cap, lambda: r), (
                        attempt,
                        base,
                        cap,
                        r,
                    )


@needs_compiled
@pytest.mark.parametrize(
    "args",
    [(3.0, 1000, 30000), (3, 1000.0, 30000), (3, 1000, 30000.0), ("3", 1000, 30000), (None, 1, 1)],
    ids=["float-attempt", "float-base", "float-cap", "str-attempt", "none-attempt"],
)
def test_twins_backoff_non_int_args(args: tuple[Any, ...]) -> None:
    assert COMPILED is not None
    c = outcome(COMPILED["backoff"].retry_delay_ms, *args, lambda: 0.5)
    p = outcome(PURE["backoff"].retry_delay_ms, *args, lambda: 0.5)
    assert c == p


# ---------------------------------------------------------------------------
# ids (ULID)
# ---------------------------------------------------------------------------


def ref_ulid(ts: int, rnd: bytes) -> str:
    value = (ts << 80) | int.from_bytes(rnd, "big")
    return "".join(ALPHABET[(value >> (5 * (25 - i))) & 31] for i in range(26))


def ulid_ts(ulid: str) -> int:
    n = 0
    for ch in ulid[:10]:
        n = n * 32 + ALPHABET.index(ch)
    return n


def check_ulid_shape(u: str) -> None:
    assert type(u) is str and len(u) == 26
    assert set(u) <= set(ALPHABET)
    assert u[0] in "01234567"


@pytest.mark.parametrize(
    "ts,rnd",
    [
        (0, bytes(10)),
        (0, b"\xff" * 10),
        (2**48 - 1, bytes(10)),
        (2**48 - 1, b"\xff" * 10),
        (1, b"\x00" * 9 + b"\x01"),
        (1_700_000_000_000, bytes(range(10))),
        (1_700_000_000_000, b"\x80" + bytes(9)),
        (2**47, b"\x01" * 10),
        (True, bytes(10)),
    ],
)
def test_encode_ulid_vectors(impl: SimpleNamespace, ts: int, rnd: bytes) -> None:
    u = impl.ids.encode_ulid(ts, rnd)
    check_ulid_shape(u)
    assert u == ref_ulid(ts, rnd)
    assert ulid_ts(u) == ts
    assert int.from_bytes(rnd, "big") == sum(
        ALPHABET.index(ch) << (5 * (15 - i)) for i, ch in enumerate(u[10:])
    )


def test_encode_ulid_known_values(impl: SimpleNamespace) -> None:
    assert impl.ids.encode_ulid(0, bytes(10)) == "0" * 26
    assert impl.ids.encode_ulid(2**48 - 1, b"\xff" * 10) == "7" + "Z" * 25
    assert impl.ids.encode_ulid(2**48 - 1, bytes(10)) == "7ZZZZZZZZZ" + "0" * 16
    assert impl.ids.encode_ulid(0, b"\xff" * 10) == "0" * 10 + "Z" * 16


def test_encode_ulid_random(impl: SimpleNamespace) -> None:
    rng = random.Random(5)
    for _ in range(3000):
        ts = rng.choice([rng.randrange(2**48), rng.randrange(2**41), rng.randrange(1024)])
        rnd = rng.randbytes(10)
        u = impl.ids.encode_ulid(ts, rnd)
        assert u == ref_ulid(ts, rnd)
        assert ulid_ts(u) == ts


@pytest.mark.parametrize(
    "ts",
    [-1, -(2**47), -(2**63), 2**48, 2**48 + 1, 2**62, 2**63 - 1, 2**63, 2**64, -(2**64), 10**30],
)
def test_encode_ulid_timestamp_out_of_range(impl: SimpleNamespace, ts: int) -> None:
    with pytest.raises(ValueError):
        impl.ids.encode_ulid(ts, bytes(10))
    with pytest.raises(ValueError):
        impl.ids.new_ulid(ts)


@pytest.mark.parametrize("n", [0, 1, 9, 11, 16])
def test_encode_ulid_wrong_byte_length(impl: SimpleNamespace, n: int) -> None:
    with pytest.raises(ValueError):
        impl.ids.encode_ulid(1, bytes(n))


@pytest.mark.parametrize(
    "rnd", [bytearray(range(10)), memoryview(bytes(range(10)))], ids=["bytearray", "memoryview"]
)
def test_encode_ulid_bytes_like(impl: SimpleNamespace, rnd: Any) -> None:
    # the twin takes any sized bytes-like object (int.from_bytes does)
    assert impl.ids.encode_ulid(7, rnd) == ref_ulid(7, bytes(rnd))


def test_ulid_sorts_by_timestamp(impl: SimpleNamespace) -> None:
    rng = random.Random(9)
    stamps = sorted({rng.randrange(2**48) for _ in range(500)} | {0, 1, 2**48 - 1})
    ids = [impl.ids.encode_ulid(ts, rng.randbytes(10)) for ts in stamps]
    assert ids == sorted(ids)
    # within one ms: ordered by the random part
    same = [impl.ids.encode_ulid(42, i.to_bytes(10, "big")) for i in (0, 1, 255, 256, 2**79)]
    assert same == sorted(same)


def test_new_ulid(impl: SimpleNamespace) -> None:
    before = int(time.time() * 1000)
    ids = [impl.ids.new_ulid() for _ in range(200)]
    after = int(time.time() * 1000)
    for u in ids:
        check_ulid_shape(u)
        assert before <= ulid_ts(u) <= after
    assert len(set(ids)) == len(ids)
    fixed = [impl.ids.new_ulid(1_234_567) for _ in range(50)]
    assert all(ulid_ts(u) == 1_234_567 for u in fixed)
    assert len(set(fixed)) == 50
    assert ulid_ts(impl.ids.new_ulid(0)) == 0
    assert ulid_ts(impl.ids.new_ulid(2**48 - 1)) == 2**48 - 1


@needs_compiled
def test_twins_ulid_agree() -> None:
    assert COMPILED is not None
    rng = random.Random(13)
    c, p = COMPILED["ids"].encode_ulid, PURE["ids"].encode_ulid
    for ts in (0, 1, 2**16 - 1, 2**16, 2**32, 2**47, 2**48 - 2, 2**48 - 1):
        for rnd in (bytes(10), b"\xff" * 10, bytes(range(10))):
            assert c(ts, rnd) == p(ts, rnd)
    for _ in range(5000):
        ts = rng.randrange(2**48)
        rnd = rng.randbytes(10)
        assert c(ts, rnd) == p(ts, rnd)


@needs_compiled
@pytest.mark.parametrize(
    "ts,rnd",
    [
        (-1, bytes(10)),
        (2**48, bytes(10)),
        (2**63, bytes(10)),
        (2**64, bytes(10)),
        (-(2**64), bytes(10)),
        (1, bytes(9)),
        (1, None),
        (1, "0123456789"),
        (1.0, bytes(10)),
        (1, bytearray(10)),
    ],
    ids=["neg", "2**48", "2**63", "2**64", "-2**64", "9-bytes", "none", "str", "float-ts",
         "bytearray"],  # fmt: skip
)
def test_twins_ulid_same_exceptions(ts: Any, rnd: Any) -> None:
    assert COMPILED is not None
    assert outcome(COMPILED["ids"].encode_ulid, ts, rnd) == outcome(PURE["ids"].encode_ulid, ts, rnd)


# ---------------------------------------------------------------------------
# Selection of the active implementation
# ---------------------------------------------------------------------------


def test_speedups_flag() -> None:
    assert cairnq.SPEEDUPS == _speedups.IMPLEMENTATION
    assert cairnq.SPEEDUPS in ("python", "cython")
    forced = os.environ.get("CAIRNQ_PURE_PYTHON", "") not in ("", "0")
    if COMPILED is not None and not forced:
        assert cairnq.SPEEDUPS == "cython"
    if COMPILED is None or forced:
        assert cairnq.SPEEDUPS == "python"


def test_active_kernels_match_flag() -> None:
    active = COMPILED if _speedups.IMPLEMENTATION == "cython" else PURE
    assert active is not None
    assert _speedups.decode_task is active["rows"].decode_task
    assert _speedups.decode_tasks is active["rows"].decode_tasks
    assert _speedups.decode_mapping is active["rows"].decode_mapping
    assert _speedups.dumps is active["jsoncodec"].dumps
    assert _speedups.encode_ids is active["beats"].encode_ids
    assert _speedups.decode_beats is active["beats"].decode_beats
    assert _speedups.retry_delay_ms is active["backoff"].retry_delay_ms
    assert _speedups.new_ulid is active["ids"].new_ulid
    assert _speedups.loads is active["jsoncodec"].loads


def _run_flag(value: str | None) -> str:
    env = dict(os.environ)
    env.pop("CAIRNQ_PURE_PYTHON", None)
    if value is not None:
        env["CAIRNQ_PURE_PYTHON"] = value
    proc = subprocess.run(
        [sys.executable, "-c", "import cairnq; print(cairnq.SPEEDUPS)"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_pure_python_env_forces_twins() -> None:
    assert _run_flag("1") == "python"


def test_env_unset_or_zero_uses_compiled() -> None:
    want = "python" if COMPILED is None else "cython"
    assert _run_flag(None) == want
    assert _run_flag("0") == want
