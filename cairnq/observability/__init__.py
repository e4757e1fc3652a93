"""Observability: optional instrumentation built on the ``cairnq.events`` seam and the worker."""
