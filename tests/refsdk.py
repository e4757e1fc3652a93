"""The reference SDK (``cairnq==0.15.1`` from PyPI), in a virtualenv of its own.

Its import name is ours too, so it never shares an interpreter with the code
under test: snippets run in a subprocess of that venv's Python, in isolated
mode (no PYTHONPATH, no cwd on sys.path), and print one JSON document back.

The venv is built on first use, with the Python running the tests (what the
reference says can depend on it: the standard library's JSON messages
differ between 3.11 and 3.12), and cached under ``.cache/`` at the
repository root, one per Python version (override with ``CAIRNQ_REF_VENV``);
a file lock keeps parallel test processes from building it twice.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import textwrap
import venv
from pathlib import Path
from typing import Any

REFERENCE = "cairnq[postgres]==0.15.1"
ROOT = Path(__file__).resolve().parent.parent
_PY = "py%d.%d" % sys.version_info[:2]
VENV = Path(os.environ.get("CAIRNQ_REF_VENV", ROOT / ".cache" / f"refsdk-0.15.1-{_PY}"))


def python() -> Path:
    """The reference venv's interpreter, building the venv if needed."""
    exe = VENV / "bin" / "python"
    marker = VENV / ".ready"
    if marker.exists():
        return exe
    VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(VENV.parent / ".refsdk.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not marker.exists():
            venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
            subprocess.run(
                [str(exe), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", REFERENCE],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            marker.write_text(REFERENCE)
    return exe


_PRELUDE = '''
import asyncio, json, sys
import cairnq
assert cairnq.__version__ == "0.15.1", cairnq.__version__
ARGS = json.loads(sys.argv[1])
def emit(value):
    sys.stdout.write("\\n@@RESULT@@" + json.dumps(value, default=repr))
'''


def run(script: str, args: Any = None, *, timeout: float = 120) -> Any:
    """Run ``script`` with the reference SDK; returns what it passed to ``emit``.

    The script sees ``ARGS`` (the JSON-decoded ``args``) and calls
    ``emit(value)`` once with a JSON-serializable result.
    """
    code = _PRELUDE + textwrap.dedent(script)
    proc = subprocess.run(
        [str(python()), "-I", "-c", code, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(VENV),
    )
    if proc.returncode != 0:
        raise RuntimeError(f"reference SDK script failed ({proc.returncode}):\n{proc.stderr}")
    _, marker, payload = proc.stdout.rpartition("@@RESULT@@")
    if not marker:
        raise RuntimeError(f"reference SDK script emitted nothing:\n{proc.stdout}\n{proc.stderr}")
    return json.loads(payload)


def spawn(script: str, args: Any = None, **popen: Any) -> subprocess.Popen[str]:
    """Start ``script`` under the reference SDK without waiting (workers)."""
    code = _PRELUDE + textwrap.dedent(script)
    return subprocess.Popen(
        [str(python()), "-I", "-c", code, json.dumps(args)],
        text=True,
        cwd=str(VENV),
        **popen,
    )


if __name__ == "__main__":  # `python tests/refsdk.py` builds the venv ahead of time
    print(python())
    sys.exit(0)
