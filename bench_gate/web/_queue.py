"""The queue: pending requests (a page at a time, live over SSE), the agents' open
questions, and answering them."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException

from ..errors import GatewayError, QuotaExceeded
from ..gateway import RequestSort
from ..models import Principal
from ..questions import Answer, QuestionSet, QuestionStatus
from ..streams import event_stream
from ._console import Console, checked_form, console_of, first, require_decider, shown_error

__all__ = ["router"]

router = APIRouter()
_SORT_WORDS = {RequestSort.EXPIRY: "soonest expiry first", RequestSort.NEWEST: "newest first"}


def _open_questions(console: Console, me: Principal) -> list[QuestionSet]:
    asks = console.gateway.questions.find(QuestionStatus.OPEN, limit=200)
    return [q for q in reversed(asks) if console.gateway.may_see(me, q.run_id)]


def _queue_page(console: Console, request: Request, me: Principal) -> dict[str, Any]:
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
    return {"pending": page, "questions": _open_questions(console, me),
            "now": console.gateway.clock(),
            "paging": {"total": page.total, "offset": page.offset, "limit": page.limit,
                       "sort": sort.value, "words": _SORT_WORDS[sort],
                       "first": page.offset + 1 if page else 0,
                       "last": page.offset + len(page),
                       "next": at(sort, page.offset + page.limit)
                       if page.offset + page.limit < page.total else None,
                       "prev": at(sort, max(0, page.offset - page.limit))
                       if page.offset > 0 else None,
                       "sorts": [(s.value, _SORT_WORDS[s], at(s, 0)) for s in RequestSort]}}


@router.get("/", response_class=HTMLResponse)
async def queue(request: Request) -> Response:
    console = console_of(request)
    _, me = console.who(request)
    return console.page(request, "queue.html", _queue_page(console, request, me))


@router.get("/fragments/queue", response_class=HTMLResponse)
async def queue_rows(request: Request) -> Response:
    console = console_of(request)
    _, me = console.who(request)
    ctx = _queue_page(console, request, me)
    response = console.page(request, "_queue_rows.html", ctx)
    response.headers["X-Total-Count"] = str(ctx["paging"]["total"])
    return response


def _one_question(console: Console, me: Principal, question_id: str) -> QuestionSet:
    ask = shown_error(console.gateway.questions.get, question_id)
    if not console.gateway.may_see(me, ask.run_id):
        raise HTTPException(403, f"{question_id} belongs to another requester's run")
    return ask


def _question_page(console: Console, request: Request, ask: QuestionSet, *,
                   refusal: str | None = None, status_code: int = 200) -> Response:
    run = shown_error(console.gateway.get_run, ask.run_id)
    return console.page(request, "question.html", {
        "q": ask, "run": run, "refusal": refusal, "now": console.gateway.clock()},
        status_code=status_code)


@router.get("/questions/{question_id}", response_class=HTMLResponse)
async def question(request: Request, question_id: str) -> Response:
    console = console_of(request)
    _, me = console.who(request)
    return _question_page(console, request, _one_question(console, me, question_id))


@router.post("/questions/{question_id}/answer", response_class=HTMLResponse)
async def answer(request: Request, question_id: str) -> Response:
    console, session, me, form = await checked_form(request)
    require_decider(me, "answering")
    ask = _one_question(console, me, question_id)
    answers: list[Answer | dict[str, Any]] = [
        {"choice": first(form, f"choice-{i}") or None,
         "text": first(form, f"text-{i}").strip() or None}
        for i in range(len(ask.questions))]
    desk = console.gateway.questions
    try:
        done = desk.answer(ask.id, me, answers, first(form, "notes").strip())
    except GatewayError as exc:
        return _question_page(console, request, desk.get(ask.id),
                              refusal=f"Not sent: {exc.message}", status_code=422)
    console.say(session, "ok", f"Answered {done.id}; the agent has your answers.")
    return RedirectResponse("/", status_code=303)


@router.get("/events")
async def events(request: Request) -> Response:
    console = console_of(request)
    session, me = console.who(request)
    try:
        # A revoked token ends its sessions' streams too.
        return event_stream(console.gateway, me, console.tokens, session.token,
                            stopping=console.stopping, disconnected=request.is_disconnected,
                            hello="retry: 2000\n: connected\n\n", tick=": tick\n\n")
    except QuotaExceeded as exc:
        return Response(exc.message, status_code=429, media_type="text/plain")
