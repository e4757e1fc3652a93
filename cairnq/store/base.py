"""``TaskStore``: every protocol operation, once, over the driver seam.

The store is layered so each part fits in mind on its own:

* ``driver.py``: what a dialect provides (run a named statement, alone, or
  deferred; a write transaction; wakeups; connect/close). SQLite and
  PostgreSQL implement it in ``sqlite/`` and ``postgres/``.
* ``ops/``: the operations written once over that seam, one mixin per kind
  (submit, reads, browse, manage, claims, settle), with their argument checks from
  ``validation.py``.
* ``ports.py``: what the worker and ``watch`` may use, and the one place that
  decides whether a store method is cairnq's own (so a fast path may stand in
  for it) or the user's (so it is called).

``TaskStore`` is their composition; a driver subclasses it. Rows come back
as sequences in table order (``select *`` / ``returning *``), decoded to
``Task`` by the compiled kernel. Storage imports nothing above it:
backpressure and retention are handed in as objects (``ops/policies.py``).
This module keeps every name 0.15.1 code imports from it.
"""

from __future__ import annotations

from cairnq._sql import specialize, statement_params
from cairnq.store.driver import Fetch
from cairnq.store.driver import PushReason as PushReason
from cairnq.store.ops.browse import BrowseOps
from cairnq.store.ops.claims import ClaimDraw, ClaimOps, claim_statement, probe_statement
from cairnq.store.ops.core import (
    CONFLICTS,
    LEASE_EXPIRED_ERROR_JSON,
    SUPPORTED_PROTOCOL_MAJOR,
    Conflict,
    check_protocol_version,
    dump_json,
)
from cairnq.store.ops.core import Row as Row
from cairnq.store.ops.manage import ManageOps
from cairnq.store.ops.policies import GateFactory as GateFactory
from cairnq.store.ops.policies import QueueGate as QueueGate
from cairnq.store.ops.policies import Sweeper as Sweeper
from cairnq.store.ops.policies import install_gate_factory as install_gate_factory
from cairnq.store.ops.reads import ReadOps
from cairnq.store.ops.settle import SettleOps
from cairnq.store.ops.submit import SubmitOps
from cairnq.store.own import register_own
from cairnq.store.validation import validate_purge_input

__all__ = [
    "TaskStore",
    "Conflict",
    "CONFLICTS",
    "Fetch",
    "ClaimDraw",
    "SUPPORTED_PROTOCOL_MAJOR",
    "check_protocol_version",
    "dump_json",
    "validate_purge_input",
    "LEASE_EXPIRED_ERROR_JSON",
    "claim_statement",
    "probe_statement",
    "specialize",
    "statement_params",
]

class TaskStore(SubmitOps, ReadOps, BrowseOps, ManageOps, ClaimOps, SettleOps):
    """Durable task storage: the protocol's operations over one database."""


register_own(TaskStore)
