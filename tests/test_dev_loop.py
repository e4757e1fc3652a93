"""A source tree that was never installed stops at once with one message that
says what to run: for ``import cairnq`` and for pytest's collection alike.

The uninstalled tree is a copy of cairnq/ (without the _speedups/ and
protocol/ that setup.py maps into it) run with ``-S``, so no installed or
editable cairnq can answer the import.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INSTRUCTIONS = ('pip install -e ".[postgres,test]"', "bash scripts/test.sh")


def _source_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "clone"
    shutil.copytree(ROOT / "cairnq", tree / "cairnq", ignore=shutil.ignore_patterns("__pycache__"))
    (tree / "tests").mkdir()
    for name in ("conftest.py", "backends.py"):
        shutil.copy(ROOT / "tests" / name, tree / "tests" / name)
    (tree / "tests" / "test_anything.py").write_text("def test_nothing():\n    pass\n")
    return tree


def _run(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # -S: no site-packages, hence no editable-install finder; pytest and its
    # dependencies come from PYTHONPATH instead.
    env = {**os.environ, "PYTHONPATH": sysconfig.get_paths()["purelib"]}
    command = [sys.executable, "-S", *args]
    return subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=120)


def _one_message(proc: subprocess.CompletedProcess[str]) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    for wanted in INSTRUCTIONS:
        assert out.count(wanted) == 1, out
    assert "ModuleNotFoundError" not in out and "During handling" not in out, out
    return out


def test_importing_the_source_tree_says_what_to_run(tmp_path: Path) -> None:
    out = _one_message(_run(_source_tree(tmp_path), "-c", "import cairnq"))
    assert "cairnq is not installed" in out


def test_pytest_on_the_source_tree_says_what_to_run(tmp_path: Path) -> None:
    # (-p no:cairnq: the plugin an editable install registers cannot load under -S)
    args = ("-m", "pytest", "-p", "no:cairnq", "-p", "no:cacheprovider", "tests")
    proc = _run(_source_tree(tmp_path), *args)
    out = _one_message(proc)
    assert proc.returncode == 4  # a usage error, not failing tests
    assert "Traceback" not in out and "conftest" not in out, out
