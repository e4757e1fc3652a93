"""Handler registrations and the claim sources they imply.

A *claim source* is one draw per poll: a name that sizes itself (``batch=``,
``resource=`` or its own ``concurrency=``) draws on its own, so its quota can
be counted in its own units; every other name shares one draw.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Optional

from cairnq.store.validation import check_int, check_text

__all__ = ["Registration", "ClaimSource", "Registry", "Handler", "CallStyle"]

Handler = Callable[..., Any]
CallStyle = Literal["batch", "ctx_payload", "ctx"]

# Per-name concurrency is bookkept as a resource of the name's own.
_NAME_CAP_PREFIX = "\x00concurrency:"


def _is_async(fn: Handler) -> bool:
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - an object with async __call__
    return call is not None and inspect.iscoroutinefunction(call)


def _call_style(fn: Handler, batch: Optional[int]) -> CallStyle:
    if batch is not None:
        return "batch"
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature: the simple form
        return "ctx"
    positional = 0
    for p in params:
        if p.kind is p.VAR_POSITIONAL:
            return "ctx_payload"
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            positional += 1
    return "ctx_payload" if positional >= 2 else "ctx"


@dataclass(frozen=True)
class Registration:
    name: str
    fn: Handler
    batch: Optional[int]
    resource: Optional[str]
    concurrency: Optional[int]
    style: CallStyle
    is_async: bool
    # Every resource one call of this name holds while it runs (made once:
    # the worker reads it for every call it starts).
    resources: tuple[str, ...] = field(init=False)
    # Whether its calls may start quick (``quick.py``): an async handler of
    # one task that holds no resource. (The worker's settings decide too.)
    quick: bool = field(init=False)

    def __post_init__(self) -> None:
        held = []
        if self.resource is not None:
            held.append(self.resource)
        if self.concurrency is not None:
            held.append(_NAME_CAP_PREFIX + self.name)
        object.__setattr__(self, "resources", tuple(held))
        object.__setattr__(self, "quick", self.is_async and self.batch is None and not held)

    @property
    def chunk(self) -> int:
        """Tasks per call."""
        return self.batch or 1


@dataclass(frozen=True)
class ClaimSource:
    names: tuple[str, ...]
    batch: int
    resources: tuple[str, ...]


class Registry:
    """Names to handlers, plus resource capacities (per worker process)."""

    def __init__(self, capacities: dict[str, int]) -> None:
        """``capacities``: resource name -> units, as ``check_capacities`` returns them."""
        self.capacities = dict(capacities)
        self.declared = tuple(sorted(self.capacities))  # what resource= may name
        self.by_name: dict[str, Registration] = {}
        self.claim_sources: tuple[ClaimSource, ...] = ()
        self.names: tuple[str, ...] = ()

    def register(
        self,
        name: str,
        fn: Handler,
        *,
        batch: Optional[int] = None,
        resource: Optional[str] = None,
        concurrency: Optional[int] = None,
    ) -> None:
        check_text("task name", name)
        if not callable(fn):
            raise TypeError(f"handler for {name!r} is not callable, got {type(fn).__name__}")
        if batch is not None:
            check_int("batch", batch, minimum=1)
        if concurrency is not None:
            check_int("concurrency", concurrency, minimum=1)
        if resource is not None and resource not in self.declared:
            raise ValueError(
                f"task {name!r} declares resource {resource!r}, which is not in "
                f"Worker(resources=...); declared: {', '.join(self.declared) or 'none'}"
            )
        self.by_name[name] = Registration(
            name=name,
            fn=fn,
            batch=batch,
            resource=resource,
            concurrency=concurrency,
            style=_call_style(fn, batch),
            is_async=_is_async(fn),
        )
        if concurrency is not None:
            self.capacities[_NAME_CAP_PREFIX + name] = concurrency
        self._rebuild()

    def _rebuild(self) -> None:
        own: list[ClaimSource] = []
        shared: list[str] = []
        for reg in self.by_name.values():
            if reg.batch is not None or reg.resources:
                own.append(ClaimSource((reg.name,), reg.chunk, reg.resources))
            else:
                shared.append(reg.name)
        if shared:
            own.append(ClaimSource(tuple(shared), 1, ()))
        self.claim_sources = tuple(own)
        self.names = tuple(self.by_name)
