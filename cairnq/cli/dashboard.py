"""``cairnq dashboard``: serve the web dashboard (cairnq.dashboard) with uvicorn.

Safe by default: it listens on 127.0.0.1, and refuses any other address
unless ``--auth`` names how requests prove who they are (the secrets come from
the environment, never the command line). Audit lines (who canceled,
retried or purged what) go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import Any, Optional

from cairnq.cli.common import (
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    open_client,
    resolve_target,
)

__all__ = ["add_parser", "run", "DEFAULT_PORT"]

DEFAULT_PORT = 8484


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "dashboard",
        parents=[common],
        help="serve the web dashboard (needs the 'dashboard' extra)",
        description="Serve the web dashboard: queues and their counts, throughput, workers, "
        "running tasks (updated live), the task list with filters, each task's details, and "
        "cancel / retry / purge. Listens on 127.0.0.1 unless --host says otherwise; any "
        "address but loopback needs --auth. --auth token reads CAIRNQ_DASHBOARD_TOKEN; "
        "--auth basic reads CAIRNQ_DASHBOARD_USER and CAIRNQ_DASHBOARD_PASSWORD. "
        "Needs: pip install 'cairnq-fast[dashboard]'.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any free)"
    )
    p.add_argument(
        "--read-only", action="store_true", help="show everything, change nothing (no actions)"
    )
    p.add_argument(
        "--base-path",
        default="",
        metavar="PATH",
        help="serve every page under this prefix, e.g. /cairnq (behind a proxy)",
    )
    p.add_argument(
        "--auth",
        choices=("token", "basic"),
        default=None,
        help="require a token (Bearer header or login form) or HTTP basic auth",
    )
    p.set_defaults(run=run, parser=p)


def run(args: argparse.Namespace) -> int:
    from cairnq.dashboard import Auth, AuthConfigError, MissingExtra, require_extra
    from cairnq.dashboard.auth import is_loopback

    try:
        require_extra()
    except MissingExtra as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    if not 0 <= args.port <= 65535:
        raise CliError(f"--port must be between 0 and 65535, got {args.port}", EXIT_USAGE)
    auth: Optional[Auth] = None
    if args.auth is not None:
        try:
            auth = Auth.from_env(args.auth)
        except AuthConfigError as exc:
            raise CliError(str(exc), EXIT_USAGE) from None
    elif not is_loopback(args.host):
        raise CliError(
            f"refusing to listen on {args.host} without --auth: anyone who can reach it could "
            "read and change tasks. Pass --auth token or --auth basic (the secrets come from "
            "the environment), or keep the default --host 127.0.0.1.",
            EXIT_USAGE,
        )
    resolve_target(args)  # no database named: a usage error before anything starts
    try:
        return asyncio.run(_serve(args, auth))
    except KeyboardInterrupt:
        return EXIT_OK


async def _serve(args: argparse.Namespace, auth: Any) -> int:
    from cairnq.dashboard.routes import Dashboard
    from cairnq.dashboard.server import serve

    where = resolve_target(args).describe()

    def listening(port: int) -> None:
        host = f"[{args.host}]" if ":" in args.host else args.host
        mode = " read-only" if args.read_only else ""
        auth_text = f", auth {args.auth}" if args.auth else ""
        url = f"http://{host}:{port}{args.base_path.rstrip('/')}/"
        print(f"cairnq dashboard{mode}: {url} ({where}{auth_text}); Ctrl-C stops", flush=True)

    async with open_client(args, create=False, max_size=4) as client:
        try:
            dashboard = Dashboard(
                client, read_only=args.read_only, base_path=args.base_path, auth=auth
            )
        except ValueError as exc:
            raise CliError(str(exc), EXIT_USAGE) from None
        with _audit_to_stderr():
            started = await serve(
                dashboard,
                host=args.host,
                port=args.port,
                verbose=bool(getattr(args, "verbose", 0)),
                on_listening=listening,
            )
    if not started:
        raise CliError(f"could not listen on {args.host}:{args.port}")
    return EXIT_OK


class _audit_to_stderr:
    """Audit lines reach stderr even when no -v asked for cairnq's logs."""

    def __init__(self) -> None:
        self.logger = logging.getLogger("cairnq.dashboard.audit")
        self.handler: Optional[logging.Handler] = None

    def __enter__(self) -> None:
        if self.logger.isEnabledFor(logging.INFO) and self.logger.hasHandlers():
            return  # -v or --log-level already route it
        self.handler = logging.StreamHandler(sys.stderr)
        self.handler.setFormatter(logging.Formatter("%(asctime)s audit: %(message)s"))
        self.saved = (self.logger.level, self.logger.propagate)
        self.logger.addHandler(self.handler)
        self.logger.setLevel(logging.INFO)
        self.logger.propagate = False

    def __exit__(self, *exc: object) -> None:
        if self.handler is not None:
            self.logger.removeHandler(self.handler)
            self.logger.setLevel(self.saved[0])
            self.logger.propagate = self.saved[1]
