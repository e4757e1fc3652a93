"""A coroutine's step, pure Python. Twin of ``steps_c.pyx``.

``send(coro, value)`` is ``coro.send(value)`` with the outcome as a pair:
``(False, what it yielded)`` when it suspends, ``(True, what it returned)``
when it finishes; anything else it raises goes through. The worker takes
the first step of every call this way: most handlers return on it, and
the compiled kernel hands their value back without the StopIteration that
``send`` raises and the caller catches (about half the cost of a no-op
call's first step).
"""

from __future__ import annotations

from typing import Any, Coroutine


def send(coro: Coroutine[Any, Any, Any], value: Any) -> tuple[bool, Any]:
    try:
        return False, coro.send(value)
    except StopIteration as stop:
        return True, stop.value
