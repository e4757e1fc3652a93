"""Group commit for PostgreSQL writes issued outside a transaction.

A write that finds nothing in flight is sent at once, on its own in
autocommit: a caller that submits one task after another never waits for a
batch to form. Writes that come while one is on its way are sent together:
one transaction, pipelined (one round trip) when the executor offers it, so
one WAL flush instead of one per write. If any
statement of a batch fails, the batch is rolled back and every write in it is
re-run on its own, so each caller gets its own outcome.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any, Awaitable, Callable, Sequence

from cairnq.store.postgres.rows import rows_of

log = logging.getLogger("cairnq.store")

__all__ = ["PgWriteBatcher"]

MAX_BATCH = 256
Rows = Callable[[str, list[Any], bool], Awaitable[list[Any]]]  # (text, values, prepare)
# A write waiting for its batch: text, values, prepare (False: planned with its
# own values, see cairnq._sql's plan-custom), and the caller's future.
_Write = tuple[str, list[Any], bool, "asyncio.Future[list[Any]]"]


class PgWriteBatcher:
    def __init__(self, executor: Any, rows: Rows) -> None:
        self._executor = executor
        self._rows = rows
        self._batch_writer = getattr(executor, "_write_batch", None)
        self._queue: deque[_Write] = deque()
        self._flusher: asyncio.Task[None] | None = None
        self._sending_alone = False  # a write that found nothing in flight is on its way

    async def write(self, text: str, values: list[Any], prepare: bool = True) -> list[Any]:
        if self._flusher is None and not self._queue and not self._sending_alone:
            # Nothing in flight: send it now. Waiting a turn to see whether
            # others join would cost every sequential caller that turn (and
            # whatever else is ready in it) for nothing.
            self._sending_alone = True
            try:
                return await self._rows(text, values, prepare)
            finally:
                self._sending_alone = False
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Any]] = loop.create_future()
        self._queue.append((text, values, prepare, future))
        if self._flusher is None:
            self._flusher = loop.create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        try:
            while self._queue:
                batch = [self._queue.popleft() for _ in range(min(MAX_BATCH, len(self._queue)))]
                batch = [w for w in batch if not w[3].cancelled()]
                if len(batch) == 1:
                    await self._one(*batch[0])
                elif batch:
                    await self._many(batch)
        finally:
            self._flusher = None

    async def _one(
        self, text: str, values: list[Any], prepare: bool, future: asyncio.Future[list[Any]]
    ) -> None:
        try:
            rows = await self._rows(text, values, prepare)
        except Exception as exc:
            _settle(future, exc=exc)
        else:
            _settle(future, rows)

    async def _many(self, batch: Sequence[_Write]) -> None:
        try:
            if self._batch_writer is not None:
                results = await self._batch_writer([(t, v, p) for t, v, p, _ in batch])
            else:
                results = []
                async with self._executor.transaction() as session:
                    rows = rows_of(session)
                    for text, values, prepare, _ in batch:
                        results.append(await rows(text, values, prepare))
        except Exception:
            log.debug("batched write failed; re-running its writes one by one", exc_info=True)
            await asyncio.gather(*(self._one(*w) for w in batch))
            return
        for (_, _, _, future), rows in zip(batch, results):
            _settle(future, rows)

    async def drain(self) -> None:
        flusher = self._flusher
        if flusher is not None:
            await asyncio.gather(flusher, return_exceptions=True)


def _settle(future: asyncio.Future[list[Any]], rows: Any = None, exc: BaseException | None = None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(rows)
