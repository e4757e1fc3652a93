"""The HTTP side of ``/metrics`` and ``/healthz``, shared by a worker's own
endpoint (``prometheus.py``) and the supervisor's merged one
(``aggregate.py``): each says how to produce the two answers."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from typing import Any, Callable

__all__ = ["handler_class", "TEXT"]

TEXT = "text/plain; charset=utf-8"
_NOT_FOUND = b"not found: try /metrics or /healthz\n"


def handler_class(
    metrics: Callable[[], tuple[str, bytes]], health: Callable[[], tuple[bool, str]]
) -> type[BaseHTTPRequestHandler]:
    """A request handler answering ``/metrics`` with ``metrics()`` (content
    type, body) and ``/healthz`` with ``health()`` (healthy, reason): 200 or
    503, the reason on one line."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._reply(200, *metrics())
            elif path == "/healthz":
                ok, reason = health()
                self._reply(200 if ok else 503, TEXT, (reason + "\n").encode())
            else:
                self._reply(404, TEXT, _NOT_FOUND)

        def _reply(self, status: int, content_type: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # scrapes every few seconds would drown the worker's own log

    return Handler
