"""The distribution name, for real: ours (``cairnq-fast``) and the reference
SDK (``cairnq`` 0.15.1) both provide the import package ``cairnq``.

Each case is a fresh virtualenv with real wheels installed by pip: ours alone,
the reference alone, and both in either order (the one installed last owns the
shared files). Whatever the order, ``import cairnq`` and ``cairnq --version``
either are one implementation, intact, or refuse with the fix; the fix works.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest
import refsdk

pytestmark = pytest.mark.interop

ROOT = Path(__file__).resolve().parent.parent
FIX = "pip uninstall -y cairnq cairnq-fast && pip install cairnq-fast"
PROBE = (
    "import cairnq; print(getattr(cairnq, 'IMPLEMENTATION', '-'), cairnq.__version__, "
    "getattr(cairnq, 'SPEEDUPS', '-'))"
)
# The packages of ours named like a module of the reference: they hold the
# guard that refuses under the reference's cairnq/__init__.py.
SHADOWING = ("cairnq/worker/__init__.py", "cairnq/store/sqlite/__init__.py",
             "cairnq/store/postgres/__init__.py")  # fmt: skip


def _pip(python: Path, *args: str) -> None:
    subprocess.run(
        [str(python), "-m", "pip", "--disable-pip-version-check", "-q", *args],
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=600,
    )


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Our wheel (the one scripts/test.sh just built, or built here) and the
    reference's (pip's cache serves it after the first download)."""
    out = tmp_path_factory.mktemp("wheels")
    built = sorted((ROOT / ".cache" / "dist").glob("cairnq_fast-*.whl"))
    if os.environ.get("CAIRNQ_TEST_INSTALLED") and built:
        ours = built[-1]
    else:
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
            check=True,
            stdout=subprocess.DEVNULL,
            timeout=600,
        )
        ours = next(out.glob("cairnq_fast-*.whl"))
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(out),
         refsdk.REFERENCE.replace("[postgres]", "")],
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=600,
    )  # fmt: skip
    return {"ours": ours, "reference": next(out.glob("cairnq-0.15.1-*.whl"))}


def _venv(where: Path, wheels: dict[str, Path], *order: str) -> Path:
    venv.EnvBuilder(with_pip=True, clear=True).create(where)
    python = where / "bin" / "python"
    for name in order:
        _pip(python, "install", str(wheels[name]))
    return python


def _run(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _command(python, str(python), *args)


def _version_command(python: Path) -> subprocess.CompletedProcess[str]:
    return _command(python, str(python.parent / "cairnq"), "--version")


def _command(python: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run in the venv's bin/, far from the source tree; the caller checks the status."""
    return subprocess.run(
        argv, check=False, capture_output=True, text=True, timeout=120, cwd=python.parent
    )


def _assert_ours(python: Path) -> None:
    probe = _run(python, "-I", "-c", PROBE)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split() == ["cairnq-fast", "0.16.0", "cython"]
    version = _version_command(python)
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == "cairnq-fast 0.16.0 (kernels: cython; protocol 1)"
    owners = _run(python, "-I", "-c", "import importlib.metadata as m; "
                  "print(m.packages_distributions()['cairnq'])")  # fmt: skip
    assert owners.stdout.strip() == "['cairnq-fast']"


def _assert_refused(python: Path) -> None:
    for result in (_run(python, "-I", "-c", PROBE), _version_command(python)):
        assert result.returncode != 0
        at = result.stderr.rfind("ImportError: ")
        assert at >= 0, result.stderr
        message = result.stderr[at:]  # the exception line and its continuation
        assert "cairnq-fast" in message and "cairnq 0.15.1" in message, message
        assert FIX in message, message


def test_ours_alone(tmp_path: Path, wheels: dict[str, Path]) -> None:
    _assert_ours(_venv(tmp_path / "venv", wheels, "ours"))


def test_reference_alone_has_no_implementation_attributes() -> None:
    """How to tell the reference: no ``IMPLEMENTATION``, no ``SPEEDUPS``."""
    probe = _run(refsdk.python(), "-I", "-c", PROBE)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split() == ["-", "0.15.1", "-"]


def test_ours_over_the_reference_refuses_then_the_fix_works(
    tmp_path: Path, wheels: dict[str, Path]
) -> None:
    python = _venv(tmp_path / "venv", wheels, "reference", "ours")
    _assert_refused(python)
    _pip(python, "uninstall", "-y", "cairnq", "cairnq-fast")
    _pip(python, "install", str(wheels["ours"]))
    _assert_ours(python)


def test_the_reference_over_ours_refuses_then_the_fix_works(
    tmp_path: Path, wheels: dict[str, Path]
) -> None:
    missing = [p for p in SHADOWING if "refuse_unless_ours" not in (ROOT / p).read_text()]
    if missing:
        pytest.skip(f"refuse_unless_ours() is not called in {missing} yet")
    python = _venv(tmp_path / "venv", wheels, "ours", "reference")
    _assert_refused(python)
    _pip(python, "uninstall", "-y", "cairnq", "cairnq-fast")
    _pip(python, "install", str(wheels["ours"]))
    _assert_ours(python)
