"""Who may use the dashboard: ``Auth.token(...)``, ``Auth.basic(...)``, or
None (nobody is asked; the server must then listen on loopback only).

No web framework is imported here, so the CLI can check its options and the
environment before the ``dashboard`` extra is needed.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
from dataclasses import dataclass, field
from typing import Literal, Mapping, Optional

__all__ = ["Auth", "AuthConfigError", "ENV_TOKEN", "ENV_USER", "ENV_PASSWORD", "is_loopback"]

ENV_TOKEN = "CAIRNQ_DASHBOARD_TOKEN"
ENV_USER = "CAIRNQ_DASHBOARD_USER"
ENV_PASSWORD = "CAIRNQ_DASHBOARD_PASSWORD"
_SESSION_CONTEXT = b"cairnq.dashboard.session.v1"


class AuthConfigError(ValueError):
    """Auth asked for but not configured; ``str()`` says which variable."""


@dataclass(frozen=True)
class Auth:
    """How requests prove who they are.

    * ``Auth.token(t)``: ``Authorization: Bearer <t>``, or the login form,
      which sets a cookie holding an HMAC of the token (never the token);
    * ``Auth.basic(user, password)``: HTTP basic authentication.
    """

    kind: Literal["token", "basic"]
    secret: str = field(repr=False)
    user: Optional[str] = None

    @classmethod
    def token(cls, token: str) -> "Auth":
        if not token:
            raise AuthConfigError("the dashboard token must not be empty")
        return cls("token", token)

    @classmethod
    def basic(cls, user: str, password: str) -> "Auth":
        if not user or not password:
            raise AuthConfigError("the dashboard user and password must not be empty")
        if ":" in user:
            raise AuthConfigError("the dashboard user must not contain ':'")
        return cls("basic", password, user)

    @classmethod
    def from_env(cls, kind: str, environ: Optional[Mapping[str, str]] = None) -> "Auth":
        """``token`` reads CAIRNQ_DASHBOARD_TOKEN; ``basic`` reads
        CAIRNQ_DASHBOARD_USER and CAIRNQ_DASHBOARD_PASSWORD."""
        env = os.environ if environ is None else environ
        if kind == "token":
            token = env.get(ENV_TOKEN, "")
            if not token:
                raise AuthConfigError(f"--auth token needs ${ENV_TOKEN} set (and not empty)")
            return cls.token(token)
        if kind == "basic":
            missing = [name for name in (ENV_USER, ENV_PASSWORD) if not env.get(name)]
            if missing:
                raise AuthConfigError(
                    f"--auth basic needs {' and '.join('$' + m for m in missing)} set"
                )
            return cls.basic(env[ENV_USER], env[ENV_PASSWORD])
        raise AuthConfigError(f"auth must be 'token' or 'basic', not {kind!r}")

    def session_value(self) -> str:
        """The login cookie's value: an HMAC keyed by the token, so the cookie
        proves the token was known without holding it."""
        return hmac.new(self.secret.encode(), _SESSION_CONTEXT, hashlib.sha256).hexdigest()

    def accepts_token(self, presented: str) -> bool:
        return self.kind == "token" and hmac.compare_digest(
            presented.encode(), self.secret.encode()
        )

    def accepts_session(self, presented: str) -> bool:
        return self.kind == "token" and hmac.compare_digest(
            presented.encode(), self.session_value().encode()
        )

    def accepts_basic(self, user: str, password: str) -> bool:
        if self.kind != "basic" or self.user is None:
            return False
        # Both compared, always: the time taken says nothing about which was wrong.
        user_ok = hmac.compare_digest(user.encode(), self.user.encode())
        password_ok = hmac.compare_digest(password.encode(), self.secret.encode())
        return user_ok and password_ok


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
