"""An instrument's answers that are no state: SCPI's NaN and INF, booleans other than 0
or 1, garbage, units, binary, megabytes, another spelling of the same value, a write the
instrument refuses. The PSU is a real simulator behind a lying raw-socket server
(tests/liar_instrument.py) that the gateway reaches as a ``TCPIP0::…::SOCKET`` resource;
what it really did is read on the simulator's own port."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from bench_gate.config import BenchConfig
from bench_gate.errors import InstrumentError
from bench_gate.gateway import Gateway
from bench_gate.models import EventType, Principal, Status
from tests.conftest import Clock
from tests.liar_instrument import LyingInstrument, gw, liar, lied_config, lied_gateway

__all__ = ["gw", "liar", "lied_config"]  # the fixtures, for pytest

STAT = "VOLT:PROT:STAT? (@1)"


def _on_unprotected(front_panel: Any) -> None:
    """CH1 on at 0 V, its over-voltage protection switched off at the panel."""
    for text in ("CURR 0.5,(@1)", "VOLT:PROT 6,(@1)", "VOLT:PROT:STAT OFF,(@1)",
                 "OUTP ON,(@1)"):
        front_panel.write(text)
    assert front_panel.query(STAT) == "0" and front_panel.query("OUTP? (@1)") == "1"


# ------------------------------------------------------- SCPI's NaN and INF are no state
async def test_nan_for_a_protection_state_is_no_state_not_on(
        gw: Gateway, liar: LyingInstrument, script: Principal, olga: Principal,
        front_panel: Any) -> None:
    """SCPI-99 §7.2.1.5: 9.91E37 is NaN. Answered for ``VOLT:PROT:STAT?`` (the guard that
    makes the bench's ovp limit mean something), it was read as 1 (protection on): a write
    the envelope refuses on the true answer (CH1 on with its protection off) was held,
    approved and written, and the watch left the channel on. Now it is no answer: nothing
    is held, and the watch, unable to show CH1 inside, switches it off."""
    _on_unprotected(front_panel)
    run = gw.create_run(script, "script")
    refused = await gw.submit(run.id, "psu", "VOLT 2,(@1)")
    assert refused.status == "refused" and "protection is OFF" in refused.reason
    liar.answer(STAT, "9.91E37", times=1000)
    with pytest.raises(InstrumentError, match=r"9\.91E37.*NaN"):
        result = await gw.submit(run.id, "psu", "VOLT 2,(@1)")
        assert result.request is not None  # the old code held it: approve, as a person would
        await gw.grant(result.request.id, olga, ["setpoint"],
                       proposal_hash=result.request.proposal_hash)
    assert Decimal(front_panel.query("VOLT? (@1)")) == 0, "nothing was written"
    assert gw.list_requests(run_id=run.id) == []
    # The watch cannot show CH1 inside (its guard unreadable): the safe action, at once.
    safed = await gw.watch.check(gw.core.instrument("psu"))
    assert safed is not None and safed.error is None
    assert front_panel.query("OUTP? (@1)") == "0"


@pytest.mark.parametrize("answer", ["2", "-1", "0.5", "9.9E37"])
async def test_a_boolean_answers_0_or_1(gw: Gateway, liar: LyingInstrument,
                                        script: Principal, front_panel: Any,
                                        answer: str) -> None:
    """A boolean answers 0 or 1 (IEEE 488.2 §8.7.2); any other number is no state."""
    _on_unprotected(front_panel)
    run = gw.create_run(script, "script")
    liar.answer(STAT, answer, times=1000)
    with pytest.raises(InstrumentError, match=r"not a boolean|INF"):
        await gw.submit(run.id, "psu", "VOLT 2,(@1)")
    assert gw.list_requests(run_id=run.id) == []
    assert Decimal(front_panel.query("VOLT? (@1)")) == 0


@pytest.mark.parametrize("answer", ["9.9E37", "-9.9E37", "9.91E37"])
async def test_inf_or_nan_for_a_setting_at_the_recheck_writes_nothing(
        gw: Gateway, liar: LyingInstrument, script: Principal, olga: Principal,
        front_panel: Any, answer: str) -> None:
    """A current limit answered as SCPI's INF or NaN at the recheck is no value: the
    recheck fails, and nothing is written."""
    front_panel.write("CURR 0.5,(@1)")
    front_panel.write("OUTP ON,(@1)")
    run = gw.create_run(script, "script")
    req = (await gw.submit(run.id, "psu", "VOLT 2,(@1)")).request
    assert req is not None
    liar.answer("CURR? (@1)", answer, times=1000)  # from the recheck on: the recheck fails
    done = (await gw.grant(req.id, olga, ["setpoint"],
                           proposal_hash=req.proposal_hash)).request
    assert done.status is Status.FAILED and "nothing was written" in (done.outcome or "")
    assert answer in (done.outcome or "")
    assert Decimal(front_panel.query("VOLT? (@1)")) == 0
    events = [e.type for e in gw.store.journal(run.id, limit=1000) if e.request_id == req.id]
    assert events.count(EventType.STEP_FAILED) == 1


@pytest.mark.parametrize("answer", ["9.9E37", "9.91E37"])
async def test_inf_or_nan_for_a_limit_at_the_read_back_is_ambiguous_and_made_safe(
        gw: Gateway, liar: LyingInstrument, script: Principal, olga: Principal,
        front_panel: Any, answer: str) -> None:
    """Read back after the write, a current limit answered as INF or NaN is unknown: the
    write is ``ambiguous`` (never ``executed``), and CH1, not shown inside, is switched off."""
    front_panel.write("CURR 0.5,(@1)")
    front_panel.write("OUTP ON,(@1)")
    run = gw.create_run(script, "script")
    req = (await gw.submit(run.id, "psu", "VOLT 2,(@1)")).request
    assert req is not None
    liar.answer("CURR? (@1)", answer, times=1000, after="VOLT 2.0,(@1)")
    done = (await gw.grant(req.id, olga, ["setpoint"],
                           proposal_hash=req.proposal_hash)).request
    assert done.status is Status.AMBIGUOUS, done.outcome
    assert "a person must check" in (done.outcome or "")
    assert Decimal(front_panel.query("VOLT? (@1)")) == 2, "the write itself landed"
    assert front_panel.query("OUTP? (@1)") == "0", "and CH1 got the safe action"


# ---------------------------------------------------- the instrument refuses the write
@pytest.mark.parametrize("message, refused, status, volts, amps", [
    ("VOLT 2,(@1)", "VOLT 2.0", Status.FAILED, 0, "0.5"),
    # one unit of two refused: a partial change, never "executed" with the approved values
    ("VOLT 2,(@1);CURR 0.3,(@1)", "CURR 0.3", Status.AMBIGUOUS, 2, "0.5"),
])
async def test_a_write_the_instrument_refuses_is_never_done(
        gw: Gateway, liar: LyingInstrument, script: Principal, olga: Principal,
        front_panel: Any, message: str, refused: str, status: Status, volts: int,
        amps: str) -> None:
    """Held. The instrument refuses a unit (its state unchanged, -222 in its error queue):
    ``failed`` when nothing took effect, ``ambiguous`` when part did; the error named."""
    front_panel.write("CURR 0.5,(@1)")
    run = gw.create_run(script, "script")
    req = (await gw.submit(run.id, "psu", message)).request
    assert req is not None
    liar.refuse(refused)
    liar.answer("SYST:ERR?", '-222,"Data out of range"', after=refused)
    done = (await gw.grant(req.id, olga, list(req.required),
                           proposal_hash=req.proposal_hash)).request
    assert done.status is status, done.outcome
    assert "-222" in (done.outcome or "")
    assert Decimal(front_panel.query("VOLT? (@1)")) == volts
    assert Decimal(front_parsed := front_panel.query("CURR? (@1)")) == Decimal(amps), \
        front_parsed


# ------------------------------------------------- garbage at the recheck writes nothing
@pytest.mark.parametrize("answer", [
    "", "OOPS", "+2.0V", "2.0 V", "\x80\xff\x00", "NAN", "INF", "2,0", "#15+2.00",
    "1" * 100_000, "9" * 3_000_000, "X" * 3_000_000,
])
@pytest.mark.parametrize("io", ["auto", "pyvisa"])
async def test_garbage_for_a_setpoint_at_the_recheck_writes_nothing(
        lied_config: BenchConfig, db_path: Path, clock: Clock, liar: LyingInstrument,
        script: Principal, olga: Principal, front_panel: Any, io: str, answer: str) -> None:
    """Garbage, units, binary, a block, a number of 100 kB or 3 MB in place of CH1's
    voltage at the recheck: nothing is written, the outcome says why in a few lines."""
    gw = lied_gateway(lied_config, db_path, clock, io)
    await gw.start()
    try:
        run = gw.create_run(script, "script")
        req = (await gw.submit(run.id, "psu", "VOLT 2,(@1)")).request
        assert req is not None
        liar.answer(":VOLT? (@1)", answer, times=1)
        done = (await gw.grant(req.id, olga, ["setpoint"],
                               proposal_hash=req.proposal_hash)).request
        assert done.status in (Status.FAILED, Status.STALE), done.outcome
        assert Decimal(front_panel.query("VOLT? (@1)")) == 0
        assert not any(line.startswith("VOLT 2") for line in liar.received)
        assert len(done.outcome or "") < 2000, len(done.outcome or "")
    finally:
        await gw.close()
        gw.store.close()


async def test_a_long_list_of_points_is_still_read(
        gw: Gateway, script: Principal, front_panel: Any) -> None:
    """The bound on an answer is per number: a list of 100 points (1.6 kB) is read whole."""
    front_panel.write("LIST:VOLT " + ",".join(["1"] * 100) + ",(@1)")
    run = gw.create_run(script, "script")
    req = (await gw.submit(run.id, "psu", "VOLT 2,(@1)")).request
    assert req is not None
    assert req.snapshot.values["ch1.list_voltage"] == ",".join(["1.0"] * 100)


@pytest.mark.parametrize("unit, status, volts", [
    ("*IDN?", Status.FAILED, 0),  # at the recheck: nothing written
    ("OUTP:PAIR?", Status.AMBIGUOUS, 2),  # read at the read-back only: no read-back
])
async def test_megabytes_for_a_text_answer_are_no_answer_and_stay_out_of_the_outcome(
        gw: Gateway, liar: LyingInstrument, script: Principal, olga: Principal,
        front_panel: Any, unit: str, status: Status, volts: int) -> None:
    """2 MB for the identity or a word field: no answer (nothing written on it, or no
    read-back), and none of it in the outcome (it was quoted whole: an instrument's
    megabytes in every event and alert)."""
    run = gw.create_run(script, "script")
    req = (await gw.submit(run.id, "psu", "VOLT 2,(@1)")).request
    assert req is not None
    liar.answer(unit, "A" * 2_000_000)
    done = (await gw.grant(req.id, olga, ["setpoint"],
                           proposal_hash=req.proposal_hash)).request
    assert done.status is status, done.outcome
    assert len(done.outcome or "") < 2000, len(done.outcome or "")
    assert Decimal(front_panel.query("VOLT? (@1)")) == volts


@pytest.mark.parametrize("answer", ["-0.00000000E+00", "-0", "+0", "0.000", " 0.0 "])
async def test_another_spelling_of_the_same_value_at_the_recheck_is_the_same_value(
        gw: Gateway, liar: LyingInstrument, script: Principal, olga: Principal,
        front_panel: Any, answer: str) -> None:
    """Held. Negative zero and other spellings of 0 V at the recheck are the 0 V the
    approver saw: the write runs (never a false stale)."""
    run = gw.create_run(script, "script")
    req = (await gw.submit(run.id, "psu", "VOLT 2,(@1)")).request
    assert req is not None
    liar.answer(":VOLT? (@1)", answer)
    done = (await gw.grant(req.id, olga, ["setpoint"],
                           proposal_hash=req.proposal_hash)).request
    assert liar.fired
    assert done.status is Status.EXECUTED, done.outcome
    assert Decimal(front_panel.query("VOLT? (@1)")) == 2
