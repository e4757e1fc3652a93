"""Turns at SQLite's write lock for the cairnq processes sharing one file.

SQLite hands its write lock to whichever connection asks at an instant it is
free, and with ``busy_timeout`` (ours is 0; the engine polls) a waiter only
asks now and then. A process with writes queued back to back asks again
microseconds after each COMMIT, so a waiter can lose every race for seconds
while the lock changes hands hundreds of times. Here a waiting writer queues
up instead, in a sidecar file next to the database, ``<database>-cairnq-wait``:

* A writer that found the lock taken takes a slot: an open-file-description
  (OFD) write lock on the slot's 16 bytes, which the kernel drops if the
  process dies, and in the bytes themselves when it began waiting and when it
  last polled (``CLOCK_MONOTONIC`` nanoseconds, one clock for every process
  of the machine, and SQLite's WAL shares its memory only within one).
* Before every attempt at the lock, a writer asks the kernel whether any
  other slot is locked (one ``F_OFD_GETLK``: the whole cost when nobody
  waits). A waiter attempts only if no live waiter began waiting before it.
  A writer that is not waiting (it just committed, typically) goes on only
  until the longest waiter has waited HOLD_NS, then queues up at the back.
* So the lock, once free, goes to the writer that has waited longest, and a
  writer waits at most HOLD_NS plus the transactions of those ahead of it
  (measured: p99 ~20 ms beside two writers that never pause). A waiter
  that has not polled for STALE_NS (its process stopped, or its loop blocked)
  is passed over until it polls again, so a stuck process cannot stall the
  others; a dead one's slot is released by the kernel.

The sidecar exists only while there is contention to order: the first
writer to wait creates it; every writer that finds it keeps it open, with a
shared OFD lock on the byte after the table ("present"), and the last of
them to close removes it (it alone can take that byte exclusively). Without
it, a writer looks for it again only after ABSENT_RECHECK_NS (so an
uncontended process pays one clock read per write, and a writer that has
not seen the sidecar yet may go ahead of a waiter for that long, once).

Writers that do not take part (the reference SDK, the sqlite3 shell) are not
ordered, but lose nothing: the participants never barge ahead of each other,
which leaves them more chances than before. Where OFD locks are missing (not
Linux) or the sidecar cannot be opened (a read-only directory), there are no
turns: the engine then polls as it would otherwise.
"""

from __future__ import annotations

import logging
import os
import struct
import sys
import time
from typing import Optional

if sys.platform != "win32":
    import fcntl

    # Open-file-description locks (Linux 3.15+): owned by one open file, not
    # by the process, so two connections of one process are two writers.
    _AVAILABLE = hasattr(fcntl, "F_OFD_GETLK")
else:
    _AVAILABLE = False

log = logging.getLogger("cairnq.store")

__all__ = ["WriteTurns", "SUFFIX", "STALE_NS"]

SUFFIX = "-cairnq-wait"
SLOTS = 64
_SLOT = 16  # two int64: began waiting, last polled
_TABLE = SLOTS * _SLOT
_PRESENT = _TABLE  # the byte every writer with the sidecar open holds a shared lock on
# A waiter polls every millisecond or so; one that has been silent this long
# is not waited for.
STALE_NS = 20_000_000
# A writer that is not waiting (it just had the lock) goes on writing until
# the longest waiter has waited this long: each hand-over leaves the lock idle
# until the waiter's next poll (a millisecond or two), so handing it over at
# every COMMIT would cost busy writers a fifth of their throughput.
HOLD_NS = 10_000_000
# Without a sidecar, how long before a writer looks for one again.
ABSENT_RECHECK_NS = 1_000_000
# struct flock: l_type, l_whence, l_start, l_len, l_pid, padded like the C struct.
_FLOCK = struct.Struct("hhqqi0q")
_ENTRY = struct.Struct("qq")
_STAMP = struct.Struct("q")
_monotonic_ns = time.monotonic_ns


class WriteTurns:
    """This connection's place in the queue for the write lock (see the module docstring)."""

    __slots__ = ("_path", "_fd", "_slot", "_since", "_absent_until", "_probe")

    def __init__(self, path: str) -> None:
        self._path = path  # the sidecar
        self._fd: Optional[int] = None  # open while the sidecar exists and we have seen it
        self._slot: Optional[int] = None  # our slot while waiting (None: no slot was free)
        self._since: Optional[int] = None  # when we began waiting; None while not waiting
        self._absent_until = 0  # no sidecar: do not look again before then
        self._probe = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, _TABLE, 0)

    @classmethod
    def open(cls, database: str) -> Optional["WriteTurns"]:
        """Turns for the database file ``database`` (as SQLite names it), or
        None where there can be none (no file, no OFD locks). Touches no file."""
        if not database or not _AVAILABLE:
            return None
        return cls(database + SUFFIX)

    @property
    def waiting(self) -> bool:
        return self._since is not None

    def my_turn(self) -> bool:
        """May this writer try for the lock now: no live writer has waited longer."""
        fd = self._fd
        if fd is None:
            if _monotonic_ns() < self._absent_until:
                return True  # no sidecar a moment ago: nobody waits
            fd = self._attach(create=False)
            if fd is None:
                return True
        try:
            found = _FLOCK.unpack(fcntl.fcntl(fd, fcntl.F_OFD_GETLK, self._probe))
            if found[0] == fcntl.F_UNLCK:
                return True  # nobody else waits
            return not self._older_waiter(fd, found[2])
        except OSError:
            log.debug("write turns unavailable", exc_info=True)
            return True

    def wait(self) -> None:
        """Queue up (once) and mark this waiter as still polling."""
        now = _monotonic_ns()
        if self._since is None:
            self._since = now
            fd = self._fd if self._fd is not None else self._attach(create=True)
            self._slot = None if fd is None else self._take_slot(fd)
            self._stamp(_ENTRY.pack(now, now), 0)
        else:
            self._stamp(_STAMP.pack(now), 8)

    def served(self) -> None:
        """Out of the queue: this writer got the lock, or stopped waiting for it."""
        if self._since is None:
            return
        self._since = None
        slot, self._slot = self._slot, None
        if slot is not None and self._fd is not None:
            _lock(self._fd, fcntl.F_UNLCK, slot * _SLOT, _SLOT)

    def close(self) -> None:
        """Leave the queue, and remove the sidecar if no other writer has it open."""
        self.served()
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if _lock(fd, fcntl.F_WRLCK, _PRESENT, 1):  # nobody else holds it: the last one
                os.unlink(self._path)
        except OSError:
            log.debug("write turns sidecar left behind", exc_info=True)
        finally:
            os.close(fd)

    # -- the sidecar -----------------------------------------------------------

    def _attach(self, create: bool) -> Optional[int]:
        """Open the sidecar (creating it if ``create``) and mark it in use. The
        file found must still be the one at the path once marked: the last
        user may have removed it meanwhile."""
        now = _monotonic_ns()
        if not create and not os.access(self._path, os.F_OK):  # cheaper than a failing open
            self._absent_until = now + ABSENT_RECHECK_NS
            return None
        flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0) | (os.O_CREAT if create else 0)
        for _ in range(3):
            try:
                fd = os.open(self._path, flags, 0o666)
            except FileNotFoundError:
                self._absent_until = now + ABSENT_RECHECK_NS
                return None
            except OSError:  # a read-only directory, say: no turns for a while
                log.debug("no write turns for %s", self._path, exc_info=True)
                self._absent_until = now + 1000 * ABSENT_RECHECK_NS
                return None
            try:
                if _lock(fd, fcntl.F_RDLCK, _PRESENT, 1) and _same_file(fd, self._path):
                    self._fd = fd
                    return fd
            except OSError:
                pass
            os.close(fd)  # being removed by its last user: look again
        return None

    def _stamp(self, data: bytes, at: int) -> None:
        if self._slot is None or self._fd is None:
            return
        try:
            os.pwrite(self._fd, data, self._slot * _SLOT + at)
        except OSError:
            log.debug("write turns unavailable", exc_info=True)

    # -- the table ----------------------------------------------------------

    def _older_waiter(self, fd: int, found: int) -> bool:
        """Is a live waiter ahead of us? ``found``: the offset of one other
        slot lock. The kernel reports any one conflicting lock, not the
        lowest, so the others are searched for on both sides of each one
        found: two probes per waiter, one more in all."""
        table = os.pread(fd, _TABLE, 0).ljust(_TABLE, b"\0")
        now = _monotonic_ns()
        mine = (self._since, self._slot or 0) if self._since is not None else None
        ranges = [(0, SLOTS)]
        slot = found // _SLOT  # a locked slot of the first range
        while ranges:
            lo, hi = ranges.pop()
            if slot < 0:
                slot = _locked_slot(fd, lo, hi)
                if slot < 0:
                    continue
            since, polled = _ENTRY.unpack_from(table, slot * _SLOT)
            if (
                since
                and now - polled < STALE_NS
                and ((since, slot) < mine if mine is not None else now - since >= HOLD_NS)
            ):
                return True
            ranges += [r for r in ((lo, slot), (slot + 1, hi)) if r[0] < r[1]]
            slot = -1
        return False

    def _take_slot(self, fd: int) -> Optional[int]:
        for slot in range(SLOTS):
            if _lock(fd, fcntl.F_WRLCK, slot * _SLOT, _SLOT):
                return slot
        return None  # every slot taken: wait unannounced


def _locked_slot(fd: int, lo: int, hi: int) -> int:
    """Some slot in [lo, hi) locked by another writer, or -1."""
    probe = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, lo * _SLOT, (hi - lo) * _SLOT, 0)
    found = _FLOCK.unpack(fcntl.fcntl(fd, fcntl.F_OFD_GETLK, probe))
    return -1 if found[0] == fcntl.F_UNLCK else found[2] // _SLOT


def _lock(fd: int, kind: int, start: int, length: int) -> bool:
    """Set (or clear) an OFD lock without waiting; False if another holds one in the way."""
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _FLOCK.pack(kind, os.SEEK_SET, start, length, 0))
    except OSError:
        return False
    return True


def _same_file(fd: int, path: str) -> bool:
    try:
        at_path = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (at_path.st_dev, at_path.st_ino)
