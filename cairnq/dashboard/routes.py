"""The dashboard as an ASGI app: routes, each one thin (read, hand to a
template or an action, answer). See ``cairnq.dashboard.app``."""

from __future__ import annotations

import asyncio
import logging
import os
import re
from pathlib import Path
from typing import Any, Mapping, Optional, Union
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Mount, Route, Router
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

from cairnq._ids import now_ms
from cairnq.client import CairnQ
from cairnq.dashboard import actions, pages, queries
from cairnq.dashboard.auth import Auth
from cairnq.dashboard.live import LiveHub
from cairnq.dashboard.render import environment, to_json_text
from cairnq.dashboard.security import (
    SESSION_COOKIE,
    Guard,
    Refused,
    SecurityHeaders,
    address,
    checked_form,
    csrf_token,
    root,
    who,
)
from cairnq.dashboard.stream import EventStream
from cairnq.models import TERMINAL, Task
from cairnq.store.base import TaskStore

__all__ = ["Dashboard", "Source"]

log = logging.getLogger("cairnq.dashboard")
Source = Union[CairnQ, TaskStore, str, "os.PathLike[str]"]
STATIC = Path(__file__).parent / "static"
_PG_PREFIXES = ("postgres://", "postgresql://")
_BASE_PATH = re.compile(r"^(/[A-Za-z0-9._~!$&'()*+,;=:@%-]+)*$")
_PURGE_FILTERS = ("queue", "status", "name")
_NO_STORE = {"cache-control": "no-store"}


class Dashboard:
    """The ASGI app. Opens its client on the first request (a mounted app's
    lifespan never runs), and closes it at lifespan shutdown or ``aclose()``
    when it opened it; a client handed in stays the caller's."""

    def __init__(
        self,
        source: Source,
        *,
        read_only: bool = False,
        base_path: str = "",
        auth: Optional[Auth] = None,
        watch_poll_ms: Optional[int] = None,
    ) -> None:
        base_path = base_path.rstrip("/")
        if not _BASE_PATH.match(base_path):
            raise ValueError(f"base_path must look like /cairnq (or be empty), got {base_path!r}")
        if auth is not None and not isinstance(auth, Auth):
            raise TypeError("auth must be an Auth (Auth.token(...), Auth.basic(...)) or None")
        if not isinstance(source, (CairnQ, str, os.PathLike)):
            try:  # a store: wrapped, and like a client, the caller's to close
                source = CairnQ(source)
            except TypeError:
                raise TypeError(
                    "source must be a CairnQ client, a store, a SQLite path or a postgresql:// DSN"
                ) from None
        self._source = source
        self._client: Optional[CairnQ] = source if isinstance(source, CairnQ) else None
        self._owned = not isinstance(source, CairnQ)
        self._opening = asyncio.Lock()
        self.read_only = read_only
        self.base_path = base_path
        self.auth = auth
        self.templates = environment()
        self.hub = LiveHub(self.client, _overview_json, watch_poll_ms=watch_poll_ms)
        inner = Starlette(
            routes=self._routes(),
            exception_handlers={
                Refused: self._refused,
                HTTPException: self._http_error,
                Exception: self._crashed,
            },
        )
        guarded = Guard(inner, auth, self._deny)
        self._at_root = SecurityHeaders(guarded)
        prefixed = Router(routes=[Mount(base_path, app=guarded)]) if base_path else guarded
        self._app = SecurityHeaders(prefixed)

    # -- ASGI and the client's life ---------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if self.base_path and str(scope.get("root_path", "")).endswith(self.base_path):
            # Mounted at its base path by the host (``mount("/cairnq", app(...,
            # base_path="/cairnq"))``): the prefix is already consumed.
            await self._at_root(scope, receive, send)
            return
        await self._app(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    @property
    def client_open(self) -> bool:
        """True once the client is there (handed in, or opened by a request)."""
        return self._client is not None

    async def client(self) -> CairnQ:
        """The client, opened on first use."""
        if self._client is not None:
            return self._client
        async with self._opening:
            if self._client is None:
                source = self._source
                text = os.fspath(source) if not isinstance(source, CairnQ) else ""
                if text.startswith(_PG_PREFIXES):
                    client = CairnQ.postgres(text, min_size=1, max_size=4)
                else:
                    client = CairnQ.sqlite(text)
                try:
                    await client.connect()
                except BaseException:
                    await client.close()  # what it opened before failing; retried next request
                    raise
                self._client = client
        return self._client

    async def aclose(self) -> None:
        """End the live streams; close the client if the dashboard opened it.
        Call it from your own app's shutdown when the dashboard is mounted."""
        await self.hub.close()
        if self._owned and self._client is not None:
            client, self._client = self._client, None
            await client.close()

    async def end_streams(self) -> None:
        """End every open event stream (a server about to stop calls this)."""
        await self.hub.close()

    # -- rendering --------------------------------------------------------------------

    def _routes(self) -> list[Any]:
        downloads = [
            Route(f"/tasks/{{task_id}}/{part}.json", self._download(part))
            for part in pages.JSON_PARTS
        ]
        return [
            Route("/", self.overview),
            Route("/api/overview", self.api_overview),
            Route("/api/tasks/{task_id}/status", self.api_task_status),
            Route("/events", EventStream(self.hub)),
            Route("/tasks", self.task_list),
            *downloads,
            Route("/tasks/{task_id}/cancel", self.cancel, methods=["GET", "POST"]),
            Route("/tasks/{task_id}/retry", self.retry, methods=["GET", "POST"]),
            Route("/tasks/{task_id}", self.task_detail),
            Route("/purge", self.purge, methods=["GET", "POST"]),
            Route("/login", self.login, methods=["GET", "POST"]),
            Route("/logout", self.logout, methods=["POST"]),
            Mount("/static", app=StaticFiles(directory=STATIC), name="static"),
        ]

    def page(
        self, request: Request, template: str, page: str, *, status: int = 200, **context: Any
    ) -> HTMLResponse:
        common = {
            "root": root(request.scope),
            "csrf": csrf_token(request),
            "read_only": self.read_only,
            "auth_kind": None if self.auth is None else self.auth.kind,
            "who": who(request),
            "flash": pages.flash(request.query_params),
            "now_ms": now_ms(),
            "page": page,
            "nav": context.pop("nav", None),
        }
        html = self.templates.get_template(template).render({**common, **context})
        return HTMLResponse(html, status, headers=_NO_STORE)

    def _error_page(self, request: Request, status: int, title: str, message: str) -> Response:
        response = self.page(
            request, "error.html", "error", status=status, title=title, message=message
        )
        if status == 401 and self.auth is not None and self.auth.kind == "basic":
            response.headers["www-authenticate"] = 'Basic realm="cairnq dashboard", charset="UTF-8"'
        return response

    async def _refused(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, Refused)
        return self._error_page(
            request, exc.status, _TITLES.get(exc.status, "Refused"), exc.message
        )

    async def _http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        status = exc.status_code
        message = _MESSAGES.get(status, "The request could not be served.")
        return self._error_page(request, status, _TITLES.get(status, "Error"), message)

    async def _crashed(self, request: Request, exc: Exception) -> Response:
        # The traceback goes to the server's log (the server logs what is
        # raised), never to the page.
        try:
            return self._error_page(
                request, 500, "Something went wrong",
                "The dashboard could not answer this request. The details are in the "
                "server's log.",
            )  # fmt: skip
        except Exception:
            return HTMLResponse(_CRASH_PAGE, 500, headers=_NO_STORE)

    async def _deny(self, request: Request) -> Response:
        """Answer to a request without valid credentials."""
        if self.auth is not None and self.auth.kind == "token":
            if request.method == "GET" and "text/html" in request.headers.get("accept", ""):
                response: Response = self._login_page(request, status=401, next_url=_here(request))
            else:
                response = PlainTextResponse("authentication required\n", 401)
            response.headers["www-authenticate"] = 'Bearer realm="cairnq dashboard"'
            return response
        return self._error_page(
            request, 401, "Sign in", "This dashboard asks for a user name and password."
        )

    def _login_page(
        self, request: Request, *, status: int = 200, next_url: str = "", failed: bool = False
    ) -> HTMLResponse:
        return self.page(
            request, "login.html", "login", status=status, next_url=next_url, failed=failed
        )

    # -- pages ------------------------------------------------------------------------

    async def overview(self, request: Request) -> Response:
        ov = await queries.overview(await self.client())
        return self.page(
            request, "overview.html", "overview", nav="overview", **pages.overview_context(ov)
        )

    async def api_overview(self, request: Request) -> Response:
        return JSONResponse(await _overview_json(await self.client()), headers=_NO_STORE)

    async def api_task_status(self, request: Request) -> Response:
        """``{"status": ...}`` of one task (a primary-key read): a followed
        task's page asks when the overview's running list cannot tell
        whether its task has moved on."""
        task_id = request.path_params["task_id"]
        try:
            ref = await (await self.client()).get_status(task_id)
        except (TypeError, ValueError):
            ref = None
        if ref is None:
            return JSONResponse({"status": None}, status_code=404, headers=_NO_STORE)
        return JSONResponse({"status": ref.status}, headers=_NO_STORE)

    async def task_list(self, request: Request) -> Response:
        query = request.query_params
        form = pages.list_form(query)
        try:
            flt = queries.TaskFilter.from_query(query)
            sort, limit, cursor = pages.list_options(query)
            result = await queries.task_page(
                await self.client(), flt, sort=sort, cursor=cursor, limit=limit
            )
        except queries.FilterError as exc:
            return self.page(
                request, "tasks.html", "tasks", status=400, nav="tasks", form=form,
                filter_error=str(exc), result=None, flt=None, next_query="", first_query="",
                purge_query="", key_query="", on_later_page=False,
            )  # fmt: skip
        kept = {**flt.query(), "sort": sort if sort != "newest" else None}
        kept["limit"] = str(limit) if limit != queries.DEFAULT_PAGE_SIZE else None
        next_query = _query({**kept, "cursor": result.next_cursor}) if result.next_cursor else ""
        purge = {k: v for k, v in flt.query().items() if k in _PURGE_FILTERS}
        return self.page(
            request, "tasks.html", "tasks", nav="tasks", form=form, filter_error=None,
            result=result, flt=flt, next_query=next_query,
            first_query=_query(kept), on_later_page=bool(cursor), purge_query=_query(purge),
            key_query=_query({"key": flt.key}),
        )  # fmt: skip

    async def _task(self, request: Request) -> Task:
        task_id = request.path_params["task_id"]
        try:
            task = await (await self.client()).get(task_id)
        except (TypeError, ValueError):
            task = None
        if task is None:
            raise Refused(404, "No task has this id (it may have been purged).")
        return task

    async def task_detail(self, request: Request) -> Response:
        task = await self._task(request)
        key = await self._key_of(task, request.query_params.get("key"))
        return self.page(
            request, "task.html", "task", nav="tasks",
            **pages.task_context(task, key, self.read_only),
        )  # fmt: skip

    async def _key_of(self, task: Task, claimed: Optional[str]) -> Optional[str]:
        # No store read finds a task's key from its id (cairnq_task_keys has
        # no index on task_id): the key is shown when the link carried it.
        if claimed:  # shown only once the key is seen to point at this task
            other = await (await self.client()).get_by_key(claimed)
            return claimed if other is not None and other.id == task.id else None
        return None

    def _download(self, part: str) -> Any:
        async def download(request: Request) -> Response:
            task = await self._task(request)
            value = pages.part_value(task, part)
            if value is None and part == "error":
                raise Refused(404, "This task has no error.")
            safe_id = re.sub(r"[^A-Za-z0-9_-]", "_", task.id)[:100]
            return Response(
                to_json_text(value),
                media_type="application/json",
                headers={
                    "content-disposition": f'attachment; filename="{safe_id}-{part}.json"',
                    "x-content-type-options": "nosniff",
                    **_NO_STORE,
                },
            )

        return download

    # -- actions ----------------------------------------------------------------------

    def _writable(self) -> None:
        if self.read_only:
            raise Refused(403, "This dashboard is read-only: it shows tasks but changes nothing.")

    def _actor(self, request: Request) -> actions.Actor:
        return actions.Actor(who(request), address(request))

    async def cancel(self, request: Request) -> Response:
        self._writable()
        task = await self._task(request)
        if request.method == "POST":
            await checked_form(request)
            outcome = await actions.cancel(await self.client(), self._actor(request), task.id)
            return self._back_to_task(request, task, outcome.flash)
        return self.page(
            request, "confirm.html", "confirm", nav="tasks", action="cancel", task=task,
            possible=task.status in ("queued", "running"),
        )  # fmt: skip

    async def retry(self, request: Request) -> Response:
        self._writable()
        task = await self._task(request)
        if request.method == "POST":
            form = await checked_form(request)
            reset = form.get("reset_attempt") in ("1", "on", "true")
            outcome = await actions.retry(
                await self.client(), self._actor(request), task.id, reset_attempt=reset
            )
            return self._back_to_task(request, task, outcome.flash)
        return self.page(
            request, "confirm.html", "confirm", nav="tasks", action="retry", task=task,
            possible=task.status in ("failed", "canceled"),
        )  # fmt: skip

    def _back_to_task(self, request: Request, task: Task, flash: str) -> Response:
        url = f"{root(request.scope)}/tasks/{_segment(task.id)}?flash={flash}"
        return RedirectResponse(url, 303)

    async def purge(self, request: Request) -> Response:
        self._writable()
        if request.method == "POST":
            form = await checked_form(request)
            values = {k: str(form.get(k) or "") for k in (*_PURGE_FILTERS, "older_than_ms")}
            flt = _purge_filter(values)
            older = values["older_than_ms"].strip() or "0"
            if not older.isdigit() or int(older) >= 2**53:
                raise Refused(
                    400, "older_than_ms must be a whole number of milliseconds (0 or more)."
                )
            outcome = await actions.purge(
                await self.client(), self._actor(request), older_than_ms=int(older),
                queue=flt.queue, status=flt.status, name=flt.name,
            )  # fmt: skip
            url = f"{root(request.scope)}/tasks" + _query(
                {**flt.query(), "flash": outcome.flash, "n": str(outcome.count)}
            )
            return RedirectResponse(url, 303)
        extra = sorted(k for k, v in request.query_params.items() if v and k not in _PURGE_FILTERS)
        extra = [k for k in extra if k not in ("sort", "limit", "cursor", "flash", "n")]
        if extra:
            raise Refused(
                400,
                "Purge selects finished tasks by queue, status and name only; clear these "
                f"filters first: {', '.join(extra)}.",
            )
        flt = _purge_filter(dict(request.query_params))
        return self.page(
            request, "confirm.html", "confirm", nav="tasks", action="purge", task=None,
            possible=True, purge=flt, statuses=TERMINAL,
        )  # fmt: skip

    # -- login (token auth) ----------------------------------------------------------

    async def login(self, request: Request) -> Response:
        if self.auth is None or self.auth.kind != "token":
            raise HTTPException(404)
        if request.method == "GET":
            return self._login_page(
                request, next_url=_safe_next(request, request.query_params.get("next"))
            )
        form = await checked_form(request)
        token = form.get("token")
        next_url = _safe_next(request, str(form.get("next") or ""))
        if not isinstance(token, str) or not self.auth.accepts_token(token):
            actions.audit.warning("login refused from %s", address(request))
            return self._login_page(request, status=401, next_url=next_url, failed=True)
        actions.audit.info("login (token) from %s", address(request))
        response = RedirectResponse(next_url or f"{root(request.scope)}/", 303)
        response.set_cookie(
            SESSION_COOKIE, self.auth.session_value(), path=root(request.scope) + "/",
            httponly=True, samesite="strict", secure=request.url.scheme == "https",
        )  # fmt: skip
        return response

    async def logout(self, request: Request) -> Response:
        if self.auth is None or self.auth.kind != "token":
            raise HTTPException(404)
        await checked_form(request)
        response = RedirectResponse(f"{root(request.scope)}/login?flash=logged_out", 303)
        response.delete_cookie(SESSION_COOKIE, path=root(request.scope) + "/")
        return response


async def _overview_json(client: CairnQ) -> dict[str, Any]:
    return (await queries.overview(client)).to_json()


def _purge_filter(values: Any) -> queries.TaskFilter:
    try:
        flt = queries.TaskFilter.from_query({k: values.get(k) or "" for k in _PURGE_FILTERS})
    except queries.FilterError as exc:
        raise Refused(400, str(exc)) from None
    if flt.status is not None and flt.status not in TERMINAL:
        raise Refused(400, f"Only finished tasks can be purged; {flt.status} tasks cannot.")
    return flt


def _segment(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")


def _query(params: Mapping[str, Optional[str]]) -> str:
    kept = {k: v for k, v in params.items() if v}
    return "?" + urlencode(kept) if kept else ""


def _here(request: Request) -> str:
    query = request.url.query
    return request.url.path + ("?" + query if query else "")


def _safe_next(request: Request, target: Optional[str]) -> str:
    """Only a path inside this dashboard (never another site) to go back to."""
    prefix = root(request.scope) + "/"
    if target and target.startswith(prefix) and not target.startswith("//") and "\\" not in target:
        return target
    return ""


_TITLES = {
    400: "Bad request",
    401: "Sign in",
    403: "Refused",
    404: "Not found",
    405: "Method not allowed",
}
_MESSAGES = {
    404: "There is no page here.",
    405: "This page does not accept that method.",
}
_CRASH_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Error · cairnq</title></head>
<body><main id="page" data-page="error"><h1>Something went wrong</h1>
<p>The dashboard could not answer this request. The details are in the server's log.</p>
</main></body></html>
"""
