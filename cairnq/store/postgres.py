"""``PostgresStore`` (placeholder until the PostgreSQL backend lands)."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any

from cairnq.errors import UnsupportedBackend
from cairnq.store.base import Fetch, TaskStore
from cairnq.store.pg_pool import check_schema_name

__all__ = ["PostgresStore", "QUEUED_CHANNEL", "DONE_CHANNEL"]

QUEUED_CHANNEL = "cairnq_queued"
DONE_CHANNEL = "cairnq_done"

_NOT_YET = "the PostgreSQL backend is not available in this build yet"


class PostgresStore(TaskStore):
    def __init__(
        self,
        source: Any,
        *,
        min_size: int = 1,
        max_size: int = 10,
        schema: str | None = None,
    ) -> None:
        if schema is not None:
            check_schema_name(schema)
        self.source = source
        self.min_size = min_size
        self.max_size = max_size
        self.schema = schema

    async def connect(self) -> None:
        raise UnsupportedBackend(_NOT_YET)

    async def close(self) -> None:
        return None

    async def protocol_version(self) -> int:
        raise UnsupportedBackend(_NOT_YET)

    async def _fetch(self, name: str, params: dict[str, Any]) -> list[Any]:
        raise UnsupportedBackend(_NOT_YET)

    def _transaction(self) -> AbstractAsyncContextManager[Fetch]:
        raise UnsupportedBackend(_NOT_YET)
