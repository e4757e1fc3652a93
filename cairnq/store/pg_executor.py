"""Moved to ``cairnq.store.postgres.executor``; this path (0.15.1's) names
the same module, so every name importable here before still is, and a name
patched through either path is patched for both."""

import sys

from cairnq.store.postgres import executor as _moved
from cairnq.store.postgres.executor import ListenUnavailable as ListenUnavailable
from cairnq.store.postgres.executor import PgExecutor as PgExecutor
from cairnq.store.postgres.executor import PgSession as PgSession

__all__ = ["PgSession", "PgExecutor", "ListenUnavailable"]

sys.modules[__name__] = _moved
