"""Policies installed by the API layer: backpressure and retention.

Storage imports nothing above it: both are handed in as objects with the one
or two methods the store calls, and the gate class behind
``use_backpressure`` is installed by the package root
(``install_gate_factory``), so the policy lives above storage and the
store's 0.15.1 method keeps working.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from cairnq.store.ops.core import StoreCore

__all__ = ["QueueGate", "Sweeper", "GateFactory", "install_gate_factory", "PolicyOps"]


class QueueGate(Protocol):
    """What the store needs from backpressure: wait for room in a queue."""

    async def acquire(self, queue: str) -> None: ...


class Sweeper(Protocol):
    """What the store needs from retention: start once connected, stop on close."""

    def start(self) -> None: ...

    async def stop(self) -> None: ...


# Builds the gate ``use_backpressure`` installs: cairnq.backpressure's
# QueueDepthGate, wired in by the package root (cairnq/__init__.py).
GateFactory = Callable[..., QueueGate]
_gate_factory: GateFactory | None = None


def install_gate_factory(factory: GateFactory) -> None:
    """Set what ``TaskStore.use_backpressure`` builds (done once by ``import cairnq``)."""
    global _gate_factory
    _gate_factory = factory


class PolicyOps(StoreCore):
    _gate: QueueGate | None = None
    _sweeper: Sweeper | None = None

    def use_backpressure(
        self, max_queue_depth: Any, *, max_queue_wait_ms: int = 600_000
    ) -> None:
        if _gate_factory is None:  # only when cairnq/__init__.py has not run
            raise RuntimeError("no backpressure gate installed; import cairnq first")
        self._gate = _gate_factory(self, max_queue_depth, max_queue_wait_ms=max_queue_wait_ms)

    def use_retention(self, sweeper: Sweeper) -> None:
        self._sweeper = sweeper

    def _start_sweeper(self) -> None:
        if self._sweeper is not None:
            self._sweeper.start()
