"""The SQLite driver: ``SQLiteStore`` and the engine beneath it."""

from cairnq._distribution import refuse_unless_ours

# Named like a module of the reference SDK: refuse under its package (docs/install.md).
refuse_unless_ours("cairnq/store/sqlite/")

from cairnq.store.sqlite.store import SQLiteStore

__all__ = ["SQLiteStore"]
