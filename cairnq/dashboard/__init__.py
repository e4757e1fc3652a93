"""The web dashboard: ``cairnq dashboard`` serves it, and ``app()`` builds the
same thing as an ASGI app to mount in FastAPI, Starlette or any ASGI host::

    from cairnq.dashboard import app
    dashboard = app("postgresql://localhost/tasks", read_only=True)

Needs the ``dashboard`` extra (``pip install 'cairnq-fast[dashboard]'``). Importing
this package does not import the web stack; ``app()`` does. See
docs/dashboard.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from cairnq.dashboard.auth import Auth, AuthConfigError

if TYPE_CHECKING:
    from cairnq.dashboard.routes import Dashboard, Source

__all__ = ["app", "Auth", "AuthConfigError", "MissingExtra", "require_extra"]

# Each package of the extra, by the module names it may import as.
_EXTRA = (("starlette",), ("uvicorn",), ("jinja2",), ("python_multipart", "multipart"))


class MissingExtra(ImportError):
    """The ``dashboard`` extra is not installed."""


def require_extra() -> None:
    """Import the ``dashboard`` extra's packages, or raise ``MissingExtra``
    (with the pip command) naming those that are missing."""
    import importlib

    missing = []
    for names in _EXTRA:
        for name in names:
            try:
                importlib.import_module(name)
                break
            except ImportError:
                pass
        else:
            missing.append(names[0].replace("_", "-"))
    if missing:
        raise MissingExtra(
            f"the dashboard needs {', '.join(missing)}: pip install 'cairnq-fast[dashboard]'"
        )


def app(
    store_or_dsn: "Source",
    *,
    read_only: bool = False,
    base_path: str = "",
    auth: Optional[Auth] = None,
) -> "Dashboard":
    """The dashboard as an ASGI app.

    ``store_or_dsn``: a ``CairnQ`` client or a store (used as is, never
    closed by the dashboard), a SQLite file path, or a ``postgresql://`` DSN (opened on the
    first request, closed at the app's shutdown or by ``await
    dashboard.aclose()``). ``read_only`` hides the actions and refuses them;
    ``base_path`` serves every page under a prefix (``/cairnq``), for a proxy
    that does not strip it; ``auth`` is ``Auth.token(...)``,
    ``Auth.basic(...)`` or None (no sign-in: keep it on a trusted network).
    """
    require_extra()
    from cairnq.dashboard.routes import Dashboard

    return Dashboard(store_or_dsn, read_only=read_only, base_path=base_path, auth=auth)
