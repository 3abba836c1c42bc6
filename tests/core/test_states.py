"""The lifecycles of runs, plans and questions are tables checked at import, like the
request table (tests/core/test_config_states.py); these test the tables and their check."""

from __future__ import annotations

import enum

import pytest

from bench_gate.errors import TransitionError
from bench_gate.models import RunStatus
from bench_gate.states import (
    PLANS,
    QUESTIONS,
    RUNS,
    Machine,
    PlanEvent,
    PlanStatus,
    QuestionEvent,
    QuestionStatus,
    RunEvent,
    check_machine,
)


@pytest.mark.parametrize("machine", [RUNS, PLANS, QUESTIONS], ids=lambda m: m.name)
def test_every_table_passes_its_check(machine: Machine[enum.Enum, enum.Enum]) -> None:
    machine.check()
    for state in machine.terminal:
        assert all(machine.target(state, e) is None for e in {e for _, e in machine.transitions})


def test_run_moves() -> None:
    assert RUNS.target(RunStatus.ACTIVE, RunEvent.TAKE_OVER) is RunStatus.TAKEN_OVER
    assert RUNS.target(RunStatus.SUSPENDED, RunEvent.RELEASE) is RunStatus.ACTIVE
    assert RUNS.target(RunStatus.SUSPENDED, RunEvent.SUSPEND) is None  # not twice
    with pytest.raises(TransitionError, match="cannot take over run-1: it is closed"):
        RUNS.move("run-1", RunStatus.CLOSED, RunEvent.TAKE_OVER)
    with pytest.raises(TransitionError, match="cannot release run-1: it is active"):
        RUNS.move("run-1", RunStatus.ACTIVE, RunEvent.RELEASE)


def test_plan_and_question_moves() -> None:
    assert PLANS.move("plan-1", PlanStatus.PENDING, PlanEvent.ACTIVATE) is PlanStatus.ACTIVE
    assert PLANS.target(PlanStatus.EXHAUSTED, PlanEvent.REVOKE) is None
    with pytest.raises(TransitionError) as raised:
        PLANS.move("plan-1", PlanStatus.EXPIRED, PlanEvent.REVOKE)
    assert (raised.value.status, raised.value.event) == ("expired", "revoke")
    assert QUESTIONS.target(QuestionStatus.OPEN, QuestionEvent.ANSWER) is \
        QuestionStatus.ANSWERED
    assert QUESTIONS.target(QuestionStatus.ANSWERED, QuestionEvent.CANCEL) is None


class Light(enum.StrEnum):
    OFF = "off"
    ON = "on"
    BROKEN = "broken"


class Flip(enum.StrEnum):
    FLIP = "flip"
    BREAK = "break"


def test_the_check_finds_an_unreachable_state() -> None:
    with pytest.raises(AssertionError, match="unreachable statuses: \\['broken'\\]"):
        check_machine("light", Light, Light.OFF, frozenset({Light.BROKEN}),
                      {(Light.OFF, Flip.FLIP): Light.ON, (Light.ON, Flip.FLIP): Light.OFF})


def test_the_check_finds_an_exit_from_a_terminal_state() -> None:
    table = {(Light.OFF, Flip.FLIP): Light.ON, (Light.ON, Flip.BREAK): Light.BROKEN,
             (Light.BROKEN, Flip.FLIP): Light.ON}
    with pytest.raises(AssertionError, match="terminal statuses with exits"):
        Machine("light", Light, Light.OFF, frozenset({Light.BROKEN}), table).check()
