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
  waits). If some live waiter began waiting before it, it does not attempt:
  it queues up itself (a writer that just committed goes to the back).
* So the lock, once free, goes to the writer that has waited longest. A waiter
  that has not polled for STALE_NS (its process stopped, or its loop blocked)
  is passed over until it polls again, so a stuck process cannot stall the
  others; a dead one's slot is released by the kernel.

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
# A waiter polls every millisecond or so; one that has been silent this long
# is not waited for.
STALE_NS = 20_000_000
# struct flock: l_type, l_whence, l_start, l_len, l_pid, padded like the C struct.
_FLOCK = struct.Struct("hhqqi0q")
_ENTRY = struct.Struct("qq")
_STAMP = struct.Struct("q")
_monotonic_ns = time.monotonic_ns


class WriteTurns:
    """This connection's place in the queue for the write lock (see the module docstring)."""

    __slots__ = ("_fd", "_slot", "_since", "_probe")

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._slot: Optional[int] = None  # our slot while waiting (None: no slot was free)
        self._since: Optional[int] = None  # when we began waiting; None while not waiting
        self._probe = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, _TABLE, 0)

    @classmethod
    def open(cls, database: str) -> Optional["WriteTurns"]:
        """Turns for the database file ``database`` (as SQLite names it), or None
        where there can be none (no file, no OFD locks, no sidecar)."""
        if not database or not _AVAILABLE:
            return None
        try:
            fd = os.open(
                database + SUFFIX, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666
            )
        except OSError:
            log.debug("no write turns for %s", database, exc_info=True)
            return None
        return cls(fd)

    @property
    def waiting(self) -> bool:
        return self._since is not None

    def my_turn(self) -> bool:
        """May this writer try for the lock now: no live writer has waited longer."""
        try:
            found = _FLOCK.unpack(fcntl.fcntl(self._fd, fcntl.F_OFD_GETLK, self._probe))
            if found[0] == fcntl.F_UNLCK:
                return True  # nobody else waits
            return not self._older_waiter(found[2])
        except OSError:
            log.debug("write turns unavailable", exc_info=True)
            return True

    def wait(self) -> None:
        """Queue up (once) and mark this waiter as still polling."""
        now = _monotonic_ns()
        try:
            if self._since is None:
                self._since = now
                self._slot = self._take_slot()
                if self._slot is not None:
                    os.pwrite(self._fd, _ENTRY.pack(now, now), self._slot * _SLOT)
            elif self._slot is not None:
                os.pwrite(self._fd, _STAMP.pack(now), self._slot * _SLOT + 8)
        except OSError:
            log.debug("write turns unavailable", exc_info=True)

    def served(self) -> None:
        """Out of the queue: this writer got the lock, or stopped waiting for it."""
        if self._since is None:
            return
        self._since = None
        slot, self._slot = self._slot, None
        if slot is not None:
            self._lock(fcntl.F_UNLCK, slot)

    def close(self) -> None:
        self.served()
        os.close(self._fd)

    # -- the table ----------------------------------------------------------

    def _older_waiter(self, found: int) -> bool:
        """Is a live waiter ahead of us? ``found``: the offset of one other
        slot lock. The kernel reports any one conflicting lock, not the
        lowest, so the others are searched for on both sides of each one
        found: two probes per waiter, one more in all."""
        table = os.pread(self._fd, _TABLE, 0).ljust(_TABLE, b"\0")
        now = _monotonic_ns()
        mine = (self._since, self._slot or 0) if self._since is not None else None
        ranges = [(0, SLOTS)]
        slot = found // _SLOT  # a locked slot of the first range
        while ranges:
            lo, hi = ranges.pop()
            if slot < 0:
                slot = self._locked_slot(lo, hi)
                if slot < 0:
                    continue
            since, polled = _ENTRY.unpack_from(table, slot * _SLOT)
            if since and now - polled < STALE_NS and (mine is None or (since, slot) < mine):
                return True
            ranges += [r for r in ((lo, slot), (slot + 1, hi)) if r[0] < r[1]]
            slot = -1
        return False

    def _locked_slot(self, lo: int, hi: int) -> int:
        """Some slot in [lo, hi) locked by another writer, or -1."""
        probe = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, lo * _SLOT, (hi - lo) * _SLOT, 0)
        found = _FLOCK.unpack(fcntl.fcntl(self._fd, fcntl.F_OFD_GETLK, probe))
        return -1 if found[0] == fcntl.F_UNLCK else found[2] // _SLOT

    def _take_slot(self) -> Optional[int]:
        for slot in range(SLOTS):
            if self._lock(fcntl.F_WRLCK, slot):
                return slot
        return None  # every slot taken: wait unannounced

    def _lock(self, kind: int, slot: int) -> bool:
        try:
            fcntl.fcntl(
                self._fd, fcntl.F_OFD_SETLK, _FLOCK.pack(kind, os.SEEK_SET, slot * _SLOT, _SLOT, 0)
            )
        except OSError:
            return False
        return True
