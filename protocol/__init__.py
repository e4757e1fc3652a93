"""The CairnQ protocol: every SQL statement and migration, per dialect.

Installed as ``cairnq._protocol``. Nothing here is Python but this file; the
store loads ``migrations/<dialect>/*.sql`` and ``sql/<dialect>/*.sql`` at connect.
"""
