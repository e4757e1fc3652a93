"""The C library, for this package's ctypes bindings (inotify in file_watch,
timerfd in fine_timer before Python 3.13).

Loaded once, at the first binding that needs it and never at import:
``ctypes.util.find_library`` runs ``ldconfig`` in a subprocess (about 2 ms
here), which a process that never waits on a SQLite file should not pay.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

__all__ = ["libc"]


@functools.cache
def libc() -> ctypes.CDLL:
    """The C library with ``use_errno`` (raises OSError where there is none)."""
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
