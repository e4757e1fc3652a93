"""Coroutines written as classes, for the worker's call paths
(``starter._SharedStep``, ``quick.QuickCall``): what asyncio needs of a
task's coroutine beyond ``send``, ``throw`` and ``close``, which each
subclass writes for its own steps."""

from __future__ import annotations

import collections.abc
from typing import Any

__all__ = ["ClassCoroutine", "exception_thrown"]


class ClassCoroutine:
    __slots__ = ()

    def send(self, value: Any) -> Any:
        raise NotImplementedError

    def throw(self, exc: Any, *rest: Any) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __await__(self) -> "ClassCoroutine":
        return self

    def __iter__(self) -> "ClassCoroutine":
        return self

    def __next__(self) -> Any:
        return self.send(None)


# asyncio takes any collections.abc.Coroutine as a task's coroutine (its
# subclasses are ones too).
collections.abc.Coroutine.register(ClassCoroutine)


def exception_thrown(typ: Any, val: Any = None, tb: Any = None) -> BaseException:
    """The exception a coroutine's ``throw`` was given in the old
    three-argument form (type, value, traceback)."""
    exc = typ() if val is None else (val if isinstance(val, BaseException) else typ(val))
    return exc.with_traceback(tb) if tb is not None else exc
