"""A repeated read runs from its plan (bench_gate/reads.py): what it journals is what the long
way journals, and everything that can change between two reads is still asked each time:
the live answer, the run's status, the run's selected channel, what a read carries with it.
The meter's function, asked on the lane's turn, is tested in test_excitation_holes.py.
"""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench_gate.errors import NotFound
from bench_gate.gateway import Gateway
from bench_gate.models import Event, EventType, Principal
from bench_gate.store import (
    ReadLog,
    ReadRow,
    ReadTemplate,
    canonical_data,
    flat_data,
    read_row,
    rows_of,
)

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)


def _events(gateway: Gateway, run_id: str, kind: EventType) -> list[dict[str, Any]]:
    return [e.data for e in gateway.journal(run_id, limit=1000) if e.type is kind]


async def test_a_repeated_read_journals_what_the_long_way_does_with_the_live_answer(
        gateway: Gateway, script: Principal, front_panel: Any) -> None:
    run = gateway.create_run(script, "script")
    answers = []
    for volts in ("1.5", "2.25", "3.125"):
        front_panel.write(f"VOLT {volts},(@1)")  # the instrument changes between reads
        result = await gateway.submit(run.id, "psu", "VOLT? (@1)")
        assert result.status == "executed"
        answers.append(float(result.response or "nan"))
    assert answers == [1.5, 2.25, 3.125], "a plan never keeps an answer"
    received = _events(gateway, run.id, EventType.COMMAND_RECEIVED)
    executed = _events(gateway, run.id, EventType.READ_EXECUTED)
    assert received == [{"instrument": "psu", "message": "VOLT? (@1)", "rationale": None,
                         "confidence": None, "step_id": None, "origin": "client"}] * 3
    assert [e["canonical"] for e in executed] == [["VOLT? (@1)"]] * 3
    assert [float(e["response"]) for e in executed] == answers
    assert gateway.verify_journal().intact


async def test_a_read_that_carries_a_rationale_journals_it(
        gateway: Gateway, script: Principal) -> None:
    run = gateway.create_run(script, "script")
    await gateway.submit(run.id, "psu", "VOLT? (@1)")
    await gateway.submit(run.id, "psu", "VOLT? (@1)", rationale="checking the rail",
                         step_id="s-1")
    received = _events(gateway, run.id, EventType.COMMAND_RECEIVED)
    assert received[1]["rationale"] == "checking the rail" and received[1]["step_id"] == "s-1"


async def test_a_closed_run_refuses_a_read_it_made_before(
        gateway: Gateway, script: Principal) -> None:
    run = gateway.create_run(script, "script")
    assert (await gateway.submit(run.id, "psu", "VOLT? (@1)")).status == "executed"
    gateway.close_run(run.id, "done")
    result = await gateway.submit(run.id, "psu", "VOLT? (@1)")
    assert result.status == "refused" and "closed" in result.reason
    with pytest.raises(NotFound):  # a plan is no way in for a run that does not exist
        await gateway.submit("run-nope", "psu", "VOLT? (@1)")


async def test_the_one_step_read_takes_only_a_kept_read_and_journals_what_submit_does(
        gateway: Gateway, script: Principal, front_panel: Any) -> None:
    """``Gateway.read`` (the socket door's path for a read with nothing attached) runs a
    kept read in one step; anything else is left to ``submit`` (None), and what it
    journals is what the long way journals."""
    run = gateway.create_run(script, "script")
    assert await gateway.read(run.id, "psu", "VOLT? (@1)") is None, "not kept yet"
    assert await gateway.read("run-nope", "psu", "VOLT? (@1)") is None  # submit: NotFound
    assert (await gateway.submit(run.id, "psu", "VOLT? (@1)")).status == "executed"
    front_panel.write("VOLT 2.5,(@1)")
    result = await gateway.read(run.id, "psu", "VOLT? (@1)")
    assert result is not None and result.status == "executed"
    assert float(result.response or "nan") == 2.5, "the live answer, never a kept one"
    assert await gateway.read(run.id, "psu", "VOLT 1,(@1)") is None, "a write: never here"
    assert await gateway.read(run.id, "psu", "CURR? (@1)") is None, "another message"
    received = _events(gateway, run.id, EventType.COMMAND_RECEIVED)
    executed = _events(gateway, run.id, EventType.READ_EXECUTED)
    assert received == [{"instrument": "psu", "message": "VOLT? (@1)", "rationale": None,
                         "confidence": None, "step_id": None, "origin": "client"}] * 2
    assert [float(e["response"]) for e in executed][1:] == [2.5]
    gateway.close_run(run.id, "done")
    assert await gateway.read(run.id, "psu", "VOLT? (@1)") is None, "closed: submit refuses"
    assert gateway.verify_journal().intact


async def test_each_runs_selection_decides_a_repeated_channel_less_read(
        gateway: Gateway, script: Principal, front_panel: Any) -> None:
    for channel, volts in ((1, "1.0"), (2, "2.0"), (3, "3.0")):
        front_panel.write(f"VOLT {volts},(@{channel})")
    a = gateway.create_run(script, "script")
    b = gateway.create_run(script, "script")
    await gateway.submit(a.id, "psu", "INST:NSEL 1")
    await gateway.submit(b.id, "psu", "INST:NSEL 2")

    async def volts(run_id: str) -> float:
        return float((await gateway.submit(run_id, "psu", "VOLT?")).response or "nan")

    for _ in range(2):
        assert await volts(a.id) == 1.0
        assert await volts(b.id) == 2.0
    await gateway.submit(a.id, "psu", "INST:NSEL 3")
    assert await volts(a.id) == 3.0
    assert await volts(b.id) == 2.0
    # A message that selects and reads moves the run's selection every time it runs.
    for _ in range(2):
        answer = await gateway.submit(b.id, "psu", "INST:NSEL 1;:VOLT?")
        assert float(answer.response or "nan") == 1.0
        await gateway.submit(b.id, "psu", "INST:NSEL 2")
        assert await volts(b.id) == 2.0


VALUES = st.one_of(st.none(), TEXT, st.booleans(), st.integers(),
                   st.floats(allow_nan=False, allow_infinity=False), st.lists(TEXT, max_size=3))


@given(st.dictionaries(TEXT, VALUES, max_size=6))
def test_a_reads_data_is_encoded_as_the_chain_encodes_it(data: dict[str, Any]) -> None:
    assert flat_data(data) == canonical_data(data)


@given(run=TEXT, instrument=TEXT, message=TEXT, origin=TEXT, canonical=st.lists(TEXT, max_size=3),
       response=TEXT, micros=st.integers(0, 10**12))
def test_a_plans_journal_text_is_the_events_text(run: str, instrument: str, message: str,
                                                origin: str, canonical: list[str],
                                                response: str, micros: int) -> None:
    received = {"instrument": instrument, "message": message, "rationale": None,
                "confidence": None, "step_id": None, "origin": origin}
    executed = {"message": message, "canonical": canonical, "response": response}
    first = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(microseconds=micros)
    then = first + timedelta(microseconds=micros % 997)
    events = [Event(run_id=run, type=EventType.COMMAND_RECEIVED, at=first, data=received),
              Event(run_id=run, type=EventType.READ_EXECUTED, at=then, data=executed)]
    template = ReadTemplate(received, message, canonical)  # type: ignore[arg-type]
    assert template.rows(run, first, then, response) == rows_of(events)
    assert [read_row(run, EventType.COMMAND_RECEIVED, first, received),  # type: ignore[arg-type]
            read_row(run, EventType.READ_EXECUTED, then, executed)] == rows_of(events)  # type: ignore[arg-type]
    # The template makes its record's text itself: the read log's line is the same bytes.
    assert _record_line(template.rows(run, first, then, response)) == \
        _record_line(rows_of(events))


def _record_line(rows: list[ReadRow]) -> bytes:
    """The line a fresh read log writes for one read's rows (its header line left out)."""
    with tempfile.TemporaryDirectory() as tmp:
        log = ReadLog(Path(tmp) / "reads.log")
        try:
            log.write_rows(rows)
        finally:
            log.close()
        return (Path(tmp) / "reads.log").read_bytes().split(b"\n")[1]
