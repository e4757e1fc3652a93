"""Kernels, compiled and pure Python on the same vectors: jsoncodec.dumps."""

from __future__ import annotations

import datetime
import decimal
import json
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernel_kit import (  # noqa: F401 (fixtures)
    COMPILED,
    DUMPS_VECTORS,
    LONE_SURROGATES,
    PURE,
    MyFloat,
    impl,
    needs_compiled,
    nested_list,
    outcome,
    stdlib_dumps,
)

import cairnq
from cairnq import SerializationError

# jsoncodec.dumps
# ---------------------------------------------------------------------------


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
