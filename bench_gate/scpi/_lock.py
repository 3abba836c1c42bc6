"""A profile's ``lock`` section: how its instrument is locked to one interface, the
gateway's, so that nothing reaches it around the gate (docs/interlocks.md, section 2).

    lock:
      request: "SYST:LOCK:REQ?"   # answers 1 when granted, 0 when another interface holds it
      release: "SYST:LOCK:REL"
      owner: "SYST:LOCK:OWN?"     # names the interface holding it (LAN1, USB, NONE...)

A profile without one describes an instrument the gateway cannot lock. The request and the
release must be ``forbidden`` in the profile's command table, so that no client can take or
free the gateway's lock through any door; the owner query must be a read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, field_validator

if TYPE_CHECKING:
    from ._profile import Profile

__all__ = ["LockSpec", "check_lock"]


class LockSpec(BaseModel):
    """The commands, canonical as the gateway sends them, that lock the instrument."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: A query: 1 (or +1) when this interface now holds the lock, 0 when another does.
    request: str
    #: Undoes one request (the gateway never sends it: the lock goes with its connection).
    release: str
    #: A query naming the interface that holds the lock, for "held by ...".
    owner: str | None = None

    @field_validator("request", "owner")
    @classmethod
    def _query(cls, v: str | None) -> str | None:
        if v is not None and not v.endswith("?"):
            raise ValueError(f"expected a query ending in '?', got {v!r}")
        return v

    @field_validator("release")
    @classmethod
    def _command(cls, v: str) -> str:
        if v.endswith("?"):
            raise ValueError(f"expected a command, not the query {v!r}")
        return v


def check_lock(profile: Profile) -> None:
    """Refuse a lock section a client could get around: its request and release must be
    forbidden headers of the profile, its owner query a read."""
    from ._schema import Effect, ProfileError

    lock = profile.model.lock
    if lock is None:
        return
    for what, command, wanted in (("request", lock.request, Effect.FORBIDDEN),
                                  ("release", lock.release, Effect.FORBIDDEN),
                                  ("owner", lock.owner, Effect.READ)):
        if command is None:
            continue
        form = profile.form_of(command)
        if form is None or form.effect is not wanted:
            found = "not in the profile" if form is None else f"effect {form.effect.value}"
            raise ProfileError(f"{profile.name}: lock.{what} {command!r} must be a "
                               f"{wanted.value} header of the profile, found {found}")
