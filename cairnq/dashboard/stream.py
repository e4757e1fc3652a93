"""``GET /events``: the overview as server-sent events.

A raw ASGI endpoint rather than a streaming response, so a client that goes
away is noticed at once (``http.disconnect``) and its place at the hub is
freed then, not at the next write."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from starlette.types import Receive, Scope, Send

from cairnq.dashboard.live import Inbox, LiveHub

__all__ = ["EventStream", "KEEPALIVE_S"]

KEEPALIVE_S = 15.0


class EventStream:
    def __init__(self, hub: LiveHub, keepalive_s: float = KEEPALIVE_S) -> None:
        self.hub = hub
        self.keepalive_s = keepalive_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gone = asyncio.ensure_future(_disconnected(receive))
        try:
            async with self.hub.listen() as inbox:
                await send(
                    {
                        "type": "http.response.start",
                        "status": 200,
                        "headers": [
                            (b"content-type", b"text/event-stream; charset=utf-8"),
                            (b"cache-control", b"no-store"),
                            (b"x-accel-buffering", b"no"),  # proxies: do not hold events back
                        ],
                    }
                )
                await self._pump(inbox, gone, send)
        finally:
            gone.cancel()

    async def _pump(self, inbox: Inbox, gone: asyncio.Future[None], send: Send) -> None:
        await send({"type": "http.response.body", "body": b": connected\n\n", "more_body": True})
        while not gone.done():
            message = asyncio.ensure_future(inbox.get())
            either: set[asyncio.Future[Any]] = {message, gone}
            done, _ = await asyncio.wait(
                either, timeout=self.keepalive_s, return_when=asyncio.FIRST_COMPLETED
            )
            if message not in done:
                message.cancel()
                if gone in done:
                    return
                chunk = b": keepalive\n\n"
            else:
                text = message.result()
                if text is None:  # the hub is closing
                    break
                chunk = f"event: overview\ndata: {text}\n\n".encode()
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        with contextlib.suppress(Exception):
            await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _disconnected(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
