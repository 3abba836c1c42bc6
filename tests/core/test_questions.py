"""Questions an agent asks the operator: the core desk (ask, answer, expire, cancel, wait)
and its HTTP twin."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from bench_gate.errors import InvalidInput, NotFound, PermissionDenied, TransitionError
from bench_gate.gateway import Gateway
from bench_gate.models import EventType, Principal, Role
from bench_gate.questions import QuestionStatus

from .._http_bench import Bench, start_bench
from ..conftest import Clock

AGENT = Principal(name="agent-1", role=Role.REQUESTER)
OLGA = Principal(name="olga", role=Role.OPERATOR)
TWO = [{"text": "Which channel?", "options": [{"label": "CH1"}, {"label": "CH2"}]},
       {"text": "Limit?", "options": [{"label": "0.1 A"}, {"label": "0.5 A"}],
        "allow_free_text": True}]


def run_of(gateway: Gateway) -> str:
    return gateway.create_run(AGENT, "agent", goal="ask things").id


async def test_ask_then_answer_is_journaled_and_published(gateway: Gateway) -> None:
    run = run_of(gateway)
    async with gateway.subscribe() as queue:
        ask = gateway.questions.ask(run, AGENT, TWO, timeout_minutes=5)
        assert ask.status is QuestionStatus.OPEN and ask.id.startswith("q-")
        assert [a.id for a in gateway.questions.find(QuestionStatus.OPEN)] == [ask.id]
        waiting = asyncio.create_task(gateway.questions.wait(ask.id, 10))
        await asyncio.sleep(0.05)
        done = gateway.questions.answer(ask.id, OLGA, [{"choice": "ch2"},
                                                       {"text": "0.2 A"}], notes="careful")
        got = await asyncio.wait_for(waiting, 5)
        messages = [queue.get_nowait() for _ in range(queue.qsize())]
    assert got.status is QuestionStatus.ANSWERED and got.answers is not None
    assert [a.choice for a in got.answers] == ["CH2", None]
    assert got.answers[1].text == "0.2 A" and got.answered_by == "olga"
    assert "CH2" in (done.outcome or "")
    assert [m["status"] for m in messages if m["type"] == "question"] == ["open", "answered"]
    kinds = [e.type for e in gateway.store.journal(run, limit=100)]
    assert EventType.QUESTION_ASKED in kinds and EventType.QUESTION_ANSWERED in kinds
    with pytest.raises(TransitionError):
        gateway.questions.answer(ask.id, OLGA, [{"choice": "CH1"}, {"choice": "0.1 A"}])


@pytest.mark.parametrize(("questions", "needle"), [
    ([], "1 to 4"),
    ([TWO[0]] * 5, "1 to 4"),
    ([{"text": "one?", "options": [{"label": "a"}]}], "options"),
    ([{"text": "five?", "options": [{"label": c} for c in "abcde"]}], "options"),
    ([{"text": "same?", "options": [{"label": "a"}, {"label": "A"}]}], "distinct"),
    ([{"text": "", "options": [{"label": "a"}, {"label": "b"}]}], "text"),
])
async def test_bad_questions(gateway: Gateway, questions: list[Any], needle: str) -> None:
    with pytest.raises(InvalidInput, match=needle):
        gateway.questions.ask(run_of(gateway), AGENT, questions)


@pytest.mark.parametrize(("answers", "needle"), [
    ([{"choice": "CH3"}, {"choice": "0.1 A"}], "not one of"),
    ([{"choice": "CH1"}], "one answer each"),
    ([{"text": "whatever"}, {"choice": "0.1 A"}], "not free text"),
    ([{"choice": "CH1"}, {}], "choose one of"),
])
async def test_bad_answers(gateway: Gateway, answers: list[Any], needle: str) -> None:
    ask = gateway.questions.ask(run_of(gateway), AGENT, TWO)
    with pytest.raises(InvalidInput, match=needle):
        gateway.questions.answer(ask.id, OLGA, answers)
    assert gateway.questions.get(ask.id).status is QuestionStatus.OPEN


async def test_who_may_ask_and_answer(gateway: Gateway) -> None:
    run = run_of(gateway)
    with pytest.raises(PermissionDenied):
        gateway.questions.ask(run, Principal(name="someone-else"), TWO)
    ask = gateway.questions.ask(run, AGENT, TWO)
    with pytest.raises(PermissionDenied, match="operator"):
        gateway.questions.answer(ask.id, AGENT, [{"choice": "CH1"}, {"choice": "0.1 A"}])
    op_run = gateway.create_run(OLGA, "engineer", goal="me").id
    mine = gateway.questions.ask(op_run, OLGA, TWO)
    with pytest.raises(PermissionDenied, match="another person"):
        gateway.questions.answer(mine.id, OLGA, [{"choice": "CH1"}, {"choice": "0.1 A"}])
    with pytest.raises(NotFound):
        gateway.questions.get("q-nope")


async def test_expiry_is_a_time_comparison_and_means_no_answer(gateway: Gateway,
                                                               clock: Clock) -> None:
    run = run_of(gateway)
    ask = gateway.questions.ask(run, AGENT, TWO, timeout_minutes=2)
    clock.advance(minutes=1)
    await gateway.sweep()
    assert gateway.questions.get(ask.id).status is QuestionStatus.OPEN
    clock.advance(minutes=2)
    await gateway.sweep()  # the gateway's one sweeper expires it; no task per question
    got = await gateway.questions.wait(ask.id, 0)
    assert got.status is QuestionStatus.EXPIRED and got.answers is None
    assert (got.outcome or "").startswith("no answer")
    with pytest.raises(TransitionError):
        gateway.questions.answer(ask.id, OLGA, [{"choice": "CH1"}, {"choice": "0.1 A"}])
    expired = [e for e in gateway.store.journal(run, limit=100)
               if e.type is EventType.QUESTION_EXPIRED]
    assert len(expired) == 1


async def test_read_expires_without_the_sweeper(gateway: Gateway, clock: Clock) -> None:
    ask = gateway.questions.ask(run_of(gateway), AGENT, TWO, timeout_minutes=1)
    clock.advance(minutes=5)
    assert gateway.questions.get(ask.id).status is QuestionStatus.EXPIRED


async def test_closing_the_run_cancels_its_questions(gateway: Gateway) -> None:
    run = run_of(gateway)
    ask = gateway.questions.ask(run, AGENT, TWO)
    gateway.close_run(run)
    got = gateway.questions.get(ask.id)
    assert got.status is QuestionStatus.CANCELLED and got.answers is None
    with pytest.raises(TransitionError):
        gateway.questions.ask(run, AGENT, TWO)


# ----------------------------------------------------------------------- over HTTP
@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("questions"))


def test_http_round_trip_and_roles(bench: Bench) -> None:
    with bench.http("bot") as bot, bench.http("olga") as olga, bench.http("bot2") as bot2:
        run = bot.post("/v1/runs", json={"kind": "agent", "goal": "q"}).json()["id"]
        r = bot.post(f"/v1/runs/{run}/questions", json={"questions": TWO_CAMEL,
                                                        "timeoutMinutes": 5})
        assert r.status_code == 201, r.text
        q = r.json()
        assert q["status"] == "open" and q["questions"][1]["allowFreeText"] is True
        assert bot2.post(f"/v1/runs/{run}/questions",
                         json={"questions": TWO_CAMEL}).status_code == 403
        assert bot2.get(f"/v1/questions/{q['id']}").status_code == 403
        assert q["id"] in [x["id"] for x in olga.get("/v1/questions",
                                                     params={"status": "open"}).json()]
        assert q["id"] in [x["id"] for x in bot.get("/v1/questions").json()]
        assert q["id"] not in [x["id"] for x in bot2.get("/v1/questions").json()]
        assert bot.post(f"/v1/questions/{q['id']}/answer",
                        json={"answers": [{"choice": "CH1"}, {"choice": "0.1 A"}]}
                        ).status_code == 403
        bad = olga.post(f"/v1/questions/{q['id']}/answer",
                        json={"answers": [{"choice": "CH9"}, {"choice": "0.1 A"}]})
        assert bad.status_code == 422 and "not one of" in bad.json()["reason"]
        assert bot.post(f"/v1/runs/{run}/questions",
                        json={"questions": [{"text": "x", "options": [{"label": "a"}]}]}
                        ).status_code == 422
        ok = olga.post(f"/v1/questions/{q['id']}/answer",
                       json={"answers": [{"choice": "CH1"}, {"text": "0.3 A"}]})
        assert ok.status_code == 200, ok.text
        got = bot.get(f"/v1/questions/{q['id']}", params={"wait": 5}).json()
        assert got["status"] == "answered" and got["answers"][1]["text"] == "0.3 A"
        assert olga.post(f"/v1/questions/{q['id']}/answer",
                         json={"answers": [{"choice": "CH1"}, {"choice": "0.1 A"}]}
                         ).status_code == 409


def test_http_long_poll_sees_the_expiry(bench: Bench) -> None:
    with bench.http("bot") as bot:
        run = bot.post("/v1/runs", json={"kind": "agent", "goal": "q"}).json()["id"]
        q = bot.post(f"/v1/runs/{run}/questions",
                     json={"questions": TWO_CAMEL, "timeoutMinutes": 1}).json()
        bench.clock.advance(minutes=2)
        got = bot.get(f"/v1/questions/{q['id']}", params={"wait": 5}).json()
        assert got["status"] == "expired" and got["answers"] is None
        assert got["outcome"].startswith("no answer")


TWO_CAMEL = [{"text": "Which channel?", "options": [{"label": "CH1"}, {"label": "CH2"}]},
             {"text": "Limit?", "options": [{"label": "0.1 A"}, {"label": "0.5 A"}],
              "allowFreeText": True}]


def test_cli_lists_and_answers(bench: Bench) -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    exe = str(Path(sys.executable).parent / "bench-gate")
    env = {**os.environ, "BENCH_GATE_TOKEN": bench.tokens["olga"]}
    with bench.http("bot") as bot:
        run = bot.post("/v1/runs", json={"kind": "agent", "goal": "q"}).json()["id"]
        q = bot.post(f"/v1/runs/{run}/questions", json={"questions": TWO_CAMEL}).json()
    shown = subprocess.run([exe, "questions", "--url", bench.url], env=env, text=True,
                           capture_output=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert q["id"] in shown.stdout and "Which channel?" in shown.stdout
    assert "(or a free-text answer)" in shown.stdout
    done = subprocess.run([exe, "answer", q["id"], "ch2", "only 0.2 A", "--url", bench.url],
                          env=env, text=True, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "answered" in done.stdout
    with bench.http("bot") as bot:
        got = bot.get(f"/v1/questions/{q['id']}").json()
    assert got["answers"] == [{"choice": "CH2", "text": None},
                              {"choice": None, "text": "only 0.2 A"}]
