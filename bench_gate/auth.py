"""Bearer tokens, stored hashed (sha256); a token is shown once, when it is created.

Identity always comes from a token, never from a request body.

A door that keeps a connection open on a token (the socket door after ``GATE:TOK``, an MCP
session) watches it (:meth:`Tokens.watch`): a revocation made through this object is
announced at once, and one made elsewhere (the CLI, another gateway on the same store) is
found by a re-check of the watched tokens every ``RECHECK_SECONDS``.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import secrets
import threading
import time
import unicodedata
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .errors import GatewayError, InvalidInput, NotFound, PermissionDenied, StoreError
from .models import Principal, Role, now
from .store import Store
from .texts import RE_TOKEN, TOKEN_PREFIX, hidden, redact

__all__ = [
    "ANONYMOUS_PREFIX",
    "TOKEN_IN_TEXT",
    "TOKEN_PREFIX",
    "Tokens",
    "carries_token",
    "held_at",
    "names_of",
    "normalize_name",
    "redact",
    "refuse_revoked",
    "refuse_token",
    "revoked_tokens",
    "token_free",
]

TABLE = "tokens"
#: How long a verified token is trusted without a store lookup. A revocation made in this
#: process takes effect at once; one made elsewhere (the CLI, another gateway) within this.
VERIFIED_SECONDS = 2.0
_CACHE_MAX = 4096
#: How often watched tokens are checked against the store for a revocation made elsewhere.
RECHECK_SECONDS = 1.0


#: Whitespace, and the braille blank (U+2800), which shows as a space but is not one.
_RE_SPACES = re.compile(r"[\s\u2800]+")
#: Unicode's default-ignorable code points (DerivedCoreProperties.txt) that are not format
#: characters: they show as nothing (a grapheme joiner, variation selectors, Hangul
#: fillers, Khmer inherent vowels, Mongolian variation selectors, musical format marks,
#: tag variation selectors), so ``olga`` with one reads ``olga``.
_RE_IGNORABLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f"
    "\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]")


#: The socket door's name for a connection without a token (``script@<peer address>``):
#: no token takes it, or its holder would own (and could never approve) those runs.
ANONYMOUS_PREFIX = "script@"


def normalize_name(name: str) -> str:
    """A person's name as identities are compared: Unicode NFKC, case-folded, invisible
    characters (format characters such as zero-width spaces and direction marks, and every
    other default-ignorable one: a grapheme joiner, a variation selector, a Hangul filler)
    removed, runs of whitespace (and blanks that show as one) made one space, trimmed.
    ``Olga``, ``olga ``, ``OLGA`` and ``olga<U+034F>`` are one person.

    Token names are unique in this form, and a verified token's Principal carries it, so
    every comparison of people (who requested, who approved what) sees one spelling."""
    # Invisible characters go first: removed after, "o<ZWSP><U+0301>" came out as an
    # uncomposed "o<U+0301>", a second name for "ó" (and normalizing again changed it).
    # (No character's NFKC or case folding makes an invisible one.)
    text = _RE_IGNORABLE.sub("", "".join(c for c in name
                                         if unicodedata.category(c) != "Cf"))
    text = unicodedata.normalize("NFKC", text)
    text = unicodedata.normalize("NFKC", text.casefold())
    return _RE_SPACES.sub(" ", text).strip()


def carries_token(text: str | None) -> bool:
    """Whether a text holds something shaped like a bench-gate token."""
    return bool(text) and RE_TOKEN.search(text or "") is not None


#: Why a free-text field holding a token is refused (it never echoes the token).
TOKEN_IN_TEXT = (f"holds something shaped like a bench-gate token ({TOKEN_PREFIX}...); free "
                 "text is stored and shown to people, a token never is: present a token only "
                 "in the Authorization header (HTTP) or with GATE:TOK on the socket door")


def refuse_token(value: str | None, field: str) -> None:
    """Raise InvalidInput naming ``field`` when ``value`` carries a token-shaped string,
    or a character that does not show as itself (``texts.hidden``: a terminal escape in a
    rationale repainted the proposal on the approver's terminal).

    Called where free text enters the core (a run's goal, notes, questions, answers...),
    before anything is stored or journaled; the message never repeats the value."""
    where = field if field.isidentifier() else None
    if carries_token(value):
        raise InvalidInput(f"{field} {TOKEN_IN_TEXT}", field=where)
    unseen = hidden(value)
    if unseen is not None:
        raise InvalidInput(f"{field} {unseen}", field=where)


def token_free(value: str | None) -> str | None:
    """A pydantic validator of the doors' bodies: the value, unless it carries a token or a
    character that does not show as itself (a ValueError the door reports as 422 with the
    field's location)."""
    if carries_token(value):
        raise ValueError(f"the text {TOKEN_IN_TEXT}")
    unseen = hidden(value)
    if unseen is not None:
        raise ValueError(f"the text {unseen}")
    return value


def revoked_tokens(store: Store) -> frozenset[str]:
    """The ids of every revoked token, read from the store now (no cache): a revocation
    made anywhere (the CLI on the store, another gateway) counts at once."""
    return frozenset(str(r["id"]) for r in store.kv_list(TABLE) if r.get("revoked_at"))


def names_of(store: Store, ids: Iterable[str]) -> set[str]:
    """The people (normalized names) these token ids belong to."""
    wanted = set(ids)
    return {normalize_name(str(r["name"])) for r in store.kv_list(TABLE)
            if str(r.get("id")) in wanted}


def held_at(store: Store, names: Iterable[str], at: str | None) -> set[str]:
    """The ids of the tokens these people held at ``at`` (ISO 8601; a name holds one active
    token at a time), every one they ever held when the time is unknown: the tokens behind
    an approval kept without them (remembered before approvals kept their token), so that
    revoking the token withdraws it too."""
    people = {normalize_name(n) for n in names}
    try:
        when = datetime.fromisoformat(at) if at else None
    except ValueError:
        when = None
    out: set[str] = set()
    for r in store.kv_list(TABLE):
        if normalize_name(str(r.get("name", ""))) not in people:
            continue
        born, died = r.get("created_at"), r.get("revoked_at")
        if when is None or (born and datetime.fromisoformat(born) <= when and (
                not died or datetime.fromisoformat(died) > when)):
            out.add(str(r["id"]))
    return out


def refuse_revoked(store: Store, who: Principal, revoked: frozenset[str] | None = None
                   ) -> None:
    """PermissionDenied when ``who``'s token was revoked, looked up now: a verified token
    is trusted ``VERIFIED_SECONDS`` without a lookup, and a decision that lets a write go
    (a grant, clearing a stop, releasing a run), or any other a person makes (a denial, a
    takeover, an answer to an agent), is never made with a revoked one."""
    if who.token and who.token in (revoked_tokens(store) if revoked is None else revoked):
        raise PermissionDenied(f"the token {who.token} of {who.name} was revoked: it "
                               "decides nothing")


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(eq=False, slots=True)
class _Watch:
    """One door's interest in one token: call ``on_revoked`` on ``loop``, once."""

    digest: str
    on_revoked: Callable[[], None]
    loop: asyncio.AbstractEventLoop


class Tokens:
    def __init__(self, store: Store) -> None:
        self.store = store
        # digest -> (trusted until, monotonic; principal). Only valid tokens are kept, so
        # guessing gets no cache and a new token works at once.
        self._verified: dict[str, tuple[float, Principal]] = {}
        # digest -> the watches on it; revoke() may run in a worker thread, hence the lock.
        self._watches: dict[str, set[_Watch]] = {}
        self._watch_lock = threading.Lock()
        self._recheck: asyncio.Task[None] | None = None
        self._create_lock = threading.Lock()

    def create(self, name: str, role: Role | str, by: Principal | None = None
               ) -> tuple[dict[str, Any], str]:
        """A new token for ``name``: returns (its record, the secret to hand over once).
        ``by``, the admin asking, is looked up now: a token revoked a moment ago (trusted
        ``VERIFIED_SECONDS`` without a lookup) makes no other (PermissionDenied).

        The name is kept normalized (:func:`normalize_name`), and is unique in that form
        among active tokens: ``Olga`` or ``olga `` when ``olga`` holds one is refused
        (InvalidInput naming the holder), so two spellings never pass for two people."""
        if by is not None:
            refuse_revoked(self.store, by)
        person = normalize_name(name)
        unseen = hidden(person)
        if unseen is not None:  # a name is shown beside every approval it gives
            raise InvalidInput(f"a token's name {unseen}", field="name")
        if not person or len(person) > 64:
            raise InvalidInput(f"a token needs a name of 1 to 64 characters, not {name!r}",
                               field="name")
        if person.startswith(ANONYMOUS_PREFIX):
            raise InvalidInput(f"{person!r} is how the socket door names a connection "
                               "without a token (script@<address>): give the token a "
                               "name of its own", field="name")
        try:
            role = Role(role)
        except ValueError as exc:
            raise InvalidInput(f"role must be one of {[r.value for r in Role]}, "
                               f"not {role!r}", field="role") from exc
        with self._create_lock:
            for record in self.store.kv_list(TABLE):
                if record.get("revoked_at") or normalize_name(str(record["name"])) != person:
                    continue
                raise InvalidInput(
                    f"the name {name!r} is taken: active token {record['id']} belongs to "
                    f"{record['name']!r} ({record['role']}), and names are compared "
                    "case-folded and trimmed; revoke that token first, or choose another "
                    "name", field="name")
            secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
            # Who made it: a leaked admin token's tokens outlive its revocation, so
            # revoking it names them (made_by) for the admin to judge.
            record = {"id": f"tok-{uuid.uuid4().hex[:12]}", "name": person,
                      "role": role.value, "created_at": now().isoformat(),
                      "revoked_at": None,
                      "created_by": by.token if by is not None and by.token else None}
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
        who = Principal(name=normalize_name(record["name"]), role=Role(record["role"]),
                        token=str(record["id"]))
        if len(self._verified) >= _CACHE_MAX:
            self._verified.clear()
        self._verified[digest] = (clock + VERIFIED_SECONDS, who)
        return who

    def verify_for_stop(self, token: str | None) -> Principal | None:
        """:meth:`verify`, or, while the store is away, who the token was when last
        verified here: the emergency stop never waits for the store (pressing it harms
        nothing; clearing it is an operator's, looked up on the store)."""
        try:
            return self.verify(token)
        except StoreError:
            hit = self._verified.get(_digest(token)) if token else None
            if hit is None:
                raise
            return hit[1]

    def all(self) -> list[dict[str, Any]]:
        return sorted(self.store.kv_list(TABLE), key=lambda r: str(r["created_at"]))

    def revoke(self, id_or_name: str) -> int:
        """Revoke a token by id, or every token of a name; returns how many. Whatever
        watches a revoked token (live socket-door connections, MCP sessions) hears of it
        at once."""
        revoked = []
        for digest, record in self._entries():
            if not record.get("revoked_at") and (
                    id_or_name == record["id"] or
                    normalize_name(id_or_name) == normalize_name(record["name"])):
                record["revoked_at"] = now().isoformat()
                self.store.kv_put(TABLE, digest, record)
                self._verified.pop(digest, None)
                revoked.append(digest)
        if not revoked:
            raise NotFound(f"no active token {id_or_name!r}")
        self._announce(revoked)
        return len(revoked)

    def made_by(self, id_or_name: str) -> list[dict[str, Any]]:
        """The active tokens made by the token ``id_or_name`` names (its id, or every token
        of a name), oldest first."""
        makers = {str(r["id"]) for r in self.store.kv_list(TABLE)
                  if id_or_name == r["id"]
                  or normalize_name(id_or_name) == normalize_name(str(r["name"]))}
        return [r for r in self.all()
                if r.get("created_by") in makers and not r.get("revoked_at")]

    def role_of(self, name: str) -> Role | None:
        """The highest role among ``name``'s active tokens; None when it has none."""
        roles = [Role(r["role"]) for r in self.store.kv_list(TABLE)
                 if r.get("name") == name and not r.get("revoked_at")]
        return max(roles, key=list(Role).index) if roles else None

    # ------------------------------------------------------------------ revocation watch
    def watch(self, token: str, on_revoked: Callable[[], None]) -> Callable[[], None]:
        """Call ``on_revoked`` once, on the running loop, when ``token`` is revoked (or found
        missing): at once for a revocation made through this object, within
        ``RECHECK_SECONDS`` for one made elsewhere. Returns a function that stops watching."""
        loop = asyncio.get_running_loop()
        watch = _Watch(_digest(token), on_revoked, loop)
        with self._watch_lock:
            self._watches.setdefault(watch.digest, set()).add(watch)
            if self._recheck is None or self._recheck.done():
                self._recheck = loop.create_task(self._recheck_forever())

        def unwatch() -> None:
            with self._watch_lock:
                watches = self._watches.get(watch.digest)
                if watches is not None:
                    watches.discard(watch)
                    if not watches:
                        del self._watches[watch.digest]
        return unwatch

    def _announce(self, digests: list[str]) -> None:
        """Tell every watch of these tokens, each on its own loop (from any thread)."""
        with self._watch_lock:
            fired = [w for d in digests for w in self._watches.pop(d, ())]
        for watch in fired:
            if not watch.loop.is_closed():
                watch.loop.call_soon_threadsafe(watch.on_revoked)

    async def _recheck_forever(self) -> None:
        """Revocations made by another process: the watched tokens, read every
        ``RECHECK_SECONDS`` while any is watched."""
        while True:
            await asyncio.sleep(RECHECK_SECONDS)
            with self._watch_lock:
                watched = list(self._watches)
                if not watched:
                    self._recheck = None
                    return
            try:
                records = dict(self._entries())
            except GatewayError:
                continue  # the store is away: look again next time
            gone = [d for d in watched
                    if (r := records.get(d)) is None or r.get("revoked_at")]
            for digest in gone:
                self._verified.pop(digest, None)
            if gone:
                self._announce(gone)

    def any(self) -> bool:
        return bool(self.store.kv_list(TABLE))

    def _entries(self) -> list[tuple[str, dict[str, Any]]]:
        # The kv table keys are digests; list them alongside their records.
        return self.store.kv_items(TABLE)
