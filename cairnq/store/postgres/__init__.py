"""The PostgreSQL driver: ``PostgresStore`` and its parts."""

from cairnq._distribution import refuse_unless_ours

# Named like a module of the reference SDK: refuse under its package (docs/install.md).
refuse_unless_ours("cairnq/store/postgres/")

from cairnq.store.postgres.listener import (
    DONE_CHANNEL,
    LISTENER_RETRY_MAX_MS,
    LISTENER_RETRY_MS,
    QUEUED_CHANNEL,
)
from cairnq.store.postgres.params import positional_statement, to_positional
from cairnq.store.postgres.store import PostgresStore

__all__ = [
    "PostgresStore",
    "QUEUED_CHANNEL",
    "DONE_CHANNEL",
    "LISTENER_RETRY_MS",
    "LISTENER_RETRY_MAX_MS",
    "positional_statement",
    "to_positional",
]
