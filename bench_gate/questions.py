"""Questions an agent asks the operator, waiting in the same queue as approvals.

One ask (``q-…``) holds 1 to 4 questions, each with 2 to 4 options and, if the agent allows
it, a free-text answer. An operator answers all of them at once; the answers go back to the
agent. An ask expires like a takeover request: a comparison against the clock (the gateway's
one sweeper, and every read), never a sleeping task per ask. An expired ask is "no answer".

    open ──answer──▶ answered
      ├──time────▶ expired     (the agent gets no answer)
      └──cancel──▶ cancelled   (the run closed: the agent is gone)

Asks live in the store's kv table ``questions``. Every move is journaled on the ask's run and
published to the gateway's subscribers (type ``question``), for the console, the CLI and SSE.
The kv table has no compare-and-swap: a move is one read-check-write with no await between,
which is atomic on the gateway's event loop (one gateway per store; see docs/mcp.md).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, Field, ValidationError, field_validator

from .auth import refuse_revoked, refuse_token
from .config import PolicyConfig
from .errors import InvalidInput, NotFound, PermissionDenied, TransitionError
from .models import Event, EventType, Principal, RunStatus
from .states import QUESTIONS, QuestionEvent, QuestionStatus
from .store import Store
from .wire import rfc3339

__all__ = [
    "TABLE",
    "TERMINAL",
    "Answer",
    "Option",
    "Question",
    "QuestionDesk",
    "QuestionSet",
    "QuestionStatus",
]

TABLE = "questions"
#: The longest one wait slice; expiry is noticed at the latest this much late.
WAIT_SLICE = 1.0
#: How often the sweep rereads the table for open asks it does not know of.
RESCAN_SECONDS = 30.0


#: An ask that is answered, expired or cancelled is done.
TERMINAL = QUESTIONS.terminal


class Option(BaseModel):
    """One choice the operator can pick."""

    label: str = Field(min_length=1, max_length=120)
    description: str = Field(default="", max_length=1000)


class Question(BaseModel):
    """One question: its text, 2 to 4 options, and whether free text is accepted."""

    text: str = Field(min_length=1, max_length=2000)
    options: list[Option] = Field(min_length=2, max_length=4)
    allow_free_text: bool = False

    @field_validator("options")
    @classmethod
    def _distinct(cls, options: list[Option]) -> list[Option]:
        """An answer names its option by label, trimmed and case-folded: ``a`` and ``A``
        would be one option."""
        labels = [o.label.strip().casefold() for o in options]
        if len(set(labels)) != len(labels):
            raise ValueError("option labels must be distinct (ignoring case and surrounding "
                             "spaces)")
        return options


class Answer(BaseModel):
    """The operator's answer to one question: a chosen option's label, free text, or both."""

    choice: str | None = Field(default=None, max_length=120)
    text: str | None = Field(default=None, max_length=4000)


class QuestionSet(BaseModel):
    """One ask: the questions, who asked on which run, its expiry and, once given, the answers."""

    id: str
    run_id: str
    asked_by: str
    questions: list[Question]
    status: QuestionStatus = QuestionStatus.OPEN
    timeout_minutes: int
    created_at: datetime
    expires_at: datetime
    answers: list[Answer] | None = None
    answered_by: str | None = None
    decided_at: datetime | None = None
    notes: str = ""
    #: One sentence for the agent: the answers, or why there are none.
    outcome: str | None = None

    def summary(self) -> str:
        if self.status is QuestionStatus.ANSWERED and self.answers is not None:
            parts = []
            for q, a in zip(self.questions, self.answers, strict=True):
                said = "; ".join(x for x in (a.choice, a.text) if x)
                parts.append(f"{q.text} → {said}")
            return f"answered by {self.answered_by}: " + " | ".join(parts)
        if self.status is QuestionStatus.EXPIRED:
            return f"no answer: the question expired at {rfc3339(self.expires_at)}"
        if self.status is QuestionStatus.CANCELLED:
            return "no answer: the question was cancelled (the run closed)"
        return f"waiting for the operator until {rfc3339(self.expires_at)}"


def _problems(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(x) for x in e['loc']) or 'body'}: {e['msg']}"
                     for e in exc.errors())


class QuestionDesk:
    """Asks on the gateway's store: ask, answer, list, wait, expire, cancel a run's asks."""

    def __init__(self, store: Store, *, clock: Callable[[], datetime],
                 publish: Callable[..., None], policy: PolicyConfig) -> None:
        self.store = store
        self.clock = clock
        self._publish = publish
        self.policy = policy
        self._waiters: dict[str, set[asyncio.Event]] = {}
        #: Open asks' expiries, for the sweep; None until the first scan.
        self._open: dict[str, datetime] | None = None
        self._scanned = 0.0

    # ------------------------------------------------------------------ records
    def _save(self, ask: QuestionSet) -> None:
        self.store.kv_put(TABLE, ask.id, ask.model_dump(mode="json"))

    def _load(self, question_id: str) -> QuestionSet:
        raw = self.store.kv_get(TABLE, question_id)
        if raw is None:
            raise NotFound(f"no question {question_id!r}")
        return QuestionSet.model_validate(raw)

    def _changed(self, ask: QuestionSet, event: EventType, data: dict[str, Any]) -> None:
        self._save(ask)
        if self._open is not None:
            if ask.status is QuestionStatus.OPEN:
                self._open[ask.id] = ask.expires_at
            else:
                self._open.pop(ask.id, None)
        self.store.append([Event(run_id=ask.run_id, type=event,
                                 data={"question_id": ask.id, "status": ask.status.value,
                                       **data})])
        for waiter in self._waiters.get(ask.id, ()):
            waiter.set()
        self._publish("question", id=ask.id, run_id=ask.run_id, status=ask.status.value,
                      asked_by=ask.asked_by, count=len(ask.questions))

    def _expire_if_due(self, ask: QuestionSet) -> QuestionSet:
        if ask.status is QuestionStatus.OPEN and ask.expires_at <= self.clock():
            ask.status = QUESTIONS.move(ask.id, ask.status, QuestionEvent.EXPIRE)
            ask.decided_at = self.clock()
            ask.outcome = ask.summary()
            self._changed(ask, EventType.QUESTION_EXPIRED,
                          {"expires_at": ask.expires_at.isoformat()})
        return ask

    # ------------------------------------------------------------------ requester
    def ask(self, run_id: str, who: Principal, questions: list[Question | dict[str, Any]],
            timeout_minutes: int | None = None) -> QuestionSet:
        """Post 1 to 4 questions on ``who``'s own run; the operator sees them in the queue."""
        run = self.store.get_run(run_id)
        if run is None:
            raise NotFound(f"no run {run_id!r}")
        if run.principal != who.name:
            raise PermissionDenied(f"{run_id} belongs to {run.principal}; only its requester "
                                   "asks questions on it")
        if run.status is RunStatus.CLOSED:
            raise TransitionError(run_id, run.status.value, "ask", "the run is closed")
        if not 1 <= len(questions) <= 4:
            raise InvalidInput(f"ask 1 to 4 questions at a time, not {len(questions)}")
        try:
            parsed = [Question.model_validate(q) for q in questions]
        except ValidationError as exc:
            raise InvalidInput("questions: " + _problems(exc)) from exc
        for i, q in enumerate(parsed, start=1):
            refuse_token(q.text, f"question {i}'s text")
            for j, o in enumerate(q.options, start=1):
                refuse_token(o.label, f"question {i}'s option {j} label")
                refuse_token(o.description, f"question {i}'s option {j} description")
        minutes = self.policy.default_timeout_minutes if timeout_minutes is None \
            else timeout_minutes
        if not 1 <= minutes <= self.policy.max_timeout_minutes:
            raise InvalidInput(f"timeoutMinutes must be 1 to {self.policy.max_timeout_minutes}, "
                               f"not {minutes}")
        created = self.clock()
        ask = QuestionSet(id=f"q-{uuid.uuid4()}", run_id=run_id, asked_by=who.name,
                          questions=parsed, timeout_minutes=minutes, created_at=created,
                          expires_at=created + timedelta(minutes=minutes))
        ask.outcome = ask.summary()
        self._changed(ask, EventType.QUESTION_ASKED, {
            "asked_by": who.name, "expires_at": ask.expires_at.isoformat(),
            "questions": [q.model_dump(mode="json") for q in parsed]})
        return ask

    def get(self, question_id: str) -> QuestionSet:
        return self._expire_if_due(self._load(question_id))

    def find(self, status: QuestionStatus | None = None, run_id: str | None = None,
             limit: int = 100, offset: int = 0) -> list[QuestionSet]:
        """Asks, oldest first (the queue's order), after expiring the overdue ones."""
        asks = [self._expire_if_due(QuestionSet.model_validate(raw))
                for raw in self.store.kv_list(TABLE)
                if run_id is None or raw.get("run_id") == run_id]
        asks = [a for a in asks if status is None or a.status is status]
        asks.sort(key=lambda a: a.created_at)
        return asks[offset:offset + limit]

    async def wait(self, question_id: str, timeout: float) -> QuestionSet:
        """Wait up to ``timeout`` seconds for an answer (or the expiry), holding no thread."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout)
        event = asyncio.Event()
        self._waiters.setdefault(question_id, set()).add(event)
        try:
            while True:
                ask = self.get(question_id)
                remaining = deadline - loop.time()
                if ask.status in TERMINAL or remaining <= 0:
                    return ask
                event.clear()
                try:
                    await asyncio.wait_for(event.wait(), timeout=min(remaining, WAIT_SLICE))
                except TimeoutError:
                    pass
        finally:
            waiters = self._waiters.get(question_id, set())
            waiters.discard(event)
            if not waiters:
                self._waiters.pop(question_id, None)

    # ------------------------------------------------------------------ operator
    def answer(self, question_id: str, who: Principal, answers: list[Answer | dict[str, Any]],
               notes: str = "") -> QuestionSet:
        """Answer every question of an open ask; the agent reads the answers."""
        if not who.operates:
            raise PermissionDenied(f"{who.name} is a {who.role.value}; answering needs an "
                                   "operator")
        refuse_revoked(self.store, who)  # an answer steers an agent: looked up now
        ask = self.get(question_id)
        if who.name == ask.asked_by:
            raise PermissionDenied(f"{who.name} asked this question; another person must "
                                   "answer it")
        answered = QUESTIONS.move(ask.id, ask.status, QuestionEvent.ANSWER)
        try:
            given = [Answer.model_validate(a) for a in answers]
        except ValidationError as exc:
            raise InvalidInput("answers: " + _problems(exc)) from exc
        for i, a in enumerate(given, start=1):
            refuse_token(a.choice, f"answer {i}'s choice")
            refuse_token(a.text, f"answer {i}'s text")
        refuse_token(notes, "notes")
        if len(given) != len(ask.questions):
            raise InvalidInput(f"{ask.id} has {len(ask.questions)} question(s); give one "
                               f"answer each, not {len(given)}")
        for i, (q, a) in enumerate(zip(ask.questions, given, strict=True), start=1):
            labels = {o.label.strip().casefold(): o.label for o in q.options}
            text = (a.text or "").strip() or None
            if a.choice is not None:
                label = labels.get(a.choice.strip().casefold())
                if label is None:
                    raise InvalidInput(f"answer {i}: {a.choice!r} is not one of "
                                       f"{[o.label for o in q.options]}")
                a.choice = label
            if text is not None and not q.allow_free_text:
                raise InvalidInput(f"answer {i}: this question takes one of its options, not "
                                   "free text")
            if a.choice is None and text is None:
                raise InvalidInput(f"answer {i}: choose one of "
                                   f"{[o.label for o in q.options]}"
                                   + (" or write an answer" if q.allow_free_text else ""))
            a.text = text
        ask.status = answered
        ask.answers = given
        ask.answered_by = who.name
        ask.decided_at = self.clock()
        ask.notes = notes
        ask.outcome = ask.summary()
        self._changed(ask, EventType.QUESTION_ANSWERED, {
            "by": who.name, "notes": notes,
            "answers": [a.model_dump(mode="json") for a in given]})
        return ask

    # ------------------------------------------------------------------ housekeeping
    def sweep(self) -> int:
        """Expire every open ask whose time is up; called by the gateway's one sweeper.

        It compares against the open asks' expiries held in memory, and reads the table
        only when one is due (or every ``RESCAN_SECONDS``, for asks made elsewhere).
        """
        now_ = self.clock()
        mono = time.monotonic()
        if self._open is None or mono - self._scanned >= RESCAN_SECONDS:
            self._open = {str(raw["id"]): datetime.fromisoformat(str(raw["expires_at"]))
                          for raw in self.store.kv_list(TABLE)
                          if raw.get("status") == QuestionStatus.OPEN.value}
            self._scanned = mono
        count = 0
        for question_id in [q for q, at in self._open.items() if at <= now_]:
            ask = self._load(question_id)
            if ask.status is QuestionStatus.OPEN:
                self._expire_if_due(ask)
                count += 1
            self._open.pop(question_id, None)
        return count

    def cancel_run(self, run_id: str) -> int:
        """The run closed: its open asks will get no answer."""
        count = 0
        for ask in self.find(QuestionStatus.OPEN, run_id=run_id, limit=10_000):
            ask.status = QUESTIONS.move(ask.id, ask.status, QuestionEvent.CANCEL)
            ask.decided_at = self.clock()
            ask.outcome = ask.summary()
            self._changed(ask, EventType.QUESTION_CANCELLED, {"reason": "the run closed"})
            count += 1
        return count
