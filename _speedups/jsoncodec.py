"""Strict JSON at the storage boundary, pure Python. Twin of ``jsoncodec_c.pyx``.

``dumps`` writes exactly what the reference SDK writes (the stdlib encoder with
``allow_nan=False``, compact separators, ``ensure_ascii=True``), so a task stored
by either SDK is byte-identical; anything that is not strict JSON raises
``SerializationError`` instead of being coerced. ``loads`` reads through orjson
and falls back to the stdlib for the few valid documents orjson refuses (integers
beyond 64 bits, lone surrogate escapes, out-of-range exponents).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from cairnq.errors import SerializationError

_encoder = json.JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(",", ":"))
_encode = _encoder.encode
_orjson_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError
_stdlib_loads = json.loads


def dumps(value: Any) -> str:
    try:
        return _encode(value)
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise SerializationError(f"value is not JSON-serializable: {exc}") from exc


def loads(text: Any) -> Any:
    try:
        return _orjson_loads(text)
    except _JSONDecodeError:
        return _stdlib_loads(text)
