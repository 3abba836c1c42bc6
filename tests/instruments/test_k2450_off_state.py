"""The Keithley 2450's output-off state (2450 Reference Manual, section 2 "Output-off state",
section 6 :OUTPut[1]:<function>:SMODe): "output off" in ZERO keeps a 0 V source on the
terminals with the current limit in force, so an off channel is not de-energized there.

Through the socket door with real pyvisa clients, proven on the simulator's own port: an
off-state write that would leave an off output holding a limit outside the envelope is
refused in every spelling (with the function, without it, long form, with OUTP OFF in the
same message); one inside is held for every approval and the approver is told the output
stays live; a panel-set or recalled (*RCL) ZERO with a limit outside is made safe by the
read-back; the safe action and the emergency stop leave both off states at HIMPedance (the
relay open) with the output off; and for every off-state value an off channel is judged on
exactly what that state holds.
"""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench_gate import envelope
from bench_gate.gateway import Gateway
from bench_gate.models import ApprovalKind, Principal, Status
from bench_gate.scpi import get_profile
from sim_instruments import SimServedThread, SimSmu
from tests.doors.proxy.test_proxy import in_thread, next_pending
from tests.instruments import test_k2450
from tests.instruments.test_k2450_envelope import _refused

smu_sim = test_k2450.smu_sim
config = test_k2450.config
smu = test_k2450.smu
panel = test_k2450.panel
LIMITS = {1: test_k2450.LIMITS}  # 10 V, 0.1 A
PROFILE = get_profile("k2450")


def _modes(panel: Any) -> tuple[str, str, str]:
    """The output and both output-off states, as the SMU itself answers."""
    return (panel.query(":OUTP?"), panel.query(":OUTP:VOLT:SMOD?"),
            panel.query(":OUTP:CURR:SMOD?"))


# ------------------------------------------------------------------ the envelope's rule

_STATE = {"ch1.output": "0", "ch1.voltage": "50", "ch1.current": "0.5",
          "ch1.current_level": "0.5", "ch1.vlim": "50", "ch1.rsense_volt": "0",
          "ch1.rsense_curr": "0", "ch1.rsense_res": "0"}


@given(st.sampled_from(["HIMP", "HIMPEDANCE", "NORM", "normal", "ZERO", "zero", "GUAR",
                        "GUARD", "", "garbled", None]),
       st.sampled_from(["HIMP", "NORM", "ZERO", "GUAR", None]))
def test_an_off_channel_is_judged_on_what_its_off_state_holds(
        volt_mode: str | None, curr_mode: str | None) -> None:
    """Every field outside, the output off: HIMPedance and NORMal hold no programmed level,
    ZERO holds the current limit (sourcing voltage) or the current level (sourcing
    current), and GUARd, an unread or an unknown state is judged as if the output were on."""
    state = dict(_STATE)
    for key, mode in (("ch1.off_mode", volt_mode), ("ch1.off_mode_current", curr_mode)):
        if mode is not None:
            state[key] = mode
    found = {b.field for b in envelope.breaches(PROFILE, LIMITS, state)}
    everything = {"voltage", "current", "current_level", "vlim"}
    holds = {"HIMP": set(), "HIMPEDANCE": set(), "NORM": set(), "NORMAL": set()}
    volt = holds.get((volt_mode or "?").upper(), {"current"} if (volt_mode or "").upper()
                     == "ZERO" else everything)
    curr = holds.get((curr_mode or "?").upper(), {"current_level"} if curr_mode == "ZERO"
                     else everything)
    assert found == volt | curr, (volt_mode, curr_mode, found)
    on = envelope.breaches(PROFILE, LIMITS, {**state, "ch1.output": "1"})
    assert {b.field for b in on} == everything  # on, every off state is beside the point


def test_the_safe_action_opens_the_relay_before_it_switches_off() -> None:
    assert envelope.safe_commands(PROFILE, [1]) == [
        "OUTP1:VOLT:SMOD HIMP", "OUTP1:CURR:SMOD HIMP", "OUTP1 0"]


# ------------------------------------------------------------------ through the socket door

@pytest.mark.parametrize("message", [
    ":OUTP:VOLT:SMOD ZERO", ":OUTP1:VOLT:SMOD ZERO", "OUTPUT:VOLTAGE:SMODE ZERO",
    "outp:volt:smod zero", ":OUTP:SMOD ZERO",  # no function: both (section 6)
    ":OUTP:VOLT:SMOD ZERO;:OUTP OFF", ":OUTP OFF;:OUTP:VOLT:SMOD ZERO",
])
async def test_zero_over_a_current_limit_outside_is_refused(
        smu: Any, gateway: Gateway, panel: Any, message: str) -> None:
    panel.write(":SOUR:VOLT:ILIM 0.5")  # set at the bench, the output off: HIMP-safe so far
    error = await _refused(smu, gateway, message)
    assert "current limit (while sourcing voltage) is 0.5 A, above the bench limit of " \
           "0.1 A (the output is off, but output-off state (voltage source) ZERO" in error
    assert _modes(panel) == ("0", "NORM", "NORM")


async def test_zero_over_a_current_level_outside_is_refused(
        smu: Any, gateway: Gateway, panel: Any) -> None:
    """Sourcing current, ZERO's limit is the programmed current level (or more)."""
    panel.write(":SOUR:CURR 0.5")
    error = await _refused(smu, gateway, ":OUTP:CURR:SMOD ZERO")
    assert "current source level is 0.5 A" in error and "(current source) ZERO" in error
    await _refused(smu, gateway, ":OUTP:SMOD ZERO")
    assert _modes(panel) == ("0", "NORM", "NORM")


async def test_zero_inside_is_held_and_the_approver_is_told_it_stays_live(
        smu: Any, gateway: Gateway, olga: Principal, panel: Any) -> None:
    task = asyncio.ensure_future(in_thread(smu.write, ":OUTP:VOLT:SMOD ZERO"))
    req = await next_pending(gateway)
    assert set(req.required) == {ApprovalKind.SETPOINT, ApprovalKind.OUTPUT_ENABLE,
                                 ApprovalKind.STATE}
    assert req.actions[0].words == "CH1 output-off state (voltage source) NORM → ZERO"
    handoff = gateway.get_request(req.id).handoff
    assert handoff["snapshot"]["ch1.off_mode"] == "NORM"
    assert handoff["reversibility"].endswith(
        "; live while off: CH1 the output is off, but output-off state (voltage source) ZERO "
        "keeps the current limit (while sourcing voltage) in force")
    result = await gateway.grant(req.id, olga, list(req.required),
                                 proposal_hash=req.proposal_hash)
    assert result.request.status is Status.EXECUTED, result.request.outcome
    await task
    assert _modes(panel) == ("0", "ZERO", "NORM")


@pytest.mark.parametrize("how", ["panel", "recall"])
async def test_zero_over_a_limit_outside_is_made_safe_by_the_read_back(
        smu: Any, gateway: Gateway, olga: Principal, panel: Any,
        smu_sim: SimServedThread, how: str) -> None:
    """Set at the panel, or recalled by *RCL: a command whose effect the gateway cannot
    predict runs, the read-back finds the off output holding 0.5 A and the safe action
    opens the relay. (A setpoint on it is refused before it is sent.) The recalled slot
    was saved through the gateway in a safe state, then again at the panel: the one change
    the gateway's record of it cannot see."""
    if how == "recall":
        saving = asyncio.ensure_future(in_thread(smu.write, "*SAV 1"))
        save = await next_pending(gateway)
        await gateway.grant(save.id, olga, list(save.required),
                            proposal_hash=save.proposal_hash)
        await saving
    panel.write(":OUTP:VOLT:SMOD ZERO;:SOUR:VOLT:ILIM 0.5")
    message = ":SOUR:VOLT:RANG 20"
    if how == "panel":
        error = await _refused(smu, gateway, ":SOUR:VOLT 1")
        assert "(voltage source) ZERO keeps the current limit" in error
    if how == "recall":  # saved through the gateway before, now again at the panel
        panel.write("*SAV 1;:OUTP:VOLT:SMOD NORM;:SOUR:VOLT:ILIM 0.01")
        message = "*RCL 1"
    assert isinstance(smu_sim.instrument, SimSmu)
    task = asyncio.ensure_future(in_thread(smu.write, message))
    req = await next_pending(gateway)
    result = await gateway.grant(req.id, olga, list(req.required),
                                 proposal_hash=req.proposal_hash)
    await task
    assert "safe action" in str(result.request.outcome), result.request.outcome
    assert _modes(panel) == ("0", "HIMP", "HIMP")
    assert smu_sim.instrument.off_state() == "HIMP"


async def test_the_emergency_stop_leaves_the_relay_open(
        gateway: Gateway, olga: Principal, panel: Any, smu_sim: SimServedThread) -> None:
    panel.write(":OUTP:VOLT:SMOD ZERO;:OUTP:CURR:SMOD GUAR;:SOUR:VOLT 1;:OUTP ON")
    done = await gateway.emergency_stop(olga, "test", "smu")
    assert _modes(panel) == ("0", "HIMP", "HIMP")
    assert isinstance(smu_sim.instrument, SimSmu) and smu_sim.instrument.off_state() == "HIMP"
    assert "OUTP1:VOLT:SMOD HIMP" in str(done) and not any(
        r.get("errors") for r in done.get("instruments", {}).values()
        if isinstance(r, dict)), done


async def test_a_reset_leaves_normal_which_holds_no_level(
        smu: Any, gateway: Gateway, olga: Principal, panel: Any) -> None:
    """*RST (and power on) puts both off states at NORMal (section 6, default value): a 0 V
    source with a reduced limit; the 2450's 21 V default voltage limit is not in force."""
    panel.write(":OUTP:VOLT:SMOD HIMP;:OUTP:CURR:SMOD ZERO")
    task = asyncio.ensure_future(in_thread(smu.write, "*RST"))
    req = await next_pending(gateway)
    result = await gateway.grant(req.id, olga, list(req.required),
                                 proposal_hash=req.proposal_hash)
    await task
    assert result.request.status is Status.EXECUTED, result.request.outcome
    assert "safe action" not in str(result.request.outcome)
    assert _modes(panel) == ("0", "NORM", "NORM")
    assert Decimal(panel.query(":SOUR:CURR:VLIM?")) == 21
