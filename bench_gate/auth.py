"""Bearer tokens, stored hashed (sha256); a token is shown once, when it is created.

Identity always comes from a token, never from a request body.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
import uuid
from typing import Any

from .errors import InvalidInput, NotFound
from .models import Principal, Role, now
from .store import Store

__all__ = [
    "TOKEN_IN_TEXT",
    "TOKEN_PREFIX",
    "Tokens",
    "carries_token",
    "redact",
    "refuse_token",
    "token_free",
]

TOKEN_PREFIX = "bg_"
RE_TOKEN = re.compile(re.escape(TOKEN_PREFIX) + r"[A-Za-z0-9_-]{16,}")
TABLE = "tokens"
#: How long a verified token is trusted without a store lookup. A revocation made in this
#: process takes effect at once; one made elsewhere (the CLI, another gateway) within this.
VERIFIED_SECONDS = 2.0
_CACHE_MAX = 4096


def carries_token(text: str | None) -> bool:
    """Whether a text holds something shaped like a bench-gate token."""
    return bool(text) and RE_TOKEN.search(text or "") is not None


#: Why a free-text field holding a token is refused (it never echoes the token).
TOKEN_IN_TEXT = (f"holds something shaped like a bench-gate token ({TOKEN_PREFIX}...); free "
                 "text is stored and shown to people, a token never is: present a token only "
                 "in the Authorization header (HTTP) or with GATE:TOK on the socket door")


def refuse_token(value: str | None, field: str) -> None:
    """Raise InvalidInput naming ``field`` when ``value`` carries a token-shaped string.

    Called where free text enters the core (a run's goal, notes, questions, answers...),
    before anything is stored or journaled; the message never repeats the value."""
    if carries_token(value):
        raise InvalidInput(f"{field} {TOKEN_IN_TEXT}",
                           field=field if field.isidentifier() else None)


def token_free(value: str | None) -> str | None:
    """A pydantic validator of the doors' bodies: the value, unless it carries a token
    (a ValueError the door reports as 422 with the field's location)."""
    if carries_token(value):
        raise ValueError(f"the text {TOKEN_IN_TEXT}")
    return value


def redact(text: str | None) -> str | None:
    """The text with every token-shaped word withheld, for journals and messages."""
    return RE_TOKEN.sub(TOKEN_PREFIX + "…(withheld)", text) if text else text


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Tokens:
    def __init__(self, store: Store) -> None:
        self.store = store
        # digest -> (trusted until, monotonic; principal). Only valid tokens are kept, so
        # guessing gets no cache and a new token works at once.
        self._verified: dict[str, tuple[float, Principal]] = {}

    def create(self, name: str, role: Role | str) -> tuple[dict[str, Any], str]:
        """A new token for ``name``: returns (its record, the secret to hand over once)."""
        if not name.strip() or len(name) > 64:
            raise InvalidInput("a token needs a name of 1 to 64 characters")
        try:
            role = Role(role)
        except ValueError as exc:
            raise InvalidInput(f"role must be one of {[r.value for r in Role]}, "
                               f"not {role!r}") from exc
        secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
        record = {"id": f"tok-{uuid.uuid4().hex[:12]}", "name": name, "role": role.value,
                  "created_at": now().isoformat(), "revoked_at": None}
        self.store.kv_put(TABLE, _digest(secret), record)
        return record, secret

    def verify(self, token: str | None) -> Principal | None:
        if not token:
            return None
        digest = _digest(token)
        clock = time.monotonic()
        hit = self._verified.get(digest)
        if hit is not None and hit[0] > clock:
            return hit[1]
        record = self.store.kv_get(TABLE, digest)
        if record is None or record.get("revoked_at"):
            self._verified.pop(digest, None)
            return None
        who = Principal(name=record["name"], role=Role(record["role"]))
        if len(self._verified) >= _CACHE_MAX:
            self._verified.clear()
        self._verified[digest] = (clock + VERIFIED_SECONDS, who)
        return who

    def all(self) -> list[dict[str, Any]]:
        return sorted(self.store.kv_list(TABLE), key=lambda r: str(r["created_at"]))

    def revoke(self, id_or_name: str) -> int:
        """Revoke a token by id, or every token of a name; returns how many."""
        count = 0
        for digest, record in self._entries():
            if id_or_name in (record["id"], record["name"]) and not record.get("revoked_at"):
                record["revoked_at"] = now().isoformat()
                self.store.kv_put(TABLE, digest, record)
                self._verified.pop(digest, None)
                count += 1
        if not count:
            raise NotFound(f"no active token {id_or_name!r}")
        return count

    def any(self) -> bool:
        return bool(self.store.kv_list(TABLE))

    def _entries(self) -> list[tuple[str, dict[str, Any]]]:
        # The kv table keys are digests; list them alongside their records.
        return self.store.kv_items(TABLE)
