"""The dashboard's browser tests' kit: headless Chromium through Selenium, the
dashboard and workers as real subprocesses, a database per test, waits with
explicit timeouts, and screenshots.

* Chromium and its driver are Debian's (/usr/bin/chromium, /usr/bin/chromedriver;
  scripts/env.sh installs them). The driver's path is given explicitly and
  ``SE_OFFLINE=1`` is set, so Selenium never fetches a browser or driver.
  Without them the tests skip, unless ``CAIRNQ_REQUIRE_BROWSER`` is set
  (scripts/test.sh sets it): then they fail.
* One browser per test module (it starts in about a second, but twice per test
  adds up on a 2-core host); each test gets its own database (a SQLite file,
  or a brand-new PostgreSQL database) and its own dashboard process on it.
* Screenshots go to ``$CAIRNQ_SCREENSHOTS`` (default: a tmp dir of the run):
  ``dashboard-<page>.png`` for SQLite, ``<dialect>/dashboard-<page>.png`` else.
"""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from backends import DIALECTS, Backend, make_backend
from processes import die_with_parent

from cairnq import CairnQ, Task, Worker

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
BROWSER_ARGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-dev-shm-usage",
)
WIDTH, HEIGHT = 1280, 900

PAGE_TIMEOUT_S = 20.0  # a page load or an element showing up
LIVE_TIMEOUT_S = 30.0  # a live update after a worker drained tasks (refresh <= 1/s)
START_TIMEOUT_S = 30.0  # a subprocess answering (imports on a busy 2-core host)

T = TypeVar("T")


# -- the browser ---------------------------------------------------------------


def browser_missing() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            return f"{path} is missing (apt-get install chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    return None


def start_chromium() -> Any:
    os.environ["SE_OFFLINE"] = "1"  # selenium-manager must never download anything
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for arg in (*BROWSER_ARGS, f"--window-size={WIDTH},{HEIGHT}"):
        options.add_argument(arg)
    options.binary_location = CHROMIUM
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(PAGE_TIMEOUT_S)
    return driver


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """One headless Chromium for the module's tests."""
    reason = browser_missing()
    if reason is not None:
        if os.environ.get("CAIRNQ_REQUIRE_BROWSER"):
            pytest.fail(f"CAIRNQ_REQUIRE_BROWSER is set but {reason}")
        pytest.skip(reason)
    driver = start_chromium()
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="session")
def screenshots_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wanted = os.environ.get("CAIRNQ_SCREENSHOTS")
    path = Path(wanted) if wanted else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


# -- processes -----------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(pred: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll ``pred`` until it returns something truthy (returned), or fail."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class Process:
    """A ``python -m cairnq ...`` subprocess, its output in a log file; it dies
    with the test run and is stopped by pid (SIGTERM, then SIGKILL)."""

    def __init__(self, label: str, args: list[str], cwd: Path) -> None:
        self.label = label
        self.log = cwd / f"{label}.log"
        with open(self.log, "w") as sink:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cairnq", *args],
                cwd=str(cwd),
                stdout=sink,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,  # noqa: PLW1509 - as tests/processes.py
            )

    def output(self) -> str:
        return self.log.read_text()[-4000:] if self.log.exists() else ""

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(
                f"{self.label} exited with {self.proc.returncode}:\n{self.output()}"
            )

    def stop(self, *, kill: bool = False, timeout: float = 10.0) -> int | None:
        if self.proc.poll() is None:
            if kill:
                self.proc.kill()
            else:
                self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            return None


class Dashboard(Process):
    """``cairnq dashboard --db TARGET --port FREE`` answering on 127.0.0.1."""

    def __init__(self, target: str, cwd: Path, extra: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        args = ["dashboard", "--db", target, "--port", str(self.port), *extra]
        super().__init__(f"dashboard-{self.port}", args, cwd)
        wait_until(self._answers, START_TIMEOUT_S, f"the dashboard on {self.base}")

    def _answers(self) -> bool:
        self.check_alive()
        try:
            with urllib.request.urlopen(self.base + "/", timeout=2) as reply:
                return bool(reply.status)
        except urllib.error.HTTPError:
            return True  # it answers (an error page is still an answer)
        except OSError:
            return False

    def url(self, path: str) -> str:
        return self.base + path


HANDLERS = '''
"""Handlers of the dashboard browser tests' worker process."""
import asyncio

from cairnq import TaskError


def setup(worker):
    @worker.task("job.quick")
    async def quick(ctx, payload):
        await asyncio.sleep(0.02)
        return {"done": payload}

    @worker.task("job.hold")
    async def hold(ctx, payload):
        # Stays running (with progress) until the process is killed.
        await ctx.progress(0.4, "step 4 of 10")
        await asyncio.sleep(3600)

    @worker.task("job.broken")
    async def broken(ctx, payload):
        raise TaskError("the input was not usable", code="bad_input")
'''


class WorkerProcess(Process):
    """``cairnq --db TARGET worker handlers:setup`` on ``queues``, in another
    process (the handlers above)."""

    def __init__(self, target: str, cwd: Path, queues: tuple[str, ...], concurrency: int = 4):
        (cwd / "dash_handlers.py").write_text(textwrap.dedent(HANDLERS))
        args = [
            "--db", target, "worker", "dash_handlers:setup", "--queues", ",".join(queues),
            "--concurrency", str(concurrency), "--poll-interval-ms", "50",
        ]  # fmt: skip
        super().__init__(f"worker-{'-'.join(queues)}", args, cwd)


# -- the database --------------------------------------------------------------


def client_for(target: str) -> CairnQ:
    if target.startswith(("postgres://", "postgresql://")):
        return CairnQ.postgres(target, min_size=1, max_size=2)
    return CairnQ.sqlite(target)


def with_client(target: str, work: Callable[[CairnQ], Awaitable[T]]) -> T:
    """``await work(client)`` on a client of its own, in an event loop of its own
    (the tests themselves are plain functions driving the browser)."""

    async def run() -> T:
        async with client_for(target) as client:
            return await work(client)

    return asyncio.run(run())


async def settle_with(
    client: CairnQ, queue: str, handlers: dict[str, Any], task_ids: list[str]
) -> list[Task]:
    """Run ``handlers`` in an in-process worker on ``queue`` until every task of
    ``task_ids`` is finished; the finished tasks."""
    worker = Worker(client.store, [queue], poll_interval_ms=20, retry_backoff_ms=0, concurrency=4)
    for name, fn in handlers.items():
        worker.register(name, fn)
    running = asyncio.create_task(worker.run())
    try:
        return [
            await client.wait(task_id, timeout_ms=20_000, poll_ms=10, max_poll_ms=50)
            for task_id in task_ids
        ]
    finally:
        worker.stop()
        await running


@dataclass
class Site:
    """One test's database, the dashboard on it, and the shared browser."""

    backend: Backend
    cwd: Path
    driver: Any
    shots: Path
    dashboard_args: tuple[str, ...] = ()  # e.g. ("--read-only",): set before the first open
    _dashboard: Dashboard | None = None
    _processes: list[Process] = field(default_factory=list)

    @property
    def target(self) -> str:
        return self.backend.target

    @property
    def dialect(self) -> str:
        return self.backend.dialect

    def db(self, work: Callable[[CairnQ], Awaitable[T]]) -> T:
        return with_client(self.target, work)

    def task(self, task_id: str) -> Task:
        found = self.db(lambda client: client.get(task_id))
        assert found is not None, task_id
        return found

    # processes

    @property
    def dashboard(self) -> Dashboard:
        if self._dashboard is None:
            self._dashboard = Dashboard(self.target, self.cwd, self.dashboard_args)
            self._processes.append(self._dashboard)
        return self._dashboard

    def start_worker(self, queues: tuple[str, ...], concurrency: int = 4) -> WorkerProcess:
        worker = WorkerProcess(self.target, self.cwd, queues, concurrency)
        self._processes.append(worker)
        return worker

    def stop_all(self) -> None:
        for process in reversed(self._processes):
            process.stop(kill=True)

    # the browser

    def open(self, path: str, page: str | None = None) -> None:
        """Load ``path`` of the dashboard; with ``page``, check main#page says so."""
        self.driver.get(self.dashboard.url(path))
        if page is not None:
            self.expect_page(page)

    def expect_page(self, page: str) -> None:
        """Wait until a loaded document's main#page says ``page``."""
        wait_until(
            lambda: self._shown() == page, PAGE_TIMEOUT_S, f"page {page!r} (is {self._shown()!r})"
        )

    def _shown(self) -> str | None:
        """The loaded document's data-page (None while loading or navigating:
        the driver may answer anything then, hence the broad except)."""
        from selenium.common.exceptions import WebDriverException

        try:
            shown = self.driver.execute_script(
                "const main = document.querySelector('main#page');"
                "return document.readyState === 'complete' && main ? main.dataset.page : null;"
            )
        except WebDriverException:
            return None
        return None if shown is None else str(shown)

    def go(self, css: str, page: str) -> None:
        """Click ``css`` (a link or a submit button) and wait for the next
        document, ``page``. A mark left on the old window object tells them
        apart, or a check could read the page being left."""
        from selenium.common.exceptions import WebDriverException

        self.driver.execute_script("window.__leaving = 1;")
        self.click(css)

        def arrived() -> bool:
            try:
                return bool(self.driver.execute_script("return window.__leaving === undefined;"))
            except WebDriverException:
                return False

        wait_until(arrived, PAGE_TIMEOUT_S, f"a new page after clicking {css}")
        self.expect_page(page)

    def find(self, css: str, timeout: float = PAGE_TIMEOUT_S) -> Any:
        """The element ``css`` names, once it is there."""
        from selenium.webdriver.common.by import By

        return wait_until(
            lambda: (self.driver.find_elements(By.CSS_SELECTOR, css) or [None])[0],
            timeout,
            f"{css} on {self.driver.current_url}",
        )

    def all(self, css: str) -> list[Any]:
        from selenium.webdriver.common.by import By

        return list(self.driver.find_elements(By.CSS_SELECTOR, css))

    def absent(self, css: str) -> bool:
        return not self.all(css)

    def text(self, css: str) -> str:
        return str(self.find(css).text).strip()

    def wait_text(self, css: str, wanted: str, timeout: float = PAGE_TIMEOUT_S) -> None:
        """Wait until ``css``'s text reads ``wanted`` (no reload: just reads)."""
        from selenium.common.exceptions import WebDriverException

        def reads() -> str | None:
            try:
                return self.text(css)
            except WebDriverException:  # stale, or the driver mid-update
                return None

        wait_until(
            lambda: reads() == wanted, timeout, f"{css} to read {wanted!r} (reads {reads()!r})"
        )

    def click(self, css: str) -> None:
        self.find(css).click()

    def screenshot(self, page: str) -> Path:
        folder = self.shots if self.dialect == "sqlite" else self.shots / self.dialect
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"dashboard-{page}.png"
        # The whole page, not just the first screenful (capped at four).
        width, height = self.driver.execute_script(
            "const e = document.documentElement; return [e.scrollWidth, e.scrollHeight];"
        )
        clip = {"x": 0, "y": 0, "width": width, "height": min(height, 4 * HEIGHT), "scale": 1}
        shot = self.driver.execute_cdp_cmd(
            "Page.captureScreenshot",
            {"format": "png", "captureBeyondViewport": True, "clip": clip},
        )
        path.write_bytes(base64.b64decode(shot["data"]))
        return path


def forget_last_test(driver: Any) -> None:
    """A dialog a failed test left open would block every later test; cookies
    are per host, not per port, so one dashboard's would reach the next."""
    from selenium.common.exceptions import NoAlertPresentException

    try:
        driver.switch_to.alert.dismiss()
    except NoAlertPresentException:
        pass
    driver.get("about:blank")
    driver.execute_cdp_cmd("Network.clearBrowserCookies", {})


@pytest.fixture(params=DIALECTS)
def site(
    request: pytest.FixtureRequest, tmp_path: Path, chromium: Any, screenshots_dir: Path
) -> Iterator[Site]:
    """A new database of each dialect (on PostgreSQL a brand-new database, its
    DSN handed to the subprocesses), with the browser cleaned of the last test."""
    with make_backend(request.param, tmp_path) as backend:
        with_client(backend.target, lambda client: asyncio.sleep(0))  # the schema, migrated
        forget_last_test(chromium)
        site = Site(backend, tmp_path, chromium, screenshots_dir)
        try:
            yield site
        finally:
            site.stop_all()
