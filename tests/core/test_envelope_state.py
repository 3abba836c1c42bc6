"""The envelope is a rule about instrument state (issue: ways around the envelope).

Every check here reads the simulator's own port (``front_panel``), never the gateway:
- energizing with an untouched field above the envelope (current limit, OVP) is refused;
- a command whose effect cannot be predicted (``*RCL``, unknown headers) needs every
  approval, never claims "nothing reaches the DUT", and a breach it causes is made safe at
  once by the read-back check;
- a tightened envelope applies at the live recheck of a request held before it;
- plans count units, not messages, and spend writes atomically;
- the read-back tells the truth (pure rules of ``judge_readback``);
- a property: after any sequence of granted requests, no energized channel is outside.
"""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench_gate.config import ChannelLimits
from bench_gate.gateway import Gateway
from bench_gate.models import ApprovalKind, EventType, Principal, Status
from bench_gate.readback import Verdict, judge_readback

LIMITS = {1: (Decimal(6), Decimal(1)), 2: (Decimal(12), Decimal("0.5")),
          3: (Decimal(12), Decimal("0.5"))}


def panel(front_panel: Any, query: str) -> Decimal:
    return Decimal(str(front_panel.query(query)).strip())


def energized_outside(front_panel: Any) -> list[str]:
    """Every energized channel outside the default bench's envelope, read on the simulator."""
    bad = []
    for ch, (vmax, imax) in LIMITS.items():
        if panel(front_panel, f"OUTP? (@{ch})") == 0:
            continue
        volts, amps = panel(front_panel, f"VOLT? (@{ch})"), panel(front_panel, f"CURR? (@{ch})")
        if volts > vmax or amps > imax:
            bad.append(f"CH{ch} on at {volts} V / {amps} A")
    return bad


async def grant_all(gw: Gateway, request_id: str, who: Principal) -> Any:
    req = gw.get_request(request_id)
    return await gw.grant(req.id, who, [k.value for k in req.missing()],
                          proposal_hash=req.proposal_hash)


async def test_energize_with_untouched_current_limit_above_envelope_is_refused(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any) -> None:
    """CH2's limit is the instrument's default 1.0 A against an envelope of 0.5 A. An
    approved CH2 voltage must not make ``OUTP ON,(@2)`` a one-click energize."""
    run = gateway.create_run(script, "script")
    volt = (await gateway.submit(run.id, "psu", "VOLT 2,(@2)")).request
    assert volt is not None
    assert (await grant_all(gateway, volt.id, olga)).request.status is Status.EXECUTED
    result = await gateway.submit(run.id, "psu", "OUTP ON,(@2)")
    assert result.status == "refused" and result.code == -222
    assert "CH2 current limit is 1.0 A, above the bench limit of 0.5 A" in result.reason
    assert panel(front_panel, "OUTP? (@2)") == 0
    # Fixing the limit in the same message makes it legal: the predicted state is inside.
    fixed = (await gateway.submit(run.id, "psu", "CURR 0.4,(@2);:OUTP ON,(@2)")).request
    assert fixed is not None
    assert (await grant_all(gateway, fixed.id, olga)).request.status is Status.EXECUTED
    assert panel(front_panel, "OUTP? (@2)") == 1 and energized_outside(front_panel) == []


async def test_energize_with_ovp_above_envelope_is_refused(
        gateway: Gateway, script: Principal, front_panel: Any) -> None:
    gateway.config.envelope["psu"][1] = ChannelLimits(voltage=Decimal(6), current=Decimal(1),
                                                      ovp=Decimal("6.2"))
    run = gateway.create_run(script, "script")
    result = await gateway.submit(run.id, "psu", "VOLT 1,(@1);:OUTP ON,(@1)")
    assert result.status == "refused" and result.code == -222
    assert "over-voltage protection level is 6.6 V, above the bench limit of 6.2 V" \
        in result.reason
    assert panel(front_panel, "OUTP? (@1)") == 0 and panel(front_panel, "VOLT? (@1)") == 0


async def test_recall_of_an_over_limit_state_needs_everything_and_is_made_safe(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        front_panel: Any) -> None:
    """Slot 3 saved through the gateway, then again from the front panel at 20 V with CH2
    on (the one change the gateway's record cannot see), then ``*RST``. ``*RCL 3``: it
    needs every approval and its handoff never says nothing reaches the DUT; after the
    grant, the read-back finds CH2 out of the envelope and switches it off at once."""
    run = gateway.create_run(script, "script")
    save = (await gateway.submit(run.id, "psu", "*SAV 3")).request
    assert save is not None
    assert (await grant_all(gateway, save.id, olga)).request.status is Status.EXECUTED
    for command in ("VOLT 20,(@2)", "CURR 0.4,(@2)", "OUTP 1,(@2)", "*SAV 3", "*RST"):
        front_panel.write(command)
    assert panel(front_panel, "OUTP? (@2)") == 0
    req = (await gateway.submit(run.id, "psu", "*RCL 3")).request
    assert req is not None
    assert req.required == [ApprovalKind.SETPOINT, ApprovalKind.OUTPUT_ENABLE,
                            ApprovalKind.STATE]
    assert req.actions[0].unpredictable
    assert req.handoff["reversibility"].startswith("unpredictable:")
    assert "nothing reaches the DUT" not in str(req.handoff)
    part = await gateway.grant(req.id, olga, ["state"], proposal_hash=req.proposal_hash)
    assert part.request.status is Status.PENDING and "cannot predict" in part.message
    done = await gateway.grant(req.id, pete, ["setpoint", "output_enable"],
                               proposal_hash=req.proposal_hash)
    final = done.request
    assert final.status is Status.AMBIGUOUS, final.outcome
    assert "envelope breach" in (final.outcome or "")
    assert "CH2 voltage setpoint is 20.0 V, above the bench limit of 12.0 V" in (
        final.outcome or "")
    assert panel(front_panel, "OUTP? (@2)") == 0, "the safe action switched CH2 off"
    assert energized_outside(front_panel) == []
    breach = [e.data for e in gateway.store.journal(run.id, limit=1000)
              if e.type is EventType.ENVELOPE_BREACH]
    assert breach and breach[0]["safe_action"] == ["OUTP:DEL:FALL 0.0,(@2)", "OUTP 0,(@2)"]
    assert {"channel": 2, "field": "voltage", "value": "20.0", "limit": "12.0"} \
        in breach[0]["breaches"]


async def test_a_breach_found_after_an_ordinary_write_is_made_safe_and_reported(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any) -> None:
    """Someone at the front panel put CH3 out of the envelope with its output on. The next
    write through the gateway reads every channel back and switches CH3 off, and says so
    without failing the unrelated write."""
    for command in ("VOLT 15,(@3)", "CURR 0.2,(@3)", "OUTP 1,(@3)"):
        front_panel.write(command)
    run = gateway.create_run(script, "script")
    alerts: list[dict[str, Any]] = []
    async with gateway.subscribe() as queue:
        req = (await gateway.submit(run.id, "psu", "VOLT 1,(@1)")).request
        assert req is not None
        final = (await grant_all(gateway, req.id, olga)).request
        while not queue.empty():
            alerts.append(queue.get_nowait())
    assert final.status is Status.EXECUTED, final.outcome
    assert "CH3 voltage setpoint is 15.0 V" in (final.outcome or "")
    assert panel(front_panel, "VOLT? (@1)") == 1
    assert panel(front_panel, "OUTP? (@3)") == 0
    assert any(a.get("alert") == "envelope_breach" for a in alerts)


async def test_unpredictable_command_handoff_never_claims_nothing_reaches_the_dut(
        gateway: Gateway, script: Principal) -> None:
    run = gateway.create_run(script, "script")
    # *TRG applies whatever triggered levels and lists are set: nobody can predict it (the
    # E36312A's profile is complete, so an unknown header would be refused, not held).
    req = (await gateway.submit(run.id, "psu", "*TRG")).request
    assert req is not None and req.actions[0].unpredictable
    assert "cannot predict" in req.handoff["reversibility"]
    assert "its effect on setpoints and outputs cannot be predicted" in \
        req.handoff["risk"]["signals"]


async def test_a_tightened_envelope_applies_at_the_live_recheck(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any) -> None:
    run = gateway.create_run(script, "script")
    req = (await gateway.submit(run.id, "psu", "VOLT 5.5,(@1);:OUTP ON,(@1)")).request
    assert req is not None
    gateway.config.envelope["psu"][1] = ChannelLimits(voltage=Decimal(3), current=Decimal(1))
    final = (await grant_all(gateway, req.id, olga)).request
    assert final.status is Status.FAILED
    assert "this bench's rules refuse it now: CH1 voltage setpoint is 5.5 V, above the " \
        "bench limit of 3.0 V" in (final.outcome or "")
    assert panel(front_panel, "VOLT? (@1)") == 0 and panel(front_panel, "OUTP? (@1)") == 0


async def test_plans_count_units_not_messages(gateway: Gateway, script: Principal,
                                              olga: Principal, pete: Principal,
                                              front_panel: Any) -> None:
    """20 VOLT units in one message (0 → 5 V in 0.25 V steps) is 20 writes: with 10 left it
    is held whole, and nothing of it runs."""
    run = gateway.create_run(script, "script")
    scope = {"instrument": "psu", "channels": [1], "voltage": [0, 5], "current_max": 1,
             "max_step": 0.5, "output_enable": False, "max_writes": 10}
    req = await gateway.request_plan(run.id, scope)
    await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    plan_id = req.plan_id
    assert plan_id is not None and gateway.get_plan(plan_id).status.value == "active"
    ramp = ";".join(f":VOLT {Decimal('0.25') * n},(@1)" for n in range(1, 21))
    held = await gateway.submit(run.id, "psu", ramp.lstrip(":"))
    assert held.status == "pending"
    assert panel(front_panel, "VOLT? (@1)") == 0
    assert gateway.get_plan(plan_id).writes_used == 0
    small = ";".join(f":VOLT {Decimal('0.25') * n},(@1)" for n in range(1, 5))
    ran = await gateway.submit(run.id, "psu", small.lstrip(":"))
    assert ran.status == "executed", ran.reason
    assert gateway.get_plan(plan_id).writes_used == 4
    assert panel(front_panel, "VOLT? (@1)") == 1


async def test_max_step_holds_between_units_of_one_message(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any) -> None:
    run = gateway.create_run(script, "script")
    scope = {"instrument": "psu", "channels": [1], "voltage": [0, 5], "current_max": 1,
             "max_step": 0.5, "output_enable": False, "max_writes": 50}
    req = await gateway.request_plan(run.id, scope)
    await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    jump = await gateway.submit(run.id, "psu", "VOLT 0.5,(@1);:VOLT 1.5,(@1)")
    assert jump.status == "pending", "the second unit steps 1 V"
    assert panel(front_panel, "VOLT? (@1)") == 0


async def test_concurrent_writes_never_overspend_a_plan(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any) -> None:
    run = gateway.create_run(script, "script")
    scope = {"instrument": "psu", "channels": [1, 2, 3], "voltage": [0, 5],
             "current_max": 0.5, "output_enable": False, "max_writes": 1}
    req = await gateway.request_plan(run.id, scope)
    await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    assert req.plan_id is not None
    results = await asyncio.gather(*[
        gateway.submit(run.id, "psu", f"VOLT {n % 3 + 1},(@{n % 3 + 1})") for n in range(9)])
    executed = [r for r in results if r.status == "executed"]
    assert len(executed) == 1, [r.status for r in results]
    assert gateway.get_plan(req.plan_id).writes_used == 1
    moved = [ch for ch in (1, 2, 3) if panel(front_panel, f"VOLT? (@{ch})") != 0]
    assert len(moved) == 1


# --- the read-back tells the truth --------------------------------------------------------

BEFORE = {"ch1.voltage": "0.0", "ch1.output": "0"}


def test_failed_means_nothing_took_effect() -> None:
    expected = {**BEFORE, "ch1.voltage": "5.0"}
    j = judge_readback(before=BEFORE, expected=expected, after=dict(BEFORE), unverifiable=[],
                       blind=False, error="timed out", instrument_errors=[])
    assert j.verdict is Verdict.FAILED
    moved = {**BEFORE, "ch1.output": "1"}
    j = judge_readback(before=BEFORE, expected=expected, after=moved, unverifiable=[],
                       blind=False, error="timed out", instrument_errors=[])
    assert j.verdict is Verdict.AMBIGUOUS and "ch1.output 0 → 1" in j.detail


def test_an_unknown_command_with_an_error_is_never_failed() -> None:
    """``DISP:TEXT`` whose instrument reported an error: "0 of 0 changes" is no proof that
    nothing happened."""
    j = judge_readback(before=BEFORE, expected=BEFORE, after={**BEFORE, "ch1.output": "1"},
                       unverifiable=['DISP:TEXT "x"'], blind=True, error=None,
                       instrument_errors=['-113,"Undefined header"'])
    assert j.verdict is Verdict.AMBIGUOUS and "ch1.output 0 → 1" in j.detail


values = st.sampled_from(["0.0", "1.0", "5.0"])
states = st.fixed_dictionaries({"ch1.voltage": values, "ch1.output": st.sampled_from("01")})


@given(before=states, expected=states, after=states, blind=st.booleans(),
       error=st.sampled_from([None, "timed out"]),
       errors=st.sampled_from([[], ['-222,"Data out of range"']]))
def test_judge_readback_never_hides_a_change(before: dict[str, str], expected: dict[str, str],
                                             after: dict[str, str], blind: bool,
                                             error: str | None, errors: list[str]) -> None:
    j = judge_readback(before=before, expected=expected, after=after, unverifiable=[],
                       blind=blind, error=error, instrument_errors=errors)
    if j.verdict is Verdict.FAILED:
        assert after == before, "failed must mean nothing took effect"
    if j.verdict is Verdict.EXECUTED and not blind:
        assert all(after[k] == expected[k] for k in expected if expected[k] != before[k])
        assert all(after[k] == before[k] for k in before if expected[k] == before[k])
    moved = [k for k in before if after[k] != before[k]]
    if moved and j.verdict is not Verdict.EXECUTED:
        assert all(k in j.detail for k in moved if after[k] != expected[k])


# --- the property: after any sequence of granted requests ---------------------------------

channels = st.integers(1, 3)
commands = st.one_of(
    st.builds(lambda ch, v: f"VOLT {v},(@{ch})", channels, st.sampled_from([1, 5, 6, 11, 12])),
    st.builds(lambda ch, i: f"CURR {i},(@{ch})", channels,
              st.sampled_from(["0.1", "0.5", "0.9", "1"])),
    st.builds(lambda ch, on: f"OUTP {on},(@{ch})", channels, st.sampled_from(["ON", "OFF"])),
    st.builds(lambda ch, v, i: f"APPL CH{ch},{v},{i};:OUTP ON,(@{ch})", channels,
              st.sampled_from([2, 6, 12]), st.sampled_from(["0.2", "0.5", "1"])),
    st.sampled_from(["*RST", "*RCL 1", "*RCL 2", "*SAV 2", "*TRG"]),
)
#: Out-of-envelope states saved from the front panel for *RCL to find.
PANEL_SETUP = ("VOLT 20,(@2)", "OUTP 1,(@2)", "VOLT 6,(@1)", "CURR 3,(@1)", "OUTP 1,(@1)",
               "*SAV 1", "*RST")


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sequence=st.lists(commands, min_size=1, max_size=6))
async def test_no_sequence_of_granted_requests_leaves_the_envelope(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any,
        sequence: list[str]) -> None:
    for command in PANEL_SETUP:
        front_panel.write(command)
    run = gateway.create_run(script, "script")
    for message in sequence:
        result = await gateway.submit(run.id, "psu", message)
        if result.request is not None and result.status == "pending":
            await grant_all(gateway, result.request.id, olga)
        assert energized_outside(front_panel) == [], (sequence, message)


async def test_units_run_in_order_so_no_state_on_the_way_may_leave_the_envelope(
        gateway: Gateway, script: Principal, front_panel: Any) -> None:
    """CH2 at 20 V with its output off. ``OUTP ON`` before the ``VOLT`` that makes it safe
    would energize 20 V for the length of the write, though the final state is inside."""
    front_panel.write("VOLT 20,(@2)")
    run = gateway.create_run(script, "script")
    result = await gateway.submit(run.id, "psu", "OUTP ON,(@2);:VOLT 5,(@2);:CURR 0.1,(@2)")
    assert result.status == "refused" and result.code == -222
    assert "after OUTP 1,(@2)" in result.reason and "make the state safe first" in result.reason
    fine = await gateway.submit(run.id, "psu", "VOLT 5,(@2);:CURR 0.1,(@2);:OUTP ON,(@2)")
    assert fine.status == "pending"
    assert panel(front_panel, "OUTP? (@2)") == 0


async def test_a_fresh_request_after_stale_keeps_the_channels_the_approver_saw(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any) -> None:
    """``VOLT 5.5`` held on the run's selected CH1; the run then selects CH3 for a read.
    When the request goes stale, its successor is still CH1's, never the new selection."""
    run = gateway.create_run(script, "script")
    assert (await gateway.submit(run.id, "psu", "INST:NSEL 1;:VOLT?")).status == "executed"
    req = (await gateway.submit(run.id, "psu", "VOLT 5.5")).request
    assert req is not None and req.actions[0].canonical == "VOLT 5.5,(@1)"
    assert (await gateway.submit(run.id, "psu", "INST:NSEL 3;:MEAS:VOLT?")).status == "executed"
    front_panel.write("CURR 0.2,(@1)")  # the knob turns: the request goes stale
    stale = (await gateway.grant(req.id, olga, ["setpoint"],
                                 proposal_hash=req.proposal_hash)).request
    assert stale.status is Status.STALE and stale.superseded_by
    fresh = gateway.get_request(stale.superseded_by)
    assert [a.canonical for a in fresh.actions] == ["VOLT 5.5,(@1)"]
    assert panel(front_panel, "VOLT? (@3)") == 0 and panel(front_panel, "VOLT? (@1)") == 0


async def test_a_closed_run_runs_nothing_more(gateway: Gateway, script: Principal,
                                              olga: Principal, front_panel: Any) -> None:
    run = gateway.create_run(script, "script")
    plan = await gateway.request_plan(run.id, {
        "instrument": "psu", "channels": [2], "voltage": [0, 5], "current_max": 0.5,
        "output_enable": False, "max_writes": 5})
    await gateway.grant(plan.id, olga, ["setpoint"], proposal_hash=plan.proposal_hash)
    assert plan.plan_id is not None
    gateway.close_run(run.id)
    result = await gateway.submit(run.id, "psu", "VOLT 3,(@2)")
    assert result.status == "refused" and "the run is closed" in result.reason
    assert (await gateway.submit(run.id, "psu", "VOLT? (@2)")).status == "refused"
    assert gateway.get_plan(plan.plan_id).status.value == "revoked"
    assert panel(front_panel, "VOLT? (@2)") == 0


# --- a second hostile review: races and restarts -------------------------------------------
async def test_a_run_closed_while_its_write_waits_for_the_instrument_holds_nothing(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any) -> None:
    run = gateway.create_run(script, "script")
    inst = gateway.instrument("psu")
    release = asyncio.Event()

    async def busy(link: Any) -> None:
        await release.wait()

    blocker = asyncio.ensure_future(inst.lane.run(busy))  # the lane is busy elsewhere
    submit = asyncio.ensure_future(gateway.submit(run.id, "psu", "VOLT 4,(@1)"))
    await asyncio.sleep(0.1)
    gateway.close_run(run.id, "closed by its requester")
    release.set()
    result = await submit
    await blocker
    assert result.status == "refused" and "closed" in result.reason
    assert gateway.list_requests(run_id=run.id, status=Status.PENDING) == []
    assert panel(front_panel, "VOLT? (@1)") == 0


async def test_revoking_a_plan_while_its_write_waits_is_never_undone(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any) -> None:
    run = gateway.create_run(script, "script")
    req = await gateway.request_plan(run.id, {
        "instrument": "psu", "channels": [1], "voltage": [0, 5], "current_max": 0.5,
        "output_enable": False, "max_writes": 10})
    await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    assert req.plan_id is not None
    inst = gateway.instrument("psu")
    release = asyncio.Event()

    async def busy(link: Any) -> None:
        await release.wait()

    blocker = asyncio.ensure_future(inst.lane.run(busy))
    submit = asyncio.ensure_future(gateway.submit(run.id, "psu", "VOLT 4.5,(@1)"))
    await asyncio.sleep(0.1)
    gateway.revoke_plan(req.plan_id, olga)
    release.set()
    result = await submit
    await blocker
    assert result.status == "pending", "held for a person, not run by a revoked plan"
    assert gateway.get_plan(req.plan_id).status.value == "revoked"
    assert (await gateway.submit(run.id, "psu", "VOLT 3,(@1)")).status == "pending"
    assert panel(front_panel, "VOLT? (@1)") == 0


async def test_a_plan_approved_under_looser_rules_stops_counting(
        gateway: Gateway, olga: Principal, front_panel: Any) -> None:
    """olga approved both halves of a plan on her own engineer run under loose rules; the
    bench now requires an independent approver: the plan's writes no longer run."""
    run = gateway.create_run(olga, "engineer")
    req = await gateway.request_plan(run.id, {
        "instrument": "psu", "channels": [1], "voltage": [0, 5], "current_max": 0.5,
        "output_enable": True, "max_writes": 10})
    await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    await gateway.grant(req.id, olga, ["output_enable"], proposal_hash=req.proposal_hash)
    assert req.plan_id is not None
    gateway.config.policy.independent_approver = True  # tightened (or after a restart)
    result = await gateway.submit(run.id, "psu", "VOLT 2,(@1);:CURR 0.4,(@1);:OUTP ON,(@1)")
    final = result.request
    assert final is not None and final.status is Status.FAILED, final.outcome if final else ""
    assert "refuse its plan now" in (final.outcome or "")
    assert panel(front_panel, "OUTP? (@1)") == 0 and panel(front_panel, "VOLT? (@1)") == 0
