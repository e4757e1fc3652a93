"""Strict JSON at the storage boundary, pure Python. Twin of ``jsoncodec_c.pyx``.

``dumps`` writes exactly what the reference SDK writes (the stdlib encoder with
``allow_nan=False``, compact separators, ``ensure_ascii=True``), so a task stored
by either SDK is byte-identical; anything that is not strict JSON raises
``SerializationError`` instead of being coerced.

``loads`` reads through orjson, except where orjson would not give what the
stdlib gives: integers beyond 64 bits (orjson returns a lossy float for them,
silently), lone surrogate escapes and out-of-range exponents (orjson raises).
``dumps`` also refuses lone surrogates (a str with a code point in
U+D800..U+DFFF that is not half of a pair): the stdlib would write them as
``\\udXXX`` escapes, which SQLite stores but PostgreSQL's jsonb, and every
UTF-8 reader, refuses. One rule for both databases: SerializationError.

Text with a run of 19 or more digits goes straight to the stdlib (a cheap,
conservative test: such runs are rare and the stdlib is always right); the
rest falls back on any orjson error.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from cairnq.errors import SerializationError

_encoder = json.JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(",", ":"))
_encode = _encoder.encode
_orjson_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError
_stdlib_loads = json.loads
_LONG_DIGITS = re.compile(r"[0-9]{19}")
# Every escape of ensure_ascii output, in order: a backslash pair is its own
# escape, so a "\\u" after an escaped backslash is never taken for one.
_ESCAPE = re.compile(r"\\(u[0-9a-f]{4}|.)")


def dumps(value: Any) -> str:
    try:
        text = _encode(value)
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise SerializationError(str(exc)) from exc  # the encoder's own words, as 0.15.1
    if "\\ud" in text:  # a surrogate escape: legal only as half of a pair
        _refuse_lone_surrogates(text)
    return text


def _refuse_lone_surrogates(text: str) -> None:
    high_end = -1  # where the last unpaired high surrogate's escape ended
    for m in _ESCAPE.finditer(text):
        escape = m.group(1)
        unit = int(escape[1:], 16) if len(escape) == 5 else -1
        if high_end >= 0:
            if m.start() == high_end and 0xDC00 <= unit <= 0xDFFF:
                high_end = -1  # a pair: one code point above U+FFFF
                continue
            break
        if 0xD800 <= unit <= 0xDBFF:
            high_end = m.end()
        elif 0xDC00 <= unit <= 0xDFFF:
            break
    else:
        if high_end < 0:
            return
    raise SerializationError(
        "str contains a lone surrogate, which is not valid Unicode "
        "(PostgreSQL and every UTF-8 reader refuse it)"
    )


def loads(text: Any) -> Any:
    if _LONG_DIGITS.search(text if isinstance(text, str) else text.decode("utf-8", "replace")):
        return _stdlib_loads(text)
    try:
        return _orjson_loads(text)
    except _JSONDecodeError:
        return _stdlib_loads(text)
