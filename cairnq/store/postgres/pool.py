"""The built-in PostgreSQL executor: a psycopg 3 connection pool.

Implements the ``PgExecutor`` seam (``$n`` placeholders through psycopg's raw
cursor, scripts over the simple query protocol, ``transaction()``, ``listen``)
plus two fast paths the store uses when present: ``_query_raw(text, values,
prepare)`` (rows as tuples) and ``_write_batch([(text, values, prepare),
...])`` (several statements in one transaction, sent in pipeline mode: one
round trip and one commit for all of them). ``prepare=False`` sends a
statement unprepared, planned with its values (``-- cairnq: plan-custom``).

jsonb and json come back as text: the store decodes JSON itself (the same
exact decoder as on SQLite), so the wire-form probe finds text.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, AsyncIterator, Callable, Optional, Sequence

from cairnq.store.postgres.executor import ListenUnavailable
from cairnq.store.postgres.notifications import hear_while_listening, read_notifications
from cairnq.store.validation import MAX_SCHEMA_BYTES as MAX_SCHEMA_BYTES
from cairnq.store.validation import PLAIN_IDENT as PLAIN_IDENT
from cairnq.store.validation import check_schema_name as check_schema_name

log = logging.getLogger("cairnq.store")

__all__ = ["create_pool_executor", "check_schema_name", "PLAIN_IDENT", "PoolExecutor", "DedicatedSession"]

CONNECT_TIMEOUT_S = 10
HOT_CONNECTION_MAX_S = 60.0  # the kept connection goes back to the pool this often
# An idle pooled connection beyond min_size is closed after this long (one per
# period: psycopg_pool shrinks step by step). psycopg_pool's default is ten
# minutes: a worker that grew its pool in a burst would hold the extra
# connections that long, and a fleet's connections add up against the
# server's max_connections.
POOL_MAX_IDLE_S = 60.0
MAX_SPARE_CURSORS = 64  # kept per connection for pipelined batches
_MAX_SESSIONS = 64  # sessions kept for pooled connections (per executor)
_warned_pure_python = False


def _import_psycopg() -> Any:
    try:
        import psycopg
        import psycopg_pool  # noqa: F401
    except ImportError as exc:  # pragma: no cover - exercised without the extra
        raise RuntimeError(
            "PostgreSQL support needs psycopg 3 and psycopg-pool: pip install 'cairnq-fast[postgres]'"
        ) from exc
    global _warned_pure_python
    if psycopg.pq.__impl__ == "python" and not _warned_pure_python:
        _warned_pure_python = True
        log.warning(
            "psycopg is running its pure-Python implementation; install psycopg[c] "
            "(needs libpq-dev) for the C one, which cairnq is tuned for"
        )
    return psycopg


def _has_rows(cur: Any) -> bool:
    # The result status, not cur.description: that builds a Column object per
    # column on every access, a measurable cost on a 23-column row.
    result = cur.pgresult
    return result is not None and result.status == _TUPLES_OK


_TUPLES_OK = 2  # psycopg.pq.ExecStatus.TUPLES_OK (an IntEnum); importing cairnq loads no driver


_json_as_text: Any = None  # one loader class for the process, made on first use


def _configure_adapters(conn: Any) -> None:
    global _json_as_text
    if _json_as_text is None:
        from psycopg.adapt import Loader

        class JsonAsText(Loader):
            def load(self, data: Any) -> str:
                return bytes(data).decode("utf-8")

        _json_as_text = JsonAsText
    conn.adapters.register_loader("jsonb", _json_as_text)
    conn.adapters.register_loader("json", _json_as_text)


class _Session:
    """A PgSession over one psycopg connection (inside a transaction, or the
    executor's kept connection).

    It keeps one cursor for its statements: a cursor made per statement
    copies the connection's adapters, and a cursor that runs the same text
    again keeps its row loaders (about a sixth of a one-row read's CPU on
    this machine). A statement that starts while the kept cursor is busy
    (two at once on one session) gets a cursor of its own.
    """

    __slots__ = ("_conn", "_cursor", "_spares")

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._cursor: Any = None  # free for the next statement; None while in use
        self._spares: list[Any] = []  # free cursors for a pipelined batch

    def _take_cursors(self, n: int) -> list[Any]:
        """``n`` cursors for a pipelined batch (one per statement: each holds
        its own result), the kept ones first."""
        spares = self._spares
        kept = len(spares) - min(n, len(spares))
        taken = spares[kept:]
        del spares[kept:]
        cursor = self._conn.cursor
        taken.extend(cursor() for _ in range(n - len(taken)))
        return taken

    def _give_back(self, cursors: list[Any]) -> None:
        room = MAX_SPARE_CURSORS - len(self._spares)
        if room > 0:
            self._spares.extend(cursors[:room])

    async def query(self, text: str, values: Sequence[Any]) -> list[dict[str, Any]]:
        cur = await self._run(text, values, True)
        if not _has_rows(cur):
            self._cursor = cur
            return []
        names = [d.name for d in cur.description]
        rows = [dict(zip(names, row)) for row in await cur.fetchall()]
        self._cursor = cur
        return rows

    async def _query_raw(
        self, text: str, values: Sequence[Any], prepare: bool = True
    ) -> list[tuple[Any, ...]]:
        cur = await self._run(text, values, prepare)
        rows = await cur.fetchall() if _has_rows(cur) else []
        self._cursor = cur  # given back only once its rows are read
        return rows

    async def _run(self, text: str, values: Sequence[Any], prepare: bool) -> Any:
        # prepare=False: the unnamed statement, planned with these very values.
        cur = self._cursor
        if cur is None:
            cur = self._conn.cursor()
        else:
            self._cursor = None
        await cur.execute(text, values, prepare=None if prepare else False)
        return cur

    async def execute(self, sql: str) -> None:
        # No parameters and never prepared: the simple query protocol, which
        # takes several statements (and $$-quoted bodies) at once.
        await self._conn.execute(sql, prepare=False)


class DedicatedSession:
    """One connection of its own (``PoolExecutor.dedicated``): statements with
    ``$n`` placeholders, never prepared (they run now and then), one at a
    time. A statement cancelled from asyncio is cancelled on the server too
    (psycopg sends the cancel request and waits for the statement to end)."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    @property
    def closed(self) -> bool:
        return bool(self._conn.closed)

    async def query(self, text: str, values: Sequence[Any]) -> list[tuple[Any, ...]]:
        cur = self._conn.cursor()
        await cur.execute(text, values, prepare=False)
        return await cur.fetchall() if _has_rows(cur) else []

    async def close(self) -> None:
        await self._conn.close()


class PoolExecutor:
    """``PgExecutor`` over a ``psycopg_pool.AsyncConnectionPool``."""

    def __init__(self, pool: Any, dsn: str) -> None:
        self._pool = pool
        self._dsn = dsn
        self._closing: set[asyncio.Task[None]] = set()  # listener connections on their way out
        # One pooled connection kept checked out for lone statements (reads and
        # autocommit writes): a round trip through the pool's checkout and
        # return costs ~35 us more than the statement on this machine. Only
        # when the pool has room for transactions besides it.
        self._hot: Any = None
        self._hot_session: _Session | None = None  # over _hot, keeping its cursor
        self._hot_since = 0.0
        self._hot_busy = False
        self._hot_enabled = pool.max_size >= 2
        # One session (and its cursors) per pooled connection, found again at
        # each checkout: id(conn) -> session, checked against the connection
        # itself (an id outlives its object).
        self._sessions: dict[int, _Session] = {}

    @property
    def pool(self) -> Any:
        return self._pool

    def _session(self, conn: Any) -> _Session:
        session = self._sessions.get(id(conn))
        if session is None or session._conn is not conn:
            if len(self._sessions) >= _MAX_SESSIONS:  # connections the pool replaced
                self._sessions.clear()
            session = self._sessions[id(conn)] = _Session(conn)
        return session

    async def query(self, text: str, values: Sequence[Any]) -> list[dict[str, Any]]:
        async with self._pool.connection() as conn:
            return await self._session(conn).query(text, values)

    async def _query_raw(
        self, text: str, values: Sequence[Any], prepare: bool = True
    ) -> list[tuple[Any, ...]]:
        """Rows as tuples. ``prepare=False`` plans the statement with these
        values instead of reusing a prepared (possibly generic) plan."""
        if self._hot_busy or not self._hot_enabled:
            async with self._pool.connection() as conn:
                return await self._session(conn)._query_raw(text, values, prepare)
        self._hot_busy = True
        try:
            session = self._hot_session
            if session is None or time.monotonic() - self._hot_since > HOT_CONNECTION_MAX_S:
                await self._release_hot()
                self._hot = await self._pool.getconn()
                session = self._hot_session = self._session(self._hot)
                self._hot_since = time.monotonic()
            try:
                return await session._query_raw(text, values, prepare)
            except BaseException:
                # Back to the pool, which checks it and drops it if it is broken.
                await self._release_hot()
                raise
        finally:
            self._hot_busy = False
            if not self._hot_enabled:  # closed while this statement ran
                await self._release_hot()

    async def _release_hot(self) -> None:
        conn, self._hot = self._hot, None
        self._hot_session = None
        if conn is not None:
            await self._pool.putconn(conn)

    async def execute(self, sql: str) -> None:
        async with self._connection() as conn:
            await self._session(conn).execute(sql)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[_Session]:
        async with self._connection() as conn:
            async with conn.transaction():
                yield self._session(conn)

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[Any]:
        """A connection for a transaction, a batch or a script: the kept one
        while it is idle and the pool has no other to spare, else one from the
        pool. Otherwise every store would open a second connection at once
        (its migrations run while the kept one is out) and keep it: a quiet
        worker would hold two pooled connections where one does."""
        conn = self._hot
        if conn is None or self._hot_busy or not self._hot_enabled or self._pool_has_idle():
            async with self._pool.connection() as pooled:
                yield pooled
            return
        self._hot_busy = True
        try:
            yield conn
        except BaseException:
            # Back to the pool, which checks it and drops it if it is broken.
            self._hot_busy = False
            await self._release_hot()
            raise
        self._hot_busy = False
        if not self._hot_enabled:  # closed while it was lent
            await self._release_hot()

    def _pool_has_idle(self) -> bool:
        return bool(self._pool.get_stats().get("pool_available", 0))

    async def _write_batch(
        self, statements: Sequence[tuple[str, Sequence[Any], bool]]
    ) -> list[list[tuple[Any, ...]]]:
        """Run every statement ``(text, values, prepare)`` in one transaction,
        pipelined: one round trip, one commit. Any error aborts (and rolls
        back) the whole batch."""
        async with self._connection() as conn:
            session = self._session(conn)
            cursors = session._take_cursors(len(statements))
            async with conn.transaction():
                async with conn.pipeline():
                    for cur, (text, values, prepare) in zip(cursors, statements):
                        await cur.execute(text, values, prepare=None if prepare else False)
                results = []
                for cur in cursors:
                    results.append(await cur.fetchall() if _has_rows(cur) else [])
            session._give_back(cursors)  # only after a clean commit
            return results

    async def listen(
        self,
        channels: Sequence[str],
        on_notify: Callable[[str, Optional[str]], None],
        on_close: Callable[[], None],
    ) -> Callable[[], None]:
        psycopg = _import_psycopg()
        # A connection of its own, outside the pool (channels are database-wide).
        conn = await psycopg.AsyncConnection.connect(self._dsn, autocommit=True)
        heard = hear_while_listening(conn, on_notify)
        try:
            for channel in channels:
                # Composed as an identifier by psycopg (quotes doubled), whatever the name.
                await conn.execute(psycopg.sql.SQL("listen {}").format(psycopg.sql.Identifier(channel)))
        except Exception as exc:
            await conn.close()
            raise ListenUnavailable(f"LISTEN is not available here: {exc}") from exc
        except BaseException:  # cancelled (the store closing): never leave it open
            await conn.close()
            raise

        return read_notifications(conn, heard, on_notify, on_close, self._closing)

    async def dedicated(self, application_name: str) -> "DedicatedSession":
        """A connection of its own, outside the pool, in autocommit, named
        ``application_name`` in ``pg_stat_activity`` (passed as a connection
        parameter, never as SQL text): a fleet member's session."""
        psycopg = _import_psycopg()
        conn = await psycopg.AsyncConnection.connect(
            self._dsn,
            autocommit=True,
            application_name=application_name,
            cursor_factory=psycopg.AsyncRawCursor,
            connect_timeout=CONNECT_TIMEOUT_S,
        )
        return DedicatedSession(conn)

    async def _recover(self) -> None:
        """After a connection error: test every idle pooled connection and
        replace the dead ones (a server restart kills them all at once)."""
        if not self._hot_busy:
            await self._release_hot()
        await self._pool.check()

    async def close(self) -> None:
        self._hot_enabled = False
        if not self._hot_busy:
            await self._release_hot()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
        await self._pool.close()


async def create_pool_executor(
    dsn: str, *, min_size: int = 1, max_size: int = 10, schema: Optional[str] = None
) -> PoolExecutor:
    """A pooled executor for ``dsn``; with ``schema``, every connection resolves
    to that schema (created if absent)."""
    if schema is not None:
        check_schema_name(schema)
    psycopg = _import_psycopg()
    from psycopg_pool import AsyncConnectionPool

    search_path = f'"{schema}"' if schema is not None else None
    # One plain connection first: a wrong DSN or a server that is down fails
    # here, at once and with the server's own message, instead of after the
    # pool has retried in the background until its timeout.
    probe = await psycopg.AsyncConnection.connect(dsn, connect_timeout=CONNECT_TIMEOUT_S)
    await probe.close()

    async def configure(conn: Any) -> None:
        _configure_adapters(conn)
        if search_path is not None:
            await conn.execute(f"set search_path to {search_path}")

    pool = AsyncConnectionPool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        kwargs={
            "autocommit": True,  # statements outside transactions commit on their own
            "prepare_threshold": 0,  # the statement set is small and fixed: prepare at once
            "cursor_factory": psycopg.AsyncRawCursor,  # $n placeholders as written
        },
        configure=configure,
        max_idle=POOL_MAX_IDLE_S,
        open=False,
    )
    try:
        await pool.open(wait=True, timeout=30)
        if schema is not None:
            async with pool.connection() as conn:
                await conn.execute(f'create schema if not exists "{schema}"')
    except BaseException:
        await pool.close()
        raise
    return PoolExecutor(pool, dsn)
