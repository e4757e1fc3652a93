"""Kernels, compiled and pure Python on the same vectors: backoff."""

from __future__ import annotations

import random
import time
from types import SimpleNamespace
from typing import Any

import pytest
from kernel_kit import COMPILED, PURE, impl, needs_compiled, outcome  # noqa: F401 (fixtures)

# backoff
# ---------------------------------------------------------------------------


def ref_delay(attempt: int, base_ms: int, max_ms: int, r: float) -> int:
    """OPERATIONS.md §5.4, literally."""
    if base_ms <= 0:
        return 0
    exponent = max(0, attempt - 1)
    if exponent > max(max_ms, 0).bit_length():
        window = max_ms  # base_ms * 2**exponent > max_ms (without building 2**2**70)
    else:
        window = min(max_ms, base_ms * 2**exponent)
    floor = window // 2
    return floor + int(r * (window - floor))


BASES = [-1000, -1, 0, 1, 3, 250, 1000, 2**40]
CAPS = [0, 1, 7, 1000, 30000, 2**40, 2**62, 2**63 - 1]
RANDS = [0.0, 0.5, 0.999999]


@pytest.mark.parametrize("r", RANDS)
def test_backoff_exact_grid(impl: SimpleNamespace, r: float) -> None:
    fn = impl.backoff.retry_delay_ms
    for attempt in range(0, 71):
        for base in BASES:
            for cap in CAPS:
                got = fn(attempt, base, cap, lambda: r)
                assert got == ref_delay(attempt, base, cap, r), (attempt, base, cap, r)
                assert type(got) is int


def test_backoff_spec_windows(impl: SimpleNamespace) -> None:
    fn = impl.backoff.retry_delay_ms
    lo, hi = 0.0, 0.999999
    assert fn(1, 1000, 30000, lambda: lo) == 500
    assert fn(1, 1000, 30000, lambda: hi) == 999
    assert fn(2, 1000, 30000, lambda: lo) == 1000
    assert fn(2, 1000, 30000, lambda: hi) == 1999
    assert fn(3, 1000, 30000, lambda: lo) == 2000
    assert fn(3, 1000, 30000, lambda: hi) == 3999
    assert fn(0, 1000, 30000, lambda: lo) == 500  # attempt 0 behaves as 1
    assert fn(-5, 1000, 30000, lambda: lo) == 500
    for attempt in (6, 7, 10, 30, 62, 63, 64, 70):
        assert fn(attempt, 1000, 30000, lambda: lo) == 15000
        assert fn(attempt, 1000, 30000, lambda: hi) == 29999
    assert fn(5, 1000, 30000, lambda: 0.5) == 12000  # window 16000: 8000 + 4000


@pytest.mark.parametrize("base", [0, -1, -(2**62)])
def test_backoff_non_positive_base_is_zero(impl: SimpleNamespace, base: int) -> None:
    calls = []

    def rand() -> float:
        calls.append(1)
        return 0.5

    for attempt in (0, 1, 5, 100):
        assert impl.backoff.retry_delay_ms(attempt, base, 30000, rand) == 0
    assert impl.backoff.retry_delay_ms(1, base, 30000) == 0
    assert calls == []  # no jitter drawn for a zero delay


def test_backoff_huge_attempt_does_not_hang(impl: SimpleNamespace) -> None:
    t0 = time.perf_counter()
    for attempt in (1000, 10_000, 2**31, 2**62):
        assert impl.backoff.retry_delay_ms(attempt, 1000, 30000, lambda: 0.0) == 15000
    assert time.perf_counter() - t0 < 1.0


@pytest.mark.parametrize(
    "attempt,base,cap",
    [
        (2**63 - 1, 1000, 30000),
        (2**63, 1000, 30000),
        (2**70, 1000, 30000),
        (-(2**70), 1000, 30000),
        (3, 1000, 2**64),
        (70, 1000, 2**70),
        (3, 2**64, 30000),
    ],
    ids=[
        "attempt-2**63-1",
        "attempt-2**63",
        "attempt-2**70",
        "attempt--2**70",
        "cap-2**64",
        "cap-2**70",
        "base-2**64",
    ],  # fmt: skip
)
def test_backoff_beyond_64_bits(impl: SimpleNamespace, attempt: int, base: int, cap: int) -> None:
    # Python ints are unbounded; the formula is too. Both twins must follow it.
    got = impl.backoff.retry_delay_ms(attempt, base, cap, lambda: 0.5)
    assert got == ref_delay(attempt, base, cap, 0.5)


def test_backoff_default_rand_bounds(impl: SimpleNamespace) -> None:
    fn = impl.backoff.retry_delay_ms
    seen = set()
    for _ in range(3000):
        d = fn(3, 1000, 30000)
        assert 2000 <= d < 4000
        seen.add(d)
        assert 15000 <= fn(20, 1000, 30000) < 30000
        assert 500 <= fn(1, 1000, 30000) < 1000
    assert len(seen) > 100  # actually random


def test_backoff_rand_is_called_once(impl: SimpleNamespace) -> None:
    calls = []

    def rand() -> float:
        calls.append(1)
        return 0.25

    assert impl.backoff.retry_delay_ms(2, 1000, 30000, rand) == 1250
    assert len(calls) == 1


@needs_compiled
def test_twins_backoff_agree() -> None:
    assert COMPILED is not None
    rng = random.Random(11)
    c, p = COMPILED["backoff"].retry_delay_ms, PURE["backoff"].retry_delay_ms
    for attempt in list(range(-3, 80)) + [100, 1000, 2**31, 2**62]:
        for base in BASES + [7, 999, 2**50]:
            for cap in CAPS + [-5, 31, 2**50]:
                for r in RANDS + [rng.random()]:
                    assert c(attempt, base, cap, lambda: r) == p(attempt, base, cap, lambda: r), (
                        attempt,
                        base,
                        cap,
                        r,
                    )


@needs_compiled
@pytest.mark.parametrize(
    "args",
    [(3.0, 1000, 30000), (3, 1000.0, 30000), (3, 1000, 30000.0), ("3", 1000, 30000), (None, 1, 1)],
    ids=["float-attempt", "float-base", "float-cap", "str-attempt", "none-attempt"],
)
def test_twins_backoff_non_int_args(args: tuple[Any, ...]) -> None:
    assert COMPILED is not None
    c = outcome(COMPILED["backoff"].retry_delay_ms, *args, lambda: 0.5)
    p = outcome(PURE["backoff"].retry_delay_ms, *args, lambda: 0.5)
    assert c == p
