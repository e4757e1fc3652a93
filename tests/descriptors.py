"""What this process's open file descriptors point at (Linux: /proc/self/fd).

Tests that look for a leaked or a spilled file (an inotify instance, an
unlinked SQLite temporary file) read them here; elsewhere ``LISTED`` is False
and such tests skip.
"""

from __future__ import annotations

import os

__all__ = ["LISTED", "descriptor_targets"]

LISTED = os.path.isdir("/proc/self/fd")


def descriptor_targets() -> list[str]:
    """The target of each open descriptor (a path, or ``anon_inode:...``)."""
    targets = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            targets.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass  # closed meanwhile (the listing's own descriptor)
    return targets
