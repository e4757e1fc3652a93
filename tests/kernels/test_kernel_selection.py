"""Kernels, compiled and pure Python on the same vectors: Selection of the active implementation."""

from __future__ import annotations

import os
import subprocess
import sys

from kernel_kit import COMPILED, PURE

import cairnq
from cairnq import _speedups

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
    assert _speedups.send is active["steps"].send


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
