"""Starting a claim's calls with as few asyncio tasks as they need.

A no-op handler costs less than the asyncio ``Task`` that would run it: the
task object, its trip through the ready queue (``call_soon`` and a
``Handle``), its entry in asyncio's all-tasks ``WeakSet`` and the removal
from it. So the calls of one claim share one task, which runs each call's
first step in turn, each in a context of its own (a copy, as a task's
would be). Most calls end there.

A call that suspends keeps that task for the rest of its life: the task it
saw as ``asyncio.current_task()`` from its first line on (what
``asyncio.timeout``, ``TaskGroup`` and cancellation act on) is the one that
goes on running it, alone, and the calls after it move to a new shared task.
What a handler can tell apart is only that a handler before it in the same
claim ran in the same task and finished there.

A handler that suspended once starts with a task of its own for its next
``OWN_TASK_CALLS`` calls, as every call did before (the calls behind a call
that suspends in a shared task start one turn of the loop later). Then one
call of it, the probe, goes last into its claim's shared task (nothing
waits behind it): if it returns at once, the handler's calls share again.

On Python 3.12+ (``eager``) the tasks start at once, as the worker's tasks
did there already.

A call is either a coroutine (``execution.run_call``) or a quick call
(``quick.py``), whose first step in a shared task goes through its
``first_step``: a handler that returns costs no StopIteration raised and
caught on the way out.
"""

from __future__ import annotations

import asyncio
import sys
from contextvars import copy_context
from functools import partial
from typing import Any, Callable, Container, Coroutine, Hashable, Optional, Protocol, Union

from cairnq.worker.class_coroutine import ClassCoroutine, exception_thrown
from cairnq.worker.quick import RETURNED, QuickCall, QuickGroup

__all__ = ["OWN_TASK_CALLS", "CallStarter", "StartedCall", "StartedHold"]

OWN_TASK_CALLS = 256
_PROBING = -1  # (in _own_task_left) one call of the handler tries a shared task

_current_task = asyncio.current_task
_CANCELLED = object()  # (in _first_steps) a call ended by its own cancellation
_quick_first_step = QuickCall.first_step  # (called with the call: no bound method made per call)

_NEW_TASK: Callable[..., "asyncio.Task[None]"] = asyncio.Task
if sys.version_info >= (3, 12):
    _NEW_TASK = partial(asyncio.Task, eager_start=True)

if sys.version_info >= (3, 11):

    def _cancel_requests(task: "asyncio.Task[Any]") -> Callable[[], int]:
        return task.cancelling
else:

    def _cancel_requests(task: "asyncio.Task[Any]") -> Callable[[], int]:
        # 3.10 counts nothing: a pending request is a flag.
        return lambda: int(getattr(task, "_must_cancel", False))


class StartedHold(Protocol):
    """What the starter needs of a call's hold: the asyncio task that runs
    it (kept only while the handler runs: ``None`` once it is done)."""

    task: Optional["asyncio.Task[None]"]

    @property
    def is_running(self) -> bool: ...


# A call to start: its hold, its coroutine, and the key of its handler.
StartedCall = tuple[StartedHold, Coroutine[Any, Any, None], Hashable]


class CallStarter:
    """Starts calls (see the module's docstring); one per worker run."""

    __slots__ = ("_loop", "_new_task", "_own_task_left")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        # How a task is made where no task factory is set: directly (what
        # create_task would do, one frame less), started at once on 3.12+.
        self._new_task: Callable[..., "asyncio.Task[None]"] = _NEW_TASK
        # handler key -> calls still to start with a task of their own
        self._own_task_left: dict[Hashable, int] = {}

    @property
    def eager(self) -> bool:
        """Whether tasks start at once (their first step within ``start``)."""
        return self._new_task is not asyncio.Task and self._loop.get_task_factory() is None

    @property
    def suspending(self) -> Container[Hashable]:
        """The handlers whose calls start with a task of their own now: each
        suspended in a shared task not long ago. (Live: read it, keep it
        no longer than a claim's dispatch.)"""
        return self._own_task_left.keys()

    def start(self, calls: list[StartedCall]) -> None:
        """Start ``calls`` (hold, coroutine, handler key), in order."""
        own_left = self._own_task_left
        if own_left:
            shared: list[StartedCall] = []
            own: list[StartedCall] = []
            probe: Optional[StartedCall] = None
            for call in calls:
                left = own_left.get(call[2])
                if left is None:
                    shared.append(call)
                elif left > 0:
                    own_left[call[2]] = left - 1
                    own.append(call)
                elif left == 0 and probe is None:
                    own_left[call[2]] = _PROBING
                    probe = call
                else:
                    own.append(call)
            if own:
                self._start_own(own)
            if probe is not None:
                if not shared:  # alone it would have a task of its own: not a probe
                    own_left[probe[2]] = 0
                # Last: were it to suspend again, no call would wait behind it.
                shared.append(probe)
            calls = shared
        if len(calls) == 1:
            self._start_own(calls)
        elif len(calls) > 1:
            self._start_shared(calls)

    def _shared_once_more(self, key: Hashable) -> None:
        """A call with ``key`` did not suspend in a shared task: if it was its
        handler's probe, its calls share from now on."""
        if self._own_task_left.get(key) == _PROBING:
            del self._own_task_left[key]

    def _start_own(self, calls: list[StartedCall]) -> None:
        """A task of its own for each call."""
        new_task = self._task_maker()
        for hold, work, _ in calls:
            task = new_task(work)
            if not task.done() and hold.is_running:  # (an eager one may be past its handler)
                hold.task = task

    def _start_shared(self, calls: list[StartedCall]) -> None:
        step = _SharedStep(self, calls)
        task = self._task_maker()(step)
        if step.not_started:  # (not eagerly): every call waits for it
            for hold, _, _ in calls:
                hold.task = task

    def _task_maker(self) -> Callable[[Coroutine[Any, Any, None]], "asyncio.Task[None]"]:
        """How tasks are made now: through the loop's factory if one is set."""
        loop = self._loop
        if loop.get_task_factory() is None:
            return partial(self._new_task, loop=loop)
        return loop.create_task

    def _suspended(self, key: Hashable, calls: list[StartedCall], after: int) -> None:
        """The call with ``key`` suspended in a shared task (which it keeps):
        its handler's next calls get a task of their own, and the calls after
        it in ``calls`` move on."""
        self._own_task_left[key] = OWN_TASK_CALLS
        if after < len(calls):
            rest: list[StartedCall] = []
            own: list[StartedCall] = []
            for call in calls[after:]:
                call[0].task = None
                # (the calls of this claim are not counted: the calls to come are)
                (own if call[2] == key else rest).append(call)
            if own:
                self._start_own(own)
            self.start(rest)


class _SharedStep(ClassCoroutine):
    """The coroutine of a shared task: first steps of its calls, one after
    the other, then (if one suspends) that call's further steps.

    Written as a coroutine object rather than an ``async def`` so that a
    task cancelled before its first step closes the calls it never started
    (no "never awaited" warnings, nothing half-begun)."""

    __slots__ = ("_starter", "_calls", "_next", "_current", "_context")

    def __init__(self, starter: CallStarter, calls: list[StartedCall]) -> None:
        self._starter = starter
        self._calls = calls
        self._next = 0  # the first call whose first step is still to come
        self._current: Optional[Coroutine[Any, Any, None]] = None
        self._context: Any = None

    @property
    def not_started(self) -> bool:
        """No first step has been taken yet."""
        return self._next == 0 and self._current is None

    def send(self, value: Any) -> Any:
        current = self._current
        if current is not None:  # the call that suspended: its next step
            return self._context.run(current.send, value)
        return self._first_steps()

    def throw(self, exc: Any, *rest: Any) -> Any:
        if rest or isinstance(exc, type):  # the old three-argument form
            exc = exception_thrown(exc, *rest)
        current = self._current
        if current is None:  # cancelled before its first step
            self._close_unstarted()
            raise exc
        return self._context.run(current.throw, exc)

    def close(self) -> None:
        current = self._current
        if current is not None:
            self._current = None
            self._context.run(current.close)
        else:
            self._close_unstarted()

    @property
    def __name__(self) -> str:  # (how asyncio names a task's coroutine in its repr)
        if self._current is not None:
            return f"cairnq call of {self._calls[self._next - 1][2]!r}"
        return "cairnq calls"

    def _close_unstarted(self) -> None:
        calls, first = self._calls, self._next
        self._next = len(calls)
        for i in range(first, len(calls)):
            calls[i][1].close()

    def _first_steps(self) -> Any:
        calls, starter = self._calls, self._starter
        task = _current_task()
        assert task is not None
        cancel_requests = _cancel_requests(task)
        cancels = cancel_requests()
        # The group of the quick calls stepped: flushed before this step
        # ends or hands calls on (a claim's quick calls share one).
        group: Union[QuickGroup, _NoGroup] = _NO_GROUP
        i, n = self._next, len(calls)
        while i < n:
            hold, work, key = calls[i]
            i += 1
            self._next = i
            hold.task = task
            context = copy_context()
            try:
                if type(work) is QuickCall:
                    if work.group is not group:
                        group.flush()
                        group = work.group
                    step = context.run(_quick_first_step, work)
                else:
                    step = context.run(work.send, None)
            except StopIteration:
                step = RETURNED
            except asyncio.CancelledError:
                step = _CANCELLED  # the call's own (its hold was released on the way out)
            except BaseException:
                # KeyboardInterrupt, SystemExit: out through the task, as from
                # a task of its own; the calls after it still start.
                group.flush()
                starter.start(calls[i:])
                raise
            if step is RETURNED:
                if starter._own_task_left:
                    starter._shared_once_more(key)
            elif step is not _CANCELLED:
                group.flush()
                self._current, self._context = work, context
                starter._suspended(key, calls, i)
                return step
            if cancel_requests() != cancels:
                # A handler cancelled its own task (``current_task().cancel()``)
                # and returned: the cancel lands on this task as it ends, so
                # the calls after it move to another.
                group.flush()
                starter.start(calls[i:])
                raise StopIteration
        group.flush()
        raise StopIteration


class _NoGroup:
    """(In ``_first_steps``) no quick call stepped yet: nothing to flush."""

    __slots__ = ()

    def flush(self) -> None:
        pass


_NO_GROUP = _NoGroup()
