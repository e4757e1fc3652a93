"""Moved to ``cairnq.store.postgres.pool``; this path (0.15.1's) names the
same module, so every name importable here before still is, and a name
patched through either path is patched for both."""

import sys

from cairnq.store.postgres import pool as _moved
from cairnq.store.postgres.pool import PLAIN_IDENT as PLAIN_IDENT
from cairnq.store.postgres.pool import PoolExecutor as PoolExecutor
from cairnq.store.postgres.pool import check_schema_name as check_schema_name
from cairnq.store.postgres.pool import create_pool_executor as create_pool_executor

__all__ = ["create_pool_executor", "check_schema_name", "PLAIN_IDENT", "PoolExecutor"]

sys.modules[__name__] = _moved
