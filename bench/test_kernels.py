"""Each compiled kernel against its pure-Python twin, on the same inputs.

A kernel earns its place by being at least 2x its twin here (bench/RESULTS.md).
"""

from __future__ import annotations

import random

import pytest

from cairnq._speedups import compiled, pure
from cairnq.models import TASK_COLUMNS

IMPLS = ["python"] + (["cython"] if compiled is not None else [])


def kernels(impl: str) -> dict:
    return pure if impl == "python" else compiled  # type: ignore[return-value]


ROW = (
    "task_01JABCDEFGHJKMNPQRSTVWXYZ0", "email.send", "default", "running",
    '{"to":"someone@example.com","subject":"Hello","body":"' + "x" * 200 + '","n":42}',
    None, None, "{}", None, None, 1, 3, 0, "worker_01JABCDEFGHJKMNPQRSTVWXYZ0",
    1795949041110, 1795949041110, None, None, "task_01JABCDEFGHJKMNPQRSTVWXYZ0", None,
    1795949041110, 1795949041110, None,
)  # fmt: skip
assert len(ROW) == len(TASK_COLUMNS)
ROWS64 = [ROW] * 64
PAYLOAD = {"to": "someone@example.com", "subject": "Hello", "tags": ["a", "b"], "n": 42, "f": 1.5}
IDS = [f"task_01JABCDEFGHJKMNPQRSTVWX{i:03d}" for i in range(256)]
BEATS = [(task_id, None) for task_id in IDS]


@pytest.mark.parametrize("impl", IMPLS)
def test_decode_64_rows(benchmark, impl: str) -> None:
    decode = kernels(impl)["rows"].decode_tasks
    assert len(benchmark(decode, ROWS64, True)) == 64


@pytest.mark.parametrize("impl", IMPLS)
def test_dumps_payload(benchmark, impl: str) -> None:
    dumps = kernels(impl)["jsoncodec"].dumps
    assert benchmark(dumps, PAYLOAD).startswith("{")


@pytest.mark.parametrize("impl", IMPLS)
def test_loads_payload(benchmark, impl: str) -> None:
    loads = kernels(impl)["jsoncodec"].loads
    assert benchmark(loads, ROW[4])["n"] == 42


@pytest.mark.parametrize("impl", IMPLS)
def test_encode_256_ids(benchmark, impl: str) -> None:
    encode = kernels(impl)["beats"].encode_ids
    assert benchmark(encode, IDS).startswith('["')


@pytest.mark.parametrize("impl", IMPLS)
def test_decode_256_beats(benchmark, impl: str) -> None:
    decode = kernels(impl)["beats"].decode_beats
    assert len(benchmark(decode, BEATS)) == 256


@pytest.mark.parametrize("impl", IMPLS)
def test_retry_delay(benchmark, impl: str) -> None:
    delay = kernels(impl)["backoff"].retry_delay_ms
    rand = random.random
    assert 0 <= benchmark(delay, 5, 1000, 30000, rand) < 30000


@pytest.mark.parametrize("impl", IMPLS)
def test_new_ulid(benchmark, impl: str) -> None:
    new = kernels(impl)["ids"].new_ulid
    assert len(benchmark(new)) == 26


@pytest.mark.parametrize("impl", IMPLS)
def test_echo_insert_row(benchmark, impl: str) -> None:
    # The SQLite insert's echo: its annotation's constants and parameters.
    from cairnq._sql import load_statements

    stmt = load_statements("sqlite")["insert_task"]
    by_column = {c.column: c for c in stmt.echo_row}
    template = tuple(by_column[column].value for column in TASK_COLUMNS)
    sources = tuple(by_column[column].param for column in TASK_COLUMNS)
    bound = {source: i for i, source in enumerate(sources) if source is not None}
    echo = kernels(impl)["rows"].echo_row
    assert len(benchmark(echo, template, sources, bound)) == len(TASK_COLUMNS)


@pytest.mark.parametrize("impl", IMPLS)
def test_fill_claimed_rows(benchmark, impl: str) -> None:
    # A 64-task claim's rows put back together: the columns it returned, and
    # the six its fill-row annotation names (claim_one_queue_one_name).
    from cairnq._sql import load_statements
    from cairnq.store.sqlite.echo import row_filler

    stmt = load_statements("sqlite")["claim_one_queue_one_name"]
    fill = row_filler(stmt)
    assert fill is not None
    bound = {"worker_id": "w", "lease_until_ms": 2, "now_ms": 1, "queue": "q", "name": "n", "limit": 64}
    rows = [tuple(f"{c}{i}" for c in stmt.returning) for i in range(64)]
    fill_rows = kernels(impl)["rows"].fill_rows
    template, sources = fill.args
    assert len(benchmark(fill_rows, template, sources, bound, rows)) == 64


@pytest.mark.parametrize("impl", IMPLS)
def test_first_step_of_a_handler_that_returns(benchmark, impl: str) -> None:
    # What the worker does for a call's first step: the handler's coroutine
    # made and stepped once, to its return value.
    send = kernels(impl)["steps"].send

    async def handler(ctx, payload):
        return None

    def first_step():
        return send(handler(None, None), None)

    assert benchmark(first_step) == (True, None)
