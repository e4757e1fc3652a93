"""The SQLite driver: ``SQLiteStore`` and the engine beneath it."""

from cairnq.store.sqlite.store import SQLiteStore

__all__ = ["SQLiteStore"]
