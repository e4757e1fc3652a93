"""Kernels, compiled and pure Python on the same vectors: a coroutine's step
(``send``), which the worker takes for every call's first step."""

from __future__ import annotations

import asyncio
import gc
import sys
import types
import weakref
from types import SimpleNamespace
from typing import Any, Generator

import pytest
from kernel_kit import COMPILED, impl, needs_compiled  # noqa: F401 (fixtures)

from cairnq.worker.class_coroutine import ClassCoroutine

# send
# ---------------------------------------------------------------------------


class Value:
    """A return value whose references can be counted."""


RETURNED_VALUES = [None, 0, 1, -1, 2**80, "", "text", b"bytes", (), (1, 2), [1], {"k": "v"}, Value()]


@pytest.mark.parametrize("value", RETURNED_VALUES, ids=repr)
def test_a_coroutine_that_returns_gives_its_value(impl: SimpleNamespace, value: Any) -> None:
    async def returns() -> Any:
        return value

    returned, out = impl.steps.send(returns(), None)
    assert returned is True and out is value


def test_a_returned_stop_iteration_is_a_value_not_an_end(impl: SimpleNamespace) -> None:
    stop = StopIteration("mine")

    async def returns_it() -> Any:
        return stop

    assert impl.steps.send(returns_it(), None) == (True, stop)


def test_a_coroutine_that_suspends_gives_what_it_yielded_and_goes_on_from_there(impl: SimpleNamespace) -> None:
    marker = object()

    @types.coroutine
    def yields(x: Any) -> Generator[Any, Any, Any]:
        return (yield x)

    async def twice() -> Any:
        first = await yields(marker)
        second = await yields(first)
        return (first, second)

    coro = twice()
    assert impl.steps.send(coro, None) == (False, marker)
    assert impl.steps.send(coro, "a") == (False, "a")
    assert impl.steps.send(coro, "b") == (True, ("a", "b"))


@pytest.mark.parametrize("exc", [ValueError("v"), KeyError("k"), asyncio.CancelledError(), KeyboardInterrupt()])
def test_what_a_coroutine_raises_goes_through_as_it_is(impl: SimpleNamespace, exc: BaseException) -> None:
    async def raises() -> Any:
        raise exc

    with pytest.raises(type(exc)) as caught:
        impl.steps.send(raises(), None)
    assert caught.value is exc


def test_a_stop_iteration_raised_inside_is_a_runtime_error(impl: SimpleNamespace) -> None:
    async def raises_stop() -> Any:
        raise StopIteration("inside")

    with pytest.raises(RuntimeError, match="coroutine raised StopIteration"):
        impl.steps.send(raises_stop(), None)


def test_a_finished_coroutine_cannot_be_stepped_again(impl: SimpleNamespace) -> None:
    async def returns() -> int:
        return 1

    coro = returns()
    assert impl.steps.send(coro, None) == (True, 1)
    with pytest.raises(RuntimeError, match="cannot reuse already awaited coroutine"):
        impl.steps.send(coro, None)


def test_a_new_coroutine_takes_none_only(impl: SimpleNamespace) -> None:
    async def returns() -> int:
        return 1

    coro = returns()
    with pytest.raises(TypeError, match="non-None value"):
        impl.steps.send(coro, "too early")
    coro.close()


def test_generators_step_as_coroutines_do(impl: SimpleNamespace) -> None:
    def gen() -> Generator[int, Any, str]:
        got = yield 1
        return f"got {got}"

    g = gen()
    assert impl.steps.send(g, None) == (False, 1)
    assert impl.steps.send(g, "x") == (True, "got x")


class SendOnly:
    """An awaitable's iterator with ``send`` and nothing else: no ``__next__``."""

    def __init__(self, steps: int) -> None:
        self.left = steps
        self.sent: list[Any] = []

    def send(self, value: Any) -> Any:
        self.sent.append(value)
        if self.left:
            self.left -= 1
            return "step"
        raise StopIteration("done")


class Stepped(ClassCoroutine):
    """A coroutine written as a class (as the worker's own are)."""

    __slots__ = ("sent",)

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send(self, value: Any) -> Any:
        self.sent.append(value)
        if len(self.sent) == 1:
            return "first"
        raise StopIteration(len(self.sent))

    def throw(self, exc: Any, *rest: Any) -> Any:
        raise exc

    def close(self) -> None:
        pass


def test_objects_with_a_send_method_are_sent_to(impl: SimpleNamespace) -> None:
    obj = SendOnly(1)
    assert impl.steps.send(obj, None) == (False, "step")
    assert impl.steps.send(obj, 7) == (True, "done")
    assert obj.sent == [None, 7]


def test_class_coroutines_step_through_next_for_none_and_send_otherwise(impl: SimpleNamespace) -> None:
    coro = Stepped()
    assert impl.steps.send(coro, None) == (False, "first")
    assert impl.steps.send(coro, "v") == (True, 2)
    assert coro.sent == [None, "v"]


def test_an_object_that_cannot_be_sent_to_is_a_type_or_attribute_error(impl: SimpleNamespace) -> None:
    with pytest.raises((TypeError, AttributeError)):
        impl.steps.send(42, None)


def test_every_vector_gives_the_same_answer_both_ways() -> None:
    """The vectors above, side by side in one run (the kernel against the twin)."""
    from kernel_kit import PURE

    if COMPILED is None:
        pytest.skip("Cython kernels not built")

    async def returns(v: Any) -> Any:
        return v

    for value in RETURNED_VALUES:
        assert PURE["steps"].send(returns(value), None) == COMPILED["steps"].send(returns(value), None)


@needs_compiled
def test_the_kernel_keeps_no_reference_to_what_it_passes_on() -> None:
    send = COMPILED["steps"].send  # type: ignore[index]
    value = Value()
    before = sys.getrefcount(value)

    async def returns() -> Value:
        return value

    @types.coroutine
    def yields() -> Generator[Value, Any, None]:
        yield value

    async def suspends() -> None:
        await yields()

    for _ in range(1000):
        send(returns(), None)
        coro = suspends()
        send(coro, None)
        coro.close()
    assert sys.getrefcount(value) == before

    # And the coroutine itself goes when its last reference does.
    coro = returns()
    ref = weakref.ref(coro)
    send(coro, None)
    del coro
    gc.collect()
    assert ref() is None
