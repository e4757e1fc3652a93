"""Shared fixtures for the pytest-benchmark suites (`pytest bench --benchmark-only`).

Async operations are timed in batches run to completion on one event loop per
module (``loop.run_until_complete``); the reported time is per batch, the
batch size is in the benchmark name.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterator

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from backends import DIALECTS, create_database, drop_database, dsn_for  # noqa: E402

BACKLOG = int(os.environ.get("CAIRNQ_BENCH_BACKLOG", "20000"))


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture
def run(loop: asyncio.AbstractEventLoop) -> Callable[[Callable[[], Awaitable[Any]]], Callable[[], Any]]:
    """Turn an async thunk into the sync callable pytest-benchmark times."""

    def wrap(thunk: Callable[[], Awaitable[Any]]) -> Callable[[], Any]:
        return lambda: loop.run_until_complete(thunk())

    return wrap


@pytest.fixture(scope="module", params=DIALECTS)
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(dialect, SQLite path or Postgres DSN) of a fresh database per module."""
    if request.param == "sqlite":
        yield "sqlite", str(tmp_path_factory.mktemp("bench") / "bench.db")
        return
    name = create_database()
    try:
        yield "postgres", dsn_for(name)
    finally:
        drop_database(name)
