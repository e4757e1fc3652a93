"""The dashboard over real HTTP: a uvicorn server in the test's loop, httpx as
the browser, a real database of each dialect. Security (auth, CSRF, origin,
read-only, escaping, headers, error pages), the pages' contract, actions and
their audit lines, base path and mounting, the live stream and its hub, and
the CLI's refusals and serving."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("starlette")

import httpx  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.responses import PlainTextResponse  # noqa: E402
from starlette.routing import Mount, Route  # noqa: E402

from cairnq import CairnQ, Task, events  # noqa: E402
from cairnq.cli.main import main as cli_main  # noqa: E402
from cairnq.dashboard import Auth, actions, app  # noqa: E402
from cairnq.dashboard.routes import Dashboard  # noqa: E402

HOSTILE = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
CSP = (
    "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "frame-ancestors 'none'"
)
HTML = {"accept": "text/html"}


async def fail_task(q: CairnQ, task: Task, error: dict[str, Any]) -> Task:
    claimed = await q.store.claim(queues=[task.queue], worker_id="w-test", limit=1)
    assert [t.id for t in claimed] == [task.id]
    return await q.store.fail(task_id=task.id, worker_id="w-test", error=error, retryable=False)


async def finish_task(q: CairnQ, task: Task) -> Task:
    claimed = await q.store.claim(queues=[task.queue], worker_id="w-test", limit=1)
    assert [t.id for t in claimed] == [task.id]
    return await q.store.complete(task_id=task.id, worker_id="w-test", result={"ok": True})


def assert_secure_headers(response: httpx.Response) -> None:
    assert response.headers["content-security-policy"] == CSP
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["referrer-policy"] == "same-origin"


async def start(dashboard_servers: Any, source: Any, **kwargs: Any) -> Any:
    return await dashboard_servers.start(Dashboard(source, **kwargs))


# -- pages ---------------------------------------------------------------------------------


async def test_pages_follow_the_html_contract(backend: Any, dashboard_servers: Any) -> None:
    q = backend.client()
    parent = await q.store.submit(
        name="report.build", payload={"n": 1}, queue="reports", correlation_id="corr-1"
    )
    child = await q.store.submit(
        name="report.part", queue="reports", parent_id=parent.id, root_id=parent.id
    )
    await q.submit("mail.send", {"to": "a@example.com"}, queue="mail")
    served = await start(dashboard_servers, backend.target)
    http = served.http()

    page = await http.get("/")
    assert page.status_code == 200
    assert_secure_headers(page)
    body = page.text
    assert 'id="page" data-page="overview"' in body
    assert 'id="nav-overview"' in body and 'id="nav-tasks"' in body
    assert '<tr data-queue="reports">' in body and '<tr data-queue="mail">' in body
    assert re.search(r'<td class="num" data-status="queued"><a href="/tasks\?queue=reports&amp;'
                     r'status=queued">2</a></td>', body)  # fmt: skip
    assert 'id="total-queued">3<' in body
    assert 'id="throughput-chart"' in body and 'id="workers"' in body and 'id="running"' in body
    assert 'id="live-status"' in body and 'id="updated-at"' in body

    listing = await http.get("/tasks", params={"queue": "reports"})
    assert listing.status_code == 200
    rows = re.findall(r'<tr data-task-id="([^"]+)">', listing.text)
    assert rows == [child.id, parent.id]  # newest first
    assert 'id="filters"' in listing.text and 'id="apply-filters"' in listing.text
    assert 'class="task-link mono" href="/tasks/' + child.id in listing.text
    assert 'id="purge-button"' in listing.text and 'id="next-page"' not in listing.text

    detail = await http.get(f"/tasks/{child.id}")
    assert detail.status_code == 200
    for anchor in (
        'id="task-id"',
        'id="task-status"',
        'id="task-name"',
        'id="task-queue"',
        'id="payload"',
        'id="result"',
        'id="metadata"',
        'id="progress"',
        'id="progress-message"',
        'id="attempts"',
        'id="timestamps"',
        f'id="parent-link" class="mono" href="/tasks/{parent.id}"',
        f'id="root-link" class="mono" href="/tasks/{parent.id}"',
        'id="cancel-button"',
    ):
        assert anchor in detail.text, anchor
    assert 'id="retry-button"' not in detail.text

    none = await http.get("/tasks", params={"queue": "nothing-here"})
    assert 'id="no-tasks"' in none.text

    api = await http.get("/api/overview")
    assert api.json()["totals"]["queued"] == 3
    # a followed task's page asks for its status by primary key
    status = await http.get(f"/api/tasks/{child.id}/status")
    assert status.json() == {"status": "queued"} and status.headers["cache-control"]
    assert (await http.get("/api/tasks/task_00000000000000000000000000/status")).status_code == 404
    assert (await http.get("/api/tasks/not-an-id/status")).status_code == 404
    missing = await http.get("/tasks/task_00000000000000000000000000")
    assert missing.status_code == 404 and 'data-page="error"' in missing.text
    assert_secure_headers(missing)
    assert_secure_headers(await http.get("/static/dashboard.js"))


async def test_pages_and_the_next_page_walk_every_task(
    backend: Any, dashboard_servers: Any
) -> None:
    q = backend.client()
    made = [await q.submit("n", {"i": i}) for i in range(25)]
    http = (await start(dashboard_servers, backend.target)).http()
    first = await http.get("/tasks", params={"limit": "20", "sort": "oldest"})
    ids = re.findall(r'<tr data-task-id="([^"]+)">', first.text)
    assert len(ids) == 20 and 'id="first-page"' not in first.text
    link = re.search(r'id="next-page" class="button" href="([^"]+)"', first.text)
    assert link
    second = await http.get(link.group(1).replace("&amp;", "&"))
    more = re.findall(r'<tr data-task-id="([^"]+)">', second.text)
    assert ids + more == sorted(t.id for t in made)  # id order is creation order
    assert 'id="first-page"' in second.text and 'id="next-page"' not in second.text


async def test_a_bad_filter_is_a_400_page_with_the_message(
    backend: Any, dashboard_servers: Any
) -> None:
    http = (await start(dashboard_servers, backend.target)).http()
    for params, words in [
        ({"status": "bogus"}, "status must be one of"),
        ({"created_from": "yesterday-ish"}, "is not a time"),
        ({"cursor": "!!!"}, "cursor is not valid"),
        ({"limit": "7"}, "limit must be one of"),
        ({"sort": "sideways"}, "sort must be one of"),
    ]:
        response = await http.get("/tasks", params=params)
        assert response.status_code == 400, params
        assert 'id="filter-error"' in response.text and words in response.text
        assert 'id="filters"' in response.text  # the form is still there to fix it
        assert "Traceback" not in response.text


async def test_hostile_text_is_shown_as_text_everywhere(
    backend: Any, dashboard_servers: Any
) -> None:
    q = backend.client()
    task = await q.submit(HOSTILE, {"html": HOSTILE}, queue=HOSTILE, metadata={"m": HOSTILE})
    await fail_task(q, task, {"type": HOSTILE, "message": HOSTILE, "retryable": False,
                              "stack": HOSTILE + "\nline 2"})  # fmt: skip
    http = (await start(dashboard_servers, backend.target)).http()
    pages = [
        await http.get("/"),
        await http.get("/tasks"),
        await http.get(f"/tasks/{task.id}"),
        await http.get("/tasks", params={"queue": HOSTILE}),
        await http.get(f"/tasks/{task.id}/retry"),
        await http.get("/purge", params={"queue": HOSTILE}),
    ]
    for page in pages:
        assert page.status_code == 200, page.url
        assert "<script>alert" not in page.text and "<img src=x" not in page.text, page.url
    detail = pages[2].text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in detail
    assert 'id="error"' in detail and '<dd data-field="type">' in detail
    assert '<dd data-field="stack"><pre>' in detail  # multi-line fields keep their lines
    assert "&lt;script&gt;" in pages[0].text  # the queue name on the overview


async def test_long_texts_are_cut_with_a_download_link(
    backend: Any, dashboard_servers: Any
) -> None:
    q = backend.client()
    payload = {"blob": "é" * 40_000, "tail": "END"}  # 80 KB of UTF-8
    task = await q.submit("big", payload)
    http = (await start(dashboard_servers, backend.target)).http()
    detail = await http.get(f"/tasks/{task.id}")
    shown = re.search(r'<pre id="payload" class="json">(.*?)</pre>', detail.text, re.S)
    assert shown and "END" not in shown.group(1)
    assert 'id="download-payload"' in detail.text
    download = await http.get(f"/tasks/{task.id}/payload.json")
    assert download.status_code == 200
    assert download.headers["content-type"].startswith("application/json")
    assert (
        download.headers["content-disposition"] == f'attachment; filename="{task.id}-payload.json"'
    )
    assert download.headers["x-content-type-options"] == "nosniff"
    assert json.loads(download.content) == payload
    assert (await http.get(f"/tasks/{task.id}/error.json")).status_code == 404  # it has none


async def test_an_unexpected_error_is_a_plain_500_page(
    backend: Any, dashboard_servers: Any
) -> None:
    q = backend.client()

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("secret-internal-detail")

    q.store.browse_queues = broken  # type: ignore[method-assign]
    http = (await start(dashboard_servers, q)).http()  # a client handed in, used as is
    assert (await http.get("/tasks")).status_code == 200
    store_handed_in = (await start(dashboard_servers, backend.store())).http()
    assert (await store_handed_in.get("/tasks")).status_code == 200
    response = await http.get("/")
    assert response.status_code == 500
    assert "secret-internal-detail" not in response.text and "Traceback" not in response.text
    assert 'data-page="error"' in response.text
    assert_secure_headers(response)


# -- actions, CSRF, read-only, audit --------------------------------------------------------


async def test_cancel_and_retry_through_their_confirm_pages_are_audited(
    backend: Any, dashboard_servers: Any, caplog: pytest.LogCaptureFixture
) -> None:
    q = backend.client()
    task = await q.submit("n", {})
    http = (await start(dashboard_servers, backend.target)).http()
    caplog.set_level(logging.INFO, logger="cairnq.dashboard.audit")

    confirm = await http.get(f"/tasks/{task.id}/cancel")
    assert 'data-page="confirm"' in confirm.text and 'id="confirm-submit"' in confirm.text
    token = re.search(r'name="csrf" value="([^"]+)"', confirm.text)
    assert token
    done = await http.post(f"/tasks/{task.id}/cancel", data={"csrf": token.group(1)})
    assert done.status_code == 303
    assert done.headers["location"] == f"/tasks/{task.id}?flash=canceled"
    after = await http.get(done.headers["location"])
    assert 'id="flash"' in after.text and "The task was canceled." in after.text
    assert (await q.get(task.id)).status == "canceled"  # type: ignore[union-attr]

    retry = await http.get(f"/tasks/{task.id}/retry")
    assert 'id="reset-attempt"' in retry.text and 'name="reset_attempt"' in retry.text
    done = await http.post(
        f"/tasks/{task.id}/retry", data={"csrf": token.group(1), "reset_attempt": "1"}
    )
    assert done.headers["location"] == f"/tasks/{task.id}?flash=retried"
    assert (await q.get(task.id)).status == "queued"  # type: ignore[union-attr]

    lines = [r.getMessage() for r in caplog.records if r.name == "cairnq.dashboard.audit"]
    assert lines == [
        f"cancel {task.id} by local from 127.0.0.1: canceled",
        f"retry {task.id} (reset_attempt=True) by local from 127.0.0.1: queued, attempt 0/3",
    ]


async def test_posts_without_the_right_csrf_token_or_origin_are_refused(
    backend: Any, dashboard_servers: Any
) -> None:
    q = backend.client()
    task = await q.submit("n", {})
    served = await start(dashboard_servers, backend.target)
    http = served.http()
    page = await http.get(f"/tasks/{task.id}/cancel")  # sets this browser's CSRF cookie
    token = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert token
    url = f"/tasks/{task.id}/cancel"
    missing = await http.post(url, data={})
    wrong = await http.post(url, data={"csrf": "A" * 43})
    other_site = await http.post(
        url, data={"csrf": token.group(1)}, headers={"origin": "https://evil.example"}
    )
    no_cookie = await served.http().post(url, data={"csrf": token.group(1)})
    for response in (missing, wrong, other_site, no_cookie):
        assert response.status_code == 403
        assert 'data-page="error"' in response.text
    assert "another site" in other_site.text and "security token" in wrong.text
    assert (await q.get(task.id)).status == "queued"  # type: ignore[union-attr]
    same_origin = await http.post(
        url, data={"csrf": token.group(1)}, headers={"origin": served.url}
    )
    assert same_origin.status_code == 303


async def test_read_only_hides_the_actions_and_refuses_them(
    backend: Any, dashboard_servers: Any
) -> None:
    q = backend.client()
    queued = await q.submit("n", {})
    failed = await fail_task(
        q, await q.submit("n", {}, queue="other"), {"type": "E", "message": "m"}
    )
    http = (await start(dashboard_servers, backend.target, read_only=True)).http()
    detail = await http.get(f"/tasks/{queued.id}")
    assert 'id="cancel-button"' not in detail.text
    assert 'id="retry-button"' not in (await http.get(f"/tasks/{failed.id}")).text
    assert 'id="purge-button"' not in (await http.get("/tasks")).text
    token = re.search(r'name="csrf" value="([^"]+)"', detail.text)
    csrf = token.group(1) if token else ""
    refused = [
        ("GET", f"/tasks/{queued.id}/cancel"),
        ("POST", f"/tasks/{queued.id}/cancel"),
        ("POST", f"/tasks/{failed.id}/retry"),
        ("POST", "/purge"),
        ("GET", "/purge"),
    ]
    for method, url in refused:
        response = await http.request(
            method, url, data={"csrf": csrf} if method == "POST" else None
        )
        assert response.status_code == 403, url
        assert "read-only" in response.text
    assert (await q.get(queued.id)).status == "queued"  # type: ignore[union-attr]


async def test_purge_deletes_matching_finished_tasks_in_batches(
    backend: Any, dashboard_servers: Any, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    monkeypatch.setattr(actions, "PURGE_BATCH", 2)
    q = backend.client()
    done_a = [await finish_task(q, await q.submit("n", {}, queue="a")) for _ in range(5)]
    done_b = await finish_task(q, await q.submit("n", {}, queue="b"))
    waiting = await q.submit("n", {}, queue="a")
    http = (await start(dashboard_servers, backend.target)).http()
    caplog.set_level(logging.INFO, logger="cairnq.dashboard.audit")

    listing = await http.get("/tasks", params={"queue": "a"})
    assert 'id="purge-button" class="button danger" href="/purge?queue=a"' in listing.text
    confirm = await http.get("/purge", params={"queue": "a"})
    assert 'name="older_than_ms"' in confirm.text and 'id="confirm"' in confirm.text
    token = re.search(r'name="csrf" value="([^"]+)"', confirm.text)
    assert token
    done = await http.post(
        "/purge", data={"csrf": token.group(1), "queue": "a", "older_than_ms": "0", "status": ""}
    )
    assert done.status_code == 303
    assert done.headers["location"] == "/tasks?queue=a&flash=purged&n=5"
    assert "Deleted 5 finished task(s)." in (await http.get(done.headers["location"])).text
    for task in done_a:
        assert await q.get(task.id) is None
    assert await q.get(done_b.id) is not None and await q.get(waiting.id) is not None
    assert any("purge older_than_ms=0 queue='a'" in r.getMessage() and "deleted 5" in r.getMessage()
               for r in caplog.records)  # fmt: skip

    refused = await http.get("/purge", params={"queue": "a", "root_id": waiting.id})
    assert refused.status_code == 400 and "root_id" in refused.text
    assert (await http.get("/purge", params={"status": "running"})).status_code == 400


# -- authentication ----------------------------------------------------------------------------


async def test_token_auth_by_header_or_login_cookie(backend: Any, dashboard_servers: Any) -> None:
    secret = "s3cret-token-value"
    served = await start(dashboard_servers, backend.target, auth=Auth.token(secret))
    http = served.http()
    for path in ("/", "/tasks", "/api/overview", "/events"):
        response = await http.get(path)
        assert response.status_code == 401, path
    login_page = await http.get("/tasks?queue=x", headers=HTML)
    assert 'data-page="login"' in login_page.text
    assert 'name="next" value="/tasks?queue=x"' in login_page.text
    assert "signed in" not in login_page.text
    assert (await http.get("/static/dashboard.css")).status_code == 200

    bearer = await http.get("/api/overview", headers={"authorization": f"Bearer {secret}"})
    assert bearer.status_code == 200
    assert (await http.get("/", headers={"authorization": "Bearer nope"})).status_code == 401

    csrf = re.search(r'name="csrf" value="([^"]+)"', login_page.text)
    assert csrf
    bad = await http.post("/login", data={"csrf": csrf.group(1), "token": "wrong"})
    assert bad.status_code == 401 and 'id="login-error"' in bad.text
    good = await http.post(
        "/login", data={"csrf": csrf.group(1), "token": secret, "next": "https://evil.example/"}
    )
    assert good.status_code == 303 and good.headers["location"] == "/"  # never off-site
    cookie = good.headers["set-cookie"]
    assert "cairnq_session=" in cookie and secret not in cookie
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    signed_in = await http.get("/tasks")  # the cookie now proves it
    assert signed_in.status_code == 200 and "signed in: token" in signed_in.text


async def test_basic_auth_names_the_user_in_the_audit_log(
    backend: Any, dashboard_servers: Any, caplog: pytest.LogCaptureFixture
) -> None:
    q = backend.client()
    task = await q.submit("n", {})
    served = await start(dashboard_servers, backend.target, auth=Auth.basic("ops", "pw"))
    anonymous = await served.http().get("/")
    assert anonymous.status_code == 401
    assert anonymous.headers["www-authenticate"].startswith("Basic ")
    assert (await served.http(auth=("ops", "wrong")).get("/")).status_code == 401
    http = served.http(auth=("ops", "pw"))
    caplog.set_level(logging.INFO, logger="cairnq.dashboard.audit")
    page = await http.get(f"/tasks/{task.id}/cancel")
    token = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert page.status_code == 200 and token
    assert (
        await http.post(f"/tasks/{task.id}/cancel", data={"csrf": token.group(1)})
    ).status_code == 303
    assert [r.getMessage() for r in caplog.records if r.name == "cairnq.dashboard.audit"] == [
        f"cancel {task.id} by ops from 127.0.0.1: canceled"
    ]


# -- where it is served ------------------------------------------------------------------------


async def test_base_path_prefixes_every_page_and_link(backend: Any, dashboard_servers: Any) -> None:
    q = backend.client()
    task = await q.submit("n", {})
    http = (await start(dashboard_servers, backend.target, base_path="/cairnq")).http()
    assert (await http.get("/")).status_code == 404
    page = await http.get("/cairnq/")
    assert page.status_code == 200
    assert (
        'href="/cairnq/static/dashboard.css"' in page.text
        and 'data-events="/cairnq/events"' in page.text
    )
    assert "Path=/cairnq/" in page.headers["set-cookie"]
    confirm = await http.get(f"/cairnq/tasks/{task.id}/cancel")
    assert f'action="/cairnq/tasks/{task.id}/cancel"' in confirm.text
    token = re.search(r'name="csrf" value="([^"]+)"', confirm.text)
    assert token
    done = await http.post(f"/cairnq/tasks/{task.id}/cancel", data={"csrf": token.group(1)})
    assert done.headers["location"] == f"/cairnq/tasks/{task.id}?flash=canceled"


async def test_mounted_in_a_starlette_app_it_opens_its_client_on_first_use(
    backend: Any, dashboard_servers: Any
) -> None:
    q = backend.client()
    task = await q.submit("n", {"x": 1})
    dashboard = app(backend.target)

    async def home(request: Any) -> PlainTextResponse:
        return PlainTextResponse("host app")

    host = Starlette(routes=[Route("/", home), Mount("/ops/queue", app=dashboard)])
    http = (await dashboard_servers.start(host)).http()
    assert not dashboard.client_open  # the host's lifespan never reaches a mounted app
    assert (await http.get("/")).text == "host app"
    page = await http.get("/ops/queue/tasks")
    assert page.status_code == 200 and dashboard.client_open
    assert f'href="/ops/queue/tasks/{task.id}"' in page.text
    assert 'href="/ops/queue/static/dashboard.css"' in page.text
    assert (await http.get("/ops/queue/static/dashboard.css")).status_code == 200
    await dashboard.aclose()
    assert not dashboard.client_open


async def test_mounted_at_its_own_base_path_the_prefix_counts_once(
    backend: Any, dashboard_servers: Any
) -> None:
    dashboard = app(backend.target, base_path="/cairnq")
    host = Starlette(routes=[Mount("/cairnq", app=dashboard)])
    http = (await dashboard_servers.start(host)).http()
    page = await http.get("/cairnq/tasks")
    assert page.status_code == 200 and 'href="/cairnq/static/dashboard.css"' in page.text
    assert (await http.get("/cairnq/cairnq/tasks")).status_code == 404
    await dashboard.aclose()


# -- live updates ------------------------------------------------------------------------------


async def _next_overview(lines: Any) -> dict[str, Any]:
    async for line in lines:
        if line.startswith("data: "):
            return json.loads(line[6:])  # type: ignore[no-any-return]
    raise AssertionError("the stream ended")


async def _until(predicate: Any, what: str) -> None:
    for _ in range(1000):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def test_events_stream_changes_and_nothing_is_read_while_nobody_listens(
    backend: Any, dashboard_servers: Any
) -> None:
    q = backend.client()
    await q.submit("n", {}, queue="live")
    dashboard = Dashboard(backend.target, watch_poll_ms=100)
    served = await dashboard_servers.start(dashboard)
    http = served.http()
    await http.get("/")  # the client is open; the hub is not
    hub = dashboard.hub
    assert not hub.active and hub.reads == 0

    seen: list[Any] = []
    stop = events.subscribe(seen.append, kinds=["statement"])
    try:
        async with http.stream("GET", "/events") as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            lines = stream.aiter_lines()
            first = await _next_overview(lines)
            assert first["totals"]["queued"] == 1
            assert hub.active and hub.listeners == 1
            async with served.http().stream("GET", "/events") as second:
                await _next_overview(second.aiter_lines())
                assert hub.listeners == 2
            await _until(lambda: hub.listeners == 1, "the second listener to leave")
            assert hub.active
            await q.submit("n", {}, queue="live")
            update = first
            while update["totals"]["queued"] != 2:
                update = await _next_overview(lines)
            assert [row["counts"]["queued"] for row in update["queues"]] == [2]
        await _until(lambda: hub.listeners == 0 and not hub.active, "the hub to stop")
        assert any(e.name.startswith("browse_") for e in seen)  # it did read while watched

        seen.clear()
        reads = hub.reads
        await q.submit("n", {}, queue="live")  # a change nobody watches
        await asyncio.sleep(1.0)  # ten watch polls' worth, had the watch stayed on
        assert [e.name for e in seen] == ["insert_task"]
        assert hub.reads == reads
    finally:
        stop()


async def test_the_hub_reads_at_most_once_per_interval_however_many_signals(backend: Any) -> None:
    """One shared watch signalling every 20 ms, two listeners: the overview
    is read once at the start and then at most once per interval."""
    q = backend.client()
    await q.submit("n", {})
    dashboard = Dashboard(q, watch_poll_ms=20)
    hub = dashboard.hub
    loop = asyncio.get_running_loop()
    async with hub.listen() as one, hub.listen() as two:
        started = loop.time()
        assert await one.get() is not None and await two.get() is not None
        other = backend.client()  # commits from another connection signal too
        for i in range(30):
            await other.submit("n", {"i": i})
        await asyncio.sleep(1.5)
        elapsed = loop.time() - started
        assert 2 <= hub.reads <= 1 + int(elapsed / 1.0) + 1  # ~75 signals arrived meanwhile
    assert not hub.active
    await dashboard.aclose()


# -- the command line --------------------------------------------------------------------------


def test_cli_refuses_other_addresses_without_auth_and_auth_without_secrets(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "t.db")
    for name in ("CAIRNQ_DASHBOARD_TOKEN", "CAIRNQ_DASHBOARD_USER", "CAIRNQ_DASHBOARD_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    assert cli_main(["dashboard", "--db", db, "--host", "0.0.0.0"]) == 2
    assert "refusing to listen on 0.0.0.0 without --auth" in capsys.readouterr().err
    assert cli_main(["dashboard", "--db", db, "--host", "0.0.0.0", "--auth", "token"]) == 2
    assert "CAIRNQ_DASHBOARD_TOKEN" in capsys.readouterr().err
    monkeypatch.setenv("CAIRNQ_DASHBOARD_USER", "ops")
    assert cli_main(["dashboard", "--db", db, "--auth", "basic"]) == 2
    assert "CAIRNQ_DASHBOARD_PASSWORD" in capsys.readouterr().err
    assert cli_main(["dashboard", "--db", db]) == 3  # a SQLite file that does not exist
    assert "no such file" in capsys.readouterr().err


def test_cli_without_the_extra_says_how_to_install_it(tmp_path: Any) -> None:
    code = (
        "import sys; sys.modules['starlette'] = None\n"
        "from cairnq.cli.main import main\n"
        f"sys.exit(main(['dashboard', '--db', {str(tmp_path / 't.db')!r}]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "pip install 'cairnq-fast[dashboard]'" in done.stderr


def test_cli_serves_until_interrupted(backend: Any) -> None:
    asyncio.run(backend.client().submit("n", {}, queue="cli"))
    env = {**os.environ, "CAIRNQ_DASHBOARD_TOKEN": "tok"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "cairnq", "dashboard", "--db", backend.target, "--port", "0",
         "--auth", "token", "--read-only"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)/", banner)
        assert found, banner
        url = f"http://127.0.0.1:{found.group(1)}"
        with httpx.Client(base_url=url, trust_env=False, timeout=30) as http:
            assert http.get("/").status_code == 401
            page = http.get("/", headers={"authorization": "Bearer tok"})
            assert page.status_code == 200 and '<tr data-queue="cli">' in page.text
            with http.stream("GET", "/events", headers={"authorization": "Bearer tok"}) as stream:
                assert stream.status_code == 200
                proc.send_signal(signal.SIGINT)  # a live stream does not hold the stop up
                assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    asyncio.run(backend.aclose())
