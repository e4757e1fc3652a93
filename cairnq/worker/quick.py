"""Quick calls: a handler that returns at once, without the call around it.

Most handlers of a busy queue return on their first step. For them the
general call (``execution.run_call`` with a hold of its own) costs more
than the handler: a coroutine and its frame, a hold with its accounting, a
callback per completion. A *quick call* is what the starter runs instead
when the handler is a coroutine function taking one task and holding no
resource, with no ``max_run_ms``, no byte budget, no tracing and no timed
event (``Worker._quick_completer`` decides per claim), and while the
handler is not known to suspend (``CallStarter.suspending``: then its calls
would only be promoted, each at a cost). Its first step calls
the handler; if the handler returns, the call is done. The quick calls of a
claim share one hold (``QuickGroup``), which lets the calls that returned in
one step of their task go together as the step ends (``flush``): their
slots, and their completions as one group.

Anything else the handler does on that first step (suspending, raising,
returning what cannot be stored) *promotes* the call: ``run_call`` takes
over where the handler stands (``_resumed``, ``_raising``, ``_returning``),
in the same asyncio task and context, with a hold of its own, and goes on as
the general call would have. The handler cannot tell the two apart.
"""

from __future__ import annotations

import collections.abc
import types
from typing import Any, Coroutine, Generator, Optional, Protocol

from cairnq._speedups import send as _send
from cairnq.context import TaskContext
from cairnq.models import Task
from cairnq.worker.class_coroutine import ClassCoroutine, exception_thrown
from cairnq.worker.execution import CallHold, CallSettings, run_call
from cairnq.worker.registry import Registration

__all__ = ["QuickCall", "QuickGroup", "RETURNED"]

_new = object.__new__

# What ``QuickCall.first_step`` answers when the handler returned.
RETURNED = object()


class QuickGroup(Protocol):
    """The hold the quick calls of one claim share (the worker's side)."""

    settings: CallSettings

    def returned(self, call: "QuickCall", value: Any) -> bool:
        """The handler returned ``value`` on its first step: settle the
        call (True: by the next ``flush``), or leave it to the general call
        (False: ``value`` cannot be stored, so its failure is to be
        written)."""

    def flush(self) -> None:
        """The step of the task running the calls is ending: the calls that
        returned in it are done (their slots free, their completions
        queued)."""

    def promoted(self, call: "QuickCall") -> CallHold:
        """The call leaves the group for a hold of its own, kept by the
        asyncio task running now."""

    def dropped(self, call: "QuickCall") -> None:
        """The call never started: its task was cancelled first."""


class QuickCall(ClassCoroutine):
    """One quick call, as the coroutine its asyncio task runs: the first
    step is the handler's; after a promotion every step is ``run_call``'s."""

    __slots__ = ("group", "reg", "task", "ctx", "_work")

    group: QuickGroup
    reg: Registration
    task: Task
    ctx: TaskContext
    _work: Optional[Coroutine[Any, Any, None]]  # (None: not started yet)

    @classmethod
    def of(cls, group: QuickGroup, reg: Registration, task: Task, ctx: TaskContext) -> "QuickCall":
        """A call of ``task`` to ``reg``'s handler. (Made without ``__init__``:
        one frame less for every task a worker runs.)"""
        call = _new(cls)
        call.group, call.reg, call.task, call.ctx, call._work = group, reg, task, ctx, None
        return call

    def send(self, value: Any) -> Any:
        work = self._work
        if work is not None:
            return work.send(value)
        try:
            step = self.first_step()
        finally:
            self.group.flush()
        if step is RETURNED:
            raise StopIteration
        return step

    def first_step(self) -> Any:
        """The call's first step: ``RETURNED`` if the handler returned and
        the call is settled or on its way to be (once its group is flushed);
        otherwise what the step yields to the task (the call was promoted,
        see the module's docstring). Raises as ``send`` would. (The starter
        takes this rather than ``send``: no StopIteration to raise and catch
        for every task, nor for the handler's own with the compiled
        ``_speedups.send``, and one flush for many calls.)"""
        self._work = _FINISHED  # started: a late close() drops nothing
        reg, ctx = self.reg, self.ctx
        begun: collections.abc.Awaitable[Any]
        try:
            # (the payload from the task itself: ctx.payload, one frame less)
            handler = reg.fn(ctx, self.task.payload) if reg.style == "ctx_payload" else reg.fn(ctx)
            returned, step = _send(handler, None)
        except BaseException as exc:  # (KeyboardInterrupt too: run_call lets it out)
            begun = _raising(exc)
        else:
            if returned:
                if self.group.returned(self, step):
                    return RETURNED
                begun = _returning(step)
            else:
                begun = _resumed(handler, step)
        work = self._work = run_call(self.group.settings, reg, [ctx], self.group.promoted(self), begun)
        return work.send(None)

    def throw(self, exc: Any, *rest: Any) -> Any:
        if rest or isinstance(exc, type):  # the old three-argument form
            exc = exception_thrown(exc, *rest)
        work = self._work
        if work is None:  # cancelled before its first step
            self._drop()
            raise exc
        return work.throw(exc)

    def close(self) -> None:
        work = self._work
        if work is None:
            self._drop()
        else:
            work.close()

    def _drop(self) -> None:
        self._work = _FINISHED
        self.group.dropped(self)

    @property
    def __name__(self) -> str:  # (how asyncio names a task's coroutine in its repr)
        return f"cairnq call of {self.reg.name!r}"



async def _finished() -> None:
    pass


# What a quick call's steps go to once its handler returned on the first
# step: a coroutine that is over (sending to it again is an error, as to any
# finished coroutine; closing it does nothing).
_FINISHED = _finished()
_FINISHED.close()


async def _returning(value: Any) -> Any:
    """What the handler returned, for ``run_call`` to settle."""
    return value


async def _raising(exc: BaseException) -> Any:
    """What the handler raised, for ``run_call`` to settle."""
    raise exc


@types.coroutine
def _resumed(handler: Coroutine[Any, Any, Any], step: Any) -> Generator[Any, Any, Any]:
    """The handler's coroutine, which suspended on its first step (handing
    ``step`` to the task), awaited from there on: ``step`` goes to the task,
    and what the task sends or throws goes to the handler."""
    while True:
        try:
            value = yield step
        except GeneratorExit:
            handler.close()
            raise
        except BaseException as exc:
            try:
                step = handler.throw(exc)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                step = handler.send(value)
            except StopIteration as stop:
                return stop.value
