"""Helpers of the kernel tests (``tests/kernels/test_kernel_*.py``): every
vector runs through the compiled kernel and its pure-Python twin (the
``impl`` fixture), which must agree."""

from __future__ import annotations

import dataclasses
import enum
import faulthandler
import json
import os
from types import SimpleNamespace
from typing import Any

import pytest

from cairnq import Task, _speedups

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


CONTROL = "".join(chr(i) for i in range(0x20))


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
