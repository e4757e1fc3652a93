"""The dashboard in a real browser (headless Chromium), served by a real
``cairnq dashboard`` process, on both dialects: the overview, the list's
filters, sorts and pages, a task's detail (a long payload cut, downloadable
whole), cancel, retry and purge through the confirm pages, no buttons when
read-only, live counts and a task's page following it while a worker process
drains tasks, and hostile text rendered as text. The HTML contract the selectors rely on is in the
dashboard's design notes (ids, data attributes, routes). See browser_kit.py.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pytest
from browser_kit import (
    LIVE_TIMEOUT_S,
    START_TIMEOUT_S,
    Site,
    chromium,
    screenshots_dir,
    settle_with,
    site,
    wait_until,
)

from cairnq import STATUSES, CairnQ, TaskError

__all__ = ["chromium", "screenshots_dir", "site"]  # fixtures, used by name

BIG = {"pages": [f"page {i}: " + "lorem ipsum " * 10 for i in range(1000)]}  # > 64 KiB
SCRIPT = "<script>alert(1)</script>"
BREAKOUT = '"><img src=x onerror=alert(1)>'


async def quick(ctx: Any, payload: Any) -> Any:
    return {"sent": True, "to": payload.get("to") if isinstance(payload, dict) else None}


async def broken(ctx: Any, payload: Any) -> Any:
    await ctx.progress(0.6, "parsed 6 of 10 lines")
    raise TaskError(
        "line 7: the amount is not a number",
        code="bad_amount",
        details={"line": 7, "field": "amount"},
    )


async def failed_reports(client: CairnQ, count: int) -> list[str]:
    """``count`` report.parse tasks in queue reports, failed for good by ``broken``."""
    bad = [
        (await client.submit("report.parse", {"file": f"r{i}.csv"}, queue="reports",
                             max_attempts=1)).id
        for i in range(count)
    ]  # fmt: skip
    await settle_with(client, "reports", {"report.parse": broken}, bad)
    return bad


async def parent(ctx: Any, payload: Any) -> Any:
    child = await ctx.submit("invoice.child", {"of": ctx.task_id}, queue="children")
    return {"child": child.id, "total": 118.5}


def counts_on_page(site: Site, queue: str) -> dict[str, int]:
    row = f'table#queues tr[data-queue="{queue}"]'
    site.find(row)
    return {status: int(site.text(f'{row} td[data-status="{status}"]')) for status in STATUSES}


def row_ids(site: Site) -> list[str]:
    return [
        str(tr.get_attribute("data-task-id")) for tr in site.all("table#tasks tr[data-task-id]")
    ]


def column(site: Site, cls: str) -> list[str]:
    return [str(td.text).strip() for td in site.all(f"table#tasks tr[data-task-id] td.{cls}")]


def fill(site: Site, **fields: str) -> None:
    """Set the list's filter form (text inputs and selects) and apply it."""
    from selenium.webdriver.support.ui import Select

    for name, value in fields.items():
        element = site.find(f'form#filters [name="{name}"]')
        if element.tag_name == "select":
            Select(element).select_by_value(value)
        else:
            element.clear()
            element.send_keys(value)
    site.go("button#apply-filters", "tasks")


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def definitions(site: Site, css: str) -> dict[str, str]:
    """A ``dl``'s ``dt`` -> ``dd`` texts."""
    dl = site.find(css)
    terms = [str(e.text).strip().lower() for e in dl.find_elements("css selector", "dt")]
    values = [str(e.text).strip() for e in dl.find_elements("css selector", "dd")]
    return dict(zip(terms, values))


# -- 1. overview ----------------------------------------------------------------


def test_overview_shows_each_queues_counts(site: Site) -> None:
    async def seed(client: CairnQ) -> dict[str, str]:
        sent = [
            (await client.submit("email.send", {"to": f"user{i}@example.com"}, queue="emails")).id
            for i in range(4)
        ]
        await failed_reports(client, 2)
        await settle_with(client, "emails", {"email.send": quick}, sent)
        for i in range(3):
            await client.submit("email.send", {"to": f"later{i}@example.com"}, queue="emails")
        for i in range(2):
            await client.submit("report.build", {"month": f"2026-{i + 1:02}"}, queue="reports")
        dropped = await client.submit("report.build", {"month": "2025-12"}, queue="reports")
        await client.cancel(dropped.id)
        held = await client.submit("job.hold", {"video": "intro.mp4"}, queue="media")
        return {"held": held.id}

    ids = site.db(seed)
    site.start_worker(("media",))

    async def held_running(client: CairnQ) -> bool:
        task = await client.get(ids["held"])
        return task is not None and task.status == "running" and task.progress is not None

    wait_until(lambda: site.db(held_running), START_TIMEOUT_S, "the worker to hold a task")

    site.open("/", "overview")
    expected = {
        "emails": {"queued": 3, "succeeded": 4},
        "reports": {"queued": 2, "failed": 2, "canceled": 1},
        "media": {"running": 1},
    }
    for queue, counts in expected.items():
        assert counts_on_page(site, queue) == {s: counts.get(s, 0) for s in STATUSES}, queue
        assert site.all(f'table#queues tr[data-queue="{queue}"] td.oldest-age')
    stats = site.db(lambda client: client.stats())
    for status in STATUSES:
        in_db = sum(per_queue.get(status, 0) for per_queue in stats.values())
        assert int(site.text(f"span#total-{status}")) == in_db, status
    assert site.all("svg#throughput-chart title"), "one title per bar"
    assert site.all("table#workers tr[data-worker-id]")
    assert site.find(f'table#running tr[data-task-id="{ids["held"]}"]')
    assert site.find("span#updated-at").text.strip()
    site.screenshot("overview")

    site.go('table#queues tr[data-queue="reports"] a', "tasks")
    assert set(column(site, "queue")) == {"reports"}
    assert len(row_ids(site)) == 5


# -- 2. list, filters, pages -----------------------------------------------------


def test_list_filters_narrow_the_rows_and_pages_follow(site: Site) -> None:
    async def seed(client: CairnQ) -> list[str]:
        await failed_reports(client, 2)
        for i in range(25):
            await client.submit("email.send", {"to": f"user{i}@example.com"}, queue="emails")
        for i in range(5):
            await client.submit("report.build", {"month": i + 1}, queue="reports")
        return [task.id for task in await client.list(limit=1000)]

    every = site.db(seed)
    assert len(every) == 32

    site.open("/tasks", "tasks")
    newest = row_ids(site)
    assert sorted(newest) == sorted(every)
    site.screenshot("list")
    fill(site, sort="oldest")
    assert row_ids(site) == newest[::-1]

    fill(site, queue="reports")
    assert set(column(site, "queue")) == {"reports"} and len(row_ids(site)) == 7
    fill(site, status="failed")
    assert set(column(site, "status")) == {"failed"} and len(row_ids(site)) == 2
    fill(site, queue="", status="", name="email.send")
    assert set(column(site, "name")) == {"email.send"} and len(row_ids(site)) == 25
    fill(site, name="no.such.task")
    assert site.find("p#no-tasks") and not row_ids(site)

    fill(site, name="", created_from="last tuesday")
    assert "created_from" in site.text("div#filter-error")
    assert site.find("form#filters") and not row_ids(site)
    assert http_status(site.driver.current_url) == 400

    site.open("/tasks?limit=20", "tasks")
    first = row_ids(site)
    assert len(first) == 20 and site.absent("a#first-page")
    site.go("a#next-page", "tasks")
    site.find("a#first-page")
    second = row_ids(site)
    assert len(second) == 12 and site.absent("a#next-page")
    assert sorted(first + second) == sorted(every)
    site.go("a#first-page", "tasks")
    assert row_ids(site) == first


# -- 3. detail -------------------------------------------------------------------


def test_task_detail_shows_payload_result_and_error(site: Site) -> None:
    payload = {"invoice": 42, "lines": [{"sku": "A-1", "amount": "12,50"}], "note": "hello"}

    async def seed(client: CairnQ) -> dict[str, str]:
        bad = await client.submit(
            "invoice.import", payload, queue="billing", max_attempts=1,
            metadata={"tenant": "acme"},
        )  # fmt: skip
        top = await client.submit("invoice.total", {"invoice": 42}, queue="billing")
        await settle_with(
            client, "billing", {"invoice.import": broken, "invoice.total": parent}, [bad.id, top.id]
        )
        done = await client.get(top.id)
        assert done is not None and done.result is not None
        big = await client.submit("invoice.archive", BIG, queue="archive")
        return {"bad": bad.id, "top": top.id, "child": done.result["child"], "big": big.id}

    ids = site.db(seed)
    bad = site.task(ids["bad"])

    site.open("/tasks?queue=billing", "tasks")
    site.go(f'table#tasks tr[data-task-id="{ids["bad"]}"] a.task-link', "task")
    assert ids["bad"] in site.text("#task-id")
    assert site.text("#task-status") == "failed"
    assert site.text("#task-name") == "invoice.import"
    assert site.text("#task-queue") == "billing"
    assert json.loads(site.text("pre#payload")) == payload
    assert json.loads(site.text("pre#metadata"))["tenant"] == "acme"
    error = definitions(site, "section#error dl")
    assert error["type"] == "TaskError"
    assert error["message"] == "line 7: the amount is not a number"
    assert error["code"] == "bad_amount"
    assert error["retryable"].lower() in ("false", "no")
    assert site.text("#attempts").replace(" ", "") == "1/1"
    assert float(site.find("progress#progress").get_attribute("value")) in (0.6, 60.0)
    assert site.text("#progress-message") == "parsed 6 of 10 lines"
    stamps = {e.get_attribute("data-ms") for e in site.all("dl#timestamps [data-ms]")}
    assert {str(bad.created_at_ms), str(bad.completed_at_ms)} <= stamps
    assert site.find("a#retry-button") and site.absent("a#cancel-button")
    site.screenshot("task")

    site.open(f"/tasks/{ids['top']}", "task")
    assert json.loads(site.text("pre#result")) == {"child": ids["child"], "total": 118.5}
    assert site.text("#task-status") == "succeeded"

    site.open(f"/tasks/{ids['child']}", "task")
    site.go("a#parent-link", "task")
    assert ids["top"] in site.text("#task-id")
    site.open(f"/tasks/{ids['child']}", "task")
    assert site.find("a#root-link").get_attribute("href").endswith(f"/tasks/{ids['top']}")

    site.open(f"/tasks/{ids['big']}", "task")
    shown = site.text("pre#payload")
    assert shown.startswith('{\n  "pages": [') and len(shown) < len(json.dumps(BIG))
    link = site.find("a#download-payload").get_attribute("href")
    assert link.endswith(f"/tasks/{ids['big']}/payload.json")
    with urllib.request.urlopen(link, timeout=10) as reply:
        assert "attachment" in reply.headers["Content-Disposition"]
        assert json.loads(reply.read()) == BIG


# -- 4. actions ------------------------------------------------------------------


def test_cancel_and_retry_through_the_confirm_pages(site: Site) -> None:
    async def seed(client: CairnQ) -> dict[str, str]:
        bad = await failed_reports(client, 2)
        waiting = await client.submit("email.send", {"to": "a@example.com"}, queue="emails")
        return {"waiting": waiting.id, "reset": bad[0], "keep": bad[1]}

    ids = site.db(seed)

    site.open(f"/tasks/{ids['waiting']}", "task")
    site.go("a#cancel-button", "confirm")
    assert site.find("form#confirm input[name=csrf]").get_attribute("value")
    site.screenshot("confirm-cancel")
    site.go("button#confirm-submit", "task")
    site.find("div#flash")
    assert site.text("#task-status") == "canceled"
    assert site.task(ids["waiting"]).status == "canceled"

    site.open(f"/tasks/{ids['reset']}", "task")
    site.go("a#retry-button", "confirm")
    checkbox = site.find("input#reset-attempt[name=reset_attempt]")
    if not checkbox.is_selected():
        checkbox.click()
    site.screenshot("confirm-retry")
    site.go("button#confirm-submit", "task")
    site.find("div#flash")
    assert site.text("#task-status") == "queued"
    task = site.task(ids["reset"])
    assert (task.status, task.attempt, task.error) == ("queued", 0, None)

    site.open(f"/tasks/{ids['keep']}/retry", "confirm")
    checkbox = site.find("input#reset-attempt[name=reset_attempt]")
    if checkbox.is_selected():
        checkbox.click()
    site.go("button#confirm-submit", "task")
    assert site.text("#task-status") == "queued"
    task = site.task(ids["keep"])
    assert (task.status, task.attempt) == ("queued", 1)


# -- purge, read-only -----------------------------------------------------------


def test_purge_by_filter_through_its_confirm_page(site: Site) -> None:
    async def seed(client: CairnQ) -> None:
        await failed_reports(client, 3)
        sent = [(await client.submit("email.send", {"i": i}, queue="emails")).id for i in range(2)]
        await settle_with(client, "emails", {"email.send": quick}, sent)
        for i in range(2):
            await client.submit("report.build", {"month": i + 1}, queue="reports")

    site.db(seed)
    site.open("/tasks?queue=reports&status=failed", "tasks")
    assert len(row_ids(site)) == 3

    site.go("a#purge-button", "confirm")
    shown = site.text("#purge-filter")
    assert "reports" in shown and "failed" in shown
    site.screenshot("confirm-purge")
    site.go("button#confirm-submit", "tasks")  # the default: finished more than a day ago
    assert "0" in site.text("div#flash") and len(row_ids(site)) == 3

    site.go("a#purge-button", "confirm")
    older = site.find("input[name=older_than_ms]")
    older.clear()
    older.send_keys("0")
    site.go("button#confirm-submit", "tasks")
    assert "3" in site.text("div#flash")
    assert site.find("p#no-tasks") and not row_ids(site)
    stats = site.db(lambda client: client.stats())
    assert (stats["reports"]["failed"], stats["reports"]["queued"]) == (0, 2)
    assert stats["emails"]["succeeded"] == 2


def test_read_only_shows_no_action_buttons(site: Site) -> None:
    async def seed(client: CairnQ) -> dict[str, str]:
        bad = await client.submit("report.parse", {}, queue="reports", max_attempts=1)
        await settle_with(client, "reports", {"report.parse": broken}, [bad.id])
        waiting = await client.submit("email.send", {}, queue="emails")
        return {"bad": bad.id, "waiting": waiting.id}

    ids = site.db(seed)
    site.dashboard_args = ("--read-only",)
    site.open("/tasks", "tasks")
    assert len(row_ids(site)) == 2 and site.absent("a#purge-button")
    site.open(f"/tasks/{ids['bad']}", "task")
    assert site.text("#task-status") == "failed" and site.absent("a#retry-button")
    site.open(f"/tasks/{ids['waiting']}", "task")
    assert site.text("#task-status") == "queued" and site.absent("a#cancel-button")


# -- 5. live ---------------------------------------------------------------------


def test_overview_counts_follow_a_worker_without_reload(site: Site) -> None:
    n = 6

    async def seed(client: CairnQ) -> None:
        for i in range(n):
            await client.submit("job.quick", {"n": i}, queue="live")

    site.db(seed)
    site.open("/", "overview")
    queued_cell = site.find('table#queues tr[data-queue="live"] td[data-status="queued"]')
    assert counts_on_page(site, "live") == {s: (n if s == "queued" else 0) for s in STATUSES}
    site.wait_text("span#live-status", "live")
    site.driver.execute_script("window.__noReload = 1;")
    before = site.text("span#updated-at")

    site.start_worker(("live",))
    row = 'table#queues tr[data-queue="live"]'
    site.wait_text(f'{row} td[data-status="succeeded"]', str(n), LIVE_TIMEOUT_S)
    site.wait_text(f'{row} td[data-status="queued"]', "0", LIVE_TIMEOUT_S)

    assert site.driver.execute_script("return window.__noReload;") == 1, "the page reloaded"
    assert queued_cell.text.strip() == "0", "the same cell, rewritten in place"
    assert site.text("span#total-succeeded") == str(n)
    assert site.text("span#updated-at") != before
    stats = site.db(lambda client: client.stats("live"))
    assert stats["live"].get("succeeded", 0) == n


def test_a_task_page_follows_its_task_into_running(site: Site) -> None:
    held = site.db(lambda client: client.submit("job.hold", {"video": "intro.mp4"}, queue="slow"))
    site.open(f"/tasks/{held.id}", "task")
    assert site.text("#task-status") == "queued"
    site.start_worker(("slow",))
    site.wait_text("#task-status", "running", LIVE_TIMEOUT_S)
    site.wait_text("#progress-message", "step 4 of 10", LIVE_TIMEOUT_S)


def test_a_task_page_sees_its_task_finish_between_snapshots(site: Site) -> None:
    # The last of three quick tasks run one at a time starts and finishes
    # within the second after the first one's claim: no snapshot need ever
    # show it running, and still its page must end up saying it succeeded.
    async def seed(client: CairnQ) -> str:
        return [(await client.submit("job.quick", {"n": i}, queue="fast")).id for i in range(3)][-1]

    last = site.db(seed)
    site.open(f"/tasks/{last}", "task")
    assert site.text("#task-status") == "queued"
    site.start_worker(("fast",), concurrency=1)

    async def finished(client: CairnQ) -> bool:
        task = await client.get(last)
        return task is not None and task.status == "succeeded"

    wait_until(lambda: site.db(finished), LIVE_TIMEOUT_S, "the worker to run the tasks")
    site.wait_text("#task-status", "succeeded", LIVE_TIMEOUT_S)


# -- 6. hostile text -------------------------------------------------------------


def assert_inert(site: Site) -> None:
    """Nothing the hostile texts carry became markup or ran."""
    from selenium.common.exceptions import NoAlertPresentException

    with pytest.raises(NoAlertPresentException):
        _ = site.driver.switch_to.alert
    injected = site.driver.execute_script(
        "return [document.querySelectorAll('img[src=\"x\"], [onerror]').length,"
        " [...document.scripts].filter(s => s.text.includes('alert(1)')).length];"
    )
    assert injected == [0, 0], site.driver.current_url


def test_hostile_text_renders_as_text(site: Site) -> None:
    async def raise_hostile(ctx: Any, payload: Any) -> Any:
        raise TaskError(f"{SCRIPT} {BREAKOUT}", code="hostile")

    async def seed(client: CairnQ) -> dict[str, str]:
        bad = await client.submit(BREAKOUT, {"why": SCRIPT}, queue="xss", max_attempts=1)
        await settle_with(client, "xss", {BREAKOUT: raise_hostile}, [bad.id])
        named = await client.submit(SCRIPT, {"text": SCRIPT, "other": BREAKOUT}, queue="xss")
        await client.submit(SCRIPT, {"text": SCRIPT}, queue=BREAKOUT)
        return {"bad": bad.id, "named": named.id}

    ids = site.db(seed)

    site.open("/", "overview")
    assert_inert(site)
    assert BREAKOUT in site.text("table#queues")

    site.open("/tasks", "tasks")
    assert_inert(site)
    names = column(site, "name")
    assert names.count(SCRIPT) == 2 and names.count(BREAKOUT) == 1

    site.open(f"/tasks/{ids['named']}", "task")
    assert_inert(site)
    assert site.text("#task-name") == SCRIPT
    assert json.loads(site.text("pre#payload")) == {"text": SCRIPT, "other": BREAKOUT}

    site.open(f"/tasks/{ids['bad']}", "task")
    assert_inert(site)
    assert site.text("#task-name") == BREAKOUT
    assert definitions(site, "section#error dl")["message"] == f"{SCRIPT} {BREAKOUT}"
    assert json.loads(site.text("pre#payload")) == {"why": SCRIPT}
    site.screenshot("hostile-task")

    site.open(f"/tasks?name={urllib.parse.quote(SCRIPT)}", "tasks")
    assert_inert(site)
    assert site.find('form#filters [name="name"]').get_attribute("value") == SCRIPT
    site.go(f'table#tasks tr[data-task-id="{ids["named"]}"] a.task-link', "task")
    site.go("a#cancel-button", "confirm")
    assert_inert(site)
