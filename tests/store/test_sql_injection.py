"""Queue and task names are data: no text can change what a statement does.

The PostgreSQL store writes the queue and name values of its claims and
probes into the statement text as literals (so each combination gets a plan
of its own). These tests drive every claim variant, the probe, submits and
lists with arbitrary text for every name and queue, and check that only the
rows of that queue and name are ever touched, on both dialects.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from typing import Any, Awaitable, Optional, Sequence

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cairnq import CairnQ, Worker
from cairnq._sql import specialize, split_params, statement_params, strip_comments
from cairnq.store.base import TaskStore
from cairnq.store.ops.browse import BROWSE_ORDERS
from cairnq.store.postgres import positional_statement
from cairnq.store.postgres.params import compile_template, selective_literal, text_literal

EXAMPLES = int(os.environ.get("CAIRNQ_INJECTION_EXAMPLES", "60"))
FAR_FUTURE_MS = 2**50

# Pieces that mean something to SQL, to a driver or to a parameter rewriter.
HOSTILE = [
    "'", "''", "\\", "\\'", "\\\\", "--", "/*", "*/", ":name", ":names", ":queue", ":queues", ":limit",
    ":worker_id", ":lease_ms", ":foo", "::text", "$1", "$2", "$$", "$q$", "?", "?1", "%s", "%%", "%(name)s",
    "E'", "e'", "U&'", '"', '""', ";", " or true or queue = ", "') or true --", ") or (true", "\n", "\r\n",
    "\t", " ", "{", "}", ",", "[", "]", "null", "\\u0041", "\\x27", "é", "ß", "\u2028", "🙂", "\u200b",
    "\ufeff",
]  # fmt: skip
_chars = st.characters(exclude_characters="\x00", exclude_categories=("Cs",))  # refused up front elsewhere
_piece = st.sampled_from(HOSTILE) | st.text(_chars, min_size=1, max_size=3)
_short = st.lists(_piece, min_size=1, max_size=6).map("".join)
# Longer than any literal the store writes: those stay bound parameters.
hostile_text = _short | _short.map(lambda s: s * (201 // len(s) + 1))

VICTIM_QUEUES = ("tenant", "default")
EMPTY_QUEUE = "zz-empty"
PLANTED = {"tenant", "default", EMPTY_QUEUE, "job"}


# -- the composer on its own ------------------------------------------------------------


def test_positional_rewrite_leaves_strings_identifiers_and_comments_alone() -> None:
    sql = (
        "select ':a', E'\\' :b', \"c:d\", $$ :e -- $$, $t$ :f $t$, :g /* :h */ -- :i\n"
        "from t where x = :j and y = 'it''s :k' and z = :g::text"
    )
    text, names = positional_statement(sql)
    assert names == ("g", "j")
    assert text == (
        "select ':a', E'\\' :b', \"c:d\", $$ :e -- $$, $t$ :f $t$, $1 /* :h */ \n"
        "from t where x = $2 and y = 'it''s :k' and z = $1::text"
    )
    assert statement_params(sql) == ("g", "j")
    assert statement_params("select ':e'") == ()


def test_strip_comments_only_strips_comments() -> None:
    sql = "select '--not a comment' as a, -- a comment\n  \"x--y\" -- :c\n\n from t /* -- kept */"
    assert strip_comments(sql) == "select '--not a comment' as a,\n  \"x--y\"\n from t /* -- kept */"


def test_specialize_does_not_rewrite_inside_a_string() -> None:
    sql = "select '(:q is null or queue = :q)' where (:q is null or queue = :q)"
    assert specialize(sql, {"q": "a"}) == "select '(:q is null or queue = :q)' where queue = :q"


def test_a_literal_is_never_rescanned() -> None:
    template = compile_template("select :a, :b, :a")
    text, names = template.bind({"a": text_literal(":b -- $1 '")})
    assert text == "select E':b -- $1 ''', $1, E':b -- $1 '''"
    assert names == ("b",)
    assert split_params("select 1") == (("select 1",), ())


@settings(max_examples=EXAMPLES * 5, deadline=None, database=None)
@given(text=hostile_text | st.text(max_size=30))
def test_the_lexer_finds_no_parameter_inside_a_string_or_a_comment(text: str) -> None:
    quoted = "'" + text.replace("'", "''") + "'"
    identifier = '"' + text.replace('"', '""') + '"'
    block = "/* " + text.replace("*/", "* /").replace("/*", "/ *") + " */"
    sql = f"select {quoted}, :a, {text_literal(text)} as {identifier}, :b {block}, $t${text.replace('$t$', '')}$t$"
    chunks, slots = split_params(sql)
    assert slots == ("a", "b")
    assert "".join(c + f":{s}" for c, s in zip(chunks, slots)) + chunks[-1] == sql
    comment = "\n-- :c " + text.replace("\n", " ").replace("\r", " ")
    assert strip_comments(sql + comment) == strip_comments(sql)


def test_values_that_cannot_be_literals_stay_parameters() -> None:
    assert selective_literal("x" * 200) is not None
    assert selective_literal("x" * 201) is None
    assert selective_literal("a\x00b") is None
    assert selective_literal("\ud800") is None
    assert selective_literal(["a"] * 16) is not None
    assert selective_literal(["a"] * 17) is None
    assert selective_literal(["a", 1]) is None
    assert selective_literal(None) is None
    assert selective_literal([]) == "array[]::text[]"
    # a page position (the browse statements' cursor) is an int: digits only
    assert selective_literal(-1) == "(-1)::bigint"
    assert selective_literal(2**63 - 1) == "(9223372036854775807)::bigint"
    assert selective_literal(-(2**63)) == "(-9223372036854775808)::bigint"
    # beyond bigint it stays a parameter (the server then says what is wrong)
    assert selective_literal(2**63) is None and selective_literal(-(2**63) - 1) is None
    assert selective_literal(True) is None and selective_literal(1.5) is None


# -- the literal routine against the server ---------------------------------------------------


@pytest.mark.parametrize("conforming", ["on", "off"])
def test_a_literal_reads_back_as_its_text(backend: Any, conforming: str) -> None:
    """``select <literal>`` is the original text, for any text, whatever
    standard_conforming_strings says."""
    if backend.dialect != "postgres":
        pytest.skip("PostgreSQL literals")
    import psycopg

    with psycopg.connect(backend.target, autocommit=True) as conn:
        conn.execute(f"set standard_conforming_strings = {conforming}")
        cur = psycopg.RawCursor(conn)

        @settings(max_examples=EXAMPLES * 3, deadline=None, database=None)
        @given(
            text=hostile_text | st.text(_chars, max_size=40),
            items=st.lists(_short, max_size=4),
            number=st.integers(-(2**63), 2**63 - 1) | st.sampled_from([-(2**63), 2**63 - 1, -1, 0]),
        )
        def check(text: str, items: list[str], number: int) -> None:
            cur.execute("select " + str(selective_literal(number)) + ", 1")
            assert cur.fetchone() == (number, 1)
            cur.execute("select " + text_literal(text) + ", 1")
            assert cur.fetchone() == (text, 1)
            # The lexer and the server agree on where the literal ends.
            comment = "-- " + text.replace("\n", " ").replace("\r", " ")
            sql, names = positional_statement(f"select {text_literal(text)}, :p::text {comment}")
            assert names == ("p",)
            cur.execute(sql, ["after"])
            assert cur.fetchone() == (text, "after")
            array = selective_literal(items)
            if array is not None:
                cur.execute("select " + array + ", 1")
                assert cur.fetchone() == (items, 1)

        check()


# -- the store, with hostile names and queues ---------------------------------------------


class Harness:
    """A store on a private event loop (hypothesis drives synchronous code),
    and a raw connection that plants and reads rows behind its back."""

    def __init__(self, backend: Any) -> None:
        self.dialect = backend.dialect
        self.loop = asyncio.new_event_loop()
        self.store: TaskStore = backend.store()
        self.run(self.store.connect())
        if self.dialect == "sqlite":
            self.raw: Any = sqlite3.connect(backend.target, isolation_level=None)
            self.raw.execute("pragma busy_timeout = 5000")
        else:
            import psycopg

            self.raw = psycopg.connect(backend.target, autocommit=True)

    def run(self, coro: Awaitable[Any]) -> Any:
        return self.loop.run_until_complete(coro)

    def sql(self, text: str, params: Sequence[Any] = ()) -> list[Any]:
        if self.dialect == "postgres":
            text = text.replace("?", "%s")
        cur = self.raw.execute(text, params)
        return list(cur.fetchall()) if cur.description else []

    def reset(self) -> None:
        self.sql("delete from cairnq_task_keys")
        self.sql("delete from cairnq_tasks")

    def snapshot(self, ids: list[str]) -> list[Any]:
        """The rows, exactly as stored."""
        if self.dialect == "postgres":
            return self.sql("select t::text from cairnq_tasks t where id = any(?) order by id", [ids])
        marks = ", ".join("?" * len(ids))
        return self.sql(f"select * from cairnq_tasks where id in ({marks}) order by id", ids)

    def plant_victims(self, name: str) -> list[str]:
        """Someone else's tasks, queued, running and succeeded, in other
        queues, some under the attacker's very name."""
        ids = []
        for queue in VICTIM_QUEUES:
            for task_name in ("job", name):
                queued, running, done = (
                    self.run(self.store.submit(name=task_name, queue=queue, payload={"victim": i}))
                    for i in range(3)
                )
                self.sql(
                    "update cairnq_tasks set status = 'running', worker_id = 'victim', attempt = 1,"
                    " lease_until_ms = ? where id = ?",
                    [FAR_FUTURE_MS, running.id],
                )
                self.sql(
                    "update cairnq_tasks set status = 'succeeded', worker_id = 'victim', attempt = 1,"
                    " result = '{\"ok\": true}', completed_at_ms = 1 where id = ?",
                    [done.id],
                )
                ids += [queued.id, running.id, done.id]
        return ids

    def close(self) -> None:
        try:
            self.run(self.store.close())
        finally:
            self.loop.close()
            self.raw.close()


@pytest.fixture
def harness(backend: Any) -> Any:
    h = Harness(backend)
    try:
        yield h
    finally:
        h.close()


def _claim_variants(queue: str, name: str, other: str) -> list[tuple[list[str], Optional[list[str]]]]:
    """(queues, names) for every claim and probe statement: one queue or
    several, one name, several, any, and more of each than are written as
    literals."""
    fillers = [f"filler-{i}" for i in range(20)]
    return [
        ([queue], [name]),
        ([queue, EMPTY_QUEUE], [name]),
        ([queue], [name, other]),
        ([queue, EMPTY_QUEUE], [other, name]),
        ([queue], None),
        ([queue, EMPTY_QUEUE], None),
        ([queue], [name, *fillers]),
        ([queue, *fillers], [name, other]),
    ]


def test_hostile_names_and_queues_touch_only_their_own_rows(harness: Harness) -> None:
    store = harness.store

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(queue=hostile_text, name=hostile_text, other=hostile_text)
    def check(queue: str, name: str, other: str) -> None:
        assume(name != other and queue not in PLANTED and name not in PLANTED and other not in PLANTED)
        assume(not (set((queue, name, other)) & {f"filler-{i}" for i in range(20)}))
        harness.reset()
        victims = harness.plant_victims(name)
        before = harness.snapshot(victims)
        queued: dict[str, str] = {}  # the attacker's own queued tasks: id -> name

        def submit(task_name: str, **kwargs: Any) -> None:
            task = harness.run(store.submit(name=task_name, queue=queue, **kwargs))
            assert (task.queue, task.name, task.status) == (queue, task_name, "queued")
            queued[task.id] = task_name

        for i, (queues, names) in enumerate(_claim_variants(queue, name, other)):
            submit(name)
            submit(other, key=f"{i}{other}")  # within the 1,024-byte limit
            claimed = harness.run(store.claim(queues=queues, names=names, worker_id="attacker", limit=50))
            wanted = {i for i, n in queued.items() if names is None or n in names}
            assert {t.id for t in claimed} == wanted, (queues, names)
            for task in claimed:
                assert (task.queue, task.status, task.worker_id) == (queue, "running", "attacker")
                del queued[task.id]

        # The worker's own draw: no probe, outside a transaction.
        submit(name)

        async def draw_all(draw: Any) -> Any:
            return await draw([name], 50)

        lone_draw = store._claim_session(
            [queue], "attacker", 30_000, [name], draw_all, probe=False, single_draw=True
        )
        claimed = harness.run(lone_draw)
        assert [t.id for t in claimed] == [i for i, n in queued.items() if n == name]
        for task in claimed:
            del queued[task.id]
        # Nothing left of this name: the probe says so, the claim takes nothing.
        assert harness.run(store.claim(queues=[queue], names=[name], worker_id="attacker")) == []

        listed = harness.run(store.list(queue=queue, name=other, limit=1_000))
        assert {t.id for t in listed} >= set(queued)
        assert {(t.queue, t.name) for t in listed} == {(queue, other)}
        assert harness.snapshot(victims) == before

    check()


def test_hostile_filters_and_cursors_browse_only_their_own_rows(harness: Harness) -> None:
    """The dashboard's pages write filters and the page cursor into the
    statement as literals on PostgreSQL (plan per value): whatever the text,
    a page holds only rows matching it, and nothing else changes."""
    store = harness.store

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(queue=hostile_text, name=hostile_text, cursor=hostile_text)
    def check(queue: str, name: str, cursor: str) -> None:
        assume(queue not in PLANTED and name not in PLANTED)
        harness.reset()
        victims = harness.plant_victims(name)
        before = harness.snapshot(victims)
        own = [harness.run(store.submit(name=name, queue=queue)) for _ in range(3)]
        claimed = harness.run(store.claim(queues=[queue], names=[name], worker_id="w", limit=1))
        harness.run(store.complete(task_id=claimed[0].id, worker_id="w", result=None))
        done = claimed[0].id
        final = {t.id: "succeeded" if t.id == done else "queued" for t in own}
        for order in BROWSE_ORDERS:
            finished = order.startswith("finished")
            for status in (None, "queued", "succeeded"):
                wanted = {
                    i for i, st_ in final.items()
                    if (not finished or st_ == "succeeded") and status in (None, st_)
                }  # fmt: skip
                for after in (None, (7 if finished else None, cursor)):
                    rows = harness.run(
                        store.browse(order, queue=queue, name=name, status=status, after=after)
                    )
                    assert all((t.queue, t.name) == (queue, name) for t in rows)
                    if after is None:
                        assert {t.id for t in rows} == wanted, (order, status)
                    else:  # some page of the same rows, whatever the cursor's text
                        assert {t.id for t in rows} <= wanted, (order, status, after)
        assert harness.snapshot(victims) == before

    check()


# -- the examples of the report, one by one ---------------------------------------------------

INJECTIONS = [
    (":name", " or true or queue = "),
    (":name", " or (select pg_sleep(2)) is null or queue = "),
    (":queue", "') or true --"),
]


@pytest.mark.parametrize(("queue", "name"), INJECTIONS)
async def test_a_queue_named_like_a_parameter_claims_only_its_own_tasks(
    backend: Any, queue: str, name: str
) -> None:
    store = backend.store()
    q = CairnQ(store)
    other = await q.submit("job", queue="tenant")
    finished = await q.submit("job", queue="tenant")
    [taken] = await store.claim(queues=["tenant"], worker_id="victim")
    assert taken.id == other.id
    await store.complete(task_id=taken.id, worker_id="victim", result=None)
    waiting = await q.submit("job", queue="tenant")
    before = {t.id: t for t in await q.list(limit=100)}
    own = await q.submit(name, queue=queue)

    claimed = await store.claim(queues=[queue], names=[name], worker_id="w", limit=100)

    assert [t.id for t in claimed] == [own.id]
    after = {t.id: t for t in await q.list(limit=100)}
    assert {i: after[i] for i in before} == before  # queued, running and succeeded alike
    assert {finished.id, waiting.id} <= set(before)


async def test_a_name_cannot_run_sql(backend: Any) -> None:
    """Were the name spliced into the statement, nextval would run: the
    sequence's side effect survives any rollback."""
    if backend.dialect != "postgres":
        pytest.skip("PostgreSQL statements")
    import psycopg

    with psycopg.connect(backend.target, autocommit=True) as conn:
        conn.execute("create sequence if not exists cairnq_test_probe_seq")
    store = backend.store()
    name = " or (select nextval('cairnq_test_probe_seq')) is null or queue = "
    own = await store.submit(name=name, queue=":name")
    for queues, names in _claim_variants(":name", name, "x"):
        await store.claim(queues=queues, names=names, worker_id="w", limit=10)
    with psycopg.connect(backend.target, autocommit=True) as conn:
        assert conn.execute("select is_called from cairnq_test_probe_seq").fetchone() == (False,)
        conn.execute("drop sequence cairnq_test_probe_seq")
    assert (await store.get(own.id)).status == "running"


async def test_a_worker_on_a_queue_named_like_a_parameter_leaves_other_queues_alone(backend: Any) -> None:
    q = backend.client()
    tenant = await q.submit("job", queue="tenant")
    own = await q.submit(" or true or queue = ", queue=":name")
    factory = Worker.sqlite if backend.dialect == "sqlite" else Worker.postgres
    worker = factory(backend.target, queues=[":name"], poll_interval_ms=20)

    @worker.task(" or true or queue = ")
    async def handler(ctx: Any, payload: Any) -> str:
        return "mine"

    async with worker.background():
        done = await q.wait(own.id, timeout_ms=20_000)
    assert (done.status, done.result) == ("succeeded", "mine")
    untouched = await q.get(tenant.id)
    assert (untouched.status, untouched.attempt, untouched.error) == ("queued", 0, None)


ORDINARY = [
    ("a--b", "x"), ("q", "q--x"), ("q", "x :foo"), ("q", "x :limit"), ("q", "it's"), ("c:\\dir", "a\\'b"),
]  # fmt: skip


@pytest.mark.parametrize(("queue", "name"), ORDINARY)
async def test_ordinary_names_are_claimed_by_every_claim(backend: Any, queue: str, name: str) -> None:
    store = backend.store()
    for queues, names in _claim_variants(queue, name, "other"):
        task = await store.submit(name=name, queue=queue)
        claimed = await store.claim(queues=queues, names=names, worker_id="w", limit=5)
        assert [t.id for t in claimed] == [task.id], (queues, names)


# A PostgreSQL schema name is the one identifier the store writes into its
# statements (double-quoted, never escaped: ``create schema if not exists
# "<name>"``, the search_path), so it must be refused unless it is plain.
_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$")


@settings(max_examples=EXAMPLES * 5, deadline=None)
@given(st.lists(_piece | st.sampled_from(["a", "Z", "_", "$", "9", "\n", '"']), max_size=6).map("".join))
def test_a_schema_name_is_refused_unless_it_is_a_plain_identifier(text: str) -> None:
    from cairnq.store.validation import MAX_SCHEMA_BYTES, check_schema_name

    plain = (
        0 < len(text) <= MAX_SCHEMA_BYTES
        and set(text) <= _PLAIN
        and not text[0].isdigit()
        and text[0] != "$"
        and not text.lower().startswith("pg_")
        and text.lower() != "information_schema"
    )
    if plain:
        check_schema_name(text)
    else:
        with pytest.raises(ValueError):
            check_schema_name(text)


@pytest.mark.parametrize("name", ["abc\n", "cairnq\n", "a\r\n"])
def test_a_schema_name_with_a_line_break_at_its_end_is_refused(name: str) -> None:
    from cairnq.store.validation import check_schema_name

    with pytest.raises(ValueError):
        check_schema_name(name)
