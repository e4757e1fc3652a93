"""Storage: the protocol's operations (``TaskStore``) and their drivers."""

from cairnq.store.base import Conflict, TaskStore
from cairnq.store.postgres import PostgresStore
from cairnq.store.sqlite import SQLiteStore

__all__ = ["Conflict", "TaskStore", "SQLiteStore", "PostgresStore"]
