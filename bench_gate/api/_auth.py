"""Bearer tokens to principals, and the role each endpoint needs.

Roles nest: a requester's rights < an operator's < an admin's. Identity always comes from
the token; 401 without a valid one, 403 with the wrong role.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import Request
from starlette.exceptions import HTTPException

from ..auth import Tokens
from ..models import Principal, Role

__all__ = ["requires"]


def _principal(request: Request, stop: bool = False) -> Principal:
    tokens: Tokens = request.app.state.tokens
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    challenge = {"WWW-Authenticate": 'Bearer realm="bench-gate"'}
    if scheme.lower() != "bearer" or not token.strip():
        raise HTTPException(401, "a bearer token is required (Authorization: Bearer bg_...)",
                            headers=challenge)
    who = (tokens.verify_for_stop if stop else tokens.verify)(token.strip())
    if who is None:
        raise HTTPException(401, "the token is not valid or was revoked", headers=challenge)
    return who


def requires(role: Role, *, stop: bool = False
             ) -> Callable[[Request], Awaitable[Principal]]:
    """A FastAPI dependency: the caller, if its role is at least ``role``. A coroutine, so
    FastAPI runs it on the loop rather than sending each request through a worker thread.
    ``stop``: for the emergency stop, which never waits for the store (a token verified
    here before is taken while the store is away)."""

    async def dependency(request: Request) -> Principal:
        who = _principal(request, stop)
        if not who.at_least(role):
            article = "an" if who.role.value[0] in "aeiou" else "a"  # "an operator"
            raise HTTPException(403, f"{who.name} is {article} {who.role.value}; this needs "
                                     f"the {role.value} role")
        return who

    dependency.__name__ = f"requires_{role.value}"
    return dependency
