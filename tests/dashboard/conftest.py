"""Fixtures shared by the dashboard's HTTP tests (tests/dashboard/test_http.py);
other dashboard tests may use them too. Names and signatures are kept stable:

* ``dashboard_servers`` (function scope): a ``Servers`` factory for ``async
  def`` tests. ``served = await dashboard_servers.start(asgi_app)`` serves any
  ASGI app (a ``cairnq.dashboard`` app, or a host app that mounts one) with a
  real uvicorn server on 127.0.0.1 and a free port, in the test's own event
  loop; ``served.url`` is its ``http://127.0.0.1:<port>`` (no trailing
  slash), ``served.http()`` an ``httpx.AsyncClient`` on it (no proxies from
  the environment; closed with the server). Every server is stopped when the
  test ends.
* ``csrf_of``: a function, ``csrf_of(html)`` is the hidden ``csrf`` value of
  the page's form.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from dataclasses import dataclass, field
from typing import Any

import pytest

pytest.importorskip("starlette")  # the dashboard extra
pytest.importorskip("httpx")

import httpx  # noqa: E402
import uvicorn  # noqa: E402

_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_field(html: str) -> str:
    found = _CSRF.search(html)
    assert found, "no csrf field on the page"
    return found.group(1)


@dataclass
class Served:
    url: str
    server: uvicorn.Server
    task: "asyncio.Task[None]"
    clients: list[httpx.AsyncClient] = field(default_factory=list)

    def http(self, **kwargs: Any) -> httpx.AsyncClient:
        client = httpx.AsyncClient(base_url=self.url, trust_env=False, timeout=30, **kwargs)
        self.clients.append(client)
        return client

    async def stop(self) -> None:
        for client in self.clients:
            await client.aclose()
        self.clients.clear()
        self.server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(self.task, 30)


class Servers:
    def __init__(self) -> None:
        self.running: list[Served] = []

    async def start(self, app: Any, *, lifespan: str = "on") -> Served:
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            lifespan=lifespan,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=2,
        )
        server = uvicorn.Server(config)
        # Leave the test runner's signal handlers alone (Ctrl-C still stops pytest).
        server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign]
        task = asyncio.ensure_future(server.serve())
        while not server.started:
            if task.done():
                task.result()  # raises what stopped it
                raise RuntimeError("the server stopped before it started")
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        served = Served(f"http://127.0.0.1:{port}", server, task)
        self.running.append(served)
        return served

    async def aclose(self) -> None:
        while self.running:
            await self.running.pop().stop()


@pytest.fixture
def dashboard_servers() -> Servers:
    return Servers()


@pytest.fixture
def csrf_of() -> Any:
    return csrf_field
