"""Which store methods are cairnq's own: the one place that decides whether a
private fast path may stand in for a public store method (see ``ports.py``).

Each store class cairnq defines registers its functions for the checked
methods when it is defined (``register_own``), before user code can patch
it; ``is_own`` then compares by identity. Imports nothing, so every store
module may use it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["OWN_CHECKED", "register_own", "is_own"]

# The methods whose replacement switches a private path off, and for each
# the functions cairnq defines for it (filled by ``register_own`` as each
# store class is defined, before any user code can patch it).
OWN_CHECKED = ("claim_session", "complete", "heartbeat_batch", "_fetch", "claim_wake")
_OWN: dict[str, tuple[Any, ...]] = {name: () for name in OWN_CHECKED}
_NO_ATTRIBUTES: dict[str, Any] = {}


def register_own(cls: type) -> None:
    """Record ``cls``'s functions for the checked methods as cairnq's own
    (called once per store class cairnq defines, at import)."""
    for name in OWN_CHECKED:
        function = getattr(cls, name, None)
        if function is not None and function not in _OWN[name]:
            _OWN[name] = (*_OWN[name], function)


def is_own(store: object, name: str) -> bool:
    """Whether ``store.<name>`` is cairnq's own, unwrapped and unreplaced."""
    if name in getattr(store, "__dict__", _NO_ATTRIBUTES):
        return False
    return getattr(type(store), name, None) in _OWN[name]  # functions compare by identity
