"""The book of a worker's calls in flight: what they hold and how they give it back.

A call holds its worker in two stages (``execution.CallHold``): a
concurrency slot until its handler is done, and the rest (its tasks'
leases, its resource units, its payload bytes) until every task of it is
settled, which may come after its asyncio task ended (a completion handed
to the worker's coalesced completions). The claim loop reads the book to
know how much it may claim; the holds write to it as their calls go.

    CallBook    the counts and the calls in flight, one per worker
    Hold        one call's hold (``run_call`` and ``no_handler`` calls)
    QuickHold   the hold a claim's quick calls share (``quick.QuickGroup``)
"""

from __future__ import annotations

import asyncio
from collections import Counter
from functools import partial
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence, Union

from cairnq.context import TaskContext, left_to_write, mark_each_completed
from cairnq.errors import LostLease, SerializationError
from cairnq.models import Task
from cairnq.worker.completions import Completions
from cairnq.worker.execution import CallSettings, tell_completed
from cairnq.worker.quick import QuickCall

if TYPE_CHECKING:
    from cairnq.worker.heartbeat import Heartbeats
    from cairnq.worker.signals import Signal

__all__ = ["CallBook", "Hold", "QuickHold"]


class CallBook:
    """What a worker's calls in flight hold. It outlives a run: a run ends
    only once every call in it is settled (``settled``), so the next run
    starts from an empty book."""

    __slots__ = ("running", "calls", "in_use", "in_flight_bytes", "call_done", "heartbeats", "_no_calls")

    def __init__(self) -> None:
        # Calls whose handler has not returned: the concurrency count.
        self.running = 0
        # Every call's hold until its tasks are settled, in the order started
        # (a set: the values are unused).
        self.calls: dict[Union[Hold, QuickHold], None] = {}
        self.in_use: Counter[str] = Counter()  # resource -> units held by calls
        self.in_flight_bytes = 0  # payload bytes of the calls (with a byte budget only)
        # Set by each run: told when a slot, resource units or bytes come free;
        # and the leases' heartbeat loop.
        self.call_done: Optional[Signal] = None
        self.heartbeats: Optional[Heartbeats] = None
        self._no_calls: Optional[asyncio.Event] = None

    def slot_freed(self, count: int = 1) -> None:
        """A handler is done (``count`` of them): its concurrency slot is free."""
        self.running -= count
        if self.call_done is not None:
            self.call_done.set()

    def release(self, hold: "Hold") -> None:
        """A call's tasks are all settled (or it was cancelled): give back
        what it held."""
        self.forget(hold)
        held, size = hold.held, hold.size
        for resource in held:
            self.in_use[resource] -= 1
        self.in_flight_bytes -= size
        heartbeats = self.heartbeats
        if heartbeats is not None:
            heartbeats.release_each(hold.contexts, [task.id for task in hold.tasks])
        if (held or size) and self.call_done is not None:
            self.call_done.set()  # its resource units or payload bytes are free again

    def forget(self, hold: Union["Hold", "QuickHold"]) -> None:
        """``hold`` is over: no longer among the calls in flight."""
        self.calls.pop(hold, None)
        if not self.calls and self._no_calls is not None:
            self._no_calls.set()

    async def settled(self) -> None:
        """Wait until every call is settled (their handlers returned and what
        they left is written). A call cancelled before it ran is released here."""
        while self.calls:
            running = [hold.task for hold in self.calls if hold.task is not None and not hold.task.done()]
            if running:
                await asyncio.gather(*running, return_exceptions=True)
                continue
            for hold in list(self.calls):
                if hold.task is not None and hold.task.cancelled():
                    hold.handler_done()
                    hold.settled()
            if self.calls:  # handed-off completions still on their way
                self._no_calls = self._no_calls or asyncio.Event()
                self._no_calls.clear()
                await self._no_calls.wait()


class Hold:
    """One call's hold (``execution.CallHold``)."""

    __slots__ = ("_book", "tasks", "contexts", "held", "size", "task", "_running", "_settled")

    def __init__(
        self,
        book: CallBook,
        tasks: list[Task],
        contexts: list[TaskContext],
        held: Sequence[str],
        size: int,
    ) -> None:
        self._book = book
        self.tasks = tasks
        self.contexts = contexts
        self.held = held
        self.size = size
        self.task: Optional[asyncio.Task[None]] = None
        self._running = True
        self._settled = False

    def handler_done(self) -> None:
        """The handler is done: its concurrency slot is free (once)."""
        if self._running:
            self._running = False
            # Its asyncio task ends within this step or writes what is left
            # and settles the hold on its way out (``CallBook.settled`` waits
            # for that): let the task, its coroutine and its context go as
            # soon as it ends, not one claim later with the settlement.
            self.task = None
            self._book.slot_freed()

    @property
    def is_running(self) -> bool:
        """Its handler has not returned yet."""
        return self._running

    @property
    def is_settled(self) -> bool:
        return self._settled

    def settled(self) -> None:
        """Nothing is left to write for the call: release the rest (once)."""
        if not self._settled:
            self._settled = True
            self.handler_done()  # a call that ended before its handler did
            self._book.release(self)


class QuickHold:
    """The hold the quick calls of one claim share (``quick.QuickGroup``):
    one entry among the calls in flight for all of them, given up once each
    of them is settled or promoted (to a ``Hold`` of its own).

    The calls that return in one step of their task are let go together at
    its end (``flush``): one group of completions, one count of freed slots,
    and once written, one pass that marks their contexts and lets their
    leases go."""

    __slots__ = (
        "_book", "settings", "_completions", "_queue_first", "task", "_running", "_left",
        "_ids", "_results", "_contexts",
    )  # fmt: skip

    def __init__(self, book: CallBook, settings: CallSettings, completions: Completions, queue_first: bool) -> None:
        self._book = book
        self.settings = settings
        self._completions = completions
        # Which goes first when handlers returned (``queue_first``): where
        # deferred writes ride with the next claim (SQLite), the completions,
        # so the claim the freed slots wake carries them; elsewhere the slots,
        # so the claim goes out ahead of the write (as run_call frees it).
        self._queue_first = queue_first
        self.task: Optional[asyncio.Task[None]] = None  # (StartedHold's: set by the starter)
        self._running = 0  # calls whose handler has not returned (or whose return is not flushed)
        self._left = 0  # calls not settled
        # The calls that returned since the last flush: their task ids, results
        # (JSON text or None) and contexts, in step.
        self._ids: list[str] = []
        self._results: list[Optional[str]] = []
        self._contexts: list[TaskContext] = []

    def expect(self, calls: int) -> None:
        """``calls`` more calls (``QuickCall.of(self, ...)``) are to start in
        this hold (counted by the caller in the book's running calls)."""
        self._running += calls
        self._left += calls

    @property
    def is_running(self) -> bool:
        """Some of its handlers have not returned."""
        return self._running > 0

    def handler_done(self) -> None:
        """(What ``CallBook.settled`` asks of a hold whose task was cancelled
        first: its calls answer for themselves, in ``dropped``.)"""

    def settled(self) -> None:
        """(As ``handler_done``.)"""

    def returned(self, call: QuickCall, value: Any) -> bool:
        ctx = call.ctx
        if not left_to_write(ctx):
            self._handler_done()
            self._settle(call)
            return True
        try:
            result = None if value is None else self._completions.encode(value)
        except SerializationError:
            return False
        self._ids.append(call.task.id)
        self._results.append(result)
        self._contexts.append(ctx)
        return True

    def flush(self) -> None:
        contexts = self._contexts
        if not contexts:
            return
        ids, results = self._ids, self._results
        self._ids, self._results, self._contexts = [], [], []
        written = partial(self._written, ids, contexts)
        if self._queue_first:
            self._completions.complete_group(ids, results, written)
            self._handler_done(len(contexts))
        else:
            self._handler_done(len(contexts))
            self._completions.complete_group(ids, results, written)

    def promoted(self, call: QuickCall) -> Hold:
        self._running -= 1  # (the book's count goes on, in the new hold's)
        if not self._running:
            self.task = None
        book = self._book
        hold = Hold(book, [call.task], [call.ctx], (), 0)
        hold.task = asyncio.current_task()
        book.calls[hold] = None
        self._left -= 1
        if not self._left:
            book.forget(self)
        return hold

    def dropped(self, call: QuickCall) -> None:
        self._handler_done()
        self._settle(call)

    def _handler_done(self, count: int = 1) -> None:
        self._running -= count
        if not self._running:
            self.task = None  # (let the task go as soon as it ends: ``Hold.handler_done``)
        self._book.slot_freed(count)

    def _written(
        self,
        ids: list[str],
        contexts: list[TaskContext],
        settled: Optional[Mapping[str, str]],
        exc: Optional[BaseException],
    ) -> None:
        """The completions of a flush were written (``settled``: the final
        status of each task settled) or refused (``exc``)."""
        try:
            if settled is not None:
                for task_id, ctx in mark_each_completed(contexts, ids, settled):
                    tell_completed(self.settings, ctx, None, LostLease(task_id))
            else:
                for ctx in contexts:
                    tell_completed(self.settings, ctx, None, exc)
        finally:
            self._let_go(contexts, ids)

    def _settle(self, call: QuickCall) -> None:
        """Nothing is left to write for ``call``: its lease goes."""
        self._let_go((call.ctx,), (call.task.id,))

    def _let_go(self, contexts: Sequence[TaskContext], ids: Sequence[str]) -> None:
        """Nothing is left to write for these calls: their leases go, and
        the hold with the last of them."""
        book = self._book
        if book.heartbeats is not None:
            book.heartbeats.release_each(contexts, ids)
        self._left -= len(ids)
        if not self._left:
            book.forget(self)
