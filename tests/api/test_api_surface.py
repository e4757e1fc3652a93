"""The public surface is the reference's: names, signatures, defaults, hierarchy.

Compared two ways: against API.md's facts written out here, and against the
reference SDK itself (introspected in its own venv), so a drifting default or
a renamed keyword fails a test rather than a user's code.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
from typing import Any

import pytest

import cairnq
import refsdk

ALL = [
    "CairnQ", "Worker", "TaskContext", "Task", "TaskDef", "TaskRef", "TaskStatus", "STATUSES",
    "is_terminal_status", "Conflict", "Retention", "RetentionRule", "TaskStore", "SQLiteStore",
    "PostgresStore", "CairnQError", "AlreadyExists", "QueueFull", "TaskTimeout", "TaskFailed",
    "TaskCanceled", "TaskError", "LostLease", "ProtocolVersionMismatch", "SchemaMismatch",
    "UnsupportedBackend", "create_pool_executor", "ListenUnavailable", "PgSession", "PgExecutor",
    "SerializationError", "StoreClosed",
]  # fmt: skip

# Documented additions: keyword-only, defaulted, absent from 0.15.1.
ADDITIONS = {
    ("SQLiteStore", "__init__"): {"synchronous"},
    ("Worker", "__init__"): {"heartbeat_interval_ms", "claim_batch", "max_in_flight_bytes"},
    ("Worker", "task"): {"concurrency", "periodic"},
    ("Worker", "register"): {"concurrency", "periodic"},
}

# (module, qualified name) of every callable whose signature users depend on.
SURFACE = [
    ("cairnq", "CairnQ.__init__"), ("cairnq", "CairnQ.sqlite"), ("cairnq", "CairnQ.postgres"),
    ("cairnq", "CairnQ.submit"), ("cairnq", "CairnQ.get"), ("cairnq", "CairnQ.get_by_key"),
    ("cairnq", "CairnQ.get_status"), ("cairnq", "CairnQ.get_status_by_key"), ("cairnq", "CairnQ.list"),
    ("cairnq", "CairnQ.cancel"), ("cairnq", "CairnQ.cancel_by_key"), ("cairnq", "CairnQ.retry"),
    ("cairnq", "CairnQ.retry_by_key"), ("cairnq", "CairnQ.purge"), ("cairnq", "CairnQ.stats"),
    ("cairnq", "CairnQ.queue_depth"), ("cairnq", "CairnQ.wait"), ("cairnq", "CairnQ.wait_by_key"),
    ("cairnq", "CairnQ.call"), ("cairnq", "CairnQ.connect"), ("cairnq", "CairnQ.close"),
    ("cairnq", "Worker.__init__"), ("cairnq", "Worker.sqlite"), ("cairnq", "Worker.postgres"),
    ("cairnq", "Worker.task"), ("cairnq", "Worker.register"), ("cairnq", "Worker.run"),
    ("cairnq", "Worker.serve"), ("cairnq", "Worker.background"), ("cairnq", "Worker.stop"),
    ("cairnq", "Worker.close"),
    ("cairnq", "TaskContext.__init__"), ("cairnq", "TaskContext.progress"),
    ("cairnq", "TaskContext.heartbeat"), ("cairnq", "TaskContext.canceled"),
    ("cairnq", "TaskContext.succeed"), ("cairnq", "TaskContext.succeed_in"),
    ("cairnq", "TaskContext.fail"), ("cairnq", "TaskContext.submit"), ("cairnq", "TaskContext.wait"),
    ("cairnq", "SQLiteStore.__init__"), ("cairnq", "PostgresStore.__init__"),
    ("cairnq", "TaskStore.submit"), ("cairnq", "TaskStore.get"), ("cairnq", "TaskStore.list"),
    ("cairnq", "TaskStore.cancel"), ("cairnq", "TaskStore.retry"), ("cairnq", "TaskStore.cancel_by_key"),
    ("cairnq", "TaskStore.retry_by_key"), ("cairnq", "TaskStore.purge"), ("cairnq", "TaskStore.stats"),
    ("cairnq", "TaskStore.queue_depth"), ("cairnq", "TaskStore.claim"),
    ("cairnq", "TaskStore.claim_session"), ("cairnq", "TaskStore.heartbeat"),
    ("cairnq", "TaskStore.heartbeat_batch"), ("cairnq", "TaskStore.progress"),
    ("cairnq", "TaskStore.succeed"), ("cairnq", "TaskStore.complete"), ("cairnq", "TaskStore.complete_in"),
    ("cairnq", "TaskStore.fail"), ("cairnq", "TaskStore.use_backpressure"),
    ("cairnq", "TaskStore.claim_wake"), ("cairnq", "TaskStore.task_done_wake"),
    ("cairnq", "Retention"), ("cairnq", "RetentionRule"), ("cairnq", "Task"), ("cairnq", "TaskRef"),
    ("cairnq", "Task.from_row"),
    ("cairnq", "AlreadyExists"), ("cairnq", "QueueFull"), ("cairnq", "TaskTimeout"),
    ("cairnq", "TaskFailed"), ("cairnq", "TaskCanceled"), ("cairnq", "TaskError"), ("cairnq", "LostLease"),
    ("cairnq", "create_pool_executor"),
    ("cairnq._backoff", "retry_delay_ms"), ("cairnq._backoff", "fail_delay_ms"),
    ("cairnq._wait", "poll_wait"), ("cairnq._wait", "poll_wait_by_key"), ("cairnq._wait", "next_poll_ms"),
    ("cairnq._ids", "new_ulid"), ("cairnq._ids", "new_id"),
    ("cairnq.backpressure", "QueueDepthGate"), ("cairnq.retention", "RetentionSweeper"),
    ("cairnq.errors", "error_envelope"), ("cairnq.errors", "exception_envelope"),
    ("cairnq.errors", "as_envelope"),
]  # fmt: skip

_DUMP = """
import importlib, inspect
def resolve(module, qualname):
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj
import re
def norm(text):
    return re.sub(r" at 0x[0-9a-f]+", "", text)
def describe(obj):
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    return [[p.name, p.kind.name, None if p.default is p.empty else norm(repr(p.default)), p.default is p.empty]
            for p in sig.parameters.values()]
out = {}
for module, qualname in ARGS:
    try:
        obj = resolve(module, qualname)
    except AttributeError:
        out[module + ":" + qualname] = "missing"
        continue
    out[module + ":" + qualname] = describe(obj)
"""


def _resolve(module: str, qualname: str):
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _describe(obj) -> list[list]:
    sig = inspect.signature(obj)
    return [
        [
            p.name,
            p.kind.name,
            None if p.default is p.empty else re.sub(r" at 0x[0-9a-f]+", "", repr(p.default)),
            p.default is p.empty,
        ]
        for p in sig.parameters.values()
    ]


def test_all_is_exact() -> None:
    assert cairnq.__all__ == ALL
    for name in ALL:
        assert hasattr(cairnq, name), name
    assert isinstance(cairnq.__version__, str)
    for absent in ("QueueDepthGate", "RetentionSweeper", "EventLoopBlocked", "WatchSignal"):
        assert absent not in cairnq.__all__


def test_importing_cairnq_does_not_import_a_postgres_driver() -> None:
    import subprocess
    import sys

    code = "import sys, cairnq; print(sorted(m for m in ('psycopg', 'psycopg_pool', 'asyncpg') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_exception_hierarchy() -> None:
    for name in (
        "AlreadyExists", "QueueFull", "TaskTimeout", "TaskFailed", "TaskCanceled", "TaskError",
        "LostLease", "ProtocolVersionMismatch", "SchemaMismatch", "UnsupportedBackend",
        "SerializationError", "StoreClosed",
    ):  # fmt: skip
        assert issubclass(getattr(cairnq, name), cairnq.CairnQError), name
    assert not issubclass(cairnq.ListenUnavailable, cairnq.CairnQError)
    assert issubclass(cairnq.ListenUnavailable, Exception)


@pytest.mark.parametrize(
    ("envelope", "fields"),
    [
        (None, ("TaskError", "task_error", "task failed", False, {})),
        ({}, ("TaskError", "task_error", "task failed", False, {})),
        ({"type": "X", "details": None}, ("X", "task_error", "task failed", False, {})),
        ({"code": "c", "message": "m", "retryable": 1, "details": {"a": 1}}, ("TaskError", "c", "m", True, {"a": 1})),
    ],
)
def test_task_failed_reads_the_envelope(envelope: Any, fields: tuple[Any, ...]) -> None:
    err = cairnq.TaskFailed(envelope)
    assert (err.type, err.code, err.message, err.retryable, err.details) == fields


# API.md §3: what advanced users import from the submodules (0.15.1), with the
# documented values of its constants.
SUBMODULE_NAMES = {
    "cairnq.client": ["CairnQ"],
    "cairnq.worker": ["Worker", "Handler", "ErrorPhase", "OnError", "CLAIM_ERROR_BACKOFF_S", "retry_delay_ms",
                      "fail_delay_ms", "DEFAULT_RETRY_BACKOFF_MS", "DEFAULT_RETRY_BACKOFF_MAX_MS"],
    "cairnq.context": ["TaskContext"],
    "cairnq.models": ["TaskStatus", "STATUSES", "TERMINAL", "is_terminal_status", "TaskRef", "TaskDef", "task_name",
                      "Task"],
    "cairnq.errors": ["error_envelope", "exception_envelope", "as_envelope", *[n for n in ALL if n.endswith(
        ("Error", "Exists", "Full", "Timeout", "Failed", "Canceled", "Lease", "Mismatch", "Backend", "Closed"))]],
    "cairnq.backpressure": ["QueueDepthGate", "QueueDepthLimit", "MAX_GRANT", "INITIAL_PROBE_INTERVAL_MS",
                            "MAX_PROBE_INTERVAL_MS", "DEFAULT_MAX_WAIT_MS"],
    "cairnq.retention": ["Retention", "RetentionRule", "RetentionSweeper", "DEFAULT_INTERVAL_MS", "DEFAULT_LIMIT"],
    "cairnq.store": ["Conflict", "TaskStore", "SQLiteStore", "PostgresStore"],
    "cairnq.store.base": ["TaskStore", "Conflict", "CONFLICTS", "Fetch", "ClaimDraw", "SUPPORTED_PROTOCOL_MAJOR",
                          "check_protocol_version", "dump_json", "validate_purge_input", "LEASE_EXPIRED_ERROR_JSON",
                          "specialize", "statement_params"],
    "cairnq.store.sqlite": ["SQLiteStore"],
    "cairnq.store.postgres": ["PostgresStore", "QUEUED_CHANNEL", "DONE_CHANNEL", "LISTENER_RETRY_MS",
                              "LISTENER_RETRY_MAX_MS", "positional_statement", "to_positional"],
    "cairnq.store.pg_executor": ["PgSession", "PgExecutor", "ListenUnavailable"],
    "cairnq.store.pg_pool": ["create_pool_executor", "check_schema_name", "PLAIN_IDENT"],
    "cairnq._backoff": ["DEFAULT_RETRY_BACKOFF_MS", "DEFAULT_RETRY_BACKOFF_MAX_MS", "retry_delay_ms", "fail_delay_ms"],
    "cairnq._wait": ["DEFAULT_WAIT_TIMEOUT_MS", "DEFAULT_POLL_MS", "MAX_POLL_MS", "next_poll_ms", "poll_wait",
                     "poll_wait_by_key"],
    "cairnq._ids": ["new_ulid", "new_id", "now_ms"],
}  # fmt: skip
CONSTANTS = {
    "cairnq.worker.CLAIM_ERROR_BACKOFF_S": 0.25, "cairnq.models.TERMINAL": ("succeeded", "failed", "canceled"),
    "cairnq.backpressure.MAX_GRANT": 64, "cairnq.backpressure.INITIAL_PROBE_INTERVAL_MS": 250,
    "cairnq.backpressure.MAX_PROBE_INTERVAL_MS": 5000, "cairnq.backpressure.DEFAULT_MAX_WAIT_MS": 600_000,
    "cairnq.retention.DEFAULT_INTERVAL_MS": 3_600_000, "cairnq.retention.DEFAULT_LIMIT": 1000,
    "cairnq.store.base.SUPPORTED_PROTOCOL_MAJOR": 1, "cairnq.store.postgres.QUEUED_CHANNEL": "cairnq_queued",
    "cairnq.store.postgres.DONE_CHANNEL": "cairnq_done", "cairnq.store.postgres.LISTENER_RETRY_MS": 1000,
    "cairnq.store.postgres.LISTENER_RETRY_MAX_MS": 30_000, "cairnq._backoff.DEFAULT_RETRY_BACKOFF_MS": 1000,
    "cairnq._backoff.DEFAULT_RETRY_BACKOFF_MAX_MS": 30_000, "cairnq._wait.DEFAULT_WAIT_TIMEOUT_MS": 30_000,
    "cairnq._wait.DEFAULT_POLL_MS": 100, "cairnq._wait.MAX_POLL_MS": 500,
}  # fmt: skip


@pytest.mark.parametrize("module", sorted(SUBMODULE_NAMES))
def test_documented_submodule_names(module: str) -> None:
    mod = importlib.import_module(module)
    assert [n for n in SUBMODULE_NAMES[module] if not hasattr(mod, n)] == []
    for dotted, value in CONSTANTS.items():
        owner, _, name = dotted.rpartition(".")
        if owner == module:
            assert getattr(mod, name) == value, dotted


def test_models() -> None:
    assert cairnq.STATUSES == ("queued", "running", "succeeded", "failed", "canceled")
    assert [cairnq.is_terminal_status(s) for s in cairnq.STATUSES] == [False, False, True, True, True]
    td = cairnq.TaskDef[dict, dict]("summarize")
    assert td.name == "summarize"
    with pytest.raises(Exception):
        td.name = "x"  # type: ignore[misc]
    fields = list(cairnq.Task.__dataclass_fields__)
    assert fields[:6] == ["id", "name", "queue", "status", "payload", "metadata"]
    assert len(fields) == 23


@pytest.mark.interop
def test_signatures_match_the_reference() -> None:
    theirs = refsdk.run(_DUMP + "\nemit(out)", SURFACE)
    problems = []
    for module, qualname in SURFACE:
        ref = theirs[f"{module}:{qualname}"]
        if ref == "missing":
            problems.append(f"{module}:{qualname} missing in the reference (fix SURFACE)")
            continue
        ours = json.loads(json.dumps(_describe(_resolve(module, qualname))))
        owner, _, member = qualname.rpartition(".")
        added = ADDITIONS.get((owner, member), set())
        ours_kept = [p for p in ours if p[0] not in added]
        for p in ours:
            if p[0] in added and (p[1] != "KEYWORD_ONLY" or p[3]):
                problems.append(f"{qualname}: addition {p[0]} must be keyword-only with a default")
        if ref is not None and ours_kept != ref:
            problems.append(f"{module}:{qualname}\n  ours: {ours_kept}\n  ref:  {ref}")
    assert not problems, "\n".join(problems)
