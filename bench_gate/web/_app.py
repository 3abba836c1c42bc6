"""The bench console: server-rendered pages over the gateway core, mounted at ``/``.

Pages: sign in/out, the pending queue (live over SSE), one request with its full handoff and
the decision controls, the instrument panel, a run's timeline, and the decided history.
Every write goes through the core's approval path: the panel only files requests.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException
from starlette.types import Receive, Scope, Send

from ..auth import TOKEN_IN_TEXT, Tokens, carries_token
from ..errors import GatewayError, InstrumentError, NotFound, QuotaExceeded
from ..gateway import Gateway
from ..models import ApprovalKind, Principal, RunKind, RunStatus, Status, TakeoverRequest, now
from ..questions import Answer, QuestionSet, QuestionStatus
from ..quotas import Lease, Quota, lease
from ..states import TERMINAL
from ..store import RequestPage, RequestSort
from . import _views as views
from ._frames import FrameGuard
from ._session import COOKIE, LOGIN_CSRF_COOKIE, Session, Sessions, can_decide, new_token

__all__ = ["create_console"]

HERE = Path(__file__).parent
SHOWN_TABLE = "console_shown"
ENGINEER_RUNS = "console_engineer_runs"
HISTORY_POINTS = 120
#: Pending requests on one page of the queue.
QUEUE_PAGE = 100
_SORT_WORDS = {RequestSort.EXPIRY: "soonest expiry first", RequestSort.NEWEST: "newest first"}


class _LeasedStream(StreamingResponse):
    """An event stream that gives its quota lease back, and stops watching its token,
    however it ends."""

    def __init__(self, content: AsyncIterator[str], held: Lease,
                 unwatch: Callable[[], None], **kw: Any) -> None:
        super().__init__(content, **kw)
        self.held = held
        self.unwatch = unwatch

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.held.release()
            self.unwatch()


class SignInRequired(Exception):
    """No valid session: pages redirect to sign-in, fragments answer 401."""


class Console:
    """The console's state: the core, sign-in sessions, templates, recent measurements."""

    def __init__(self, gateway: Gateway, tokens: Tokens, stopping: asyncio.Event) -> None:
        self.gateway = gateway
        self.sessions = Sessions(tokens)
        self.stopping = stopping
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        self.templates.env.globals["show"] = views.show
        self.templates.env.globals["what_changes"] = views.what_changes
        self.templates.env.globals["badges"] = views.badges
        self.samples: dict[str, deque[tuple[float, dict[str, tuple[float, float]]]]] = {}
        self.flash: dict[str, list[tuple[str, str]]] = {}

    # ------------------------------------------------------------------ helpers
    def who(self, request: Request) -> tuple[Session, Principal]:
        found = self.sessions.get(request.cookies.get(COOKIE))
        if found is None:
            raise SignInRequired()
        return found

    def page(self, request: Request, name: str, ctx: dict[str, Any],
             status_code: int = 200) -> HTMLResponse:
        found = self.sessions.get(request.cookies.get(COOKIE))
        base: dict[str, Any] = {"me": None, "csrf": "", "messages": [],
                                "can_decide": False, "bench": self.gateway.config.bench,
                                "instruments": list(self.gateway.instruments)}
        if found is not None:
            session, me = found
            base.update(me=me, csrf=session.csrf, can_decide=can_decide(me),
                        messages=self.flash.pop(session.id, []))
        base.update(ctx)
        return self.templates.TemplateResponse(request, name, base, status_code=status_code)

    def say(self, session: Session, kind: str, text: str) -> None:
        self.flash.setdefault(session.id, []).append((kind, text))

    def visible(self, me: Principal, run_id: str | None) -> bool:
        if can_decide(me):
            return True
        run = self.gateway.store.get_run(str(run_id)) if run_id else None
        return run is not None and run.principal == me.name

    def request_for(self, me: Principal, request_id: str) -> TakeoverRequest:
        try:
            req = self.gateway.get_request(request_id)
        except NotFound as exc:
            raise HTTPException(404, exc.message) from exc
        if not self.visible(me, req.run_id):
            raise HTTPException(403, f"{request_id} belongs to another requester's run; "
                                     "a requester sees only its own runs")
        return req

    async def live(self, instrument: str) -> dict[str, str] | None:
        try:
            return views.flatten(await self.gateway.live_state(instrument))
        except (InstrumentError, NotFound):
            return None

    def record(self, req: TakeoverRequest, who: Principal, action: str,
               live: dict[str, str] | None, summary: str, key: str | None = None) -> None:
        """What the console showed to whom, beside the journal (for the run timeline)."""
        at = now().isoformat()
        self.gateway.store.kv_put(SHOWN_TABLE, key or f"{req.id}/{at}/{who.name}/{action}", {
            "request_id": req.id, "run_id": req.run_id, "who": who.name, "action": action,
            "at": at, "proposal_hash": req.proposal_hash, "live": live or {},
            "summary": summary})

    def queue(self, me: Principal, sort: RequestSort = RequestSort.EXPIRY,
              offset: int = 0) -> RequestPage:
        """One page of the pending requests ``me`` may see, sorted and counted in the store
        (a requester's own runs are chosen there too, before paging)."""
        return self.gateway.store.page_requests(
            Status.PENDING, limit=QUEUE_PAGE, offset=max(0, offset), sort=sort,
            requester=None if can_decide(me) else me.name)

    def engineer_run(self, me: Principal) -> str:
        """This engineer's console run: reused while active, else a new one."""
        record = self.gateway.store.kv_get(ENGINEER_RUNS, me.name)
        if record is not None:
            run = self.gateway.store.get_run(str(record["run_id"]))
            if run is not None and run.status is RunStatus.ACTIVE:
                return run.id
        run = self.gateway.create_run(me, RunKind.ENGINEER,
                                      goal=f"{me.name}'s changes from the bench console")
        self.gateway.store.kv_put(ENGINEER_RUNS, me.name, {"run_id": run.id})
        return run.id


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


async def checked_form(console: Console, request: Request
                       ) -> tuple[Session, Principal, dict[str, list[str]]]:
    """A signed-in POST with a matching CSRF token from the same origin, or 403."""
    session, me = console.who(request)
    form = await form_of(request)
    if not same_origin(request) or not Sessions.csrf_ok(session.csrf, first(form, "csrf")):
        raise HTTPException(403, "the form's CSRF token is missing or wrong: reload the page "
                                 "and try again")
    return session, me, form


def create_console(gateway: Gateway, tokens: Tokens,
                   stopping: asyncio.Event | None = None) -> FastAPI:
    """The console as an ASGI app; ``server.py`` mounts it at ``/`` after the API routes."""
    console = Console(gateway, tokens, stopping or asyncio.Event())
    app = FastAPI(title="bench-gate console", docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.console = console
    app.add_middleware(FrameGuard)  # never framed: X-Frame-Options and CSP frame-ancestors
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")

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

    # ------------------------------------------------------------------ sign in
    @app.get("/login", response_class=HTMLResponse)
    async def login_form(request: Request, next: str = "/") -> Response:
        token = request.cookies.get(LOGIN_CSRF_COOKIE) or new_token()
        response = console.page(request, "login.html", {"login_csrf": token, "next": next,
                                                        "error": None})
        response.set_cookie(LOGIN_CSRF_COOKIE, token, httponly=True, samesite="strict",
                            path="/login")
        return response

    @app.post("/login", response_class=HTMLResponse)
    async def login(request: Request) -> Response:
        form = await form_of(request)
        target = first(form, "next", "/")
        if not target.startswith("/") or target.startswith("//"):
            target = "/"
        if not same_origin(request) or not Sessions.csrf_ok(
                request.cookies.get(LOGIN_CSRF_COOKIE), first(form, "csrf")):
            raise HTTPException(403, "the sign-in form's CSRF token is missing or wrong: "
                                     "reload the sign-in page")
        opened = console.sessions.open(first(form, "token"))
        if opened is None:
            return console.page(request, "login.html", {
                "login_csrf": request.cookies.get(LOGIN_CSRF_COOKIE), "next": target,
                "error": "That token is not valid or was revoked."}, status_code=401)
        session, _ = opened
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(COOKIE, session.id, httponly=True, samesite="strict", path="/",
                            secure=request.url.scheme == "https")
        response.delete_cookie(LOGIN_CSRF_COOKIE, path="/login")
        return response

    @app.post("/stop", response_class=HTMLResponse)
    async def emergency_stop(request: Request) -> Response:
        """The emergency stop, for anyone signed in: no approval, never waits."""
        session, me, _ = await checked_form(console, request)
        done = await gateway.emergency_stop(me, "console")
        names = ", ".join(done["instruments"])
        console.say(session, "error", f"EMERGENCY STOP by {me.name}: {names} made safe in "
                    f"{done['seconds'] * 1000:.0f} ms, {len(done['cancelled'])} requests "
                    "cancelled; writes are refused until an operator clears the stop "
                    "(bench-gate stop --clear)")
        return RedirectResponse("/", status_code=303)

    @app.post("/logout")
    async def logout(request: Request) -> Response:
        session, _, _ = await checked_form(console, request)
        console.sessions.close(session.id)
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response

    # ------------------------------------------------------------------ queue
    def open_questions(me: Principal) -> list[QuestionSet]:
        asks = gateway.questions.find(QuestionStatus.OPEN, limit=200)
        return [q for q in reversed(asks) if console.visible(me, q.run_id)]

    def queue_page(request: Request, me: Principal) -> dict[str, Any]:
        """The queue's page from ``?sort=expiry|newest&offset=N``: what the page shows and
        the links to the other pages and orders."""
        try:
            sort = RequestSort(request.query_params.get("sort") or RequestSort.EXPIRY)
        except ValueError:
            sort = RequestSort.EXPIRY
        try:
            offset = max(0, int(request.query_params.get("offset") or 0))
        except ValueError:
            offset = 0
        page = console.queue(me, sort, offset)

        def at(sort_: RequestSort, offset_: int) -> str:
            return f"/?sort={sort_.value}" + (f"&offset={offset_}" if offset_ else "")
        return {"pending": page, "questions": open_questions(me), "now": gateway.clock(),
                "paging": {"total": page.total, "offset": page.offset, "limit": page.limit,
                           "sort": sort.value, "words": _SORT_WORDS[sort],
                           "first": page.offset + 1 if page else 0,
                           "last": page.offset + len(page),
                           "next": at(sort, page.offset + page.limit)
                           if page.offset + page.limit < page.total else None,
                           "prev": at(sort, max(0, page.offset - page.limit))
                           if page.offset > 0 else None,
                           "sorts": [(s.value, _SORT_WORDS[s], at(s, 0)) for s in RequestSort]}}

    @app.get("/", response_class=HTMLResponse)
    async def queue(request: Request) -> Response:
        _, me = console.who(request)
        return console.page(request, "queue.html", queue_page(request, me))

    @app.get("/fragments/queue", response_class=HTMLResponse)
    async def queue_rows(request: Request) -> Response:
        _, me = console.who(request)
        ctx = queue_page(request, me)
        response = console.page(request, "_queue_rows.html", ctx)
        response.headers["X-Total-Count"] = str(ctx["paging"]["total"])
        return response

    def one_question(me: Principal, question_id: str) -> QuestionSet:
        try:
            ask = gateway.questions.get(question_id)
        except NotFound as exc:
            raise HTTPException(404, exc.message) from exc
        if not console.visible(me, ask.run_id):
            raise HTTPException(403, f"{question_id} belongs to another requester's run")
        return ask

    async def question_page(request: Request, ask: QuestionSet, *,
                            refusal: str | None = None, status_code: int = 200) -> Response:
        return console.page(request, "question.html", {
            "q": ask, "run": gateway.store.get_run(ask.run_id), "refusal": refusal,
            "now": gateway.clock()}, status_code=status_code)

    @app.get("/questions/{question_id}", response_class=HTMLResponse)
    async def question(request: Request, question_id: str) -> Response:
        _, me = console.who(request)
        return await question_page(request, one_question(me, question_id))

    @app.post("/questions/{question_id}/answer", response_class=HTMLResponse)
    async def answer(request: Request, question_id: str) -> Response:
        session, me, form = await checked_form(console, request)
        if not can_decide(me):
            raise HTTPException(403, f"{me.name} is a {me.role.value}: answering needs an "
                                     "operator or admin token")
        ask = one_question(me, question_id)
        answers: list[Answer | dict[str, Any]] = [
                   {"choice": first(form, f"choice-{i}") or None,
                    "text": first(form, f"text-{i}").strip() or None}
                   for i in range(len(ask.questions))]
        try:
            done = gateway.questions.answer(ask.id, me, answers, first(form, "notes").strip())
        except GatewayError as exc:
            return await question_page(request, gateway.questions.get(ask.id),
                                       refusal=f"Not sent: {exc.message}", status_code=422)
        console.say(session, "ok", f"Answered {done.id}; the agent has your answers.")
        return RedirectResponse("/", status_code=303)

    @app.get("/events")
    async def events(request: Request) -> Response:
        session, me = console.who(request)
        try:
            held = lease(gateway, me, Quota.SSE_STREAMS)
        except QuotaExceeded as exc:
            return Response(exc.message, status_code=429, media_type="text/plain")
        revoked = asyncio.Event()  # a revoked token ends its sessions' streams too
        unwatch = tokens.watch(session.token, revoked.set)

        async def stream() -> AsyncIterator[str]:
            async with gateway.subscribe() as queue:
                yield "retry: 2000\n: connected\n\n"
                while not console.stopping.is_set() and not revoked.is_set():
                    try:
                        message = await asyncio.wait_for(queue.get(), timeout=1.0)
                    except TimeoutError:
                        if await request.is_disconnected():
                            return
                        yield ": tick\n\n"
                        continue
                    # Requests, plans and questions name their run; a run event is the run.
                    run_id = message.get("id") if message.get("type") == "run" \
                        else message.get("run_id")
                    if console.visible(me, run_id):
                        yield f"event: {message['type']}\ndata: {json.dumps(message)}\n\n"

        return _LeasedStream(stream(), held, unwatch, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache"})

    # ------------------------------------------------------------------ one request
    async def request_page(request: Request, req: TakeoverRequest, me: Principal, *,
                           refusal: str | None = None,
                           changed: list[tuple[str, str, str]] | None = None,
                           status_code: int = 200) -> Response:
        profile = gateway.profile_for(req)
        # Another bench's instrument is read (and rechecked) by that bench's gateway only.
        live = await console.live(req.instrument) if (
            req.status is Status.PENDING and gateway.owns(req)) else None
        shown_live = views.relevant(req, live) if live is not None else {}
        run = gateway.store.get_run(req.run_id)
        own = run is not None and run.principal == me.name
        self_blocked = own and (run is not None and (
            run.kind is not RunKind.ENGINEER or gateway.config.policy.independent_approver))
        valid = req.valid_approvals()
        if req.status is Status.PENDING and can_decide(me):
            console.record(req, me, "viewed", shown_live, views.what_changes(req),
                           key=f"{req.id}/{me.name}/viewed/{req.proposal_hash[:16]}")
        return console.page(request, "request.html", {
            "req": req, "run": run, "h": req.handoff, "profile": profile,
            "rows": views.diff_rows(req, profile, live),
            "drifted": live is not None and shown_live != req.snapshot.values,
            "live_read": live is not None,
            "shown_live": json.dumps(shown_live, sort_keys=True),
            "edits": views.edit_fields(req, profile,
                                       gateway.config.envelope.get(req.instrument, {})),
            "missing": req.missing(), "valid": valid, "own": own,
            "self_blocked": self_blocked, "kind_words": views.KIND_WORDS,
            "energize_channels": [a.channel for a in req.actions
                                  if a.approval is ApprovalKind.OUTPUT_ENABLE],
            "setpoint_words": [a.words for a in req.actions
                               if a.approval is ApprovalKind.SETPOINT],
            "refusal": refusal, "changed": changed or [], "terminal": req.status in TERMINAL,
            "now": gateway.clock()}, status_code=status_code)

    @app.get("/requests/{request_id}", response_class=HTMLResponse)
    async def one(request: Request, request_id: str) -> Response:
        _, me = console.who(request)
        return await request_page(request, console.request_for(me, request_id), me)

    @app.post("/requests/{request_id}/approve", response_class=HTMLResponse)
    async def approve(request: Request, request_id: str) -> Response:
        session, me, form = await checked_form(console, request)
        if not can_decide(me):
            raise HTTPException(403, f"{me.name} is a {me.role.value}: deciding needs an "
                                     "operator or admin token")
        req = console.request_for(me, request_id)
        if req.status is not Status.PENDING:
            console.say(session, "error", f"{req.id} is already {req.status.value}; nothing "
                                          "was approved")
            return RedirectResponse(f"/requests/{req.id}", status_code=303)
        kinds = [k for k in form.get("kind", []) if k in {x.value for x in ApprovalKind}]
        shown_hash = first(form, "shown_hash")
        if shown_hash != req.proposal_hash:
            return await request_page(
                request, req, me, status_code=409,
                refusal="The request changed since this page was loaded (someone edited "
                        "it). Nothing was approved: read it again and decide.")
        profile = gateway.profile_for(req)
        remote = not gateway.owns(req)
        live = {} if remote else await console.live(req.instrument)
        if live is None:
            return await request_page(request, req, me, status_code=502,
                                      refusal="The instrument cannot be read right now, so "
                                              "the live state cannot be checked. Nothing was "
                                              "approved.")
        try:
            shown: dict[str, str] = json.loads(first(form, "shown_live", "{}"))
        except json.JSONDecodeError:
            shown = {}
        now_live = views.relevant(req, live)
        if not remote and now_live != shown:
            changed = [(views.label(profile, k), views.show(profile, k, shown.get(k)),
                        views.show(profile, k, now_live.get(k)))
                       for k in sorted(set(shown) | set(now_live))
                       if shown.get(k) != now_live.get(k)]
            console.record(req, me, "refused_stale", now_live,
                           "approval refused: the live state changed since the page loaded")
            return await request_page(
                request, req, me, changed=changed, status_code=409,
                refusal="The instrument's live state changed since this page was loaded. "
                        "Nothing was approved. Here is the new state: decide again.")
        if not kinds:
            return await request_page(request, req, me, status_code=422,
                                      refusal="Tick what you approve: nothing is approved "
                                              "by default.")
        edits: dict[str, str] = {}
        for fld in views.edit_fields(req, profile,
                                     gateway.config.envelope.get(req.instrument, {})):
            raw = first(form, f"edit:{fld.key}", fld.value)
            value, error = views.check_edit(fld, raw)
            if error:
                return await request_page(request, req, me, status_code=422,
                                          refusal=f"Not approved: {error}.")
            if value is not None:
                edits[fld.key] = value
        notes = first(form, "notes").strip()
        if carries_token(notes):  # never stored, never shown back
            return await request_page(request, req, me, status_code=422,
                                      refusal=f"Not approved: the notes {TOKEN_IN_TEXT}.")
        try:
            # The core checks the hash again, in the same step that records the approval.
            result = await gateway.grant(req.id, me, kinds, notes, edits or None,
                                         proposal_hash=shown_hash)
        except GatewayError as exc:
            return await request_page(request, gateway.get_request(req.id), me,
                                      status_code=409, refusal=f"Not approved: {exc.message}")
        done = result.request
        console.record(done, me, "approved", now_live,
                       f"approved {', '.join(kinds)}" + (f" with edits {edits}" if edits else ""))
        if done.status is Status.PENDING:
            console.say(session, "info", f"Approved {', '.join(kinds)}. {result.message}")
        elif done.status is Status.EXECUTED:
            console.say(session, "ok", f"Approved and executed: {done.outcome}")
        elif done.status is Status.STALE and done.superseded_by:
            console.say(session, "error", f"{done.outcome} The fresh request is "
                                          f"{done.superseded_by}.")
            return RedirectResponse(f"/requests/{done.superseded_by}", status_code=303)
        else:
            console.say(session, "error", done.outcome or done.status.value)
        return RedirectResponse(f"/requests/{done.id}", status_code=303)

    @app.post("/requests/{request_id}/deny", response_class=HTMLResponse)
    async def deny(request: Request, request_id: str) -> Response:
        session, me, form = await checked_form(console, request)
        if not can_decide(me):
            raise HTTPException(403, f"{me.name} is a {me.role.value}: deciding needs an "
                                     "operator or admin token")
        req = console.request_for(me, request_id)
        notes = first(form, "notes").strip()
        if not notes:
            return await request_page(request, req, me, status_code=422,
                                      refusal="A denial needs a note: it goes back to the "
                                              "requester.")
        if carries_token(notes):  # never stored, never shown back
            return await request_page(request, req, me, status_code=422,
                                      refusal=f"Not denied: the notes {TOKEN_IN_TEXT}.")
        shown_hash = first(form, "shown_hash")
        if req.status is Status.PENDING and shown_hash != req.proposal_hash:
            return await request_page(
                request, req, me, status_code=409,
                refusal="The request changed since this page was loaded (someone edited "
                        "it). Nothing was denied: read it again and decide.")
        try:
            done = await gateway.deny(req.id, me, notes, proposal_hash=shown_hash)
        except GatewayError as exc:
            return await request_page(request, gateway.get_request(req.id), me,
                                      status_code=409, refusal=f"Not denied: {exc.message}")
        console.record(done, me, "denied", None, f"denied: {notes}")
        console.say(session, "ok", f"Denied; the requester gets your note: {notes}")
        return RedirectResponse(f"/requests/{done.id}", status_code=303)

    # ------------------------------------------------------------------ instruments
    @app.get("/instruments", response_class=HTMLResponse)
    async def instruments(request: Request) -> Response:
        console.who(request)
        first_name = next(iter(gateway.instruments), None)
        if first_name is None:
            raise HTTPException(404, "this bench has no instruments")
        return RedirectResponse(f"/instruments/{first_name}", status_code=303)

    async def panel_context(name: str) -> dict[str, Any]:
        try:
            inst = gateway.instrument(name)
        except NotFound as exc:
            raise HTTPException(404, exc.message) from exc
        error = None
        try:
            state = await gateway.live_state(name)
        except InstrumentError as exc:
            state, error = {"channels": {}, "idn": "?", "at": None}, exc.message
        samples = console.samples.setdefault(name, deque(maxlen=HISTORY_POINTS))
        point: dict[str, tuple[float, float]] = {}
        for ch, values in state["channels"].items():
            try:
                point[ch] = (float(Decimal(values.get("measured_voltage") or "nan")),
                             float(Decimal(values.get("measured_current") or "nan")))
            except ArithmeticError:
                continue
        if point:
            samples.append((time.time(), point))
        plots: dict[str, tuple[str, str]] = {}
        for ch in state["channels"]:
            volts = [p[ch][0] for _, p in samples if ch in p and p[ch][0] == p[ch][0]]
            amps = [p[ch][1] for _, p in samples if ch in p and p[ch][1] == p[ch][1]]
            plots[ch] = (views.sparkline(volts), views.sparkline(amps, color="#c60"))
        limits = gateway.config.envelope.get(name, {})
        return {"name": name, "inst": inst, "state": state, "error": error, "plots": plots,
                "profile": inst.profile, "limits": limits,
                "ranges": {str(ch): {f: views._limits(inst.profile, limits, ch, f)
                                     for f in ("voltage", "current")}
                           for ch in inst.profile.channels}}

    @app.get("/instruments/{name}", response_class=HTMLResponse)
    async def panel(request: Request, name: str) -> Response:
        console.who(request)
        return console.page(request, "panel.html", await panel_context(name))

    @app.get("/fragments/instruments/{name}", response_class=HTMLResponse)
    async def panel_fragment(request: Request, name: str) -> Response:
        console.who(request)
        return console.page(request, "_panel.html", await panel_context(name))

    @app.post("/instruments/{name}/change", response_class=HTMLResponse)
    async def change(request: Request, name: str) -> Response:
        """An engineer's own change: a held request of their engineer run, never a write."""
        session, me, form = await checked_form(console, request)
        try:
            inst = gateway.instrument(name)
            channel = int(first(form, "channel"))
        except (NotFound, ValueError) as exc:
            raise HTTPException(404, "no such instrument or channel") from exc
        if channel not in inst.profile.channels:
            raise HTTPException(404, f"{name} has no channel {channel}")
        limits = gateway.config.envelope.get(name, {})
        parts: list[str] = []
        for fld, header in (("voltage", "VOLT"), ("current", "CURR")):
            raw = first(form, fld).strip()
            if not raw:
                continue
            low, high, note = views._limits(inst.profile, limits, channel, fld)
            check = views.EditField(key=f"CH{channel}.{fld}", label=f"CH{channel} {fld}",
                                    value="", unit="", low=low, high=high, limit_note=note)
            _, error = views.check_edit(check, raw)
            if error:
                console.say(session, "error", f"Not submitted: {error}.")
                return RedirectResponse(f"/instruments/{name}", status_code=303)
            parts.append(f"{header} {raw},(@{channel})")
        output = first(form, "output")
        if output in ("ON", "OFF"):
            parts.append(f"OUTP {output},(@{channel})")
        if not parts:
            console.say(session, "error", "Nothing to change: fill in a value first.")
            return RedirectResponse(f"/instruments/{name}", status_code=303)
        message = ";:".join(parts)
        reason = first(form, "rationale").strip() or None
        try:
            # An engineer run is an operator's: a requester's change is refused here.
            run_id = console.engineer_run(me)
            result = await gateway.submit(run_id, name, message, rationale=reason)
        except GatewayError as exc:
            console.say(session, "error", f"Not submitted: {exc.message}")
            return RedirectResponse(f"/instruments/{name}", status_code=303)
        if result.status == "refused":
            console.say(session, "error", f"Refused: {result.reason}")
            return RedirectResponse(f"/instruments/{name}", status_code=303)
        if result.request is None:
            console.say(session, "ok", f"{message}: {result.status}")
            return RedirectResponse(f"/instruments/{name}", status_code=303)
        console.say(session, "info", "Your change is held like any other: confirm it below "
                                     "as a second step (setpoint and output enable "
                                     "separately).")
        return RedirectResponse(f"/requests/{result.request.id}", status_code=303)

    # ------------------------------------------------------------------ runs, history
    @app.get("/runs/{run_id}", response_class=HTMLResponse)
    async def timeline(request: Request, run_id: str) -> Response:
        _, me = console.who(request)
        run = gateway.store.get_run(run_id)
        if run is None:
            raise HTTPException(404, f"no run {run_id!r}")
        if not console.visible(me, run_id):
            raise HTTPException(403, f"{run_id} belongs to {run.principal}; a requester sees "
                                     "only its own runs")
        events = []
        after = 0
        while True:
            page = gateway.store.journal(run_id, after=after, limit=1000)
            events.extend(page)
            if len(page) < 1000:
                break
            after = page[-1].seq
        shown = [v for v in gateway.store.kv_list(SHOWN_TABLE) if v.get("run_id") == run_id]
        return console.page(request, "timeline.html", {
            "run": run, "rows": views.waterfall(events, run.principal, shown),
            "requests": gateway.list_requests(None, run_id, limit=200)})

    @app.get("/history", response_class=HTMLResponse)
    async def history(request: Request, instrument: str = "", outcome: str = "",
                      approver: str = "", run: str = "") -> Response:
        _, me = console.who(request)
        try:
            status = Status(outcome) if outcome else None
        except ValueError:
            status = None
        decided = [r for r in gateway.list_requests(status, run or None, instrument or None,
                                                    limit=1000)
                   if r.status in TERMINAL and console.visible(me, r.run_id)]
        if approver:
            decided = [r for r in decided if any(
                approver.lower() in a.by.lower() for a in r.approvals) or
                (r.status is Status.DENIED and approver.lower() in (r.outcome or "").lower())]
        decided.sort(key=lambda r: r.decided_at or r.created_at, reverse=True)
        return console.page(request, "history.html", {
            "decided": decided[:300], "f": {"instrument": instrument, "outcome": outcome,
                                            "approver": approver, "run": run},
            "outcomes": sorted(s.value for s in TERMINAL)})

    return app

