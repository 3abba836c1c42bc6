"""The app factory: routes, problem responses, and the state the routes read."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from ..auth import Tokens
from ..gateway import Gateway
from . import _bench, _journal, _leases, _plans, _problems, _questions, _runs, _stop, _takeover
from ._json import OneValuePerKey
from ._limits import BodyLimit
from ._query import KnownQuery

__all__ = ["create_app"]


def create_app(gateway: Gateway, tokens: Tokens,
               doors_info: dict[str, tuple[str, int]] | None = None) -> FastAPI:
    """The HTTP door over a started gateway; the caller owns the gateway's lifecycle."""
    stopping = asyncio.Event()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        stopping.set()

    # /docs and /redoc are the console's (web/_docs.py): served offline, with no CDN.
    app = FastAPI(title="bench-gate", version="0.1.0", lifespan=lifespan,
                  description="Queries pass, writes wait for a person.",
                  docs_url=None, redoc_url=None)
    app.state.gateway = gateway
    app.state.tokens = tokens
    app.state.doors_info = dict(doors_info or {})
    app.state.stopping = stopping
    _problems.install(app)
    # Inside the body cap (the last added is the outermost): a /v1 body with a key twice,
    # a query parameter the route does not take.
    app.add_middleware(OneValuePerKey)
    app.add_middleware(KnownQuery, api=app)
    # Before authentication and routing, on everything mounted later (/mcp, the console).
    app.add_middleware(BodyLimit, max_bytes=gateway.config.server.max_body_bytes)
    app.include_router(_runs.router)
    app.include_router(_plans.router)
    app.include_router(_takeover.router)
    app.include_router(_questions.router)
    app.include_router(_bench.router)
    app.include_router(_journal.router)
    app.include_router(_stop.router)
    app.include_router(_leases.router)
    _problems.unmatched(app)  # last: what no route above took, under /v1
    return app
