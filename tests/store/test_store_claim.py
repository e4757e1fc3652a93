"""TaskStore claiming: probe, lease recovery, draws (OPERATIONS.md §4.2, §4.9).

Claim order is ``priority DESC, run_at_ms ASC, id ASC``; every claim variant
(one/several queues x any/one/several names) must take exactly the same rows.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from typing import Any

import pytest
from db_clock import latest_ms, now_ms

from cairnq import LostLease, Task

LEASE_EXPIRED_TEXT = (
    '{"type":"LeaseExpired","code":"lease_expired",'
    '"message":"task lease expired and max attempts reached","retryable":false,"details":{}}'
)
TERMINAL = ("succeeded", "failed", "canceled")


# -- helpers -----------------------------------------------------------------


def need_sqlite(backend: Any) -> None:
    if backend.dialect != "sqlite":
        pytest.skip("rewrites columns with sqlite3")


def sql(backend: Any, statement: str, params: tuple = ()) -> None:
    need_sqlite(backend)
    conn = sqlite3.connect(backend.target, isolation_level=None, timeout=5)
    try:
        conn.execute(statement, params)
    finally:
        conn.close()


def raw(backend: Any, task_id: str) -> dict[str, Any]:
    """The stored row as SQLite holds it (JSON columns as text)."""
    need_sqlite(backend)
    conn = sqlite3.connect(backend.target, timeout=5)
    conn.row_factory = sqlite3.Row
    try:
        row = conn.execute("select * from cairnq_tasks where id = ?", (task_id,)).fetchone()
        return dict(row) if row is not None else None  # type: ignore[return-value]
    finally:
        conn.close()


def as_dict(task: Task) -> dict[str, Any]:
    return dict(vars(task))


def key(t: Task) -> tuple:
    return (-t.priority, t.run_at_ms, t.id)


async def claim_all_one_by_one(store: Any, **kwargs: Any) -> list[str]:
    out: list[str] = []
    while True:
        got = await store.claim(limit=1, **kwargs)
        if not got:
            return out
        assert len(got) == 1
        out.append(got[0].id)


# -- claim order ---------------------------------------------------------------


FORMS = {
    "one_queue_any_name": (["default"], None),
    "queues_any_name": (["default", "ghost"], None),
    "one_queue_one_name": (["default"], ["job"]),
    "queues_one_name": (["ghost", "default"], ["job"]),
    "one_queue_names": (["default"], ["ghost", "job"]),
    "queues_names": (["default", "ghost"], ["job", "ghost"]),
}


@pytest.mark.parametrize("form", list(FORMS))
async def test_claim_order_priority_run_at_id(sqlite_backend: Any, form: str) -> None:
    """priority DESC, then run_at_ms ASC, then id ASC; not-yet-due rows skipped.

    Checked through every claim variant (one/several queues x any/one/several names).
    """
    backend = sqlite_backend
    queues, names = FORMS[form]
    store = backend.store()
    base = now_ms() - 10_000
    # label -> (priority, run_at offset from base, id)
    spec = {
        "a": (0, -1000, "task_000000000000000000000000A1"),
        "g": (0, -1000, "task_000000000000000000000000A2"),  # ties with a: id decides
        "b": (5, -10, "task_000000000000000000000000B0"),
        "c": (5, -500, "task_000000000000000000000000C9"),
        "d": (5, -500, "task_000000000000000000000000C1"),  # ties with c: smaller id
        "e": (-1, -5000, "task_000000000000000000000000E0"),
        "f": (10, None, "task_000000000000000000000000F0"),  # due in a minute
        "h": (5, -2000, "task_000000000000000000000000Z9"),  # earlier run_at beats smaller id
    }
    # insert in an order unrelated to the expected claim order
    for label in ["e", "g", "c", "f", "a", "b", "h", "d"]:
        prio, offset, new_id = spec[label]
        t = await store.submit(name="job", payload={"label": label}, priority=prio)
        run_at = now_ms() + 60_000 if offset is None else base + offset
        sql(backend, "update cairnq_tasks set id = ?, run_at_ms = ? where id = ?", (new_id, run_at, t.id))

    label_of = {v[2]: k for k, v in spec.items()}
    order = await claim_all_one_by_one(store, queues=queues, names=names, worker_id="w1")
    assert [label_of[i] for i in order] == ["h", "d", "c", "b", "a", "g", "e"]
    assert raw(backend, spec["f"][2])["status"] == "queued"

    # once due, the delayed one is claimable
    sql(backend, "update cairnq_tasks set run_at_ms = ? where id = ?", (now_ms() - 1, spec["f"][2]))
    got = await store.claim(queues=queues, names=names, worker_id="w1")
    assert [t.id for t in got] == [spec["f"][2]]
    assert await store.claim(queues=queues, names=names, worker_id="w1") == []

    # a multi-row draw takes the best rows, not just any
    sql(backend, "update cairnq_tasks set status = 'queued', worker_id = null, lease_until_ms = null")
    got = await store.claim(queues=queues, names=names, worker_id="w2", limit=3)
    assert sorted(label_of[t.id] for t in got) == ["d", "f", "h"]


async def test_claim_order_ties_across_queues_and_names(sqlite_backend: Any) -> None:
    """Candidates of several queues/names merge in claim order (ties: run_at, then id)."""
    backend = sqlite_backend
    store = backend.store()
    base = now_ms() - 10_000
    # (queue, name, priority, run_at offset, id); expected order is the list order
    rows = [
        ("q2", "n2", 3, -100, "task_00000000000000000000000001"),
        ("q1", "n1", 3, -100, "task_00000000000000000000000002"),
        ("q2", "n1", 3, -100, "task_00000000000000000000000003"),
        ("q1", "n2", 3, -100, "task_00000000000000000000000004"),
        ("q1", "n1", 3, -50, "task_00000000000000000000000000"),
        ("q2", "n2", 1, -900, "task_0000000000000000000000000A"),
        ("q1", "n2", 1, -900, "task_0000000000000000000000000B"),
    ]
    for queue, name, prio, offset, new_id in reversed(rows):
        t = await store.submit(name=name, queue=queue, priority=prio)
        sql(backend, "update cairnq_tasks set id = ?, run_at_ms = ? where id = ?", (new_id, base + offset, t.id))
    expected = [r[4] for r in rows]
    for names in (None, ["n1", "n2"], ["n2", "n1", "ghost"]):
        order = await claim_all_one_by_one(store, queues=["q1", "q2"], names=names, worker_id="w")
        assert order == expected, names
        sql(backend, "update cairnq_tasks set status = 'queued', worker_id = null, lease_until_ms = null, attempt = 0")
    for limit in (2, 4, 7):
        got = await store.claim(queues=["q2", "q1"], names=["n1", "n2"], worker_id="w", limit=limit)
        assert sorted(t.id for t in got) == sorted(expected[:limit]), limit
        sql(backend, "update cairnq_tasks set status = 'queued', worker_id = null, lease_until_ms = null, attempt = 0")
        got = await store.claim(queues=["q2", "q1"], names=None, worker_id="w", limit=limit)
        assert sorted(t.id for t in got) == sorted(expected[:limit]), limit
        sql(backend, "update cairnq_tasks set status = 'queued', worker_id = null, lease_until_ms = null, attempt = 0")


async def test_claim_order_and_limit(backend: Any) -> None:
    """Dialect-neutral: priorities decide, then earlier run_at (submission order)."""
    store = backend.store()
    ids: dict[str, str] = {}
    for label, prio in [("p0a", 0), ("p3a", 3), ("pm2", -2), ("p3b", 3), ("p0b", 0), ("p7", 7)]:
        ids[label] = (await store.submit(name="job", priority=prio)).id
        await asyncio.sleep(0.003)  # distinct run_at_ms in submission order
    label_of = {v: k for k, v in ids.items()}

    # limit <= 0 claims nothing and touches nothing
    assert await store.claim(queues=["default"], worker_id="w", limit=0) == []
    assert await store.claim(queues=["default"], worker_id="w", limit=-3) == []
    for t in await store.list():
        assert t.status == "queued" and t.attempt == 0

    got = await store.claim(queues=["default"], worker_id="w", limit=3)
    assert len(got) == 3
    assert sorted(label_of[t.id] for t in got) == ["p3a", "p3b", "p7"]
    order = await claim_all_one_by_one(store, queues=["default"], worker_id="w")
    assert [label_of[i] for i in order] == ["p0a", "p0b", "pm2"]
    assert await store.claim(queues=["default"], worker_id="w", limit=10) == []

    more = [(await store.submit(name="job", priority=p)).id for p in (1, 9)]
    got = await store.claim(queues=["default"], worker_id="w", limit=10)
    assert len(got) == 2 and sorted(t.id for t in got) == sorted(more)


async def test_delayed_task_not_claimable_until_due(backend: Any) -> None:
    store = backend.store()
    t0 = now_ms()
    late = await store.submit(name="job", delay_ms=700, priority=100)
    far = await store.submit(name="job", delay_ms=600_000, priority=100)
    now_task = await store.submit(name="job", priority=-5)
    # Postgres evaluates the clock separately for run_at and created_at (±1 ms)
    assert late.run_at_ms >= late.created_at_ms + 699
    got = await store.claim(queues=["default"], worker_id="w", limit=10)
    assert [t.id for t in got] == [now_task.id]
    assert await store.claim(queues=["default"], worker_id="w", limit=10) == []
    assert now_ms() < t0 + 700, "setup too slow for this test's timing"
    await asyncio.sleep(max(0.0, (late.run_at_ms - now_ms()) / 1000) + 0.05)
    got = await store.claim(queues=["default"], worker_id="w", limit=10)
    assert [t.id for t in got] == [late.id]
    assert (await store.get(far.id)).status == "queued"
    assert (await store.get(far.id)).attempt == 0


# -- queue filter ------------------------------------------------------------------


async def test_claim_queue_filter(backend: Any) -> None:
    store = backend.store()
    q1 = [(await store.submit(name="job", queue="q1")).id for _ in range(2)]
    q2 = [(await store.submit(name="job", queue="q2")).id for _ in range(2)]
    q3 = [(await store.submit(name="job", queue="q3")).id for _ in range(2)]

    assert await store.claim(queues=["empty"], worker_id="w", limit=10) == []
    got = await store.claim(queues=["q1"], worker_id="w", limit=10)
    assert sorted(t.id for t in got) == sorted(q1)
    assert all(t.queue == "q1" for t in got)

    for i in q1:
        await store.succeed(task_id=i, worker_id="w", result=None)
    more = [(await store.submit(name="job", queue="q1")).id for _ in range(1)]
    got = await store.claim(queues=["q1", "q2", "nothing"], worker_id="w", limit=10)
    assert sorted(t.id for t in got) == sorted(q2 + more)
    for i in q3:
        row = await store.get(i)
        assert row.status == "queued" and row.worker_id is None and row.attempt == 0
    assert await store.claim(queues=["q1", "q2"], worker_id="w", limit=10) == []
    assert await store.claim(queues=["nothing", "other"], worker_id="w", limit=10) == []


# -- name filter ----------------------------------------------------------------------


async def test_claim_name_filters(backend: Any) -> None:
    store = backend.store()
    ids: dict[str, list[str]] = {"a": [], "b": [], "c": []}
    for n in ["a", "b", "c", "a", "b", "c"]:
        ids[n].append((await store.submit(name=n)).id)
        await asyncio.sleep(0.003)  # distinct run_at_ms: submission order is claim order

    # [] = nothing, even though everything is claimable
    assert await store.claim(queues=["default"], worker_id="w", names=[], limit=10) == []
    got = await store.claim(queues=["default"], worker_id="w", names=["a"], limit=10)
    assert sorted(t.id for t in got) == sorted(ids["a"])
    got = await store.claim(queues=["default"], worker_id="w", names=["b", "zzz"], limit=1)
    assert [t.id for t in got] == [ids["b"][0]]
    got = await store.claim(queues=["default"], worker_id="w", names=["b", "c"], limit=10)
    assert sorted(t.id for t in got) == sorted(ids["b"][1:] + ids["c"])
    assert await store.claim(queues=["default"], worker_id="w", names=["a", "b", "c"]) == []

    d = (await store.submit(name="d")).id
    e = (await store.submit(name="e")).id
    got = await store.claim(queues=["default"], worker_id="w", names=None, limit=10)
    assert sorted(t.id for t in got) == sorted([d, e])


# Dataset for the variant-equivalence test: (label, queue, name, priority, delayed)
DATASET = [
    ("a1", "qa", "n1", 0, False),
    ("a2", "qa", "n2", 5, False),
    ("a3", "qa", "n3", 9, False),
    ("a4", "qa", "n1", 5, False),
    ("a5", "qa", "n2", 0, False),
    ("a6", "qa", "n1", 99, True),
    ("a7", "qa", "n3", -1, False),
    ("a8", "qa", "n2", 5, False),
    ("b1", "qb", "n1", 7, False),
    ("b2", "qb", "n2", 0, False),
    ("b3", "qb", "n3", 5, False),
    ("b4", "qb", "n1", 0, False),
    ("b5", "qb", "n2", 50, True),
    ("b6", "qb", "n1", 5, False),
    ("c1", "qc", "n1", 100, False),
    ("c2", "qc", "n2", 100, False),
]

# logical query -> equivalent forms (queues, names) hitting different statements
QUERIES: dict[str, tuple[tuple[set[str], set[str] | None], list[tuple[list[str], list[str] | None]]]] = {
    "qa/any": (({"qa"}, None), [
        (["qa"], None), (["qa", "qz"], None), (["qa"], ["n1", "n2", "n3"]),
        (["qa", "qz"], ["n1", "n2", "n3"]),
    ]),
    "qa/n1": (({"qa"}, {"n1"}), [
        (["qa"], ["n1"]), (["qa", "qz"], ["n1"]), (["qa"], ["n1", "ng"]),
        (["qa", "qz"], ["n1", "ng"]),
    ]),
    "qa/n1n2": (({"qa"}, {"n1", "n2"}), [(["qa"], ["n1", "n2"]), (["qa", "qz"], ["n2", "n1"])]),
    "qaqb/any": (({"qa", "qb"}, None), [(["qa", "qb"], None), (["qb", "qa"], ["n1", "n2", "n3"])]),
    "qaqb/n1": (({"qa", "qb"}, {"n1"}), [(["qa", "qb"], ["n1"]), (["qa", "qb"], ["n1", "ng"])]),
    "qaqb/n1n2": (({"qa", "qb"}, {"n1", "n2"}), [(["qa", "qb"], ["n1", "n2"])]),
}


async def test_claim_variants_take_identical_rows(backend: Any) -> None:
    store = backend.store()
    namespaces = [(q, i) for q, (_, forms) in QUERIES.items() for i in range(len(forms))]
    ns_name = {ns: f"v{j}" for j, ns in enumerate(namespaces)}
    label_of: dict[str, str] = {}
    for label, queue, name, prio, delayed in DATASET:
        made = await asyncio.gather(
            *[
                store.submit(
                    name=name,
                    queue=f"{ns_name[ns]}_{queue}",
                    priority=prio,
                    delay_ms=600_000 if delayed else 0,
                    payload={"label": label},
                )
                for ns in namespaces
            ]
        )
        for t in made:
            label_of[t.id] = label
        await asyncio.sleep(0.003)  # run_at_ms increases with DATASET order in every namespace

    # model of the expected sequence for each logical query, per namespace rows
    results: dict[str, list[list[list[str]]]] = {}
    for qname, ((qset, nset), forms) in QUERIES.items():
        results[qname] = []
        for i, (queues, names) in enumerate(forms):
            prefix = ns_name[(qname, i)]
            rows = [t for t in await store.list(limit=1000) if t.queue.startswith(prefix + "_")]
            now = now_ms()
            eligible = sorted(
                (
                    t
                    for t in rows
                    if t.queue[len(prefix) + 1 :] in qset
                    and (nset is None or t.name in nset)
                    and t.run_at_ms <= now
                ),
                key=key,
            )
            expected = [[label_of[t.id] for t in eligible[k : k + 2]] for k in range(0, len(eligible), 2)]
            draws: list[list[str]] = []
            while True:
                got = await store.claim(
                    queues=[f"{prefix}_{q}" for q in queues],
                    names=names,
                    worker_id="w",
                    limit=2,
                )
                if not got:
                    break
                draws.append(sorted(label_of[t.id] for t in got))
            assert draws == [sorted(x) for x in expected], (qname, queues, names)
            results[qname].append(draws)
        # every form of the query claimed the same labels in the same draws
        assert all(r == results[qname][0] for r in results[qname]), qname

    assert results["qa/n1"][0] == [["a1", "a4"]]
    assert results["qa/any"][0] == [["a2", "a3"], ["a4", "a8"], ["a1", "a5"], ["a7"]]
    assert results["qaqb/n1n2"][0] == [["a2", "b1"], ["a4", "a8"], ["a1", "b6"], ["a5", "b2"], ["b4"]]


# -- the claimed row -------------------------------------------------------------------


async def test_claimed_row_columns(backend: Any) -> None:
    store = backend.store()
    t = await store.submit(
        name="job",
        payload={"x": [1, 2]},
        queue="q",
        priority=4,
        max_attempts=5,
        metadata={"m": 1},
        correlation_id="corr",
    )
    before = as_dict(await store.get(t.id))
    t0 = now_ms()
    [c] = await store.claim(queues=["q"], worker_id="worker_A", lease_ms=12_345)
    t1 = latest_ms()
    after = as_dict(c)
    assert after == as_dict(await store.get(t.id))
    assert after["status"] == "running"
    assert after["worker_id"] == "worker_A"
    assert t0 + 12_345 <= after["lease_until_ms"] <= t1 + 12_345
    assert after["attempt"] == 1
    assert t0 <= after["updated_at_ms"] <= t1
    if backend.dialect == "sqlite":  # one SDK clock reading per statement
        assert after["lease_until_ms"] - after["updated_at_ms"] == 12_345
    changed = {"status", "worker_id", "lease_until_ms", "attempt", "updated_at_ms"}
    assert {k: v for k, v in after.items() if k not in changed} == {
        k: v for k, v in before.items() if k not in changed
    }
    assert after["payload"] == {"x": [1, 2]} and after["metadata"] == {"m": 1}
    assert after["error"] is None and after["result"] is None
    assert after["progress"] is None and after["message"] is None
    assert after["completed_at_ms"] is None and after["cancel_requested_at_ms"] is None


async def test_claim_keeps_previous_attempt_error(backend: Any) -> None:
    store = backend.store()
    t = await store.submit(name="job", max_attempts=3)
    await store.claim(queues=["default"], worker_id="w1")
    env = {"type": "Boom", "code": "boom", "message": "first", "retryable": True, "details": {"n": 1}}
    failed = await store.fail(task_id=t.id, worker_id="w1", error=env, retryable=True)
    assert failed.status == "queued" and failed.error == env
    before = as_dict(await store.get(t.id))
    [c] = await store.claim(queues=["default"], worker_id="w2", lease_ms=1000)
    assert c.error == env
    assert c.attempt == 2
    assert c.worker_id == "w2"
    assert c.run_at_ms == before["run_at_ms"]
    assert c.completed_at_ms is None
    assert c.created_at_ms == before["created_at_ms"]
    if backend.dialect == "sqlite":
        assert json.loads(raw(backend, t.id)["error"]) == env


async def test_claim_ignores_max_attempts(backend: Any) -> None:
    store = backend.store()
    t = await store.submit(name="job", max_attempts=1)
    [c] = await store.claim(queues=["default"], worker_id="w")
    assert c.attempt == 1
    f = await store.fail(task_id=t.id, worker_id="w", error={"type": "E"}, retryable=True)
    assert f.status == "failed"  # attempt 1 == max 1
    r = await store.retry(t.id)
    assert r.status == "queued" and r.attempt == 1
    [c] = await store.claim(queues=["default"], worker_id="w")
    assert c.id == t.id and c.status == "running" and c.attempt == 2 and c.max_attempts == 1
    if backend.dialect != "sqlite":
        return
    t = await store.submit(name="job", max_attempts=2)
    sql(backend, "update cairnq_tasks set attempt = 7 where id = ?", (t.id,))
    [c] = await store.claim(queues=["default"], worker_id="w")
    assert (c.id, c.status, c.attempt) == (t.id, "running", 8)


# -- probe ------------------------------------------------------------------------------


class Plan:
    def __init__(self, draws: list[tuple[list[str] | None, int]] | None = None, ret: Any = "ret"):
        self.calls = 0
        self.draws = draws or []
        self.got: list[list[Task]] = []
        self.ret = ret

    async def __call__(self, draw: Any) -> Any:
        self.calls += 1
        for names, limit in self.draws:
            self.got.append(await draw(names, limit))
        return self.ret


async def test_probe_false_never_calls_plan(backend: Any) -> None:
    store = backend.store()

    async def session(queues: list[str], names: list[str] | None) -> tuple[Any, int]:
        plan = Plan([(None, 10)])
        out = await store.claim_session(queues=queues, worker_id="w", names=names, plan=plan)
        return out, plan.calls

    # empty database
    assert await session(["default"], None) == (None, 0)
    assert await session(["default"], ["a"]) == (None, 0)

    other_q = await store.submit(name="a", queue="other")
    other_n = await store.submit(name="b")
    delayed = await store.submit(name="a", delay_ms=600_000)
    running = await store.submit(name="a", queue="busy")
    await store.claim(queues=["busy"], worker_id="w0", lease_ms=600_000)

    for queues, names in [
        (["default"], ["a"]),
        (["default", "x"], ["a", "c"]),
        (["nothing"], None),
        (["nothing", "x"], None),
        (["busy"], None),  # running with a live lease is not work
        (["default", "other"], []),  # [] = nothing
    ]:
        assert await session(queues, names) == (None, 0), (queues, names)

    # nothing above was touched
    for t in (other_q, other_n, delayed):
        row = await store.get(t.id)
        assert row.status == "queued" and row.attempt == 0 and row.worker_id is None
    row = await store.get(running.id)
    assert row.status == "running" and row.worker_id == "w0" and row.attempt == 1

    # probe true: plan called once, its value returned even if it draws nothing
    plan = Plan([(["zzz"], 5)], ret={"sentinel": 1})
    out = await store.claim_session(queues=["default"], worker_id="w", names=["b"], plan=plan)
    assert out == {"sentinel": 1}
    assert plan.calls == 1 and plan.got == [[]]
    plan = Plan([], ret=None)
    out = await store.claim_session(queues=["other"], worker_id="w", names=None, plan=plan)
    assert out is None and plan.calls == 1
    assert (await store.get(other_q.id)).status == "queued"

    # `names` is a required keyword of claim_session (None allowed)
    with pytest.raises(TypeError):
        await store.claim_session(queues=["default"], worker_id="w", plan=Plan())  # type: ignore[call-arg]


async def test_expired_lease_elsewhere_makes_probe_true_and_is_recovered(backend: Any) -> None:
    store = backend.store()
    dead = await store.submit(name="theirs", queue="their_q", max_attempts=3)
    [c] = await store.claim(queues=["their_q"], worker_id="dead_worker", lease_ms=200)
    assert c.id == dead.id
    await store.progress(task_id=dead.id, worker_id="dead_worker", progress=0.5, message="half")
    await asyncio.sleep(0.3)

    plan = Plan([(["mine"], 10)], ret="ran")
    t0 = now_ms()
    out = await store.claim_session(
        queues=["my_q"], worker_id="other_worker", names=["mine"], plan=plan
    )
    t1 = latest_ms()
    assert out == "ran"
    assert plan.calls == 1 and plan.got == [[]]
    row = await store.get(dead.id)
    assert row.status == "queued"
    assert row.worker_id is None
    assert row.lease_until_ms is None
    assert t0 <= row.run_at_ms <= t1
    assert row.progress is None and row.message is None
    assert row.completed_at_ms is None
    assert row.attempt == 1
    assert t0 <= row.updated_at_ms <= t1

    # a claimer of that queue now gets it again straight away
    [again] = await store.claim(queues=["their_q"], worker_id="w3")
    assert again.id == dead.id and again.attempt == 2 and again.worker_id == "w3"


async def test_expired_lease_recovery_through_plain_claims(backend: Any) -> None:
    store = backend.store()
    exhausted = await store.submit(name="x", queue="q1", max_attempts=1)
    again = await store.submit(name="y", queue="q3", max_attempts=3)
    await store.claim(queues=["q1"], worker_id="dead", lease_ms=100)
    await store.claim(queues=["q3"], worker_id="dead", lease_ms=100)
    await asyncio.sleep(0.2)
    with pytest.raises(LostLease):
        await store.heartbeat(task_id=again.id, worker_id="dead")
    # a claim for another queue and name recovers both
    assert await store.claim(queues=["q2"], worker_id="w", names=["z"]) == []
    row = await store.get(exhausted.id)
    assert row.status == "failed" and row.worker_id == "dead" and row.lease_until_ms is None
    assert row.error == json.loads(LEASE_EXPIRED_TEXT)
    row = await store.get(again.id)
    assert row.status == "queued" and row.worker_id is None and row.attempt == 1

    # recovery runs before the draw: a recovered task is claimable in the same session
    await store.claim(queues=["q3"], worker_id="dead", lease_ms=100)
    await asyncio.sleep(0.2)
    [c] = await store.claim(queues=["q3"], worker_id="alive", lease_ms=5000)
    assert c.id == again.id and c.attempt == 3 and c.worker_id == "alive" and c.status == "running"
    with pytest.raises(LostLease):
        await store.complete(task_id=again.id, worker_id="dead", result=1)


# -- recover_leases branches ---------------------------------------------------------------


async def test_recover_leases_branches(sqlite_backend: Any) -> None:
    backend = sqlite_backend
    store = backend.store()
    a = await store.submit(name="a", queue="qa", max_attempts=3)  # cancel requested
    b = await store.submit(name="b", queue="qb", max_attempts=3)  # attempts left
    c = await store.submit(name="c", queue="qc", max_attempts=2)  # exhausted
    live = await store.submit(name="d", queue="qd")  # lease still valid
    prev = {"type": "Prev", "code": "prev", "message": "earlier", "retryable": True, "details": {}}

    await store.claim(queues=["qa"], worker_id="wa")
    await store.claim(queues=["qb"], worker_id="wb")
    await store.fail(task_id=b.id, worker_id="wb", error=prev)
    await store.claim(queues=["qb"], worker_id="wb")  # attempt 2 of 3
    await store.claim(queues=["qc"], worker_id="wc")
    await store.fail(task_id=c.id, worker_id="wc", error=prev)
    await store.claim(queues=["qc"], worker_id="wc")  # attempt 2 of 2
    await store.claim(queues=["qd"], worker_id="wd", lease_ms=600_000)
    for t, w in [(a, "wa"), (b, "wb"), (c, "wc")]:
        await store.progress(task_id=t.id, worker_id=w, progress=0.25, message="quarter")
    await store.cancel(a.id)

    past = now_ms() - 1000
    for t in (a, b, c):
        sql(backend, "update cairnq_tasks set lease_until_ms = ? where id = ?", (past, t.id))
    before = {t.id: raw(backend, t.id) for t in (a, b, c, live)}

    plan = Plan([(None, 10)])
    t0 = now_ms()
    out = await store.claim_session(queues=["nowhere"], worker_id="w", names=None, plan=plan)
    t1 = latest_ms()
    assert out == "ret" and plan.got == [[]]

    after = {t.id: raw(backend, t.id) for t in (a, b, c, live)}
    assert after[live.id] == before[live.id]

    def expect(tid: str, **overrides: Any) -> dict[str, Any]:
        row = dict(before[tid])
        row.update(overrides)
        return row

    # A: cancel requested -> canceled; everything else as it was
    ra = after[a.id]
    assert t0 <= ra["completed_at_ms"] <= t1
    assert ra == expect(
        a.id,
        status="canceled",
        lease_until_ms=None,
        completed_at_ms=ra["completed_at_ms"],
        updated_at_ms=ra["completed_at_ms"],
    )
    assert ra["worker_id"] == "wa" and ra["progress"] == 0.25 and ra["message"] == "quarter"
    assert ra["error"] is None and ra["cancel_requested_at_ms"] is not None

    # B: attempts left -> queued, due now, error of the previous attempt kept
    rb = after[b.id]
    assert t0 <= rb["run_at_ms"] <= t1
    assert rb == expect(
        b.id,
        status="queued",
        worker_id=None,
        lease_until_ms=None,
        run_at_ms=rb["run_at_ms"],
        progress=None,
        message=None,
        updated_at_ms=rb["run_at_ms"],
    )
    assert json.loads(rb["error"]) == prev and rb["completed_at_ms"] is None and rb["attempt"] == 2

    # C: exhausted -> failed with the exact lease-expired envelope
    rc = after[c.id]
    assert t0 <= rc["completed_at_ms"] <= t1
    assert rc == expect(
        c.id,
        status="failed",
        lease_until_ms=None,
        error=LEASE_EXPIRED_TEXT,
        completed_at_ms=rc["completed_at_ms"],
        updated_at_ms=rc["completed_at_ms"],
    )
    assert rc["worker_id"] == "wc" and rc["progress"] == 0.25 and rc["message"] == "quarter"
    assert rc["attempt"] == 2
    task_c = await store.get(c.id)
    assert task_c.error == {
        "type": "LeaseExpired",
        "code": "lease_expired",
        "message": "task lease expired and max attempts reached",
        "retryable": False,
        "details": {},
    }


async def test_recovery_at_lease_equal_to_now(
    sqlite_backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """lease_until_ms <= now is expired: at equality the task is recovered."""
    backend = sqlite_backend
    import cairnq.store.sqlite.store as sqlite_store

    if not hasattr(sqlite_store, "now_ms"):
        pytest.skip("SQLite store clock is not patchable here")
    store = backend.store()
    t = await store.submit(name="x")
    await store.claim(queues=["default"], worker_id="w")
    frozen = now_ms() + 5_000
    sql(backend, "update cairnq_tasks set lease_until_ms = ? where id = ?", (frozen + 1, t.id))
    monkeypatch.setattr(sqlite_store, "now_ms", lambda: frozen)
    plan = Plan()
    assert await store.claim_session(queues=["z"], worker_id="w2", names=None, plan=plan) is None
    assert plan.calls == 0
    assert (await store.get(t.id)).status == "running"
    sql(backend, "update cairnq_tasks set lease_until_ms = ? where id = ?", (frozen, t.id))
    assert await store.claim_session(queues=["z"], worker_id="w2", names=None, plan=plan) == "ret"
    row = await store.get(t.id)
    assert row.status == "queued" and row.run_at_ms == frozen and row.updated_at_ms == frozen


# -- plans with several draws ------------------------------------------------------------------


async def test_plan_draws_several_times(backend: Any) -> None:
    store = backend.store()
    n1 = [(await store.submit(name="n1", priority=p)).id for p in (1, 3, 2)]
    n2 = [(await store.submit(name="n2", priority=p)).id for p in (9, 0, 4)]
    other = (await store.submit(name="n1", queue="elsewhere", priority=50)).id

    plan = Plan(
        [
            (["n1"], 2),
            (["n2", "n2"], 1),
            ([], 5),
            (None, 0),
            (None, 10),
            (["n1", "n2"], 10),
        ],
        ret="done",
    )
    out = await store.claim_session(queues=["default"], worker_id="multi", names=["n1", "n2"], plan=plan)
    assert out == "done"
    a, b, empty, zero, rest, nothing = plan.got
    assert sorted(t.id for t in a) == sorted([n1[1], n1[2]])
    assert [t.id for t in b] == [n2[0]]
    assert empty == [] and zero == [] and nothing == []
    assert sorted(t.id for t in rest) == sorted([n1[0], n2[1], n2[2]])
    for t in a + b + rest:
        row = await store.get(t.id)
        assert row.status == "running" and row.worker_id == "multi" and row.attempt == 1
    assert (await store.get(other)).status == "queued"


# -- a deep backlog of another name ---------------------------------------------------------------


async def test_idle_name_against_deep_backlog(backend: Any) -> None:
    store = backend.store()
    total = 20_000
    for start in range(0, total, 2500):
        await asyncio.gather(
            *[store.submit(name="busy", payload={"i": i}) for i in range(start, start + 2500)]
        )
    assert await store.claim(queues=["default"], worker_id="w", names=["idle"]) == []
    assert await store.claim(queues=["default", "q2"], worker_id="w", names=["idle"]) == []
    assert await store.claim(queues=["default"], worker_id="w", names=["idle", "idle2"], limit=5) == []
    plan = Plan([(["idle"], 1)])
    assert await store.claim_session(queues=["default"], worker_id="w", names=["idle"], plan=plan) is None
    assert plan.calls == 0
    idle = await store.submit(name="idle", priority=-100)
    got = await store.claim(queues=["default"], worker_id="w", names=["idle"], limit=5)
    assert [t.id for t in got] == [idle.id]
    stats = await store.stats("default")
    assert stats == {
        "default": {"queued": total, "running": 1, "succeeded": 0, "failed": 0, "canceled": 0}
    }
