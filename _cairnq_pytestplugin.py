"""cairnq's pytest plugin (entry point ``pytest11``: ``cairnq``; ``-p no:cairnq`` turns it off).

The fixtures of ``cairnq.testing``. pytest imports this module at start-up in
every project that has cairnq installed, so it lives outside the package and
imports nothing but pytest and the standard library: cairnq itself, the
worker and psycopg are imported by the fixtures that need them, when a test
asks for one (a project whose cairnq cannot be imported still runs pytest).

Fixtures (every one per test):

``cairnq_db``       the path of a throwaway SQLite file (in the test's tmp_path).
``cairnq_dsn``      the DSN of a throwaway PostgreSQL database, created for the
                    test and dropped after it; skips the test when no admin DSN
                    is configured (``--cairnq-dsn`` or ``CAIRNQ_TEST_DSN``).
``cairnq_backend``  ``"sqlite"`` or ``"postgres"``: the database the next two use.
``cairnq_client``   a ``CairnQ`` on that database (it connects on first use).
``cairnq_worker``   a factory: ``cairnq_worker(queues=("default",), **options)``
                    builds a ``Worker`` on the same database, with a store of its
                    own; ``poll_interval_ms`` defaults to 50 and
                    ``retry_backoff_ms`` to 0, so ``drain`` runs retries at once.

Which database: SQLite unless an admin DSN is configured, then PostgreSQL;
``--cairnq-backend`` (``CAIRNQ_TEST_BACKEND``) = ``sqlite``, ``postgres`` or
``both`` chooses, and ``both`` runs every test that uses the client or the
worker once per dialect. ``@pytest.mark.cairnq_backends("sqlite", "postgres")``
chooses for one test (or a module, with ``pytestmark``).

Closing: the stores these fixtures build are bound to the event loop of the
test that first uses them, so they are closed in that loop, as the test's
coroutine ends, whichever plugin runs it (pytest-asyncio, anyio, a
conftest's own runner): the plugin wraps an ``async def`` test's function in
one that closes them afterwards. A plain ``def`` test that drives them with
``asyncio.run`` should close them in that run; what is left open is closed
after the test as well as can be without its loop.
"""

from __future__ import annotations

import functools
import inspect
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

import pytest

if TYPE_CHECKING:
    from cairnq.client import CairnQ
    from cairnq.store.base import TaskStore
    from cairnq.worker import Worker

BACKENDS = ("sqlite", "postgres")
DSN_ENV = "CAIRNQ_TEST_DSN"
BACKEND_ENV = "CAIRNQ_TEST_BACKEND"
# Outside-the-loop closing (the fallback) waits this long per store at most.
_CLOSE_TIMEOUT_S = 5.0


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cairnq", "cairnq test fixtures")
    group.addoption(
        "--cairnq-dsn",
        default=None,
        help=f"PostgreSQL admin DSN: cairnq_dsn (and cairnq_client, by default) create a "
        f"database per test there and drop it after (env {DSN_ENV})",
    )
    group.addoption(
        "--cairnq-backend",
        default=None,
        choices=("sqlite", "postgres", "both"),
        help=f"database of cairnq_client / cairnq_worker; both: run each such test on each "
        f"(env {BACKEND_ENV}; default: postgres when a DSN is configured, else sqlite)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "cairnq_backends(*names): run this test's cairnq_client / cairnq_worker on each of "
        "these databases ('sqlite', 'postgres')",
    )


def admin_dsn(config: pytest.Config) -> Optional[str]:
    return config.getoption("--cairnq-dsn") or os.environ.get(DSN_ENV) or None


def configured_backends(config: pytest.Config) -> tuple[str, ...]:
    chosen = config.getoption("--cairnq-backend") or os.environ.get(BACKEND_ENV)
    if not chosen:
        return ("postgres",) if admin_dsn(config) else ("sqlite",)
    if chosen == "both":
        return BACKENDS
    if chosen not in BACKENDS:
        raise pytest.UsageError(f"{BACKEND_ENV}={chosen!r}: expected sqlite, postgres or both")
    return (chosen,)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "cairnq_backend" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("cairnq_backends")
    chosen = tuple(marker.args) if marker is not None else configured_backends(metafunc.config)
    unknown = [name for name in chosen if name not in BACKENDS]
    if unknown or not chosen:
        raise pytest.UsageError(f"cairnq_backends{chosen!r}: each must be one of {BACKENDS}")
    if marker is not None or len(chosen) > 1:
        metafunc.parametrize("cairnq_backend", chosen, indirect=True)


# -- what a test opened, closed in its loop -------------------------------------------------


class Opened:
    """The stores the fixtures built for one test, to close when it ends."""

    def __init__(self) -> None:
        self.stores: list[TaskStore] = []
        self.closed_in_loop = False

    def add(self, store: TaskStore) -> None:
        self.stores.append(store)

    async def aclose(self) -> None:
        for store in reversed(self.stores):
            try:
                await store.close()
            except Exception:  # a store the test broke on purpose: keep closing the rest
                pass
        self.closed_in_loop = True

    def close_outside_loop(self) -> None:
        """The test never ran in a loop we could close them in (a plain
        ``def`` test, a runner that does not call the test's coroutine
        function): close each in a fresh loop, bounded. A store that was never
        used has nothing open; one used in a loop that is gone may not close
        cleanly, which is why the in-loop close comes first."""
        if self.closed_in_loop or not self.stores:
            return
        import asyncio

        async def close(store: TaskStore) -> None:
            await asyncio.wait_for(store.close(), _CLOSE_TIMEOUT_S)

        for store in reversed(self.stores):
            try:
                asyncio.run(close(store))
            except Exception:
                pass


_OPENED = pytest.StashKey[Opened]()


def _closing_after(fn: Callable[..., Any], opened: Opened) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def run_then_close(*args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        finally:
            await opened.aclose()

    return run_then_close


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Before any plugin turns an ``async def`` test into a call in its loop
    (pytest-asyncio reads ``item.obj`` in ``runtest``; anyio and conftest
    runners in ``pytest_pyfunc_call``, later still), give it a function that
    closes what the fixtures opened, in that loop."""
    opened = item.stash.get(_OPENED, None)
    fn = getattr(item, "obj", None)
    if opened is None or not inspect.iscoroutinefunction(fn) or hasattr(fn, "hypothesis"):
        yield
        return
    item.obj = _closing_after(fn, opened)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        item.obj = fn  # type: ignore[attr-defined]


@pytest.fixture
def cairnq_opened(request: pytest.FixtureRequest) -> Iterator[Opened]:
    """What this test's cairnq fixtures opened (closed when it ends)."""
    opened = Opened()
    request.node.stash[_OPENED] = opened
    try:
        yield opened
    finally:
        opened.close_outside_loop()


# -- the databases --------------------------------------------------------------------------


@pytest.fixture
def cairnq_db(tmp_path: Path) -> str:
    """A throwaway SQLite file's path (created by the first store that opens it)."""
    return str(tmp_path / "cairnq.db")


@pytest.fixture
def cairnq_dsn(request: pytest.FixtureRequest) -> Iterator[str]:
    """A throwaway PostgreSQL database: created now, dropped after the test."""
    admin = admin_dsn(request.config)
    if admin is None:
        pytest.skip(f"PostgreSQL not configured (--cairnq-dsn or {DSN_ENV})")
    from cairnq.testing.databases import create_database, drop_database

    dsn, name = create_database(admin, f"cairnq_test_{uuid.uuid4().hex[:12]}")
    try:
        yield dsn
    finally:
        drop_database(admin, name)


@pytest.fixture
def cairnq_backend(request: pytest.FixtureRequest) -> str:
    """The dialect ``cairnq_client`` and ``cairnq_worker`` use."""
    chosen: Optional[str] = getattr(request, "param", None)
    return chosen or configured_backends(request.config)[0]


@pytest.fixture
def cairnq_target(request: pytest.FixtureRequest, cairnq_backend: str) -> str:
    """The database ``cairnq_client`` and ``cairnq_worker`` open: ``cairnq_db``
    or ``cairnq_dsn``, by ``cairnq_backend``."""
    fixture = "cairnq_dsn" if cairnq_backend == "postgres" else "cairnq_db"
    target: str = request.getfixturevalue(fixture)
    return target


def _new_store(backend: str, target: str) -> TaskStore:
    from cairnq.store.factory import postgres_store, sqlite_store

    if backend == "postgres":
        return postgres_store(target, min_size=1, max_size=4, schema=None)
    return sqlite_store(target, busy_timeout_ms=5_000, synchronous=None)


@pytest.fixture
def cairnq_client(cairnq_backend: str, cairnq_target: str, cairnq_opened: Opened) -> CairnQ:
    """A ``CairnQ`` on this test's database; closed when the test ends."""
    from cairnq.client import CairnQ

    store = _new_store(cairnq_backend, cairnq_target)
    cairnq_opened.add(store)
    return CairnQ(store)


@pytest.fixture
def cairnq_worker(
    cairnq_backend: str, cairnq_target: str, cairnq_opened: Opened
) -> Callable[..., Worker]:
    """``cairnq_worker(queues=("default",), *, store=None, **options)``: a
    ``Worker`` on this test's database (its own store unless ``store=`` is
    given). Register handlers on it, then ``await drain(worker)``."""
    from cairnq.worker import Worker

    def make(
        queues: Any = ("default",), *, store: Optional[TaskStore] = None, **options: Any
    ) -> Worker:
        if store is None:
            store = _new_store(cairnq_backend, cairnq_target)
            cairnq_opened.add(store)
        options.setdefault("poll_interval_ms", 50)
        options.setdefault("retry_backoff_ms", 0)
        return Worker(store, list(queues), **options)

    return make
