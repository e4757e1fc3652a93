"""Running a worker as a process (``serve``) or beside other work (``background``).

Works on anything that runs, stops and closes like a worker (``Runnable``),
so it needs nothing from ``worker.py``; whether the store is closed at the
end is the caller's word (``close_store``: the worker built its store).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from typing import AsyncIterator, Optional, Protocol, TypeVar

log = logging.getLogger("cairnq.worker")

__all__ = ["Runnable", "serve", "background"]


class Runnable(Protocol):
    """What serve() and background() need of a worker."""

    async def run(self, *, concurrency: Optional[int] = None) -> None: ...

    def stop(self) -> None: ...

    async def close(self) -> None: ...


R = TypeVar("R", bound=Runnable)

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def serve(
    worker: Runnable,
    concurrency: Optional[int],
    *,
    close_store: bool,
    drain_on_eof: Optional[int] = None,
) -> None:
    """``asyncio.run`` the worker with signal handling; see ``Worker.serve``.

    ``drain_on_eof``: the read end of a pipe nobody writes to; its end of file
    (the one process holding the write end is gone) drains like a first signal.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("Worker.serve() blocks; inside a running loop use `await worker.run()`")
    asyncio.run(_serve(worker, concurrency, close_store, drain_on_eof))


async def _serve(
    worker: Runnable, concurrency: Optional[int], close_store: bool, drain_on_eof: Optional[int]
) -> None:
    loop = asyncio.get_running_loop()
    installed = _install_handlers(loop, worker)
    if drain_on_eof is not None:
        _watch_for_eof(loop, drain_on_eof, worker)
    try:
        await worker.run(concurrency=concurrency)
    finally:
        _remove_handlers(loop, installed)
        if drain_on_eof is not None:
            loop.remove_reader(drain_on_eof)
        if close_store:
            with contextlib.suppress(Exception):
                await worker.close()


def _install_handlers(loop: asyncio.AbstractEventLoop, worker: Runnable) -> list[signal.Signals]:
    installed: list[signal.Signals] = []

    def first_signal(sig: signal.Signals) -> None:
        # Graceful: stop claiming, let in-flight calls finish. The handlers go,
        # so a second signal gets the default behaviour (interrupt / terminate).
        log.info("received %s: draining in-flight calls", sig.name)
        _remove_handlers(loop, installed)
        worker.stop()

    for sig in _SIGNALS:
        try:
            loop.add_signal_handler(sig, first_signal, sig)
        except (NotImplementedError, RuntimeError, ValueError):
            continue  # not the main thread, or a platform without signal support
        installed.append(sig)
    return installed


def _watch_for_eof(loop: asyncio.AbstractEventLoop, fd: int, worker: Runnable) -> None:
    def readable() -> None:
        try:
            data = os.read(fd, 64)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            return  # nobody should write; ignore it rather than stop
        loop.remove_reader(fd)
        # Not a signal: a drain already under way is not turned into an interrupt.
        log.warning("the supervisor is gone: draining in-flight calls")
        worker.stop()

    loop.add_reader(fd, readable)


def _remove_handlers(loop: asyncio.AbstractEventLoop, installed: list[signal.Signals]) -> None:
    while installed:
        sig = installed.pop()
        with contextlib.suppress(Exception):
            loop.remove_signal_handler(sig)


@contextlib.asynccontextmanager
async def background(
    worker: R, concurrency: Optional[int], *, close_store: bool
) -> AsyncIterator[R]:
    """Run the worker as a task for the duration of the block.

    On exit: stop, wait for the run to end, close the store if the worker built
    it. A run that failed (a migration error, a protocol mismatch) is raised
    when the block itself ended cleanly, and attached as the block's exception's
    ``__cause__`` otherwise.
    """
    run = asyncio.get_running_loop().create_task(worker.run(concurrency=concurrency))
    body_error: Optional[BaseException] = None
    try:
        yield worker
    except BaseException as exc:
        body_error = exc
        raise
    finally:
        worker.stop()
        run_error: Optional[BaseException] = None
        try:
            await run
        except asyncio.CancelledError:
            pass
        except Exception as exc:
            run_error = exc
        if close_store:
            with contextlib.suppress(Exception):
                await worker.close()
        if run_error is not None:
            if body_error is None:
                raise run_error
            if body_error.__cause__ is None:
                body_error.__cause__ = run_error
