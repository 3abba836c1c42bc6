"""The console's state and what every page shares: the signed-in person, the page frame,
flash messages, checked forms, and the gateway's errors as HTTP errors.

The console talks to the gateway's façade only; every page module reaches it through
:func:`console_of`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException

from ..auth import Tokens
from ..doorway import problem_of
from ..errors import GatewayError, InstrumentError, NotFound
from ..gateway import Gateway, RequestPage, RequestSort
from ..handoff import edit_words
from ..models import Principal, Status, TakeoverRequest
from . import _views as views
from ._plots import Samples
from ._session import COOKIE, Session, Sessions

__all__ = ["QUEUE_PAGE", "Console", "SignInRequired", "checked_form", "console_of", "first",
           "form_of", "require_decider", "same_origin", "shown_error"]

HERE = Path(__file__).parent
#: Pending requests on one page of the queue.
QUEUE_PAGE = 100
T = TypeVar("T")


class SignInRequired(Exception):
    """No valid session: pages redirect to sign-in, fragments answer 401."""


class Console:
    """The console's state: the core, sign-in sessions, templates, recent measurements."""

    def __init__(self, gateway: Gateway, tokens: Tokens, stopping: asyncio.Event) -> None:
        self.gateway = gateway
        self.tokens = tokens
        self.sessions = Sessions(tokens)
        self.stopping = stopping
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        self.templates.env.globals["show"] = views.show
        self.templates.env.globals["what_changes"] = views.what_changes
        self.templates.env.globals["channels"] = views.channels
        self.templates.env.globals["edit_words"] = edit_words
        self.templates.env.globals["badges"] = views.badges
        self.templates.env.globals["utc"] = views.utc
        self.templates.env.globals["label"] = views.label
        self.templates.env.globals["outcome_words"] = views.outcome_words
        self.templates.env.globals["deciders"] = views.deciders
        #: Each instrument's measurements over the last minutes, for the panel's plots.
        self.samples: dict[str, Samples] = {}
        self.flash: dict[str, list[tuple[str, str]]] = {}

    def who(self, request: Request, stop: bool = False) -> tuple[Session, Principal]:
        found = self.sessions.get(request.cookies.get(COOKIE), stop)
        if found is None:
            raise SignInRequired()
        return found

    def page(self, request: Request, name: str, ctx: dict[str, Any],
             status_code: int = 200) -> HTMLResponse:
        found = self.sessions.get(request.cookies.get(COOKIE))
        base: dict[str, Any] = {"me": None, "csrf": "", "messages": [],
                                "can_decide": False, "bench": self.gateway.config.bench,
                                "instruments": [i.name for i in self.gateway.config.instruments]}
        if found is not None:
            session, me = found
            base.update(me=me, csrf=session.csrf, can_decide=me.operates,
                        messages=self.flash.pop(session.id, []),
                        # Every page: what is stopped, and each instrument not locked to
                        # the gateway (its warning is never hidden; docs/interlocks.md).
                        stopped=sorted(self.gateway.stopped()),
                        unlocked={n: lock for n in base["instruments"]
                                  if not (lock := self.gateway.instrument_lock(n)).locked},
                        # and each answering *IDN? as another instrument than its profile's
                        wrong={n: words for n in base["instruments"] if (
                            words := self.gateway.instrument_identity(n)["words"])})
        base.update(ctx)
        return self.templates.TemplateResponse(request, name, base, status_code=status_code)

    def say(self, session: Session, kind: str, text: str) -> None:
        self.flash.setdefault(session.id, []).append((kind, text))

    def request_for(self, me: Principal, request_id: str) -> TakeoverRequest:
        req = shown_error(self.gateway.get_request, request_id)
        if not self.gateway.may_see(me, req.run_id):
            raise HTTPException(403, f"{request_id} belongs to another requester's run; "
                                     "a requester sees only its own runs")
        return req

    async def live(self, instrument: str) -> dict[str, str] | None:
        try:
            return views.flatten(await self.gateway.live_state(instrument))
        except (InstrumentError, NotFound):
            return None

    def queue(self, me: Principal, sort: RequestSort = RequestSort.EXPIRY,
              offset: int = 0) -> RequestPage:
        """One page of the pending requests ``me`` may see, sorted and counted in the store
        (a requester's own runs are chosen there too, before paging)."""
        return self.gateway.list_requests(
            Status.PENDING, limit=QUEUE_PAGE, offset=max(0, offset), sort=sort,
            requester=None if me.operates else me.name)


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def shown_error(fn: Callable[..., T], *args: Any) -> T:
    """Call the gateway; its error becomes the HTTP error every door gives it."""
    try:
        return fn(*args)
    except GatewayError as exc:
        raise HTTPException(problem_of(exc).http, exc.message) from exc


async def form_of(request: Request) -> dict[str, list[str]]:
    """An urlencoded form body (the console's forms), parsed without extra dependencies."""
    if "application/x-www-form-urlencoded" not in request.headers.get("content-type", ""):
        raise HTTPException(415, "forms are sent as application/x-www-form-urlencoded")
    body = await request.body()
    return parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)


def first(form: dict[str, list[str]], name: str, default: str = "") -> str:
    return form.get(name, [default])[0]


def same_origin(request: Request) -> bool:
    origin = request.headers.get("origin")
    if not origin or origin == "null":
        return origin is None
    return urlsplit(origin).netloc == request.headers.get("host")


async def checked_form(request: Request, stop: bool = False
                       ) -> tuple[Console, Session, Principal, dict[str, list[str]]]:
    """A signed-in POST with a matching CSRF token from the same origin, or 403.
    ``stop``: the emergency stop's, which never waits for the store."""
    console = console_of(request)
    session, me = console.who(request, stop)
    form = await form_of(request)
    if not same_origin(request) or not Sessions.csrf_ok(session.csrf, first(form, "csrf")):
        raise HTTPException(403, "the form's CSRF token is missing or wrong: reload the page "
                                 "and try again")
    return console, session, me, form


def require_decider(me: Principal, doing: str) -> None:
    if not me.operates:
        raise HTTPException(403, f"{me.name} is a {me.role.value}: {doing} needs an "
                                 "operator or admin token")
