"""What every request goes through: the security headers, authentication,
the CSRF cookie, and the checks on each POST (same origin, CSRF token).

Plain ASGI wrappers (no framework middleware base class), so streamed
responses pass through untouched and nothing buffers them.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
import secrets
from typing import Awaitable, Callable, Optional
from urllib.parse import urlsplit

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cairnq.dashboard.auth import Auth

__all__ = [
    "HEADERS",
    "CSRF_COOKIE",
    "SESSION_COOKIE",
    "Refused",
    "SecurityHeaders",
    "Guard",
    "checked_form",
    "csrf_token",
    "who",
    "address",
    "route_path",
    "root",
]

HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (
        b"content-security-policy",
        b"default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        b"frame-ancestors 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"x-content-type-options", b"nosniff"),
)
CSRF_COOKIE = "cairnq_csrf"
SESSION_COOKIE = "cairnq_session"
_CSRF_SHAPE = re.compile(r"^[A-Za-z0-9_-]{43}$")  # secrets.token_urlsafe(32)
_SCOPE_CSRF = "cairnq.csrf"
_SCOPE_WHO = "cairnq.who"


class Refused(Exception):
    """Ends the request with ``status`` and a page saying ``message``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class SecurityHeaders:
    """Adds the security headers to every response (error pages included)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [h for h in HEADERS if h[0] not in present]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, with_headers)


def root(scope: Scope) -> str:
    """The URL prefix the app is served under (a mount point, a base path)."""
    return str(scope.get("root_path", "")).rstrip("/")


def route_path(scope: Scope) -> str:
    path = str(scope["path"])
    prefix = root(scope)
    return path[len(prefix) :] if prefix and path.startswith(prefix) else path


def csrf_token(request: Request) -> str:
    return str(request.scope[_SCOPE_CSRF])


def who(request: Request) -> str:
    """Who the request proved to be (the basic-auth user, "token", or "local"
    without auth); empty when it proved nothing (the public pages)."""
    return str(request.scope.get(_SCOPE_WHO, ""))


def address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _basic_credentials(header: str) -> Optional[tuple[str, str]]:
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, sep, password = (
            base64.b64decode(encoded.strip(), validate=True).decode().partition(":")
        )
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return (user, password) if sep else None


def authenticate(request: Request, auth: Optional[Auth]) -> Optional[str]:
    """Who the request is (for the audit log), or None when it proves nothing."""
    if auth is None:
        return "local"
    header = request.headers.get("authorization", "")
    if auth.kind == "basic":
        creds = _basic_credentials(header)
        return creds[0] if creds and auth.accepts_basic(*creds) else None
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and auth.accepts_token(token.strip()):
        return "token"
    session = request.cookies.get(SESSION_COOKIE)
    if session and auth.accepts_session(session):
        return "token"
    return None


Denier = Callable[[Request], Awaitable[Response]]


class Guard:
    """Authenticates every request but the public ones (static files, the
    login form) and gives each browser its CSRF cookie."""

    PUBLIC = ("/static/", "/login")

    def __init__(self, app: ASGIApp, auth: Optional[Auth], deny: Denier) -> None:
        self.app = app
        self.auth = auth
        self.deny = deny

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        csrf = request.cookies.get(CSRF_COOKIE, "")
        fresh = not _CSRF_SHAPE.match(csrf)
        if fresh:
            csrf = secrets.token_urlsafe(32)
        scope[_SCOPE_CSRF] = csrf
        send = self._setting_cookie(scope, send, csrf) if fresh else send
        identity = authenticate(request, self.auth)
        scope[_SCOPE_WHO] = identity or ""
        if identity is None and not route_path(scope).startswith(self.PUBLIC):
            response = await self.deny(request)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    @staticmethod
    def _setting_cookie(scope: Scope, send: Send, value: str) -> Send:
        cookie = Response()
        cookie.set_cookie(
            CSRF_COOKIE,
            value,
            path=root(scope) + "/",
            httponly=True,
            samesite="strict",
            secure=scope.get("scheme") == "https",
        )
        header = [h for h in cookie.raw_headers if h[0] == b"set-cookie"]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *header]
            await send(message)

        return sending


def _same_origin(request: Request) -> bool:
    origin = request.headers.get("origin")
    if origin is None:
        return True  # not sent (older browsers, curl): the CSRF token decides
    host = request.headers.get("host", "")
    parts = urlsplit(origin)
    return bool(parts.netloc) and parts.netloc.lower() == host.lower()


async def checked_form(request: Request) -> FormData:
    """The POSTed form, once the request proved it came from our own page:
    same origin (when the browser says) and the CSRF token of this browser."""
    if not _same_origin(request):
        raise Refused(403, "This form was sent from another site, so it was refused.")
    form = await request.form(max_files=0, max_fields=50)
    sent = form.get("csrf")
    cookie = request.cookies.get(CSRF_COOKIE, "")
    if (
        not isinstance(sent, str)
        or not _CSRF_SHAPE.match(cookie)
        or not hmac.compare_digest(sent.encode(), cookie.encode())
    ):
        raise Refused(
            403,
            "The form's security token is missing or does not match this browser's. "
            "Go back, reload the page and try again.",
        )
    return form
