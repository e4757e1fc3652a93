"""Told by the kernel when a SQLite database's files are written.

An idle SQLite waiter (a claim loop with nothing to do, a caller waiting for
its task, ``watch``) learns of another process's commit from the file's
change counter (``PRAGMA data_version``). Polling it every millisecond or two
costs a read per tick and still leaves a caller up to a tick behind. Here the
kernel says when the database's files were written, so the waiter looks at
the counter only then (and rarely otherwise, as a safety net):

* Linux: inotify on the database's files (the database, ``-wal``,
  ``-journal``) for writes, and on their **directory** for names coming and
  going only (created, deleted, renamed). A file created later (the WAL
  comes and goes: every connection closing, a restore) is watched when its
  name appears; one truncated in place (``wal_checkpoint(TRUNCATE)``) keeps
  its watch. Writes to other files in the directory (a log, another
  database) are never reported, so they cost an idle waiter nothing. The
  binding is a few ctypes calls into libc (``inotify_init1``,
  ``inotify_add_watch``); adding a watch opens no descriptor of the file
  (see the kqueue note on locks). The descriptor is non-blocking and read by
  the event loop (``loop.add_reader``), no thread.
* macOS and the BSDs: kqueue (``select.kqueue``) on the directory (an entry
  added or removed: the WAL came or went, look again) and on the ``-wal``
  file (``NOTE_WRITE``/``NOTE_EXTEND``). Never on the main database file:
  closing any descriptor of a file drops every POSIX lock the process holds
  on it, SQLite's included, so this module opens none of SQLite's locked
  files (the WAL carries no locks).
* Anywhere else (Windows), or when the watch cannot be set up (no inotify
  instances left, a directory we may not read), or with
  ``CAIRNQ_SQLITE_FILE_WATCH=0`` in the environment: no watch, and waiters
  poll as before.

A store makes its watch at its first wait (a store that never waits, a
producer, holds none) and closes it with its connection. On Linux each watch
is one inotify instance, of ``fs.inotify.max_user_instances`` per user (128
by default): past that, the store that cannot get one polls.

A notification only means "look now": the writer's WAL frames reach the
file (the event) before its commit is published in the shared-memory index
that ``data_version`` reads (after the fsync, under ``synchronous=FULL``),
so a waiter that finds nothing new right after a notification keeps looking
closely for a short while (see ``SQLiteStore._wait_for_change``).

Libraries considered: ``inotify_simple`` (a thin ctypes wrapper, blocking
reads with a timeout, fd exposed) and ``asyncinotify`` (async iterator over
events, its own loop plumbing) would each be a new mandatory dependency for
about forty lines of ctypes that this module holds; ``watchfiles`` debounces
in a Rust thread (tens of milliseconds: far too slow for a wakeup);
``watchdog`` runs a thread per observer. None covers kqueue the way needed
here (directory plus one file, no main-file descriptor), so both backends are
written out.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import functools
import logging
import os
import select
import struct
import sys
import time
import weakref
from typing import Callable

from cairnq.store.sqlite._libc import libc
from cairnq.store.sqlite.fine_timer import FineTimer

log = logging.getLogger("cairnq.store")

__all__ = ["FileWatch", "watch_database", "file_watch_enabled", "ENV"]

#: ``CAIRNQ_SQLITE_FILE_WATCH=0`` (or ``false``/``no``/``off``) turns the
#: watch off: idle waiters poll the change counter, as without one.
ENV = "CAIRNQ_SQLITE_FILE_WATCH"


def file_watch_enabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


class FileWatch:
    """One watch on one database's files, shared by every waiter of a store.

    Waiters hold ``waiting()`` while they sleep (the descriptor is read by the
    event loop only while someone does; meanwhile the kernel keeps the events,
    merging repeats) and ``add`` a future per sleep, settled at the next
    notification. ``last_notice`` is when the last one was read (monotonic
    seconds), not counting what the store's own commits caused
    (``read_own_commit``). ``live`` turns False when the watch stops working
    (its directory went away, the loop refused the descriptor): waiters then
    poll.
    ``fine`` times the close looks that follow a notification (see
    fine_timer; None where there is no timerfd); it is closed with the watch.
    """

    def __init__(self, fd: int, drain: Callable[[], bool], release: Callable[[], None]) -> None:
        self._fd = fd
        self._drain = drain  # read what is pending; True if it concerns the database
        # The descriptors go with the watch even if nobody closes it (release
        # must not refer to the watch).
        self._release = weakref.finalize(self, release)
        self._waiters: set[asyncio.Future[None]] = set()
        self._holders = 0
        self._loop: asyncio.AbstractEventLoop | None = None  # where the fd is registered
        self.live = True
        self.gone = False  # set by a backend: its watch ended (the directory went)
        self.fine: FineTimer | None = None
        self.last_notice = float("-inf")
        self.notices = 0
        self.own_notices = 0  # read right after the store's own commits (read_own_commit)

    # -- waiters ------------------------------------------------------------

    def waiting(self) -> _Holding:
        return _Holding(self)

    @property
    def reader(self) -> Callable[[], None]:
        """The callback the loop runs when a notification is there to read."""
        return self._on_readable

    def _hold(self) -> None:
        self._holders += 1
        loop = asyncio.get_running_loop()
        if self._loop is not None and self._loop is not loop and self._loop.is_closed():
            self._loop = None  # the store outlived its loop; the selector went with it
        if self._loop is None and self.live:
            try:
                loop.add_reader(self._fd, self._on_readable)
            except (NotImplementedError, OSError, ValueError, RuntimeError):
                log.debug("file watch: the loop cannot watch the descriptor", exc_info=True)
                self._stop()
                return
            self._loop = loop

    def _unhold(self) -> None:
        self._holders -= 1
        if self._holders <= 0:
            self._holders = 0
            self._unregister()

    def add(self, waiter: asyncio.Future[None]) -> None:
        self._waiters.add(waiter)

    def discard(self, waiter: asyncio.Future[None]) -> None:
        self._waiters.discard(waiter)

    # -- events -------------------------------------------------------------

    def _on_readable(self) -> None:
        self._read(own=False)

    def read_own_commit(self) -> None:
        """The store's connection has just committed, on this thread: read
        what is pending now. Its own writes are in it (no other connection
        writes the WAL while this one holds the write lock, and this runs
        right after the COMMIT), and perhaps another connection's from before
        the transaction, published by then. Waiters are woken as by any
        notification, but ``last_notice`` stays: no close looks follow, as
        nothing reported here is still on its way to being published (the
        next write of another connection is reported on its own)."""
        if self.live and self._fd >= 0:
            self._read(own=True)

    def _read(self, *, own: bool) -> None:
        try:
            relevant = self._drain()
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR):
                return
            log.debug("file watch: read failed; polling from now on", exc_info=True)
            self._stop()
            return
        if relevant:
            if own:
                self.own_notices += 1
            else:
                self.notices += 1
                self.last_notice = time.monotonic()
            self._wake()
        if self.gone:
            self._stop()

    def _wake(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    # -- shutdown -------------------------------------------------------------

    def _unregister(self) -> None:
        loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            try:
                loop.remove_reader(self._fd)
            except (OSError, ValueError, RuntimeError):
                log.debug("file watch: remove_reader failed", exc_info=True)

    def _stop(self) -> None:
        """Notifications are over (closed, or broken): wake the waiters so that
        they go back to polling (or notice the close)."""
        if not self.live:
            return
        self.live = False
        self._unregister()
        self._wake()

    def close(self) -> None:
        if self._fd < 0:
            return
        self._stop()
        try:
            self._release()
        finally:
            self._fd = -1
            fine, self.fine = self.fine, None
            if fine is not None:
                fine.close()

    @property
    def closed(self) -> bool:
        return self._fd < 0


class _Holding:
    __slots__ = ("_watch",)

    def __init__(self, watch: FileWatch) -> None:
        self._watch = watch

    def __enter__(self) -> FileWatch:
        self._watch._hold()
        return self._watch

    def __exit__(self, *exc: object) -> None:
        self._watch._unhold()


def watch_database(path: str) -> FileWatch | None:
    """A watch on the database file at ``path`` and its journals, or None
    where notifications are off, unavailable or failed to start (the caller
    polls)."""
    if not file_watch_enabled():
        return None
    real = os.path.realpath(path)
    directory, base = os.path.split(real)
    names = {base.encode(), (base + "-wal").encode(), (base + "-journal").encode()}
    watch: FileWatch | None = None
    try:
        if sys.platform.startswith("linux"):
            watch = _inotify_watch(directory or ".", names)
        elif sys.platform != "win32":
            if hasattr(select, "kqueue"):
                watch = _kqueue_watch(directory or ".", real + "-wal")
    except OSError:
        log.debug("file watch unavailable for %s; polling", path, exc_info=True)
    if watch is not None:
        watch.fine = FineTimer.open()
    return watch


# -- Linux: inotify through libc ------------------------------------------------

_IN_MODIFY = 0x00000002
_IN_MOVED_FROM = 0x00000040
_IN_MOVED_TO = 0x00000080
_IN_CREATE = 0x00000100
_IN_DELETE = 0x00000200
_IN_DELETE_SELF = 0x00000400
_IN_MOVE_SELF = 0x00000800
_IN_Q_OVERFLOW = 0x00004000
_IN_IGNORED = 0x00008000
_IN_ONLYDIR = 0x01000000
_IN_EXCL_UNLINK = 0x04000000
# On the directory, names coming and going (no writes: those of every other
# file there would be reported too); on each of the database's files, its
# writes and truncations.
_DIR_MASK = (
    _IN_CREATE | _IN_DELETE | _IN_MOVED_FROM | _IN_MOVED_TO
    | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_ONLYDIR | _IN_EXCL_UNLINK
)  # fmt: skip
_FILE_MASK = _IN_MODIFY
_NAME_CAME = _IN_CREATE | _IN_MOVED_TO
_DIR_GONE = _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_IGNORED
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name
_READ_SIZE = 64 * 1024
# The largest event: its header and a name of NAME_MAX bytes with its NUL.
# A read that left at least this much of the buffer free took every event
# queued at that moment (the kernel hands out whole events, as many as fit).
_LARGEST_EVENT = _EVENT.size + 256

@functools.cache
def _inotify_libc() -> ctypes.CDLL:
    found = libc()
    found.inotify_init1.argtypes = [ctypes.c_int]
    found.inotify_init1.restype = ctypes.c_int
    found.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    found.inotify_add_watch.restype = ctypes.c_int
    return found


def _inotify_watch(directory: str, names: set[bytes]) -> FileWatch:
    try:
        libc = _inotify_libc()
        init1, add_watch = libc.inotify_init1, libc.inotify_add_watch
    except (OSError, AttributeError) as exc:  # no libc, or one without inotify
        raise OSError(errno.ENOSYS, "inotify is not available") from exc
    fd = init1(os.O_NONBLOCK | os.O_CLOEXEC)  # IN_NONBLOCK, IN_CLOEXEC
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    folder = os.fsencode(directory)
    files: dict[int, bytes] = {}  # watch descriptor -> the file's name

    def add(path: bytes, mask: int) -> int | None:
        """The new watch's descriptor; None when there is no such file (it
        went, or never came: its name's arrival will be reported)."""
        wd = add_watch(fd, path, mask)
        if wd >= 0:
            return int(wd)
        code = ctypes.get_errno()
        if code == errno.ENOENT and mask == _FILE_MASK:
            return None
        # Out of watches (ENOSPC), say: writes could go unreported, so the
        # watch must not stand (the waiters poll instead).
        raise OSError(code, f"inotify_add_watch {os.fsdecode(path)!r}: {os.strerror(code)}")

    def arm(name: bytes) -> None:
        """Watch the file named ``name`` now there, if it still is. (A file
        replaced under its name gets a watch of its own; the old one's ends
        when the old file is gone.)"""
        wd = add(os.path.join(folder, name), _FILE_MASK)
        if wd is not None:
            files[wd] = name

    try:
        # The directory first: a file created after this is reported, and
        # armed then; one created before it is armed here.
        dir_wd = add(folder, _DIR_MASK)
        for name in names:
            arm(name)
    except BaseException:
        os.close(fd)
        raise
    watch: FileWatch
    # Read into one buffer kept for the watch: a read runs after every commit
    # of the store's own, and a fresh 64 KiB bytes object for each costs more
    # than the read (malloc, then the shrink to the few events read).
    buffer = bytearray(_READ_SIZE)
    into = [buffer]

    def drain() -> bool:
        relevant = False
        while True:
            try:
                size = os.readv(fd, into)
            except BlockingIOError:
                return relevant
            if not size:
                return relevant
            offset = 0
            while offset + _EVENT.size <= size:
                wd, mask, _, length = _EVENT.unpack_from(buffer, offset)
                start = offset + _EVENT.size
                offset = start + length
                if mask & _IN_Q_OVERFLOW:
                    # Events were lost, creations perhaps among them: look,
                    # and watch whatever is there now.
                    relevant = True
                    for name in names:
                        arm(name)
                elif wd != dir_wd:
                    if mask & _IN_IGNORED:
                        files.pop(wd, None)  # that file is gone (its name's going was told)
                    elif wd in files:
                        relevant = True
                elif mask & _DIR_GONE:
                    # The directory went (the database with it): the store's
                    # own check of the path takes it from here; poll.
                    relevant = True
                    watch.gone = True
                else:
                    name = bytes(buffer[start:offset]).rstrip(b"\0")
                    if name in names:
                        relevant = True
                        if mask & _NAME_CAME:
                            arm(name)
            if size <= _READ_SIZE - _LARGEST_EVENT:
                # Every event queued when it read: no second read (it would
                # fail with EAGAIN, an exception made for nothing). One queued
                # since makes the descriptor readable: the loop reads it.
                return relevant

    watch = FileWatch(fd, drain, lambda: os.close(fd))
    return watch


# -- macOS and the BSDs: kqueue -------------------------------------------------

if not sys.platform.startswith("linux") and sys.platform != "win32":

    def _kqueue_watch(directory: str, wal: str) -> FileWatch:
        kq = select.kqueue()
        open_flags = getattr(os, "O_EVTONLY", os.O_RDONLY) | getattr(os, "O_CLOEXEC", 0)
        fds: dict[str, int] = {}  # "dir" and "wal": descriptors watched

        def watch_fd(key: str, path: str, fflags: int) -> None:
            fd = os.open(path, open_flags)
            try:
                kev = select.kevent(
                    fd,
                    filter=select.KQ_FILTER_VNODE,
                    flags=select.KQ_EV_ADD | select.KQ_EV_CLEAR,
                    fflags=fflags,
                )
                kq.control([kev], 0, 0)
            except BaseException:
                os.close(fd)
                raise
            fds[key] = fd

        file_notes = (
            select.KQ_NOTE_WRITE | select.KQ_NOTE_EXTEND | select.KQ_NOTE_ATTRIB  # (truncation)
            | select.KQ_NOTE_DELETE | select.KQ_NOTE_RENAME | getattr(select, "KQ_NOTE_REVOKE", 0)
        )  # fmt: skip

        def arm_wal() -> None:
            """Watch the WAL file if it is there (it comes and goes)."""
            old = fds.pop("wal", None)
            if old is not None:
                os.close(old)  # the kernel drops its registration with it
            try:
                watch_fd("wal", wal, file_notes)
            except FileNotFoundError:
                pass

        try:
            watch_fd(
                "dir",
                directory,
                select.KQ_NOTE_WRITE | select.KQ_NOTE_DELETE | select.KQ_NOTE_RENAME,
            )
            arm_wal()
        except BaseException:
            for fd in fds.values():
                os.close(fd)
            kq.close()
            raise
        watch: FileWatch

        def drain() -> bool:
            relevant = False
            while True:
                events = kq.control(None, 16, 0)
                if not events:
                    return relevant
                relevant = True
                rearm = False
                for ev in events:
                    if ev.ident == fds.get("dir"):
                        if ev.fflags & (select.KQ_NOTE_DELETE | select.KQ_NOTE_RENAME):
                            watch.gone = True
                        rearm = True  # an entry came or went: perhaps the WAL
                    elif ev.fflags & (select.KQ_NOTE_DELETE | select.KQ_NOTE_RENAME):
                        rearm = True
                if rearm:
                    arm_wal()

        def release() -> None:
            for fd in fds.values():
                os.close(fd)
            fds.clear()
            kq.close()

        watch = FileWatch(kq.fileno(), drain, release)
        return watch
