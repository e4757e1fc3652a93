"""Shared fixtures.

* ``async def`` tests run in a fresh event loop each (no plugin needed); a
  fixture value with an ``aclose()`` coroutine method is closed inside that
  loop when the test ends, so stores never outlive their loop.
* ``backend`` is parametrized over every dialect the behaviour is shared by:
  a SQLite file in the test's tmp dir, or a throwaway PostgreSQL database.
  Tests build stores, clients and workers through it.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

try:  # a source tree that was never installed: stop with cairnq's one message
    import cairnq  # noqa: F401
except ImportError as _not_installed:
    if _not_installed.name != "cairnq._speedups":
        raise
    sys.stderr.write(f"{_not_installed}\n")  # the message alone, not a conftest traceback
    raise SystemExit(pytest.ExitCode.USAGE_ERROR)

from backends import DIALECTS, Backend, make_backend  # noqa: E402

if os.environ.get("CAIRNQ_TEST_INSTALLED"):  # scripts/test.sh: prove we test the wheel
    import cairnq

    assert "site-packages" in cairnq.__file__, f"testing {cairnq.__file__}, not the installed wheel"

TEST_TIMEOUT_S = float(os.environ.get("CAIRNQ_TEST_TIMEOUT_S", "120"))


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Any:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    kwargs = {name: pyfuncitem.funcargs[name] for name in names}
    closables = [v for v in pyfuncitem.funcargs.values() if hasattr(v, "aclose")]

    async def run() -> None:
        try:
            await asyncio.wait_for(pyfuncitem.obj(**kwargs), TEST_TIMEOUT_S)
        finally:
            for value in closables:
                await value.aclose()

    asyncio.run(run())
    return True


@pytest.fixture(scope="session")
def pg_database() -> Any:
    """One PostgreSQL database for the whole test run, reset between tests."""
    from backends import create_database, drop_database

    name = create_database()
    try:
        yield name
    finally:
        drop_database(name)


@pytest.fixture(params=DIALECTS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """An empty database of each dialect: a new SQLite file, or the session's
    PostgreSQL database emptied (see tests/backends.py)."""
    shared = request.getfixturevalue("pg_database") if request.param == "postgres" else None
    with make_backend(request.param, tmp_path, shared) as b:
        yield b


@pytest.fixture(params=DIALECTS)
def fresh_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """A brand-new, never-migrated database of each dialect (schema tests)."""
    with make_backend(request.param, tmp_path) as b:
        yield b


@pytest.fixture
def sqlite_backend(tmp_path: Path) -> Any:
    """SQLite only: for behaviour that is the SQLite driver's own."""
    with make_backend("sqlite", tmp_path) as b:
        yield b


__all__ = ["Backend"]
