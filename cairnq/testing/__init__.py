"""Testing helpers: run handlers in tests without a worker loop left running.

* ``await drain(worker)`` runs every due task (and whatever the handlers
  enqueue, and retries that come due meanwhile) to completion, then returns
  one :class:`Outcome` per task it ran.
* ``await run_once(handler, payload, on=client)`` runs one handler once, with
  a real ``TaskContext`` on a real store, without a worker.
* The pytest plugin (the top-level module ``_cairnq_pytestplugin``,
  registered through the ``pytest11`` entry point ``cairnq``) provides the
  fixtures ``cairnq_db``, ``cairnq_dsn``, ``cairnq_client`` and
  ``cairnq_worker``; see docs/testing.md.

The names are loaded on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cairnq.testing.draining import DrainTimeout, drain
    from cairnq.testing.once import run_once
    from cairnq.testing.outcome import Outcome

__all__ = ["drain", "run_once", "Outcome", "DrainTimeout"]

_HOMES = {
    "drain": "cairnq.testing.draining",
    "DrainTimeout": "cairnq.testing.draining",
    "run_once": "cairnq.testing.once",
    "Outcome": "cairnq.testing.outcome",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'cairnq.testing' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
