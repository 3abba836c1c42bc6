"""Questions an agent asks the operator: ask on a run, list the open ones, answer, long-poll."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import Field

from ..questions import Answer, Option, Question, QuestionSet, QuestionStatus
from ._deps import Caller, GatewayDep, Operator, own_run, wait_seconds
from ._schemas import Words, _Camel, _Out

__all__ = ["router"]

router = APIRouter(tags=["questions"])
WaitQuery = Annotated[float | None, Query(ge=0, description="long-poll up to this many "
                                          "seconds (at most 60) for an answer")]


# The core's models as request bodies (camelCase, unknown keys refused), their rules kept.
class OptionIn(Option, _Camel):
    pass


class QuestionIn(Question, _Camel):
    options: list[OptionIn] = Field(min_length=2, max_length=4)  # type: ignore[assignment]


class AskBody(_Camel):
    questions: list[QuestionIn] = Field(min_length=1, max_length=4)
    timeout_minutes: int | None = Field(default=None, ge=1, le=1440)


class AnswerIn(Answer, _Camel):
    pass


class AnswerBody(_Camel):
    answers: list[AnswerIn] = Field(min_length=1, max_length=4)
    notes: str = Field(default="", max_length=4000)


class QuestionOut(_Out):
    text: str
    options: list[Option]
    allow_free_text: bool


class AnswerOut(_Out):
    choice: str | None = None
    text: str | None = None


class QuestionSetOut(_Out):
    id: str
    run_id: str
    asked_by: str
    status: QuestionStatus
    questions: list[QuestionOut]
    timeout_minutes: int
    created_at: datetime
    expires_at: datetime
    answers: list[AnswerOut] | None = None
    answered_by: str | None = None
    decided_at: datetime | None = None
    notes: str = ""
    outcome: Words | None = None


def question_out(ask: QuestionSet) -> QuestionSetOut:
    return QuestionSetOut.model_validate(ask.model_dump())


@router.post("/v1/runs/{run_id}/questions", status_code=201, response_model=QuestionSetOut)
async def ask(run_id: str, body: AskBody, who: Caller, gw: GatewayDep) -> QuestionSetOut:
    """Ask the operator 1 to 4 questions (2 to 4 options each); they join the queue."""
    own_run(gw, run_id, who)
    # Plain data: the desk validates it (InvalidInput, a 422), whatever the body model let by.
    questions: list[Any] = [q.model_dump() for q in body.questions]
    return question_out(gw.questions.ask(run_id, who, questions, body.timeout_minutes))


@router.get("/v1/questions", response_model=list[QuestionSetOut])
async def questions(who: Caller, gw: GatewayDep, status: QuestionStatus | None = None,
              run_id: Annotated[str | None, Query(alias="runId")] = None,
              limit: Annotated[int, Query(ge=1, le=1000)] = 100,
              offset: Annotated[int, Query(ge=0, le=2**62)] = 0) -> list[QuestionSetOut]:
    """Asks, oldest first; an operator sees every run's, a requester its own."""
    if run_id is not None:
        own_run(gw, run_id, who)
    asks = gw.questions.find(status, run_id, limit=10_000 if not who.operates else limit,
                             offset=0 if not who.operates else offset)
    if not who.operates:
        asks = [a for a in asks if a.asked_by == who.name][offset:offset + limit]
    return [question_out(a) for a in asks]


@router.get("/v1/questions/{question_id}", response_model=QuestionSetOut)
async def one(question_id: str, who: Caller, gw: GatewayDep,
              wait: WaitQuery = None) -> QuestionSetOut:
    """One ask; with ``?wait=`` it returns as soon as it is answered, expired or cancelled."""
    ask = gw.questions.get(question_id)
    own_run(gw, ask.run_id, who)
    seconds = wait_seconds(wait)
    if seconds:
        ask = await gw.questions.wait(question_id, seconds)
    return question_out(ask)


@router.post("/v1/questions/{question_id}/answer", response_model=QuestionSetOut)
async def answer(question_id: str, body: AnswerBody, who: Operator,
           gw: GatewayDep) -> QuestionSetOut:
    """Answer every question of an open ask (one answer each, in order)."""
    answers: list[Answer | dict[str, Any]] = [a.model_dump() for a in body.answers]
    return question_out(gw.questions.answer(question_id, who, answers, body.notes))
