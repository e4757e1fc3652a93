"""The dashboard's task-list pages and overview over a million tasks.

    pytest bench/dashboard_pages.py --benchmark-only
    CAIRNQ_BENCH_DASHBOARD_ROWS=200000 pytest bench/dashboard_pages.py --benchmark-only

A month of history (tests/bulk_tasks.py: 1,000,000 tasks by default, mostly
finished, a few queued and running, skewed over queues and names) is written
once per dialect, then each page is read through ``task_page`` as the
dashboard reads it: the first page, and page 21 (after following 20 cursors;
keyset pagination makes it cost what the first does). The issue's bar is
100 ms per page; the overview (queue × status counts over the whole table)
is timed beside them: it runs at most once a second, only while someone
watches.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

import bulk_tasks
from backends import DIALECTS, create_database, drop_database, dsn_for

pytest.importorskip("starlette")
from cairnq import CairnQ  # noqa: E402
from cairnq.dashboard.queries import TaskFilter, overview, task_page  # noqa: E402

ROWS = int(os.environ.get("CAIRNQ_BENCH_DASHBOARD_ROWS", "1000000"))
DAY_MS = 86_400_000

# (label, sort, filter query): the list views a team opens most
VIEWS = [
    ("all", "newest", {}),
    ("all-oldest", "oldest", {}),
    ("queue", "newest", {"queue": "mail"}),
    ("failed", "newest", {"status": "failed"}),
    ("queued", "newest", {"status": "queued"}),
    ("running", "newest", {"status": "running"}),
    ("name", "newest", {"name": "job.3"}),
    ("queue+status", "newest", {"queue": "mail", "status": "succeeded"}),
    ("finished", "finished_newest", {}),
    ("finished-failed", "finished_newest", {"status": "failed"}),
    ("finished-queue", "finished_newest", {"queue": "billing"}),
    ("one-day", "newest", {"created_from": "-15d", "created_to": "-14d"}),
]


@pytest.fixture(scope="module", params=DIALECTS)
def big(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """(loop, client, now) over a database holding ROWS tasks."""
    loop = asyncio.new_event_loop()
    now = int(time.time() * 1000)
    database = None
    if request.param == "sqlite":
        path = str(Path(tmp_path_factory.mktemp("dash")) / "big.db")
        loop.run_until_complete(_migrate(CairnQ.sqlite(path)))
        bulk_tasks.fill_sqlite(path, ROWS, now)
        # opened after the history exists, as `cairnq dashboard` is: SQLite
        # reads the planner statistics when a connection opens
        client = CairnQ.sqlite(path)
        loop.run_until_complete(client.connect())
    else:
        database = create_database()
        loop.run_until_complete(_migrate(CairnQ.postgres(dsn_for(database))))
        bulk_tasks.fill_postgres(dsn_for(database), ROWS, now)
        client = CairnQ.postgres(dsn_for(database))
        loop.run_until_complete(client.connect())
    try:
        yield loop, client, now
    finally:
        loop.run_until_complete(client.close())
        loop.close()
        if database is not None:
            drop_database(database)


async def _migrate(client: CairnQ) -> None:
    await client.connect()
    await client.close()


def _filter(query: dict[str, str], now: int) -> TaskFilter:
    resolved = {
        k: str(now - int(v[1:-1]) * DAY_MS) if v.startswith("-") else v for k, v in query.items()
    }
    return TaskFilter.from_query(resolved)


@pytest.mark.parametrize("depth", [0, 20], ids=["page1", "page21"])
@pytest.mark.parametrize("label, sort, query", VIEWS, ids=[v[0] for v in VIEWS])
def test_page(benchmark: Any, big: Any, label: str, sort: str, query: dict[str, str], depth: int) -> None:
    loop, client, now = big
    flt = _filter(query, now)

    async def cursor_at_depth() -> Any:
        cursor = None
        for _ in range(depth):
            page = await task_page(client, flt, sort=sort, cursor=cursor)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        return cursor

    cursor = loop.run_until_complete(cursor_at_depth())
    benchmark.group = f"dashboard page ({ROWS:,} tasks)"
    page = benchmark(lambda: loop.run_until_complete(task_page(client, flt, sort=sort, cursor=cursor)))
    assert page.tasks or label in ("running", "queued")


def test_overview(benchmark: Any, big: Any) -> None:
    loop, client, _ = big
    benchmark.group = f"dashboard overview ({ROWS:,} tasks)"
    view = benchmark.pedantic(lambda: loop.run_until_complete(overview(client)), rounds=5, iterations=1)
    assert sum(view.totals.values()) == ROWS
