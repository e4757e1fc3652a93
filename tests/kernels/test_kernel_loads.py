"""Kernels, compiled and pure Python on the same vectors: jsoncodec.loads."""

from __future__ import annotations

import json
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
    impl,
    needs_compiled,
    outcome,
    stdlib_dumps,
)

from cairnq import SerializationError

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
    " [1 , 2] ",
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


@pytest.mark.parametrize(
    "value", [v for _, v in LONE_SURROGATES], ids=[i for i, _ in LONE_SURROGATES]
)
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


# Where a long number sits in the text. Numbers of 19 digits and more go to
# the stdlib (orjson reads an integer beyond 64 bits as a lossy float,
# silently); the compiled scan reads only every 19th character until it
# meets a digit, so a number is tried at every offset around those
# positions, beside runs one digit short and inside text of other widths.
_BIG = 2**64 + 7  # 20 digits: a float if orjson read it


def _long_number_texts() -> list[str]:
    texts = []
    for lead in range(0, 42):
        for fill in ("a", "1", "\u00e9", "\u4e2d", "\U0001f600"):
            pad = json.loads(f'"{fill}"') * lead
            texts.append(f'["{pad}",{_BIG}]')
            texts.append(f'["{pad}",{10**18 - 1},{_BIG}]')  # an 18-digit run before it
            texts.append(f'["{pad}",{_BIG},"{pad}"]')
    for digits in (18, 19, 20, 37, 38, 39):
        n = int("9" * digits)
        texts += [str(n), f"[{n}]", f"[1,{n},2]", f'{{"{"5" * 18}":{n}}}']
    return texts


@pytest.mark.parametrize("text", _long_number_texts())
def test_loads_long_numbers_at_every_offset(impl: SimpleNamespace, text: str) -> None:
    assert repr(impl.loads(text)) == repr(json.loads(text))


# Text with digits and numbers of every length in random places.
_pieces = st.one_of(
    st.integers(min_value=-(10**45), max_value=10**45).map(str),
    st.text(alphabet="0123456789", min_size=1, max_size=45).map(lambda d: json.dumps(d)),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30).map(json.dumps),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
)


@settings(max_examples=500, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=st.lists(_pieces, max_size=12))
def test_loads_property_matches_stdlib(pieces: list[str]) -> None:
    text = "[" + ",".join(pieces) + "]"
    want = repr(json.loads(text))
    assert repr(PURE["jsoncodec"].loads(text)) == want
    if COMPILED is not None:
        assert repr(COMPILED["jsoncodec"].loads(text)) == want
