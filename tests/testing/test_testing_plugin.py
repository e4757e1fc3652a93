"""The pytest plugin, run for real: pytester writes a test file that uses the
fixtures and runs pytest on it in a subprocess (the plugin loads through its
entry point, as in a user's project), once per async runner a project may
use: a conftest runner like ours, anyio's plugin, pytest-asyncio, or none at
all (a plain test calling ``asyncio.run``)."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from backends import ADMIN_DSN, DIALECTS

pytest_plugins = ["pytester"]

# What the inner tests do with the fixtures: children, retries, run_once and
# the closing of what they opened, on whichever database the run chose.
BODY = """
import asyncio
import pytest
from cairnq.testing import drain, run_once

OPENED = []  # SQLite files the tests used: closed stores leave no -wal file behind

async def test_drain_runs_children_and_due_retries(cairnq_client, cairnq_worker, cairnq_backend,
                                                   request):
    if cairnq_backend == "sqlite":
        OPENED.append(request.getfixturevalue("cairnq_db"))
    worker = cairnq_worker()
    attempts = []

    @worker.task
    async def parent(ctx, payload):
        await ctx.submit("child", {"n": payload["n"] + 1})
        return "parent done"

    @worker.task
    async def child(ctx, payload):
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise RuntimeError("flaky")
        return payload["n"]

    await cairnq_client.submit("parent", {"n": 1})
    outcomes = await drain(worker)
    assert [(o.name, o.status, o.result) for o in outcomes] == [
        ("parent", "succeeded", "parent done"), ("child", "succeeded", 2)]
    assert attempts == [1, 2]
    assert outcomes[1].attempt == 2

async def test_run_once_with_a_real_context(cairnq_client):
    async def resize(ctx, payload):
        noted = await ctx.progress(0.5, "halfway")
        await ctx.heartbeat()
        await ctx.submit("thumbnail", {"of": payload["image"]})
        return {"width": payload["width"] // 2, "progress": noted.progress}

    outcome = await run_once(resize, {"image": "a.png", "width": 640}, on=cairnq_client)
    assert (outcome.status, outcome.result) == ("succeeded", {"width": 320, "progress": 0.5})
    children = await cairnq_client.list(name="thumbnail")
    assert [(c.status, c.payload, c.parent_id) for c in children] == [
        ("queued", {"of": "a.png"}, outcome.id)]

async def test_run_once_keeps_what_the_handler_raised(cairnq_client):
    def broken(ctx, payload):  # a plain def, run in a thread as a worker does
        raise ValueError("no such user: " + payload)

    outcome = await run_once(broken, "ada", on=cairnq_client)
    assert outcome.status == "failed"
    assert isinstance(outcome.exception, ValueError)
    assert "no such user: ada" in outcome.error["message"]

def test_what_the_fixtures_opened_was_closed():
    import os
    assert OPENED and not [path for path in OPENED if os.path.exists(path + "-wal")]
"""

RUNNERS = {
    # A conftest that runs coroutine tests itself, as tests/conftest.py does.
    "conftest": (
        {
            "conftest.py": """
            import asyncio, inspect, pytest

            @pytest.hookimpl(tryfirst=True)
            def pytest_pyfunc_call(pyfuncitem):
                if not inspect.iscoroutinefunction(pyfuncitem.obj):
                    return None
                kwargs = {n: pyfuncitem.funcargs[n] for n in pyfuncitem._fixtureinfo.argnames}
                asyncio.run(pyfuncitem.obj(**kwargs))
                return True
        """
        },
        "",
        ["-p", "no:asyncio", "-p", "no:anyio"],
    ),
    "anyio": (
        {
            "conftest.py": """
            import pytest

            @pytest.fixture
            def anyio_backend():
                return "asyncio"
        """
        },
        "pytestmark = pytest.mark.anyio\n",
        ["-p", "no:asyncio"],
    ),
    "pytest-asyncio": ({}, "pytestmark = pytest.mark.asyncio\n", ["-p", "no:anyio"]),
}


def _dialect_args() -> list[str]:
    if "postgres" not in DIALECTS:
        return ["--cairnq-backend", "sqlite"]
    return ["--cairnq-dsn", ADMIN_DSN, "--cairnq-backend", "both"]


def _run(pytester: pytest.Pytester, files: dict[str, str], *args: str) -> pytest.RunResult:
    for name, text in files.items():
        pytester.path.joinpath(name).write_text(textwrap.dedent(text))
    # (Closing is checked by the -wal files the SQLite stores leave, not by
    # unraisable-exception warnings: a PostgreSQL listener connection cancelled
    # mid-connect by a close is occasionally collected open, a store matter.)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=300)


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_the_fixtures_under_each_async_runner(pytester: pytest.Pytester, runner: str) -> None:
    if runner == "pytest-asyncio":
        pytest.importorskip("pytest_asyncio")
    files, mark, flags = RUNNERS[runner]
    inner = {**files, "test_inner.py": BODY.replace("import pytest\n", "import pytest\n" + mark, 1)}
    result = _run(pytester, inner, *flags, *_dialect_args(), "-W", "error::ResourceWarning")
    runs = 3 * (2 if "postgres" in DIALECTS else 1) + 1
    result.assert_outcomes(passed=runs)


SYNC_BODY = """
import asyncio, os
from cairnq.testing import drain

OPENED = []

def test_a_plain_test_that_runs_its_own_loop(cairnq_client, cairnq_worker, cairnq_db):
    OPENED.append(cairnq_db)

    async def scenario():
        worker = cairnq_worker()
        worker.register("double", lambda ctx, n: n * 2)
        await cairnq_client.submit("double", 21)
        return await drain(worker)

    [outcome] = asyncio.run(scenario())  # the stores are left open: the plugin closes them
    assert outcome.result == 42

def test_it_was_closed_after_all():
    assert OPENED and not os.path.exists(OPENED[0] + "-wal")
"""


def test_a_plain_def_test_with_no_async_runner(pytester: pytest.Pytester) -> None:
    result = _run(pytester, {"test_inner.py": SYNC_BODY}, "-p", "no:asyncio", "-p", "no:anyio")
    result.assert_outcomes(passed=2)


def test_the_example_test_of_docs_testing_md(pytester: pytest.Pytester) -> None:
    docs = Path(__file__).resolve().parents[2] / "docs" / "testing.md"
    example = docs.read_text().split("```python\n", 1)[1].split("```", 1)[0]
    assert example.startswith("# test_signup.py")
    files = {**RUNNERS["anyio"][0], "test_signup.py": example}
    result = _run(pytester, files, "-p", "no:asyncio", *_dialect_args())
    result.assert_outcomes(passed=2 * (2 if "postgres" in DIALECTS else 1))


# -- cheap to load: pytest imports the plugin in every project that has cairnq ----------------

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "cairnq"


def test_the_plugin_module_imports_only_pytest_and_the_standard_library() -> None:
    tree = ast.parse((ROOT / "_cairnq_pytestplugin.py").read_text())
    top_level = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            top_level.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            top_level.add(node.module.split(".")[0])
    assert top_level <= {
        "__future__",
        "functools",
        "inspect",
        "os",
        "uuid",
        "pathlib",
        "typing",
        "pytest",
    }


def test_loading_the_plugin_imports_no_cairnq_no_driver_and_no_event_loop() -> None:
    """It lives outside the package: a project whose cairnq cannot be
    imported (a source checkout on the path, say) still runs pytest."""
    probe = (
        "import sys, _cairnq_pytestplugin\n"
        "print([m for m in sys.modules if m.split('.')[0] in ('cairnq', 'psycopg', 'asyncio')])"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_nothing_in_cairnq_imports_the_testing_helpers() -> None:
    offences = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.is_relative_to(PACKAGE / "testing"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else ([node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            )
            offences += [f"{path}:{node.lineno}" for n in names if n.startswith("cairnq.testing")]
    assert offences == []
