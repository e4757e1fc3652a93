"""cairnq: a durable task queue on SQLite or PostgreSQL.

A fast, drop-in implementation of the ``cairnq`` 0.15.1 Python API, sharing
databases with the reference Python and TypeScript SDKs. ``SPEEDUPS`` says
whether the compiled kernels are active (``"cython"``) or the pure-Python
twins (``"python"``). It installs as the distribution ``cairnq-fast``
(``IMPLEMENTATION``); the reference SDK's distribution, ``cairnq``, has
neither attribute (docs/install.md).
"""

from __future__ import annotations

#: "cairnq-fast": this implementation (the reference SDK has no such attribute).
IMPLEMENTATION = "cairnq-fast"

from cairnq import _distribution  # after IMPLEMENTATION: the guards below read it

# The reference distribution `cairnq` installed beside ours overwrote part of
# this package: refuse before importing any of it (docs/install.md).
_distribution.check_not_mixed(__file__)

try:
    from cairnq._speedups import IMPLEMENTATION as _IMPLEMENTATION
except ModuleNotFoundError as _missing:
    # Imported from a source tree that was never installed: setup.py maps
    # _speedups/ and protocol/ into the package only when it installs it.
    if _missing.name != "cairnq._speedups":
        raise
    raise ImportError(
        f"cairnq is not installed: {__path__[0]} is its source tree, where cairnq._speedups "
        "and cairnq._protocol do not exist (setup.py maps _speedups/ and protocol/ into the "
        "package when it installs it).\n"
        "Install it in place once, from the repository root:  pip install -e \".[postgres,test]\"\n"
        "(then `import cairnq` and `pytest` work from the root; re-run it after editing a .pyx), "
        "or run the tests on a built wheel:  bash scripts/test.sh",
        name="cairnq._speedups",
    ) from None
from cairnq.backpressure import QueueDepthGate as _QueueDepthGate
from cairnq.client import CairnQ
from cairnq.context import TaskContext
from cairnq.errors import (
    AlreadyExists,
    CairnQError,
    LostLease,
    ProtocolVersionMismatch,
    QueueFull,
    SchemaMismatch,
    SerializationError,
    StoreClosed,
    TaskCanceled,
    TaskError,
    TaskFailed,
    TaskTimeout,
    UnsupportedBackend,
)
from cairnq.models import STATUSES, Task, TaskDef, TaskRef, TaskStatus, is_terminal_status
from cairnq.retention import Retention, RetentionRule
from cairnq.store import Conflict, PostgresStore, SQLiteStore, TaskStore
from cairnq.store.base import install_gate_factory as _install_gate_factory
from cairnq.store.pg_executor import ListenUnavailable, PgExecutor, PgSession
from cairnq.store.pg_pool import create_pool_executor
from cairnq.worker import Worker

# The composition root: storage cannot import the backpressure policy built on
# top of it, so the store's use_backpressure() gets its gate class from here.
_install_gate_factory(_QueueDepthGate)

#: The version of the ``cairnq-fast`` distribution (not of the reference's ``cairnq``).
__version__ = _distribution.version()
#: "cython" when the compiled kernels are active, "python" for the pure twins.
SPEEDUPS: str = _IMPLEMENTATION

__all__ = [
    "CairnQ",
    "Worker",
    "TaskContext",
    "Task",
    "TaskDef",
    "TaskRef",
    "TaskStatus",
    "STATUSES",
    "is_terminal_status",
    "Conflict",
    "Retention",
    "RetentionRule",
    "TaskStore",
    "SQLiteStore",
    "PostgresStore",
    "CairnQError",
    "AlreadyExists",
    "QueueFull",
    "TaskTimeout",
    "TaskFailed",
    "TaskCanceled",
    "TaskError",
    "LostLease",
    "ProtocolVersionMismatch",
    "SchemaMismatch",
    "UnsupportedBackend",
    "create_pool_executor",
    "ListenUnavailable",
    "PgSession",
    "PgExecutor",
    "SerializationError",
    "StoreClosed",
]
