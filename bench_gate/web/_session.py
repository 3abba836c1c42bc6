"""Console sign-in: server-side sessions behind an httpOnly cookie, and CSRF tokens.

A session keeps the bearer token in memory only (never in the store, never in the cookie),
and every request re-verifies it, so a revoked token ends its sessions at once. A restart
signs everyone out. CSRF: each session has its own token, sent in every form and checked on
every POST; the sign-in form, which has no session yet, uses a double-submit cookie.
"""

from __future__ import annotations

import hmac
import secrets
import time
from dataclasses import dataclass, field

from ..auth import Tokens
from ..models import Principal

__all__ = ["COOKIE", "LOGIN_CSRF_COOKIE", "Session", "Sessions", "new_token"]

COOKIE = "bg_session"
LOGIN_CSRF_COOKIE = "bg_login_csrf"
LIFETIME_SECONDS = 12 * 3600


def new_token() -> str:
    return secrets.token_urlsafe(32)


@dataclass
class Session:
    id: str
    token: str
    csrf: str
    created: float = field(default_factory=time.monotonic)


class Sessions:
    """Sign-in sessions of one console, in memory."""

    def __init__(self, tokens: Tokens, lifetime: float = LIFETIME_SECONDS) -> None:
        self.tokens = tokens
        self.lifetime = lifetime
        self._by_id: dict[str, Session] = {}

    def open(self, token: str) -> tuple[Session, Principal] | None:
        who = self.tokens.verify(token.strip())
        if who is None:
            return None
        session = Session(id=secrets.token_urlsafe(32), token=token.strip(),
                          csrf=secrets.token_urlsafe(32))
        self._by_id[session.id] = session
        return session, who

    def get(self, session_id: str | None, stop: bool = False
            ) -> tuple[Session, Principal] | None:
        """The live session and its principal; None if unknown, expired or revoked.
        ``stop``: for the emergency stop, which never waits for the store."""
        if not session_id:
            return None
        session = self._by_id.get(session_id)
        if session is None:
            return None
        if time.monotonic() - session.created > self.lifetime:
            self.close(session_id)
            return None
        who = (self.tokens.verify_for_stop if stop else self.tokens.verify)(session.token)
        if who is None:
            self.close(session_id)
            return None
        return session, who

    def close(self, session_id: str | None) -> None:
        if session_id:
            self._by_id.pop(session_id, None)

    @staticmethod
    def csrf_ok(expected: str | None, given: str | None) -> bool:
        return bool(expected) and bool(given) and hmac.compare_digest(
            str(expected), str(given))
