"""Serving the dashboard with uvicorn (what ``cairnq dashboard`` runs)."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

import uvicorn

from cairnq.dashboard.routes import Dashboard

__all__ = ["serve", "GRACE_S"]

GRACE_S = 5  # a stopping server waits this long for requests still being answered


class _Server(uvicorn.Server):
    """Ends the live event streams first when asked to stop (otherwise each
    open browser tab would hold the shutdown for the grace period)."""

    def __init__(self, config: uvicorn.Config, dashboard: Dashboard) -> None:
        super().__init__(config)
        self.dashboard = dashboard

    async def shutdown(self, sockets: Any = None) -> None:
        await self.dashboard.end_streams()
        await super().shutdown(sockets)


async def serve(
    dashboard: Dashboard,
    *,
    host: str,
    port: int,
    verbose: bool = False,
    on_listening: Callable[[int], None] = lambda port: None,
) -> bool:
    """Serve until SIGINT/SIGTERM; ``on_listening(port)`` once it listens (the
    port is the real one when 0 was asked). False when it never started."""
    config = uvicorn.Config(
        dashboard,
        host=host,
        port=port,
        lifespan="on",
        log_level="info" if verbose else "warning",
        access_log=verbose,
        timeout_graceful_shutdown=GRACE_S,
        server_header=False,
    )
    server = _Server(config, dashboard)
    announce = asyncio.ensure_future(_when_listening(server, port, on_listening))
    try:
        await server.serve()
    finally:
        announce.cancel()
        await dashboard.aclose()
    return bool(server.started)


async def _when_listening(
    server: uvicorn.Server, port: int, on_listening: Callable[[int], None]
) -> None:
    while not server.started:
        await asyncio.sleep(0.05)
    for listener in getattr(server, "servers", []):
        for sock in listener.sockets:
            port = sock.getsockname()[1]
            break
    on_listening(port)
