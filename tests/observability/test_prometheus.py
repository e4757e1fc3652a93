"""``/metrics`` and ``/healthz`` served over real HTTP by
``cairnq.observability.serve_metrics``, read with prometheus_client's own
parser: counters that match a drain's outcomes, the documented metrics and
labels, no task id as a label, the default bind address, and a health check
that follows the database away and back.
"""

from __future__ import annotations

import asyncio
import os
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cairnq import CairnQ
from cairnq.observability import serve_metrics
from cairnq.observability.metrics import METRICS, label_name, prometheus_name

FAST = {"poll_interval_ms": 20, "retry_backoff_ms": 0}


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def fetch(server: Any, path: str) -> tuple[int, str]:
    return await asyncio.to_thread(get, f"http://127.0.0.1:{server.port}{path}")


def samples(text: str) -> dict[str, list[Any]]:
    """Sample lists by family name (counters without their ``_total``)."""
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def value(families: dict[str, list[Any]], sample: str, **labels: str) -> float:
    for s in (s for listed in families.values() for s in listed):
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
            return float(s.value)
    raise AssertionError(f"no sample {sample} {labels}")


async def eventually(pred: Any, timeout: float = 15.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while not (result := await pred()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not met in time")
        await asyncio.sleep(0.05)
    return result


async def test_task_counters_match_a_drain(backend) -> None:
    """200 tasks: 150 succeed, 30 fail twice (one retry, then failed), 20 are
    canceled while running."""
    q: CairnQ = backend.client()
    w = backend.worker(concurrency=32, lease_ms=10_000, heartbeat_interval_ms=50, **FAST)
    started = 0

    @w.task("ok")
    async def ok(ctx: Any, payload: Any) -> None:
        return None

    @w.task("bad")
    async def bad(ctx: Any, payload: Any) -> None:
        raise ValueError("always")

    @w.task("slow")
    async def slow(ctx: Any, payload: Any) -> None:
        nonlocal started
        started += 1
        await asyncio.sleep(0.2)  # a few heartbeat rounds (every 50 ms) while held
        deadline = time.monotonic() + 10
        while not await ctx.canceled() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    slow_ids = [(await q.submit("slow", {"i": i}, queue="default")).id for i in range(20)]
    for i in range(150):
        await q.submit("ok", {"i": i})
    for i in range(30):
        await q.submit("bad", {"i": i}, max_attempts=2)

    server = serve_metrics(w, port=0, sample_interval_s=0.2)
    try:
        async with w.background():
            deadline = time.monotonic() + 20
            while started < 20 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            for task_id in slow_ids:
                await q.cancel(task_id)

            async def drained() -> bool:
                counts = (await q.stats()).get("default", {})
                return (
                    counts.get("succeeded", 0) == 150
                    and counts.get("failed", 0) == 30
                    and counts.get("canceled", 0) == 20
                )

            await eventually(drained, what="the drain")

            async def settled_in_metrics() -> dict[str, list[Any]] | None:
                status, text = await fetch(server, "/metrics")
                assert status == 200
                families = samples(text)
                done = value(families, "cairnq_tasks_canceled_total", cairnq_task_name="slow")
                return families if done == 20 else None

            families = await eventually(settled_in_metrics, what="the canceled count")
    finally:
        server.close()

    def count(metric: str, name: str) -> float:
        return value(
            families, metric, cairnq_task_name=name,
            messaging_destination_name="default", messaging_system="cairnq",
        )  # fmt: skip

    assert count("cairnq_tasks_succeeded_total", "ok") == 150
    assert count("cairnq_tasks_claimed_total", "ok") == 150
    assert count("cairnq_tasks_retried_total", "bad") == 30
    assert count("cairnq_tasks_failed_total", "bad") == 30
    assert count("cairnq_tasks_claimed_total", "bad") == 60
    assert count("cairnq_tasks_canceled_total", "slow") == 20
    assert count("cairnq_tasks_claimed_total", "slow") == 20
    assert count("cairnq_tasks_failed_total", "ok") == 0
    assert count("cairnq_tasks_lease_lost_total", "ok") == 0
    # Every settlement was timed; every claim's wait too.
    assert count("cairnq_task_run_duration_seconds_count", "ok") == 150
    assert count("cairnq_task_run_duration_seconds_count", "bad") == 60
    assert count("cairnq_task_wait_duration_seconds_count", "ok") == 150
    assert value(families, "cairnq_claims_total") >= 1
    assert value(families, "cairnq_heartbeat_rounds_total") >= 1
    # Queue depth, from stats() (sampled before or after the end).
    assert any(s.name == "cairnq_queue_depth" for s in families["cairnq_queue_depth"])


async def test_every_listed_metric_exists_with_its_labels_and_no_task_id(backend) -> None:
    q: CairnQ = backend.client()
    w = backend.worker(**FAST)

    @w.task("ok")
    async def ok(ctx: Any, payload: Any) -> None:
        return None

    ids = [(await q.submit("ok", {"secret": "payload-value"})).id for _ in range(5)]
    server = serve_metrics(w, port=0, sample_interval_s=0.2, statements=True)
    try:
        assert server.host == "127.0.0.1"  # the default: this machine only
        async with w.background():
            for task_id in ids:
                await q.wait(task_id, timeout_ms=8_000, poll_ms=10)

            async def sampled() -> str | None:
                status, text = await fetch(server, "/metrics")
                done = [
                    s for s in samples(text)["cairnq_queue_depth"]
                    if s.labels.get("cairnq_task_status") == "succeeded" and s.value == 5
                ]  # fmt: skip
                return text if done else None

            text = await eventually(sampled, what="a queue depth sample")
    finally:
        server.close()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for metric in METRICS:
        name = prometheus_name(metric)
        assert name in families, name
        family = families[name]
        assert family.type == metric.kind, name
        expected = {label_name(a) for a in metric.labels}
        for s in family.samples:
            assert set(s.labels) - {"le"} == expected, (name, s.labels)
            assert s.labels.get("messaging_system") == "cairnq"
    for task_id in ids:
        assert task_id not in text
    assert "payload-value" not in text
    depth = {
        (s.labels["messaging_destination_name"], s.labels["cairnq_task_status"]): s.value
        for s in families["cairnq_queue_depth"].samples
    }
    assert depth[("default", "succeeded")] == 5
    statements = families["cairnq_store_statements"].samples
    assert any(s.labels["db_system_name"] == backend.dialect for s in statements)


async def test_healthz_is_503_before_the_worker_runs_and_unknown_paths_404(backend) -> None:
    w = backend.worker(**FAST)
    server = serve_metrics(w, port=0, sample_interval_s=0.2)
    try:
        status, body = await fetch(server, "/healthz")
        assert (status, body.strip()) == (503, "worker not running")
        assert (await fetch(server, "/nope"))[0] == 404
        async with w.background():

            async def healthy() -> bool:
                return (await fetch(server, "/healthz")) == (200, "ok\n")

            await eventually(healthy, what="healthy")
        status, body = await fetch(server, "/healthz")
        assert status == 503
    finally:
        server.close()


def _block_postgres(database: str, allow: bool) -> None:
    import psycopg

    from backends import ADMIN_DSN

    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        flag = "true" if allow else "false"
        # Identifiers cannot be bound; the name is the fixture's own
        # (cairnq_test_ and hex), quoted.
        conn.execute(f'alter database "{database}" allow_connections {flag}')
        if not allow:
            conn.execute(
                "select pg_terminate_backend(pid) from pg_stat_activity "
                "where datname = %s and pid <> pg_backend_pid()",
                [database],
            )


def _take_away(backend: Any) -> Any:
    if backend.dialect == "postgres":
        return lambda: _block_postgres(backend.database, False)
    return lambda: os.rename(backend.target, backend.target + ".away")


def _bring_back(backend: Any) -> Any:
    if backend.dialect == "postgres":
        return lambda: _block_postgres(backend.database, True)
    return lambda: os.rename(backend.target + ".away", backend.target)


async def test_healthz_follows_the_database_away_and_back(backend) -> None:
    """PostgreSQL: the database refuses connections and its sessions are
    ended, then it allows them again. SQLite: the file is moved away from its
    path (the worker's open connection would go on writing a file nobody else
    sees), then moved back."""
    w = backend.worker(**FAST)
    server = serve_metrics(w, port=0, sample_interval_s=0.2)

    async def health_is(code: int) -> str | None:
        status, body = await fetch(server, "/healthz")
        return body if status == code else None

    try:
        async with w.background():
            await eventually(lambda: health_is(200), what="healthy at first")
            away, back = _take_away(backend), _bring_back(backend)
            await asyncio.to_thread(away)
            try:
                body = await eventually(lambda: health_is(503), what="503 while away")
                assert body.startswith("store"), body
            finally:
                await asyncio.to_thread(back)
            await eventually(lambda: health_is(200), timeout=30, what="200 once back")
    finally:
        server.close()


async def test_a_cancel_that_lands_as_a_sample_finishes_still_ends_the_sampler(backend) -> None:
    """The queue-depth sampler runs beside the worker, which cancels it on
    its way out. A cancellation that arrived just as a stats() read finished
    was lost (asyncio.wait_for on 3.10 and 3.11 hands back the result
    instead), and the sampler went on sampling: the worker's run() never
    returned (seen in CI as a CLI worker that did not exit after SIGTERM)."""
    from cairnq.observability.recorder import Recorder

    w = backend.worker()
    recorder = Recorder(w, sample_interval_s=0.01)
    store = w.store
    reads = 0
    sampler: asyncio.Future[None] | None = None
    real_stats = store.stats

    async def stats_cancelled_as_it_finishes() -> Any:
        nonlocal reads
        reads += 1
        result = await real_stats()
        if reads == 1:
            assert sampler is not None
            sampler.cancel()  # lands while this read is returning its value
        return result

    store.stats = stats_cancelled_as_it_finishes  # type: ignore[method-assign]
    sampler = asyncio.ensure_future(recorder.sample(w))
    try:
        done, _ = await asyncio.wait({sampler}, timeout=5)
        assert sampler in done, f"the sampler went on after its cancellation ({reads} reads)"
        assert sampler.cancelled()
        assert reads == 1
    finally:
        recorder.stop()
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)
        await store.close()


async def test_a_stats_read_that_hangs_is_reported_and_left_behind(backend) -> None:
    """A stats() read that does not answer within the sampler's timeout (1 s
    at least) is cancelled and reported on /healthz as timed out; the sampler
    goes on, and its own cancellation still ends it."""
    from cairnq.observability.recorder import Recorder

    w = backend.worker()
    recorder = Recorder(w, sample_interval_s=0.01)
    never = asyncio.Event()
    reads: list[asyncio.Task[Any] | None] = []

    async def stats_that_hangs() -> Any:
        reads.append(asyncio.current_task())
        await never.wait()

    w.store.stats = stats_that_hangs  # type: ignore[method-assign]
    sampler = asyncio.ensure_future(recorder.sample(w))
    try:
        await eventually(lambda: _async(recorder.sample_error == "stats() timed out"), what="a timed-out sample")
        first = reads[0]
        assert first is not None and first.cancelled()  # the hung read was not left running
        sampler.cancel()
        done, _ = await asyncio.wait({sampler}, timeout=5)
        assert sampler in done and sampler.cancelled()
    finally:
        recorder.stop()
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)
        await w.store.close()


async def _async(value: Any) -> Any:
    return value
