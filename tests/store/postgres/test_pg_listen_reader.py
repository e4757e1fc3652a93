"""PostgreSQL: the built-in executor's listening connection, read from the
loop's readiness callback (cairnq/store/postgres/notifications.py)."""

from __future__ import annotations

import asyncio
from typing import Any, Optional

import pytest
from backends import DIALECTS
from pg_kit import connect, listener_pids, pg, terminate, until  # noqa: F401 (fixtures)

from cairnq import create_pool_executor
from cairnq.store.postgres import notifications

if "postgres" not in DIALECTS:
    pytest.skip("PostgreSQL is not available", allow_module_level=True)


class Heard:
    def __init__(self) -> None:
        self.notes: list[tuple[str, Optional[str]]] = []
        self.in_tasks = 0  # heard inside an asyncio task (not the readiness callback)
        self.closed = 0

    def on_notify(self, channel: str, payload: Optional[str]) -> None:
        self.notes.append((channel, payload))
        self.in_tasks += asyncio.current_task() is not None

    def on_close(self) -> None:
        self.closed += 1


def _dsn(pg: Any, name: str) -> str:
    return f"{pg.target}?application_name={name}"


@pytest.fixture(params=["socket", "generator"])
def reader(request: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways of reading: the readiness callback, and psycopg's generator
    where the loop has no add_reader (Windows' proactor loop; simulated)."""
    if request.param == "generator":

        def no_readers(*args: Any) -> Any:
            raise NotImplementedError  # what add_reader raises there

        # Only the listener's own watch: psycopg's waits need add_reader here.
        monkeypatch.setattr(notifications, "_watch_socket", no_readers)
    return str(request.param)


async def test_every_notification_is_heard_once_in_order_then_stop_closes(pg, reader):
    dsn = _dsn(pg, "cq_reader")
    executor = await create_pool_executor(dsn)
    heard = Heard()
    stop = await executor.listen(["cq_a", "cq_b"], heard.on_notify, heard.on_close)
    try:
        with connect(pg.target) as other:
            other.execute("select pg_notify('cq_a', 'one')")
            other.execute("select pg_notify('cq_b', 'ünïcode ✓')")
            other.execute("select pg_notify('cq_elsewhere', 'not ours')")
            # Many at once, in one transaction: several in one read.
            with other.transaction():
                for i in range(500):
                    other.execute("select pg_notify('cq_a', %s)", [f"burst {i}"])
        await until(lambda: len(heard.notes) >= 502, 5, "every notification heard")
        await asyncio.sleep(0.05)
        assert heard.notes == [("cq_a", "one"), ("cq_b", "ünïcode ✓")] + [
            ("cq_a", f"burst {i}") for i in range(500)
        ]
        assert len(listener_pids(pg.target, "cq_reader")) == 1
        # Read by the loop's readiness callback, not by a task woken a turn later.
        assert heard.in_tasks == (0 if reader == "socket" else len(heard.notes))
    finally:
        stop()
    await until(lambda: not listener_pids(pg.target, "cq_reader"), 5, "the connection closed")
    assert heard.closed == 0  # stopped, not lost
    await executor.close()


async def test_a_killed_session_is_told_once_and_its_connection_closed(pg, reader):
    dsn = _dsn(pg, "cq_killed")
    executor = await create_pool_executor(dsn)
    heard = Heard()
    stop = await executor.listen(["cq_a"], heard.on_notify, heard.on_close)
    await until(lambda: listener_pids(pg.target, "cq_killed"), 5, "listening")
    terminate(pg.target, listener_pids(pg.target, "cq_killed"))
    await until(lambda: heard.closed, 5, "on_close")
    with connect(pg.target) as other:
        other.execute("select pg_notify('cq_a', 'after')")
    await asyncio.sleep(0.1)
    stop()  # (after the loss: does nothing more)
    await asyncio.sleep(0.05)
    assert heard.closed == 1
    assert heard.notes == []
    await executor.close()  # waits for the connection's close: nothing left open
