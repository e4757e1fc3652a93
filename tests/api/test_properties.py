"""Property-based tests against real stores, on every dialect.

(a) Any JSON value round-trips through submit -> get (payload, metadata and a
    worker's result) exactly as ``json.loads(json.dumps(v))`` reads it back,
    and the stored row decodes the same through both row decoders
    (``cairnq._speedups.pure`` and ``compiled``, ``rows.decode_task``).
    PostgreSQL's jsonb normalizes: object keys come back in its own order,
    numbers written in exponent form come back as plain decimals (so an
    integral float such as 1e16 reads back as the int 10000000000000000), and
    -0.0 as 0. Those tests compare modulo exactly that; SQLite must give the
    same text back, so its comparison is strict (types, key order, sign of 0).

(b) A RuleBasedStateMachine drives random sequences of client and worker
    operations against a real store and against the pure-Python model of the
    protocol's state machine in tests/model.py, and after every step asserts
    they agree on every task's status, attempt, owner, lease, cancel flag,
    completion, error code and result, and on the key -> task mapping.

Sizes: ``CAIRNQ_PROP_EXAMPLES`` (default 100) for (a);
``CAIRNQ_PROP_MACHINE_EXAMPLES`` (default 60) and ``CAIRNQ_PROP_STEPS``
(default 40) for (b). One store per test; tables are emptied between examples.
"""

from __future__ import annotations

import asyncio
import decimal
import json
import os
import sqlite3
import time
from typing import Any, Callable, Optional

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from model import CONFLICTS, TERMINAL, Model, ModelAlreadyExists, ModelLostLease

from cairnq import AlreadyExists, LostLease
from cairnq import _speedups
from cairnq.store.base import TaskStore

PROP_EXAMPLES = int(os.environ.get("CAIRNQ_PROP_EXAMPLES", "100"))
MACHINE_EXAMPLES = int(os.environ.get("CAIRNQ_PROP_MACHINE_EXAMPLES", "60"))
MACHINE_STEPS = int(os.environ.get("CAIRNQ_PROP_STEPS", "40"))

DECODERS = [("pure", _speedups.pure["rows"].decode_task)]
if _speedups.compiled is not None:
    DECODERS.append(("compiled", _speedups.compiled["rows"].decode_task))


# -- plumbing: one event loop, one store and one raw connection per test ------------


class Harness:
    """Runs a store on a private event loop (hypothesis drives synchronous
    code) and reads the database behind its back through a raw connection."""

    def __init__(self, backend: Any) -> None:
        self.dialect = backend.dialect
        self.loop = asyncio.new_event_loop()
        if self.dialect == "sqlite":
            from cairnq import SQLiteStore

            self.store: TaskStore = SQLiteStore(backend.target)
        else:
            from cairnq import PostgresStore

            self.store = PostgresStore(backend.target)
        self.run(self.store.connect())
        if self.dialect == "sqlite":
            self.raw: Any = sqlite3.connect(backend.target, isolation_level=None)
            self.raw.execute("pragma busy_timeout = 5000")
        else:
            import psycopg

            self.raw = psycopg.connect(backend.target, autocommit=True)
            # jsonb as its text, as a text-mode driver hands it over
            self.raw_text = psycopg.connect(backend.target, autocommit=True)
            self.raw_text.adapters.register_loader("jsonb", psycopg.types.string.TextLoader)

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def sql(self, text: str) -> str:
        return text if self.dialect == "sqlite" else text.replace("?", "%s")

    def rows(self, text: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return list(self.raw.execute(self.sql(text), params).fetchall())

    def json_col(self, value: Any) -> Any:
        """A JSON column read raw: text on SQLite, decoded by psycopg on Postgres."""
        return json.loads(value) if isinstance(value, str) and self.dialect == "sqlite" else value

    def reset(self) -> None:
        self.raw.execute("delete from cairnq_task_keys")
        self.raw.execute("delete from cairnq_tasks")

    def close(self) -> None:
        try:
            self.run(self.store.close())
        finally:
            self.loop.close()
            self.raw.close()
            if self.dialect == "postgres":
                self.raw_text.close()


@pytest.fixture
def harness(backend: Any) -> Any:
    h = Harness(backend)
    try:
        yield h
    finally:
        h.close()


# -- (a) JSON values ------------------------------------------------------------------------


def _json_values(*, postgres: bool) -> st.SearchStrategy[Any]:
    # Lone surrogates are refused on both dialects (tests/api/test_input_rules.py).
    if postgres:  # jsonb cannot hold NUL
        chars = st.characters(exclude_categories=("Cs",), exclude_characters="\x00")
    else:  # the whole code space but surrogates: NUL and astral characters included
        chars = st.characters(exclude_categories=("Cs",))
    text = st.text(chars, max_size=12)
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**100), max_value=2**100)
        | st.sampled_from([2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 10**30])
        | st.floats(allow_nan=False, allow_infinity=False)
        | text
    )
    return st.recursive(
        scalars,
        lambda children: st.lists(children, max_size=5)
        | st.dictionaries(text, children, max_size=5),
        max_leaves=20,
    )


def _strict(value: Any) -> str:
    """Exact identity of a JSON value: types, key order, sign of zero."""
    return json.dumps(value, ensure_ascii=True, allow_nan=False)


def _jsonb_canonical(value: Any) -> Any:
    """What jsonb keeps of a value: key order and the float/int spelling go."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, float):  # jsonb keeps the decimal digits json.dumps wrote
        return int(decimal.Decimal(repr(value))) if value.is_integer() else value
    if isinstance(value, int):
        return value
    if isinstance(value, list):
        return [_jsonb_canonical(v) for v in value]
    if isinstance(value, dict):
        return sorted((k, _jsonb_canonical(v)) for k, v in value.items())
    raise TypeError(type(value))


def _assert_same(got: Any, expected: Any, *, postgres: bool, where: str) -> None:
    if postgres:
        a, b = _jsonb_canonical(got), _jsonb_canonical(expected)
        assert repr(a) == repr(b), f"{where}: {got!r} != {expected!r}"
    else:
        assert _strict(got) == _strict(expected), f"{where}: {got!r} != {expected!r}"


def test_any_json_value_round_trips(harness: Harness) -> None:
    postgres = harness.dialect == "postgres"
    store = harness.store
    worker_id = "worker_01PROPERTYTESTS0000000000"

    @settings(
        max_examples=PROP_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(value=_json_values(postgres=postgres))
    def check(value: Any) -> None:
        harness.reset()
        expected = json.loads(json.dumps(value))
        expected_payload = {} if value is None else expected  # payload=None is stored as {}
        submitted = harness.run(
            store.submit(name="prop.json", payload=value, queue="prop", metadata={"v": value})
        )
        _assert_same(submitted.payload, expected_payload, postgres=postgres, where="submit payload")
        [claimed] = harness.run(store.claim(queues=["prop"], worker_id=worker_id, lease_ms=60_000))
        assert claimed.id == submitted.id
        _assert_same(claimed.payload, expected_payload, postgres=postgres, where="claimed payload")
        harness.run(store.complete(task_id=claimed.id, worker_id=worker_id, result=value))

        got = harness.run(store.get(submitted.id))
        assert got is not None and got.status == "succeeded"
        for where, actual, wanted in (
            ("payload", got.payload, expected_payload),
            ("metadata", got.metadata, {"v": expected}),
            ("result", got.result, expected),  # result None is SQL NULL, read as None
        ):
            _assert_same(actual, wanted, postgres=postgres, where=f"get {where}")

        # The same stored row through both decoders (the text form every driver can give).
        if postgres:
            row = harness.raw_text.execute(
                "select * from cairnq_tasks where id = %s", (got.id,)
            ).fetchone()
            decoded_row = harness.raw.execute(
                "select * from cairnq_tasks where id = %s", (got.id,)
            ).fetchone()
        else:
            row = harness.raw.execute("select * from cairnq_tasks where id = ?", (got.id,)).fetchone()
            decoded_row = None
        for impl, decode in DECODERS:
            variants = [(True, row)] + ([(False, decoded_row)] if decoded_row is not None else [])
            for json_is_text, r in variants:
                task = decode(tuple(r), json_is_text)
                label = f"{impl} decode_task(json_is_text={json_is_text})"
                _assert_same(task.payload, expected_payload, postgres=postgres, where=f"{label} payload")
                _assert_same(task.metadata, {"v": expected}, postgres=postgres, where=f"{label} metadata")
                _assert_same(task.result, expected, postgres=postgres, where=f"{label} result")
                assert (task.id, task.status, task.attempt) == (got.id, "succeeded", 1)

    check()


# -- (b) the state machine against the model -------------------------------------------------

WORKERS = ("worker_01MACHINEWORKERA000000000", "worker_01MACHINEWORKERB000000000")
NAMES = ("alpha", "beta")
QUEUES = ("q1", "q2")
KEYS = ("k1", "k2")
LONG_LEASE_MS = 600_000  # never runs out during a test unless expired on purpose
FAR_DELAY_MS = 3_600_000  # "delayed": never due during a test
BOGUS_ID = "task_00000000000000000000000000"

_pick = st.integers(min_value=0, max_value=10_000)
_worker_choice = st.sampled_from(["owner", "owner", "owner", "other"])
_results = st.none() | st.integers(0, 99).map(lambda n: {"r": n})
_queue_sets = st.sampled_from([["q1"], ["q2"], ["q1", "q2"], ["q1", "q2"]])
_name_sets = st.sampled_from([None, None, None, None, ["alpha"], ["beta"], ["alpha", "beta"], []])
_submits = st.fixed_dictionaries(
    {
        "name": st.sampled_from(NAMES),
        "queue": st.sampled_from(QUEUES),
        "key": st.sampled_from([None, "k1", "k2"]),
        "conflict": st.sampled_from(CONFLICTS),
        "max_attempts": st.integers(1, 3),
        "priority": st.sampled_from([0, 0, 1, -1]),
        "delayed": st.sampled_from([False, False, False, True]),
    }
)


def _error(code: str) -> dict[str, Any]:
    return {"type": "MachineError", "code": code, "message": code, "retryable": True, "details": {}}


class ProtocolMachine(RuleBasedStateMachine):
    """One real store and one Model, driven in lockstep.

    Operations pick their target among the tasks where they matter (a retry
    picks a failed or canceled task, a worker write a running one with a valid
    lease, claiming one first when there is none), with now and then a wrong
    worker or an id that does not exist, so the ownership checks and the
    "no row" paths are exercised too."""

    harness: Harness  # set by the test before running

    def __init__(self) -> None:
        super().__init__()
        self.model = Model()
        self.harness.reset()

    # -- helpers -------------------------------------------------------------------------

    def run(self, coro: Any) -> Any:
        return self.harness.run(coro)

    @property
    def store(self) -> TaskStore:
        return self.harness.store

    def pick(self, i: int, *, where: Optional[Callable[[Any], bool]] = None) -> str:
        ids = sorted(self.model.tasks)
        if where is not None and i % 4 != 3:  # mostly where it matters, not always
            ids = [t for t in ids if where(self.model.tasks[t])] or ids
        if not ids or i % 19 == 18:  # now and then, an id that does not exist
            return BOGUS_ID
        return ids[(i // 4) % len(ids)]

    def running_task(self, i: int) -> str:
        """A running task with a valid lease; when there is none, a claim
        comes first (a worker only writes what it claimed)."""
        if not any(t.status == "running" and t.lease == "valid" for t in self.model.tasks.values()):
            self.claim(WORKERS[i % 2], ["q1", "q2"], None, 1 + i % 2)
        return self.pick(i, where=lambda t: t.status == "running" and t.lease == "valid")

    def worker_for(self, task_id: str, choice: str) -> str:
        t = self.model.tasks.get(task_id)
        owner = t.worker_id if t is not None and t.worker_id else WORKERS[0]
        if choice == "owner":
            return owner
        return WORKERS[1] if owner == WORKERS[0] else WORKERS[0]

    def owned_write(self, real: Callable[[], Any], model: Callable[[], Any]) -> tuple[Any, Any]:
        """Run an ownership-checked write on both; LostLease must match."""
        try:
            got = self.run(real())
        except LostLease:
            got = LostLease
        try:
            want = model()
        except ModelLostLease:
            want = LostLease
        if (got is LostLease) != (want is LostLease):
            raise AssertionError(f"store gave {got!r}, model expected {want!r}")
        return got, want

    # -- client operations -----------------------------------------------------------------

    @initialize(batch=st.lists(_submits, min_size=2, max_size=6))
    def some_tasks(self, batch: list[dict[str, Any]]) -> None:
        """Start from a few tasks, so short runs reach the interesting states."""
        for args in batch:
            self.submit(**args)

    @rule(
        name=st.sampled_from(NAMES),
        queue=st.sampled_from(QUEUES),
        key=st.sampled_from([None, "k1", "k2", "k1", "k2"]),
        conflict=st.sampled_from(CONFLICTS),
        max_attempts=st.integers(1, 3),
        priority=st.sampled_from([0, 0, 1, -1]),
        delayed=st.sampled_from([False, False, False, True]),
    )
    def submit(
        self, name: str, queue: str, key: Optional[str], conflict: str, max_attempts: int,
        priority: int, delayed: bool,
    ) -> None:  # fmt: skip
        kwargs = dict(name=name, queue=queue, key=key, conflict=conflict, max_attempts=max_attempts,
                      priority=priority)  # fmt: skip
        try:
            task = self.run(
                self.store.submit(payload={"n": len(self.model.tasks)},
                                  delay_ms=FAR_DELAY_MS if delayed else 0, **kwargs)  # type: ignore[arg-type]
            )  # fmt: skip
        except AlreadyExists:
            with pytest.raises(ModelAlreadyExists):
                self.model.submit(None, delayed=delayed, **kwargs)  # type: ignore[arg-type]
            return
        new_id = None if task.id in self.model.tasks else task.id
        expected = self.model.submit(new_id, delayed=delayed, **kwargs)  # type: ignore[arg-type]
        assert task.id == expected

    @rule(i=_pick)
    def cancel(self, i: int) -> None:
        task_id = self.pick(i, where=lambda t: t.status in ("queued", "running"))
        task = self.run(self.store.cancel(task_id))
        assert (task.status if task else None) == self.model.cancel(task_id)

    @rule(i=_pick, reset=st.booleans())
    def retry(self, i: int, reset: bool) -> None:
        task_id = self.pick(i, where=lambda t: t.status in ("failed", "canceled"))
        task = self.run(self.store.retry(task_id, reset_attempt=reset))
        assert (task.status if task else None) == self.model.retry(task_id, reset_attempt=reset)
        if task is not None:
            assert task.attempt == self.model.tasks[task_id].attempt

    @rule(op=st.sampled_from(["cancel", "retry"]), key=st.sampled_from(KEYS), reset=st.booleans())
    def by_key(self, op: str, key: str, reset: bool) -> None:
        if op == "cancel":
            task = self.run(self.store.cancel_by_key(key))
            want = self.model.cancel_by_key(key)
        else:
            task = self.run(self.store.retry_by_key(key, reset_attempt=reset))
            want = self.model.retry_by_key(key, reset_attempt=reset)
        assert (task.status if task else None) == want

    @rule(status=st.sampled_from([None, "succeeded", "failed", "canceled"]),
          queue=st.sampled_from([None, "q1"]))  # fmt: skip
    def purge(self, status: Optional[str], queue: Optional[str]) -> None:
        time.sleep(0.005)  # every finished task is now strictly older than the cutoff
        deleted = self.run(self.store.purge(older_than_ms=0, status=status, queue=queue, limit=10_000))  # type: ignore[arg-type]
        assert set(deleted) == self.model.purge(status=status, queue=queue)

    # -- claiming --------------------------------------------------------------------------

    @rule(
        worker=st.sampled_from(WORKERS),
        queues=_queue_sets,
        names=_name_sets,
        limit=st.integers(1, 3),
    )
    def claim(self, worker: str, queues: list[str], names: Optional[list[str]], limit: int) -> None:
        self.model.recover_leases()
        candidates = self.model.claim_candidates(queues, names)
        claimed = self.run(
            self.store.claim(queues=queues, worker_id=worker, lease_ms=LONG_LEASE_MS, limit=limit,
                             names=names)
        )  # fmt: skip
        # Which candidates a draw takes depends on run_at_ms and ids, which the
        # store assigned; claim does not change run_at_ms, so read them now.
        run_at = dict(self.harness.rows("select id, run_at_ms from cairnq_tasks"))
        expected = self.model.claim_order(candidates, run_at)[:limit]
        assert sorted(t.id for t in claimed) == sorted(expected), (claimed, candidates)
        self.model.apply_claim(expected, worker)
        for t in claimed:
            assert (t.status, t.worker_id, t.attempt) == ("running", worker, self.model.tasks[t.id].attempt)

    # -- worker operations (ownership-checked) ----------------------------------------------------

    @rule(
        op=st.sampled_from(["complete", "complete", "succeed", "complete_many"]),
        i=_pick,
        more=st.lists(_pick, max_size=3),
        who=_worker_choice,
        result=_results,
    )
    def settle(self, op: str, i: int, more: list[int], who: str, result: Any) -> None:
        task_id = self.running_task(i)
        worker = self.worker_for(task_id, who)
        if op == "complete_many":
            ids = list(dict.fromkeys([task_id, *(self.running_task(j) for j in more)]))
            got = self.run(self.store.complete_many(task_ids=ids, worker_id=worker, result=result))  # type: ignore[attr-defined]
            assert got == self.model.complete_many(ids, worker, result)
            return
        write = self.store.complete if op == "complete" else self.store.succeed
        settle_model = self.model.complete if op == "complete" else self.model.succeed
        got, want = self.owned_write(
            lambda: write(task_id=task_id, worker_id=worker, result=result),
            lambda: settle_model(task_id, worker, result),
        )
        if got is not LostLease:
            assert got.status == want

    @rule(
        i=_pick,
        who=_worker_choice,
        retryable=st.booleans(),
        delayed=st.sampled_from([False, False, True]),
        code=st.sampled_from(["e1", "e2"]),
    )
    def fail(self, i: int, who: str, retryable: bool, delayed: bool, code: str) -> None:
        task_id = self.running_task(i)
        worker = self.worker_for(task_id, who)
        got, want = self.owned_write(
            lambda: self.store.fail(task_id=task_id, worker_id=worker, error=_error(code),
                                    retryable=retryable, delay_ms=FAR_DELAY_MS if delayed else 0),
            lambda: self.model.fail(task_id, worker, code=code, retryable=retryable, delayed=delayed),
        )  # fmt: skip
        if got is not LostLease:
            assert got.status == want

    @rule(batch=st.booleans(), i=_pick, more=st.lists(_pick, max_size=3), who=_worker_choice)
    def heartbeat(self, batch: bool, i: int, more: list[int], who: str) -> None:
        task_id = self.running_task(i)
        worker = self.worker_for(task_id, who)
        if batch:
            ids = list(dict.fromkeys([task_id, *(self.pick(j) for j in more)]))
            got = self.run(self.store.heartbeat_batch(task_ids=ids, worker_id=worker, lease_ms=LONG_LEASE_MS))
            assert got == self.model.heartbeat_batch(ids, worker)
            return
        got, want = self.owned_write(
            lambda: self.store.heartbeat(task_id=task_id, worker_id=worker, lease_ms=LONG_LEASE_MS),
            lambda: self.model.heartbeat(task_id, worker),
        )
        if got is not LostLease:
            assert (got.cancel_requested_at_ms is not None) == want

    @rule(i=_pick)
    def expire_lease(self, i: int) -> None:
        """Renew the owner's lease for 1 ms, then let it run out."""
        task_id = self.running_task(i)
        worker = self.worker_for(task_id, "owner")
        got, _ = self.owned_write(
            lambda: self.store.heartbeat(task_id=task_id, worker_id=worker, lease_ms=1),
            lambda: self.model.expire(task_id, worker),
        )
        if got is not LostLease:
            time.sleep(0.02)

    # -- after every step: the store and the model agree ---------------------------------------

    @invariant()
    def agrees_with_model(self) -> None:
        rows = self.harness.rows(
            "select id, status, attempt, worker_id, lease_until_ms, cancel_requested_at_ms,"
            " completed_at_ms, error, result from cairnq_tasks"
        )
        real = {}
        for task_id, status, attempt, worker_id, lease, cancel, completed, error, result in rows:
            error = self.harness.json_col(error)
            real[task_id] = (
                status,
                attempt,
                worker_id,
                lease is not None,
                cancel is not None,
                completed is not None,
                error["code"] if error else None,
                self.harness.json_col(result),
            )
        expected = self.model.snapshot()
        diff = {
            i: {"store": real.get(i), "model": expected.get(i)}
            for i in set(real) | set(expected)
            if real.get(i) != expected.get(i)
        }
        assert not diff, diff
        keys = dict(self.harness.rows("select key, task_id from cairnq_task_keys"))
        assert keys == self.model.keys
        # SCHEMA.md §7 on every row: a lease exactly while running, completed exactly when finished
        for status, _, _, leased, _, completed, _, _ in real.values():
            assert leased == (status == "running")
            assert completed == (status in TERMINAL)


def test_state_machine_agrees_with_model(harness: Harness) -> None:
    machine = type("BoundProtocolMachine", (ProtocolMachine,), {"harness": harness})
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=MACHINE_EXAMPLES,
            stateful_step_count=MACHINE_STEPS,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        ),
    )
