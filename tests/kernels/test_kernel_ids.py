"""Kernels, compiled and pure Python on the same vectors: ids (ULID)."""

from __future__ import annotations

import os
import random
import time
import warnings
from types import SimpleNamespace
from typing import Any

import pytest
from kernel_kit import ALPHABET, COMPILED, PURE, impl, needs_compiled, outcome  # noqa: F401 (fixtures)

# ids (ULID)
# ---------------------------------------------------------------------------


def ref_ulid(ts: int, rnd: bytes) -> str:
    value = (ts << 80) | int.from_bytes(rnd, "big")
    return "".join(ALPHABET[(value >> (5 * (25 - i))) & 31] for i in range(26))


def ulid_ts(ulid: str) -> int:
    n = 0
    for ch in ulid[:10]:
        n = n * 32 + ALPHABET.index(ch)
    return n


def check_ulid_shape(u: str) -> None:
    assert type(u) is str and len(u) == 26
    assert set(u) <= set(ALPHABET)
    assert u[0] in "01234567"


@pytest.mark.parametrize(
    "ts,rnd",
    [
        (0, bytes(10)),
        (0, b"\xff" * 10),
        (2**48 - 1, bytes(10)),
        (2**48 - 1, b"\xff" * 10),
        (1, b"\x00" * 9 + b"\x01"),
        (1_700_000_000_000, bytes(range(10))),
        (1_700_000_000_000, b"\x80" + bytes(9)),
        (2**47, b"\x01" * 10),
        (True, bytes(10)),
    ],
)
def test_encode_ulid_vectors(impl: SimpleNamespace, ts: int, rnd: bytes) -> None:
    u = impl.ids.encode_ulid(ts, rnd)
    check_ulid_shape(u)
    assert u == ref_ulid(ts, rnd)
    assert ulid_ts(u) == ts
    assert int.from_bytes(rnd, "big") == sum(
        ALPHABET.index(ch) << (5 * (15 - i)) for i, ch in enumerate(u[10:])
    )


def test_encode_ulid_known_values(impl: SimpleNamespace) -> None:
    assert impl.ids.encode_ulid(0, bytes(10)) == "0" * 26
    assert impl.ids.encode_ulid(2**48 - 1, b"\xff" * 10) == "7" + "Z" * 25
    assert impl.ids.encode_ulid(2**48 - 1, bytes(10)) == "7ZZZZZZZZZ" + "0" * 16
    assert impl.ids.encode_ulid(0, b"\xff" * 10) == "0" * 10 + "Z" * 16


def test_encode_ulid_random(impl: SimpleNamespace) -> None:
    rng = random.Random(5)
    for _ in range(3000):
        ts = rng.choice([rng.randrange(2**48), rng.randrange(2**41), rng.randrange(1024)])
        rnd = rng.randbytes(10)
        u = impl.ids.encode_ulid(ts, rnd)
        assert u == ref_ulid(ts, rnd)
        assert ulid_ts(u) == ts


@pytest.mark.parametrize(
    "ts",
    [-1, -(2**47), -(2**63), 2**48, 2**48 + 1, 2**62, 2**63 - 1, 2**63, 2**64, -(2**64), 10**30],
)
def test_encode_ulid_timestamp_out_of_range(impl: SimpleNamespace, ts: int) -> None:
    with pytest.raises(ValueError):
        impl.ids.encode_ulid(ts, bytes(10))
    with pytest.raises(ValueError):
        impl.ids.new_ulid(ts)


@pytest.mark.parametrize("n", [0, 1, 9, 11, 16])
def test_encode_ulid_wrong_byte_length(impl: SimpleNamespace, n: int) -> None:
    with pytest.raises(ValueError):
        impl.ids.encode_ulid(1, bytes(n))


@pytest.mark.parametrize(
    "rnd", [bytearray(range(10)), memoryview(bytes(range(10)))], ids=["bytearray", "memoryview"]
)
def test_encode_ulid_bytes_like(impl: SimpleNamespace, rnd: Any) -> None:
    # the twin takes any sized bytes-like object (int.from_bytes does)
    assert impl.ids.encode_ulid(7, rnd) == ref_ulid(7, bytes(rnd))


def test_ulid_sorts_by_timestamp(impl: SimpleNamespace) -> None:
    rng = random.Random(9)
    stamps = sorted({rng.randrange(2**48) for _ in range(500)} | {0, 1, 2**48 - 1})
    ids = [impl.ids.encode_ulid(ts, rng.randbytes(10)) for ts in stamps]
    assert ids == sorted(ids)
    # within one ms: ordered by the random part
    same = [impl.ids.encode_ulid(42, i.to_bytes(10, "big")) for i in (0, 1, 255, 256, 2**79)]
    assert same == sorted(same)


def test_new_ulid(impl: SimpleNamespace) -> None:
    before = int(time.time() * 1000)
    ids = [impl.ids.new_ulid() for _ in range(200)]
    after = int(time.time() * 1000)
    for u in ids:
        check_ulid_shape(u)
        assert before <= ulid_ts(u) <= after
    assert len(set(ids)) == len(ids)
    fixed = [impl.ids.new_ulid(1_234_567) for _ in range(50)]
    assert all(ulid_ts(u) == 1_234_567 for u in fixed)
    assert len(set(fixed)) == 50
    assert ulid_ts(impl.ids.new_ulid(0)) == 0
    assert ulid_ts(impl.ids.new_ulid(2**48 - 1)) == 2**48 - 1


@needs_compiled
def test_twins_ulid_agree() -> None:
    assert COMPILED is not None
    rng = random.Random(13)
    c, p = COMPILED["ids"].encode_ulid, PURE["ids"].encode_ulid
    for ts in (0, 1, 2**16 - 1, 2**16, 2**32, 2**47, 2**48 - 2, 2**48 - 1):
        for rnd in (bytes(10), b"\xff" * 10, bytes(range(10))):
            assert c(ts, rnd) == p(ts, rnd)
    for _ in range(5000):
        ts = rng.randrange(2**48)
        rnd = rng.randbytes(10)
        assert c(ts, rnd) == p(ts, rnd)


@needs_compiled
@pytest.mark.parametrize(
    "ts,rnd",
    [
        (-1, bytes(10)),
        (2**48, bytes(10)),
        (2**63, bytes(10)),
        (2**64, bytes(10)),
        (-(2**64), bytes(10)),
        (1, bytes(9)),
        (1, None),
        (1, "0123456789"),
        (1.0, bytes(10)),
        (1, bytearray(10)),
    ],
    ids=[
        "neg",
        "2**48",
        "2**63",
        "2**64",
        "-2**64",
        "9-bytes",
        "none",
        "str",
        "float-ts",
        "bytearray",
    ],  # fmt: skip
)
def test_twins_ulid_same_exceptions(ts: Any, rnd: Any) -> None:
    assert COMPILED is not None
    assert outcome(COMPILED["ids"].encode_ulid, ts, rnd) == outcome(
        PURE["ids"].encode_ulid, ts, rnd
    )


def _random_part(ulid: str) -> str:
    return ulid[10:]


def test_new_ulid_random_parts_never_repeat_across_a_pool(impl: SimpleNamespace) -> None:
    # The compiled kernel draws from a pool of os.urandom bytes, 256 ids a
    # refill: many pools' worth, none of them sharing bytes.
    parts = [_random_part(impl.ids.new_ulid(7)) for _ in range(256 * 40 + 3)]
    assert len(set(parts)) == len(parts)


def test_new_ulid_threads_never_share_random_bytes(impl: SimpleNamespace) -> None:
    import threading

    per_thread, threads = 4_000, 8
    found: list[list[str]] = [[] for _ in range(threads)]
    start = threading.Barrier(threads)

    def draw(out: list[str]) -> None:
        start.wait()
        new_ulid = impl.ids.new_ulid
        for _ in range(per_thread):
            out.append(_random_part(new_ulid(1)))

    workers = [threading.Thread(target=draw, args=(out,)) for out in found]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    everything = [part for out in found for part in out]
    assert len(everything) == per_thread * threads
    assert len(set(everything)) == len(everything)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
def test_a_forked_child_never_draws_its_parents_next_random_bytes(impl: SimpleNamespace) -> None:
    # The parent's pool is part used when it forks: were the child to keep
    # it, both would hand out the same random parts next.
    new_ulid = impl.ids.new_ulid
    new_ulid()
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # (3.12: fork with threads about)
        pid = os.fork()
    if pid == 0:  # the child: its next ids, then out at once
        try:
            os.close(read_end)
            os.write(write_end, "\n".join(_random_part(new_ulid()) for _ in range(300)).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    parent = {_random_part(new_ulid()) for _ in range(300)}
    with os.fdopen(read_end, "rb") as pipe:
        child = set(pipe.read().decode().split("\n"))
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(child) == 300
    assert not parent & child
