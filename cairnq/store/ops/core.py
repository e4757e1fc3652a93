"""What every operation shares: row mapping, JSON encoding, the
ownership-checked write, and the problems a store survived on its own."""

from __future__ import annotations

import logging
import re
from typing import Any, Callable, Literal, Mapping, Sequence

from cairnq._speedups import decode_task, decode_tasks, dumps
from cairnq.errors import LostLease, ProtocolVersionMismatch, SerializationError
from cairnq.models import Task
from cairnq.store.driver import DriverDefaults

__all__ = [
    "StoreCore",
    "Conflict",
    "CONFLICTS",
    "SUPPORTED_PROTOCOL_MAJOR",
    "LEASE_EXPIRED_ERROR_JSON",
    "Row",
    "check_protocol_version",
    "dump_json",
]

log = logging.getLogger("cairnq.store")

Conflict = Literal["reuse", "reuse-succeeded", "reject", "replace"]
CONFLICTS: tuple[Conflict, ...] = ("reuse", "reuse-succeeded", "reject", "replace")
SUPPORTED_PROTOCOL_MAJOR = 1

Row = Sequence[Any]

# Written by recover_leases when a dead worker's task has no attempts left.
LEASE_EXPIRED_ERROR_JSON = (
    '{"type":"LeaseExpired","code":"lease_expired",'
    '"message":"task lease expired and max attempts reached","retryable":false,"details":{}}'
)


def check_protocol_version(version: int) -> None:
    if version != SUPPORTED_PROTOCOL_MAJOR:
        raise ProtocolVersionMismatch(
            f"storage protocol_version={version}, SDK supports {SUPPORTED_PROTOCOL_MAJOR}"
        )


def dump_json(value: Any) -> str:
    """Strict JSON text for a JSON column; SerializationError for anything else."""
    return dumps(value)


class StoreCore(DriverDefaults):
    """State and helpers the operation mixins share."""

    # JSON columns come back as text (SQLite, PostgreSQL json-as-text) or
    # already decoded (a PostgreSQL executor that decodes jsonb).
    _json_is_text = True
    # Callbacks told of problems the store noticed and recovered from on its
    # own (a replaced SQLite file, say): a worker reports them to on_error.
    _survived_hooks: tuple[Callable[[BaseException], None], ...] = ()

    # -- row mapping -----------------------------------------------------

    def _task(self, row: Row) -> Task:
        return decode_task(row, self._json_is_text)

    def _tasks(self, rows: list[Row]) -> list[Task]:
        return decode_tasks(rows, self._json_is_text)

    def _first(self, rows: list[Row]) -> Task | None:
        return decode_task(rows[0], self._json_is_text) if rows else None

    def _encode(self, value: Any) -> str:
        return dumps(value)

    def _result_json(self, result: Any) -> str | None:
        return None if result is None else self._encode(result)

    def _error_json(self, error: Any, retryable: bool) -> str:
        try:
            return self._encode(error)
        except SerializationError:
            pass
        try:
            # An exception's text often carries undecodable file names (lone
            # surrogates from os.listdir): the envelope keeps them as U+FFFD.
            return self._encode(_replace_surrogates(error))
        except SerializationError:
            pass
        # Keep what can be kept: the string fields, in a well-formed envelope.
        env = error if isinstance(error, Mapping) else {}
        return self._encode(
            {
                "type": _replace_surrogates(str(env.get("type", "TaskError"))),
                "code": _replace_surrogates(str(env.get("code", "task_error"))),
                "message": _replace_surrogates(str(env.get("message", ""))),
                "retryable": bool(retryable),
                "details": {},
            }
        )

    async def _owned(self, task_id: str, statement: str, params: dict[str, Any]) -> Task:
        """A write only the lease holder may make: its row, or LostLease."""
        rows = await self._fetch(statement, params)
        if not rows:
            raise LostLease(task_id)
        return self._task(rows[0])

    # -- problems survived -------------------------------------------------

    def _subscribe_survived(self, hook: Callable[[BaseException], None]) -> Callable[[], None]:
        """Be told of problems the store recovered from; returns an unsubscribe."""
        self._survived_hooks = (*self._survived_hooks, hook)

        def unsubscribe() -> None:
            self._survived_hooks = tuple(h for h in self._survived_hooks if h is not hook)

        return unsubscribe

    def _survived(self, exc: BaseException) -> None:
        log.warning("%s", exc)
        for hook in self._survived_hooks:
            try:
                hook(exc)
            except Exception:
                log.debug("survived-problem hook raised", exc_info=True)


_SURROGATES = re.compile("[\ud800-\udfff]")


def _replace_surrogates(value: Any) -> Any:
    """``value`` with every surrogate code point in its strings (keys
    included) replaced by U+FFFD; other values as they are."""
    if isinstance(value, str):
        return _SURROGATES.sub("\ufffd", value)
    if isinstance(value, Mapping):
        return {_replace_surrogates(k): _replace_surrogates(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_replace_surrogates(v) for v in value]
    return value
