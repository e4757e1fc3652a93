"""An idle SQLite waiter is told of other processes' commits by the kernel
(inotify, kqueue) instead of polling the file's change counter.

The writers here are other processes using plain ``sqlite3`` (not this SDK):
the watch is on the files, so it sees every writer. To show that a wakeup
comes from the notification and not from polling, the tests that need it
make the polling ticks huge (POLL_S) and require the wakeup well inside one
(PROMPT_S): without the watch, the wait sleeps a whole tick.
"""

from __future__ import annotations

import asyncio
import os
import select
import sys
import time
from pathlib import Path
from typing import Any, Awaitable

import pytest

import cairnq.store.sqlite.store as sqlite_store
from cairnq import SQLiteStore
from cairnq.store.sqlite.file_watch import ENV
from descriptors import LISTED, descriptor_targets

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") and not hasattr(select, "kqueue"),
    reason="no file notifications on this platform (waiters poll)",
)

POLL_S = 30.0  # every polling tick, made huge
WAIT_MS = 60_000
PROMPT_S = 10.0  # a third of one tick: only a notification wakes the wait this soon

# A writer that is not this SDK: plain sqlite3, its own table, driven by lines
# on stdin ("commit", "wal": switch the file to WAL, "truncate": checkpoint
# and truncate the WAL, "close": close the connection, "open"), answering
# "ok" to each.
WRITER = r"""
import sqlite3, sys
path = sys.argv[1]
conn = None

def connect():
    c = sqlite3.connect(path, isolation_level=None)
    c.execute("pragma busy_timeout = 10000")
    c.execute("create table if not exists other_sdk (x integer)")
    return c

conn = connect()
print("ok", flush=True)
n = 0
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "commit":
        n += 1
        conn.execute("insert into other_sdk (x) values (?)", (n,))
    elif cmd == "wal":
        conn.execute("pragma journal_mode = wal")
    elif cmd == "truncate":
        row = conn.execute("pragma wal_checkpoint(TRUNCATE)").fetchone()
        assert row[0] == 0, row  # not busy
    elif cmd == "close":
        conn.close()
        conn = None
    elif cmd == "open":
        conn = connect()
    print("ok", flush=True)
"""


class Writer:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def do(self, cmd: str) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(cmd.encode() + b"\n")
        await self.proc.stdin.drain()
        line = await asyncio.wait_for(self.proc.stdout.readline(), 60)
        assert line.strip() == b"ok", line


async def _writer(path: str) -> Writer:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WRITER, path,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    assert line.strip() == b"ok", line
    return Writer(proc)


async def _stop(writer: Writer) -> None:
    proc = writer.proc
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        await asyncio.wait_for(proc.wait(), 30)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()


@pytest.fixture
def huge_ticks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every polling tick (with or without a watch) as long as POLL_S; the
    window of close looks right after a notification is left alone."""
    for name in ("CHANGE_POLL_MIN_S", "CHANGE_POLL_MAX_S", "QUIET_POLL_S"):
        monkeypatch.setattr(sqlite_store, name, POLL_S, raising=False)


async def _woken_after(store: SQLiteStore, act: Awaitable[Any]) -> float:
    """Seconds from the start of ``act`` (another process's commit) until an
    idle claim wait that began before it returns."""
    engine = store._engine
    assert engine is not None
    wait = asyncio.ensure_future(store.claim_wake(["default"], WAIT_MS))
    await asyncio.sleep(0.2)  # the wait is asleep
    assert not wait.done()
    started = time.monotonic()
    await act
    await wait
    return time.monotonic() - started


@pytest.fixture
def db(tmp_path: Path) -> str:
    # Its own directory: nothing else is written next to the database.
    (tmp_path / "db").mkdir()
    return str(tmp_path / "db" / "tasks.db")


async def test_another_process_commit_wakes_an_idle_waiter_at_once(
    db: str, huge_ticks: None
) -> None:
    store = SQLiteStore(db)
    await store.connect()
    writer = await _writer(db)
    try:
        for _ in range(3):
            assert await _woken_after(store, writer.do("commit")) < PROMPT_S
    finally:
        await _stop(writer)
        await store.close()


async def test_wakeups_survive_the_wal_being_truncated_deleted_and_created_again(
    db: str, huge_ticks: None
) -> None:
    store = SQLiteStore(db)
    await store.connect()
    writer = await _writer(db)
    try:
        assert await _woken_after(store, writer.do("commit")) < PROMPT_S
        # A checkpoint empties the WAL to zero bytes; the next commit grows it.
        await writer.do("truncate")
        assert os.path.getsize(db + "-wal") == 0
        assert await _woken_after(store, writer.do("commit")) < PROMPT_S
        # Everyone closes: the last connection deletes the WAL. Reopened, a
        # new one is made, and is watched.
        await store.close()
        await writer.do("close")
        assert not os.path.exists(db + "-wal")
        await writer.do("open")
        await store.connect()
        assert os.path.exists(db + "-wal")
        assert await _woken_after(store, writer.do("commit")) < PROMPT_S
        # The WAL goes while this store is closed, and comes back through the
        # other process's commit, after the store has reconnected (through a
        # statement: the watch is the connection's).
        await store.close()
        await writer.do("close")
        assert not os.path.exists(db + "-wal")
        await store.get("0" * 26)
        await writer.do("open")
        assert await _woken_after(store, writer.do("commit")) < PROMPT_S
    finally:
        await _stop(writer)
        await store.close()


async def test_with_the_watch_off_waiters_poll(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "0")
    store = SQLiteStore(db)
    await store.connect()
    writer = await _writer(db)
    try:
        await store.claim_wake(["default"], 1)
        assert store._watch is None
        # Polled every few milliseconds (the default ticks): prompt too.
        assert await _woken_after(store, writer.do("commit")) < PROMPT_S
    finally:
        await _stop(writer)
        await store.close()


async def test_with_the_watch_off_and_huge_ticks_a_wait_sleeps_its_tick(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other side of the first test: the prompt wakeups there come from
    the watch, not from anything else that ends a wait."""
    monkeypatch.setenv(ENV, "0")
    for name in ("CHANGE_POLL_MIN_S", "CHANGE_POLL_MAX_S"):
        monkeypatch.setattr(sqlite_store, name, 1.5)
    store = SQLiteStore(db)
    await store.connect()
    writer = await _writer(db)
    try:
        assert await _woken_after(store, writer.do("commit")) >= 1.0
    finally:
        await _stop(writer)
        await store.close()


class _Reads:
    """How often a store's engine has read the change counter."""

    count = 0


async def _watched_store_counting_reads(db: str) -> tuple[SQLiteStore, _Reads]:
    """A connected store whose file watch is made (at a first wait), and a
    count of its change-counter reads from now on."""
    store = SQLiteStore(db)
    await store.connect()
    engine = store._engine
    await store.claim_wake(["default"], 1)  # the watch is made at the first wait
    assert engine is not None and store._watch is not None
    reads = _Reads()
    read = engine.data_version

    def counted() -> int | None:
        reads.count += 1
        return read()

    engine.data_version = counted  # type: ignore[method-assign]
    return store, reads


async def test_an_idle_waiter_reads_the_change_counter_rarely(db: str) -> None:
    """Idle, nothing written: the counter is read on the safety tick only, not
    every millisecond or two (which would be hundreds of reads a second)."""
    store, reads = await _watched_store_counting_reads(db)
    try:
        await asyncio.sleep(0.5)  # the connect's own writes are well past
        started = time.monotonic()
        await store.claim_wake(["default"], 2_000)
        seconds = time.monotonic() - started
        assert seconds >= 1.5
        polled = seconds / sqlite_store.CHANGE_POLL_MAX_S  # what polling would read
        assert reads.count < polled / 10
    finally:
        await store.close()


async def test_the_stores_own_commit_is_not_looked_for_closely(db: str) -> None:
    """A notification the store's own commit caused is not another
    connection's commit on its way to being published: a waiter after it
    reads the counter on the quiet tick, not every fraction of a millisecond
    for the next few milliseconds (a worker's every settlement would cost
    dozens of reads)."""
    store, reads = await _watched_store_counting_reads(db)
    watch = store._watch
    assert watch is not None
    try:
        await asyncio.sleep(0.5)  # the connect's own writes are well past
        for _ in range(3):
            await store.submit(name="own")  # a commit of this store's, inline
            own = watch.own_notices
            reads.count = 0
            await store.claim_wake(["default"], 300)
            assert own > 0  # (the submit was read as our own)
            # The quiet tick (100 ms) reads 3 or 4 times in 300 ms; the close
            # looks after a notification would read 30 and more.
            assert reads.count < 10, reads.count
    finally:
        await store.close()


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _inotify_fds() -> int:
    return descriptor_targets().count("anon_inode:inotify")


@pytest.mark.skipif(not LISTED, reason="needs /proc/self/fd")
async def test_stores_opened_and_closed_many_times_leak_no_descriptors(db: str) -> None:
    warm = SQLiteStore(db)
    await warm.connect()
    await warm.close()
    before, watching = _open_fds(), _inotify_fds()
    for i in range(40):
        store = SQLiteStore(db)
        await store.connect()
        await store.claim_wake(["default"], 5)  # made, registered with the loop, and not
        assert store._watch is not None
        if sys.platform.startswith("linux"):
            assert _inotify_fds() == watching + 1
        if i % 2:
            await store.close()
            await store.connect()  # a reconnect, and a wait, make a new watch
            await store.claim_wake(["default"], 5)
            assert store._watch is not None
        await store.close()
        assert store._watch is None
    assert _open_fds() <= before + 2  # (a few are the loop's own, come and gone)
    assert _inotify_fds() == watching


async def test_a_store_that_never_waits_holds_no_watch(db: str) -> None:
    store = SQLiteStore(db)
    try:
        await store.submit(name="echo", payload=1)
        assert await store.get_status("0" * 26) is None
        assert store._watch is None
    finally:
        await store.close()


async def test_closing_a_store_ends_its_idle_waits(db: str, huge_ticks: None) -> None:
    """A wait asleep on the watch is woken by the close (not left for a tick)."""
    store = SQLiteStore(db)
    await store.connect()
    wait = asyncio.ensure_future(store.claim_wake(["default"], WAIT_MS))
    await asyncio.sleep(0.2)
    started = time.monotonic()
    await store.close()
    await wait
    assert time.monotonic() - started < PROMPT_S


async def test_writes_to_other_files_beside_the_database_do_not_wake_a_waiter(
    db: str, huge_ticks: None
) -> None:
    """A log and another WAL database in the same directory, written while a
    waiter sleeps: the kernel reports none of it (the waiter's descriptor is
    never read), and a commit to the database still wakes it at once. (Names
    coming and going are still read, to be filtered: a rollback-journal
    database beside this one, creating and deleting its journal at every
    commit, would be read twice a commit.)"""
    folder = os.path.dirname(db)
    other_db = os.path.join(folder, "other.db")
    log_file = os.path.join(folder, "worker.log")
    lookalike = db + "-wal.bak"  # begins with a watched name, is not one
    for path in (log_file, lookalike):
        with open(path, "w") as f:
            f.write("")
    store = SQLiteStore(db)
    await store.connect()
    neighbour = await _writer(other_db)
    await neighbour.do("wal")
    await neighbour.do("commit")  # its -wal and -shm are made
    writer = await _writer(db)
    try:
        await store.claim_wake(["default"], 1)  # makes the watch
        watch = store._watch
        assert watch is not None
        await asyncio.sleep(0.5)  # the connect's and the writer's start-up writes are past
        reads = 0
        drain = watch._drain

        def counted() -> bool:
            nonlocal reads
            reads += 1
            return drain()

        watch._drain = counted  # type: ignore[method-assign]
        wait = asyncio.ensure_future(store.claim_wake(["default"], WAIT_MS))
        await asyncio.sleep(0.2)
        for i in range(50):
            await neighbour.do("commit")
            for path in (log_file, lookalike):
                with open(path, "a") as f:
                    f.write(f"line {i}\n")
                    f.flush()
                    os.fsync(f.fileno())
        await asyncio.sleep(0.3)
        assert not wait.done()
        assert reads == 0
        started = time.monotonic()
        await writer.do("commit")
        await asyncio.wait_for(wait, PROMPT_S)
        assert time.monotonic() - started < PROMPT_S
        assert reads >= 1
    finally:
        await _stop(writer)
        await _stop(neighbour)
        await store.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify")
async def test_a_database_file_renamed_into_place_is_watched(db: str, huge_ticks: None) -> None:
    """The watch follows a name, not a file: a WAL written after the file
    under the name was replaced (a restore by rename) still wakes the waiter."""
    from cairnq.store.sqlite.file_watch import watch_database

    wal = db + "-wal"
    with open(wal, "w") as f:
        f.write("")
    watch = watch_database(db)
    assert watch is not None
    try:
        loop = asyncio.get_running_loop()
        with watch.waiting():
            for round_ in range(3):
                # Replaced by rename: the name's arrival is itself news.
                staged = wal + ".new"
                with open(staged, "w") as f:
                    f.write("")
                os.replace(staged, wal)
                await asyncio.sleep(0.05)
                seen = watch.notices
                woken = loop.create_future()
                watch.add(woken)
                with open(wal, "a") as f:  # a write to the file now under the name
                    f.write(f"frame {round_}")
                await asyncio.wait_for(woken, PROMPT_S)
                assert watch.notices > seen
    finally:
        watch.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify")
async def test_a_read_takes_every_queued_event_and_stops_once_the_queue_is_empty(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store reads its watch after each of its own commits: one read
    when that empties the queue (no second read to find it empty), and as
    many as it takes when more events are queued than one read holds."""
    from cairnq.store.sqlite.file_watch import watch_database

    watch = watch_database(db)
    assert watch is not None
    reads = 0
    readv = os.readv

    def counted(fd: int, buffers: Any) -> int:
        nonlocal reads
        if fd == watch._fd:
            reads += 1
        return readv(fd, buffers)

    monkeypatch.setattr(os, "readv", counted)
    folder = os.path.dirname(db)
    try:
        with watch.waiting():
            with open(db + "-wal", "w") as f:  # its name's arrival is news
                f.write("")
            watch.read_own_commit()
            assert reads == 1
            assert watch.own_notices == 1
            # About 190 KiB of events (names that are not the database's,
            # so none of them is news): three reads of 64 KiB and more.
            for i in range(3000):
                open(os.path.join(folder, f"unrelated-{i:06d}-{'x' * 24}"), "w").close()
            reads = 0
            watch.read_own_commit()
            assert reads >= 3
            assert watch.own_notices == 1
            with pytest.raises(BlockingIOError):
                os.read(watch._fd, 4096)  # nothing was left behind
    finally:
        watch.close()
