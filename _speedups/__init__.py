"""The hot kernels, compiled (Cython) when available, pure Python otherwise.

Each kernel has a pure-Python twin held to the same test vectors:

    rows        database rows -> Task objects;          rows_c.pyx      / rows.py
                an insert's row from its bound values
    jsoncodec   strict JSON encoding (orjson-backed)    jsoncodec_c.pyx / jsoncodec.py
    beats       batch heartbeat id marshalling          beats_c.pyx     / beats.py
    backoff     retry backoff with equal jitter         backoff_c.pyx   / backoff.py
    ids         ULID task and worker ids                ids_c.pyx       / ids.py
    steps       a coroutine's step, its return value    steps_c.pyx     / steps.py
                without a StopIteration

``IMPLEMENTATION`` says which set is active ("cython" or "python"); it is also
exported as ``cairnq.SPEEDUPS``. Set ``CAIRNQ_PURE_PYTHON=1`` before importing
cairnq to force the pure-Python twins.
"""

from __future__ import annotations

import os
from types import ModuleType

from cairnq._speedups import backoff as _backoff_py
from cairnq._speedups import beats as _beats_py
from cairnq._speedups import ids as _ids_py
from cairnq._speedups import jsoncodec as _json_py
from cairnq._speedups import rows as _rows_py
from cairnq._speedups import steps as _steps_py

__all__ = [
    "IMPLEMENTATION",
    "decode_task",
    "decode_tasks",
    "decode_mapping",
    "echo_row",
    "fill_rows",
    "dumps",
    "loads",
    "encode_ids",
    "decode_beats",
    "retry_delay_ms",
    "new_ulid",
    "send",
    "compiled",
    "pure",
]


def _load_compiled() -> dict[str, ModuleType] | None:
    try:
        from cairnq._speedups import backoff_c, beats_c, ids_c, jsoncodec_c, rows_c, steps_c
    except ImportError:
        return None
    return {
        "rows": rows_c,
        "jsoncodec": jsoncodec_c,
        "beats": beats_c,
        "backoff": backoff_c,
        "ids": ids_c,
        "steps": steps_c,
    }


#: The pure-Python twins, always importable (tests run both sets side by side).
pure: dict[str, ModuleType] = {
    "rows": _rows_py,
    "jsoncodec": _json_py,
    "beats": _beats_py,
    "backoff": _backoff_py,
    "ids": _ids_py,
    "steps": _steps_py,
}
#: The compiled kernels, or None when they were not built (no compiler at install).
compiled = _load_compiled()

_forced_pure = os.environ.get("CAIRNQ_PURE_PYTHON", "") not in ("", "0")
IMPLEMENTATION = "python" if _forced_pure or compiled is None else "cython"

# Typed as the twins; rebound to the compiled kernels when those are active.
decode_task = _rows_py.decode_task
decode_tasks = _rows_py.decode_tasks
decode_mapping = _rows_py.decode_mapping
echo_row = _rows_py.echo_row
fill_rows = _rows_py.fill_rows
dumps = _json_py.dumps
loads = _json_py.loads
encode_ids = _beats_py.encode_ids
decode_beats = _beats_py.decode_beats
retry_delay_ms = _backoff_py.retry_delay_ms
new_ulid = _ids_py.new_ulid
send = _steps_py.send
if IMPLEMENTATION == "cython":
    assert compiled is not None
    decode_task = compiled["rows"].decode_task
    decode_tasks = compiled["rows"].decode_tasks
    decode_mapping = compiled["rows"].decode_mapping
    echo_row = compiled["rows"].echo_row
    fill_rows = compiled["rows"].fill_rows
    dumps = compiled["jsoncodec"].dumps
    loads = compiled["jsoncodec"].loads
    encode_ids = compiled["beats"].encode_ids
    decode_beats = compiled["beats"].decode_beats
    retry_delay_ms = compiled["backoff"].retry_delay_ms
    new_ulid = compiled["ids"].new_ulid
    send = compiled["steps"].send
