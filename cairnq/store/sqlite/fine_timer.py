"""Sleeps shorter than a millisecond on the event loop (Linux ``timerfd``).

asyncio's selector waits in whole milliseconds: epoll's timeout is rounded
up, so ``loop.call_later(0.0002, ...)`` fires about 1 ms later. A SQLite
waiter told that the database's files were written often finds the commit
not yet published (the writer's fsync is still running; see file_watch) and
wants to look again a fraction of a millisecond later, not a whole one: on a
``call()`` that happens twice (the worker woken, then the caller), and each
millisecond lost is most of what the three commits themselves cost.

A ``timerfd`` armed for the delay is one more descriptor the loop already
polls; it turns readable on time, with no thread and no spinning. One timer
serves every waiter of a store: it is armed for the earliest deadline and
re-armed when it fires. Python 3.13+ binds ``timerfd`` in ``os``; before
that, two libc calls through ctypes. Elsewhere (macOS, Windows, a libc
without it) ``FineTimer.open()`` is None and waiters use whole milliseconds.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import heapq
import itertools
import logging
import os
import sys
import time
import weakref
from typing import Callable, Optional

from cairnq.store.sqlite._libc import libc

log = logging.getLogger("cairnq.store")

__all__ = ["FineTimer"]

_CLOCK_MONOTONIC = 1  # time.monotonic() reads the same clock on Linux
_TFD_NONBLOCK = 0o4000
_TFD_CLOEXEC = 0o2000000
# Deadlines this close to now are due: firing early by this much costs one
# look at the change counter too soon, never a missed one.
_SLACK_S = 0.00002


class _TimeSpec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _ITimerSpec(ctypes.Structure):
    _fields_ = [("it_interval", _TimeSpec), ("it_value", _TimeSpec)]


@functools.cache
def _binding() -> Optional[tuple[Callable[[], int], Callable[[int, int], None]]]:
    """(create, arm(fd, nanoseconds)) for this platform, or None. Made at the
    first ``FineTimer.open()``, not at import (see ``_libc``)."""
    if not sys.platform.startswith("linux"):
        return None
    if sys.version_info >= (3, 13):  # os binds timerfd

        def create_os() -> int:
            return os.timerfd_create(_CLOCK_MONOTONIC, flags=_TFD_NONBLOCK | _TFD_CLOEXEC)

        def arm_os(fd: int, ns: int) -> None:
            os.timerfd_settime_ns(fd, initial=ns)

        return create_os, arm_os
    try:
        found = libc()
        create_fn, settime_fn = found.timerfd_create, found.timerfd_settime
    except (OSError, AttributeError):
        return None
    create_fn.argtypes, create_fn.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    settime_fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_ITimerSpec), ctypes.c_void_p]
    settime_fn.restype = ctypes.c_int

    def create_libc() -> int:
        fd = int(create_fn(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC))
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return fd

    def arm_libc(fd: int, ns: int) -> None:
        spec = _ITimerSpec(_TimeSpec(0, 0), _TimeSpec(ns // 1_000_000_000, ns % 1_000_000_000))
        if settime_fn(fd, 0, ctypes.byref(spec), None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    return create_libc, arm_libc



class FineTimer:
    """Settles futures after sub-millisecond delays, on the loop that asked."""

    def __init__(self, fd: int, arm: Callable[[int, int], None]) -> None:
        self._fd = fd
        # The descriptor goes with the timer even if nobody closes it.
        self._release = weakref.finalize(self, os.close, fd)
        self._arm_fd = arm
        self._due: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self._armed_for: Optional[float] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None

    @classmethod
    def open(cls) -> Optional["FineTimer"]:
        """A timer, or None where there is no timerfd (the caller sleeps in
        whole milliseconds)."""
        binding = _binding()
        if binding is None:
            return None
        create, arm = binding
        try:
            return cls(create(), arm)
        except OSError:
            log.debug("no timerfd; waiters sleep in whole milliseconds", exc_info=True)
            return None

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def settle_after(self, future: asyncio.Future[None], delay_s: float) -> bool:
        """Set ``future``'s result (None) ``delay_s`` from now, unless it is
        done by then. False if the timer cannot serve (closed, or the loop
        refused its descriptor): the caller falls back to ``call_later``."""
        if self._fd < 0 or not self._on_loop():
            return False
        deadline = time.monotonic() + max(delay_s, 0.0)
        heapq.heappush(self._due, (deadline, next(self._order), future))
        if self._armed_for is None or deadline < self._armed_for:
            return self._arm(deadline)
        return True

    def close(self) -> None:
        if self._fd < 0:
            return
        fd, self._fd = self._fd, -1
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.remove_reader(fd)
        self._loop = None
        self._release()
        for _, _, future in self._due:  # wake whoever still sleeps: they look and wait again
            if not future.done():
                future.set_result(None)
        self._due.clear()

    # -- internals ------------------------------------------------------------

    def _on_loop(self) -> bool:
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return True
        if self._loop is not None and not self._loop.is_closed():
            return False  # in use on another running loop: not shared across loops
        try:
            loop.add_reader(self._fd, self._fired)
        except (NotImplementedError, OSError, ValueError, RuntimeError):
            log.debug("the loop cannot watch a timerfd", exc_info=True)
            return False
        self._loop = loop
        self._due.clear()  # futures of a closed loop will never be awaited
        self._armed_for = None
        return True

    def _arm(self, deadline: float) -> bool:
        ns = max(1, int((deadline - time.monotonic()) * 1e9))  # 0 would disarm it
        try:
            self._arm_fd(self._fd, ns)
        except OSError:
            log.debug("timerfd could not be armed", exc_info=True)
            self._armed_for = None
            return False
        self._armed_for = deadline
        return True

    def _fired(self) -> None:
        try:
            os.read(self._fd, 8)  # the expiry count; reading it disarms readability
        except BlockingIOError:
            pass
        except OSError:
            log.debug("timerfd read failed", exc_info=True)
        self._armed_for = None
        due, now = self._due, time.monotonic() + _SLACK_S
        while due and (due[0][0] <= now or due[0][2].done()):
            _, _, future = heapq.heappop(due)
            if not future.done():
                future.set_result(None)
        if due and not self._arm(due[0][0]):
            for _, _, future in due:  # cannot re-arm: settle now rather than never
                if not future.done():
                    future.set_result(None)
            due.clear()
