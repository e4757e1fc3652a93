"""Reading a listening connection's notifications as they arrive.

A connection that only listens is read from the loop's own readiness
callback: when its socket is readable, the input is consumed and every
notification in it is handed to ``on_notify`` in that same callback. psycopg's
``notifies()`` generator does the same work one loop turn later (its task
wakes on a future the readiness callback settles) and registers and removes
the reader around each wait: that turn sits between a commit and every
waiter it wakes (a worker's claim, a ``call()``'s read of its result).

Only ``psycopg.pq``'s documented libpq calls are used (``consume_input``,
``notifies``, ``status``), on a connection nothing else uses once its LISTENs
are done. A loop without ``add_reader`` (Windows' proactor) gets the
generator instead.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Optional

log = logging.getLogger("cairnq.store")

__all__ = ["hear_while_listening", "read_notifications"]

OnNotify = Callable[[str, Optional[str]], None]


def hear_while_listening(conn: Any, on_notify: OnNotify) -> Callable[[Any], None]:
    """Register, before the LISTENs run, a psycopg notify handler for what
    comes in with their replies (psycopg reads those itself); returned for
    ``read_notifications``."""

    def heard(note: Any) -> None:
        on_notify(note.channel, note.payload)

    conn.add_notify_handler(heard)
    return heard


def read_notifications(
    conn: Any,
    heard: Callable[[Any], None],
    on_notify: OnNotify,
    on_close: Callable[[], None],
    closing: set["asyncio.Task[None]"],
) -> Callable[[], None]:
    """Hand ``conn``'s notifications to ``on_notify(channel, payload)`` until
    the returned ``stop()`` is called; ``on_close()`` if the connection ends
    first. Either way the connection is closed, in a task kept in ``closing``
    until it is done. ``heard``: ``hear_while_listening``'s handler."""
    loop = asyncio.get_running_loop()
    ended = False

    def end() -> None:
        nonlocal ended
        if not ended:
            ended = True
            task = loop.create_task(conn.close())
            closing.add(task)
            task.add_done_callback(closing.discard)

    def lost() -> None:
        end()
        on_close()

    try:
        unwatch = _watch_socket(loop, conn, on_notify, lost)
    except NotImplementedError:
        conn.remove_notify_handler(heard)  # (the generator yields what it would have heard)
        unwatch = _consume_in_task(loop, conn, on_notify, lost)

    def stop() -> None:
        if not ended:
            unwatch()
            end()

    return stop


def _watch_socket(
    loop: asyncio.AbstractEventLoop, conn: Any, on_notify: OnNotify, lost: Callable[[], None]
) -> Callable[[], None]:
    """Read ``conn`` whenever its socket is readable; ``lost()`` once it is
    gone. Returns what stops the reading."""
    from psycopg import pq

    pgconn = conn.pgconn
    encoding = conn.info.encoding
    fd = conn.fileno()

    def readable() -> None:
        try:
            pgconn.consume_input()
        except Exception:  # the connection is gone (psycopg.OperationalError)
            log.debug("listener connection ended", exc_info=True)
        else:
            while (note := pgconn.notifies()) is not None:
                try:
                    on_notify(note.relname.decode(encoding), note.extra.decode(encoding))
                except Exception:
                    log.exception("a notification's handler raised")
            if pgconn.status == pq.ConnStatus.OK:
                return
        loop.remove_reader(fd)
        lost()

    loop.add_reader(fd, readable)
    # Input that came in behind the LISTENs' replies is in libpq's buffer
    # already, where the socket's readiness no longer tells of it.
    first_look = loop.call_soon(readable)

    def unwatch() -> None:
        first_look.cancel()
        loop.remove_reader(fd)

    return unwatch


def _consume_in_task(
    loop: asyncio.AbstractEventLoop, conn: Any, on_notify: OnNotify, lost: Callable[[], None]
) -> Callable[[], None]:
    """``_watch_socket`` through psycopg's ``notifies()`` generator."""
    stopped = False

    async def consume() -> None:
        try:
            async for note in conn.notifies():
                on_notify(note.channel, note.payload)
        except Exception:
            log.debug("listener connection ended", exc_info=True)
        finally:
            if not stopped:
                lost()

    task = loop.create_task(consume())

    def unwatch() -> None:
        nonlocal stopped
        stopped = True
        task.cancel()

    return unwatch
