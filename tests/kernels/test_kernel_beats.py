"""Kernels, compiled and pure Python on the same vectors: beats."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace
from typing import Any

import pytest
from kernel_kit import COMPILED, PURE, MyStr, impl, needs_compiled, run_isolated, stdlib_dumps  # noqa: F401 (fixtures)

from cairnq import SerializationError

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
