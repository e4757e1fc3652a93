"""Which distribution installed this ``cairnq`` package, and the mixed case.

Ours is the distribution ``cairnq-fast``; it provides the same import package,
``cairnq``, as the reference SDK's distribution ``cairnq``. pip cannot refuse a
wheel at install time, so when both are installed in one environment the one
installed last owns the shared files (``cairnq/__init__.py`` among them).
When that is ours, ``check_not_mixed()`` notices the other one (one metadata
lookup, at import) and refuses with the fix. When it is the reference's, its
own ``__init__`` runs (without ``cairnq.IMPLEMENTATION``) and soon imports one
of our leftover packages that shadow its modules; ``refuse_unless_ours()``,
called first by each of them, refuses there with the same fix.

Imports nothing of cairnq: it runs first, before any module that the other
distribution may have overwritten.
"""

from __future__ import annotations

import os
import sys
from importlib import metadata

#: The distribution this code ships in (``pip install cairnq-fast``).
DISTRIBUTION = "cairnq-fast"
#: The reference SDK's distribution, which provides the same import package.
REFERENCE = "cairnq"
FIX = f"pip uninstall -y {REFERENCE} {DISTRIBUTION} && pip install {DISTRIBUTION}"


def version() -> str:
    """This distribution's version, ``"0.0.0.dev0"`` in a never-installed tree."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "0.0.0.dev0"


def _claims(dist: metadata.Distribution, init_file: str) -> bool:
    """Whether ``dist`` installed the file at ``init_file`` (per its RECORD)."""
    for entry in dist.files or ():
        if entry.as_posix() == "cairnq/__init__.py":
            return os.path.samefile(str(dist.locate_file(entry)), init_file)
    return False


def mixed_with(init_file: str) -> metadata.Distribution | None:
    """A ``cairnq`` distribution that also claims ``init_file``, or None."""
    for dist in metadata.distributions(name=REFERENCE):
        try:
            if dist.metadata["Name"].lower() != REFERENCE:  # never our own dist-info
                continue
            if _claims(dist, init_file):
                return dist
        except OSError:  # its RECORD names a file that is gone: not ours to judge
            continue
    return None


def check_not_mixed(init_file: str) -> None:
    """Raise ImportError when another distribution claims ``cairnq/__init__.py``."""
    other = mixed_with(init_file)
    if other is None:
        return
    raise ImportError(
        f"two distributions provide the `cairnq` package in this environment: "
        f"{DISTRIBUTION} {version()} (installed last: it owns cairnq/__init__.py) and "
        f"{REFERENCE} {other.version} (the reference SDK's distribution name). They "
        f"overwrite each other's files, so neither is intact. Keep one:\n    {FIX}\n"
        f"(or `... && pip install {REFERENCE}` to keep the reference SDK instead)",
        name="cairnq",
    )


def refuse_unless_ours(what: str) -> None:
    """Raise ImportError unless the ``cairnq`` being imported is ours.

    Called first by the parts of cairnq-fast that can run under the reference's
    ``cairnq/__init__.py`` after it was installed over ours: the ``cairnq``
    command, and the packages named like one of its modules (``cairnq/worker/``
    beside its ``worker.py``; a package shadows the module of the same name, so
    neither implementation could work there).
    """
    package = sys.modules.get("cairnq")
    if getattr(package, "IMPLEMENTATION", None) == DISTRIBUTION:
        return
    try:
        reference = f"{REFERENCE} {metadata.version(REFERENCE)}"
    except metadata.PackageNotFoundError:
        reference = "another `cairnq`"
    raise ImportError(
        f"{what} belongs to {DISTRIBUTION}, but the `cairnq` package here was overwritten by "
        f"the distribution {reference} (the reference SDK), installed after {DISTRIBUTION}; "
        f"the files of both are mixed, so neither works. Keep one:\n    {FIX}\n"
        f"(or `... && pip install {REFERENCE}` to keep the reference SDK instead)",
        name="cairnq",
    )
