"""The ``cairnq`` command line."""

from cairnq.cli.main import main

__all__ = ["main"]
