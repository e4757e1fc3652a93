"""Strict JSON at the storage boundary, pure Python. Twin of ``jsoncodec_c.pyx``.

``dumps`` writes exactly what the reference SDK writes (the stdlib encoder with
``allow_nan=False``, compact separators, ``ensure_ascii=True``), so a task stored
by either SDK is byte-identical; anything that is not strict JSON raises
``SerializationError`` instead of being coerced.

``loads`` reads through orjson, except where orjson would not give what the
stdlib gives: integers beyond 64 bits (orjson returns a lossy float for them,
silently), lone surrogate escapes and out-of-range exponents (orjson raises).
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


def dumps(value: Any) -> str:
    try:
        return _encode(value)
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise SerializationError(f"value is not JSON-serializable: {exc}") from exc


def loads(text: Any) -> Any:
    if _LONG_DIGITS.search(text if isinstance(text, str) else text.decode("utf-8", "replace")):
        return _stdlib_loads(text)
    try:
        return _orjson_loads(text)
    except _JSONDecodeError:
        return _stdlib_loads(text)
