"""The bench console: server-rendered pages over the gateway core, mounted at ``/``.

Pages: sign in/out (``_signin``), the pending queue, live over SSE, and the agents'
questions (``_queue``), one request with its full handoff and the decision controls
(``_requests``), the instrument panel (``_panel``), a run's timeline and the decided history
(``_history``), and the API's reference pages with the favicon (``_docs``). Every write goes
through the core's approval path: the panel only files requests.
"""

from __future__ import annotations

import asyncio
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from ..auth import Tokens
from ..gateway import Gateway
from . import _docs, _history, _panel, _queue, _requests, _signin
from ._console import HERE, Console, SignInRequired
from ._frames import FrameGuard

__all__ = ["create_console"]


def create_console(gateway: Gateway, tokens: Tokens,
                   stopping: asyncio.Event | None = None) -> FastAPI:
    """The console as an ASGI app; ``server.py`` mounts it at ``/`` after the API routes."""
    console = Console(gateway, tokens, stopping or asyncio.Event())
    app = FastAPI(title="bench-gate console", docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.console = console
    app.add_middleware(FrameGuard)  # never framed: X-Frame-Options and CSP frame-ancestors
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")
    # The API's /docs and /redoc, offline: their bundles come from an installed package.
    app.mount(_docs.ASSETS_URL, StaticFiles(directory=str(_docs.ASSETS)), name="docs-assets")

    @app.exception_handler(SignInRequired)
    async def _sign_in(request: Request, exc: SignInRequired) -> Response:
        if request.method == "GET" and not request.url.path.startswith(
                ("/fragments", "/events")):
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"/login?next={quote(target)}", status_code=303)
        return HTMLResponse("sign in first", status_code=401)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> Response:
        return console.page(request, "error.html", {"status": exc.status_code,
                                                    "detail": exc.detail},
                            status_code=exc.status_code)

    for module in (_signin, _queue, _requests, _panel, _history, _docs):
        app.include_router(module.router)
    return app
