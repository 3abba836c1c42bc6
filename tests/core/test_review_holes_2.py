"""The second hostile review: ways around a safety invariant through another door, another
spelling or another order, each proven on the simulator's own port (never the gateway's
word for it) and each closed as a class (docs/reliability.md section 7).

1. a plan's scope is an envelope inside the envelope: judged on every field that bounds the
   output under another name (the 2450's current source level and voltage limit), not only
   on fields called ``voltage`` and ``current``.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bench_gate.config import ChannelLimits
from bench_gate.gateway import Gateway
from bench_gate.models import EventType, Principal, Role, Status, now
from bench_gate.plans import Plan, PlanScope, covers
from bench_gate.scpi import classify, get_profile
from sim_instruments import SimServedThread, SimSmu
from tests.conftest import own_port
from tests.instruments import test_k2450

smu_sim = test_k2450.smu_sim
config = test_k2450.config

SMU_PLAN = {"instrument": "smu", "channels": [1], "voltage": [0, 1], "current_max": 0.01,
            "max_step": None, "output_enable": True, "max_writes": 10, "timeout_minutes": 30}


async def _active_plan(gw: Gateway, run_id: str, scope: dict[str, Any], olga: Principal,
                       pete: Principal) -> str:
    req = await gw.request_plan(run_id, scope, rationale="a small bias")
    await gw.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    done = await gw.grant(req.id, pete, ["output_enable"], proposal_hash=req.proposal_hash)
    assert done.request.status is Status.EXECUTED, done.request.outcome
    assert req.plan_id is not None
    return req.plan_id


def _terminals(smu_sim: SimServedThread) -> tuple[float, float]:
    inst = smu_sim.instrument
    assert isinstance(inst, SimSmu)
    return inst.terminals()


# ------------------------------------------------------------------ 1. a plan's other names
async def test_a_plan_never_energizes_a_current_source_beyond_its_scope(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        smu_sim: SimServedThread) -> None:
    """Another client leaves the 2450 sourcing 90 mA with a 9 V limit, output off (inside
    the bench's 10 V / 0.1 A). A plan approved for 0 to 1 V and 10 mA must not switch that
    on unattended: its scope bounds the current source level and the voltage limit too."""
    ivan, vera = (Principal(name=n, role=Role.OPERATOR) for n in ("ivan", "vera"))
    other = gateway.create_run(script, "script", goal="a current source for another test")
    setup = (await gateway.submit(other.id, "smu",
                                  ":SOUR:FUNC CURR;:SOUR:CURR 0.09;:SOUR:CURR:VLIM 9")).request
    assert setup is not None
    await gateway.grant(setup.id, ivan, ["setpoint", "state"],
                        proposal_hash=setup.proposal_hash)
    done = await gateway.grant(setup.id, vera, ["output_enable"],
                               proposal_hash=setup.proposal_hash)
    assert done.request.status is Status.EXECUTED, done.request.outcome
    with own_port(smu_sim.resource_name, panel=True) as lan:
        assert Decimal(lan.query(":SOUR:CURR?")) == Decimal("0.09")
        run = gateway.create_run(script, "script", goal="bias the DUT")
        await _active_plan(gateway, run.id, SMU_PLAN, olga, pete)
        result = await gateway.submit(run.id, "smu", ":OUTP ON")
        assert result.status == "pending", "the plan switched on 90 mA / 9 V unattended"
        assert result.request is not None and result.request.plan_id is None
        assert lan.query(":OUTP?") == "0"
    assert _terminals(smu_sim) == (0.0, 0.0)


_levels = st.decimals(min_value=-2, max_value=2, places=3)


@settings(deadline=None)
@given(scope_v=st.decimals(min_value=0, max_value=2, places=2),
       scope_i=st.decimals(min_value=0, max_value="0.2", places=3),
       state=st.fixed_dictionaries({f: _levels for f in
                                    ("voltage", "current", "current_level", "vlim",
                                     "triggered_voltage", "triggered_current",
                                     "list_voltage", "list_current")}),
       profile=st.sampled_from(["k2450", "e36312a"]))
def test_a_plan_covers_an_output_enable_only_inside_its_scope_on_every_bounded_field(
        scope_v: Decimal, scope_i: Decimal, state: dict[str, Decimal], profile: str) -> None:
    """For any live state, a plan covers switching a channel on only when every field the
    bench's voltage or current limit bounds (whatever its name) lies inside the scope."""
    prof = get_profile(profile)
    scope = PlanScope(instrument="x", channels=[1], voltage=(Decimal(0), scope_v),
                      current_max=scope_i, output_enable=True, max_writes=5)
    plan = Plan(id="plan-1", run_id="run-1", request_id="tk-1", scope=scope, scope_hash="",
                created_at=now())
    live = {f"ch1.{f}": str(v) for f, v in state.items() if f in prof.fields}
    live["ch1.output"] = "0"
    units = classify(":OUTP ON" if profile == "k2450" else "OUTP ON,(@1)", profile).units
    inside = all(
        (abs(v) <= scope_v and (f != "voltage" or v >= 0)) if prof.limit_of(f) == "voltage"
        else abs(v) <= scope_i
        for f, v in state.items() if f in prof.fields)
    assert (covers(plan, "x", units, live, prof) is None) == inside


# ------------------------------------------------------------------ 2. IEEE 488.2 macros
async def _everything(gw: Gateway, run_id: str, instrument: str, message: str,
                      *people: Principal) -> Any:
    """Submit ``message`` and grant every approval it asks for (split between ``people``,
    one kind each while they last): the most careless approvers can do."""
    result = await gw.submit(run_id, instrument, message)
    if result.request is None or result.status != "pending":
        return result
    req = result.request
    for who, kind in zip(people * 3, [k.value for k in req.missing()], strict=False):
        done = await gw.grant(req.id, who, [kind], proposal_hash=req.proposal_hash)
    return done


async def test_a_macro_never_makes_a_harmless_header_energize(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        smu_sim: SimServedThread) -> None:
    """IEEE 488.2 §10.7: with macros enabled, a macro label is expanded even when it is a
    device header. ``*DMC "DISP:CLE",#0:OUTP ON`` then ``*EMC 1`` (each an unknown header
    on the 2450's incomplete profile, every approval) would make ``:DISP:CLE`` (harmless,
    unattended) switch the output on with no output enable and no envelope check. A macro
    definition or enable is refused on every profile, and never reaches the instrument."""
    run = gateway.create_run(script, "script", goal="tidy the display")
    for message in ('*DMC "DISP:CLE",#0:OUTP ON', "*EMC 1", "*DDT #0:OUTP ON"):
        result = await _everything(gateway, run.id, "smu", message, olga, pete)
        assert getattr(result, "status", None) == "refused" and result.code == -203, \
            (message, result)
    await gateway.submit(run.id, "smu", ":DISP:CLE")
    with own_port(smu_sim.resource_name, panel=True) as panel:
        assert panel.query(":OUTP?") == "0"
    inst = smu_sim.instrument
    assert isinstance(inst, SimSmu) and inst.macros == {} and not inst.macros_on
    assert _terminals(smu_sim) == (0.0, 0.0)


@settings(deadline=None)
@given(name=st.sampled_from(["DMC", "EMC", "DDT", "dmc", "Emc", "dDt"]),
       profile=st.sampled_from(["generic", "k2450", "dl3021", "dmm6500", "dp832",
                                "spd3303x", "e36312a", "e3631a", "34465a"]),
       data=st.sampled_from(['"X",#0OUTP ON', "1", "0", '"X","OUTP ON"', "#15OUTP1"]))
def test_a_macro_definition_is_refused_on_every_profile(name: str, profile: str,
                                                        data: str) -> None:
    """Whatever the profile lists or leaves out, a macro definition or enable (and a device
    trigger definition, *DDT) is never held for approval: it is refused, or a syntax error."""
    from bench_gate.config import PolicyConfig
    from bench_gate.policy import Verdict, decide
    from bench_gate.scpi import ScpiError
    try:
        c = classify(f"*{name} {data}", profile)
    except ScpiError:
        return
    assert decide(c, {}, PolicyConfig()).verdict is Verdict.REFUSE


# ------------------------------------------------------------------ 3. coupled outputs
async def test_a_setpoint_never_moves_a_tracking_channel_outside_its_envelope(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        sim: Any) -> None:
    """With OUTP:TRAC ON the E36312A's CH3 follows CH2's voltage setpoint. CH3 is on at 3 V
    under a 5 V envelope: a CH2 setpoint of 10 V (inside CH2's 12 V, one setpoint approval)
    put CH3 at 10 V until the read-back switched it off. The prediction applies the
    profile's coupling (``copies``), so it is refused (-222) naming CH3."""
    gateway.config.envelope["psu"][3] = ChannelLimits(voltage=Decimal(5),
                                                      current=Decimal("0.5"))
    run = gateway.create_run(script, "script", goal="a symmetric bias")
    for message in ("CURR 0.2,(@3);:VOLT 3,(@3);:OUTP ON,(@3)", "OUTP:TRAC ON"):
        done = await _everything(gateway, run.id, "psu", message, olga, pete)
        assert done.request.status is Status.EXECUTED, (message, done.request.outcome)
    result = await gateway.submit(run.id, "psu", "VOLT 10,(@2)")
    assert result.status == "refused" and result.code == -222, result
    assert "CH3 voltage setpoint is 10.0 V, above the bench limit of 5.0 V" in result.reason
    inside = await _everything(gateway, run.id, "psu", "VOLT 4,(@2)", olga, pete)
    assert inside.request.status is Status.EXECUTED, inside.request.outcome
    with own_port(sim.psu_resource_name, panel=True) as panel:
        assert Decimal(panel.query("VOLT? (@3)")) == 4, "the simulator tracks"
        assert panel.query("OUTP? (@3)").strip() == "1"
    breaches = [e for e in gateway.store.journal(run.id, limit=1000)
                if e.type is EventType.ENVELOPE_BREACH]
    assert not breaches, breaches


async def test_a_channel_no_coupling_joins_is_not_judged_for_a_write_elsewhere(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        sim: Any) -> None:
    """The other side of the coupling rule: with tracking read off, CH3 (on, and outside the
    envelope since someone set it at the front panel) does not follow CH2, so a CH2
    setpoint is held as usual, not refused for CH3; once tracking may be on, it is judged."""
    gateway.config.envelope["psu"][3] = ChannelLimits(voltage=Decimal(5),
                                                      current=Decimal("0.5"))
    with own_port(sim.psu_resource_name, panel=True) as panel:
        panel.write("CURR 1,(@3);:VOLT 3,(@3);:OUTP ON,(@3)")
        assert panel.query("OUTP:TRAC?").strip() == "0"
    run = gateway.create_run(script, "script")
    held = await gateway.submit(run.id, "psu", "VOLT 3,(@2)")
    assert held.status == "pending" and held.request is not None, held
    refused = await gateway.submit(run.id, "psu", "OUTP:TRAC ON;:VOLT 3,(@2)")
    assert refused.status == "refused" and refused.code == -222, refused
    assert "CH3 current limit" in refused.reason


async def test_a_plan_never_moves_a_channel_it_does_not_name_through_a_coupling(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        sim: Any) -> None:
    """A plan for CH2 only: with tracking on, its CH2 setpoint would move CH3 too, which the
    plan's approvers never named. Held as an ordinary request; CH3 stays where it was."""
    run = gateway.create_run(script, "script", goal="sweep CH2")
    for message in ("CURR 0.2,(@3);:VOLT 3,(@3);:OUTP ON,(@3)", "OUTP:TRAC ON"):
        done = await _everything(gateway, run.id, "psu", message, olga, pete)
        assert done.request.status is Status.EXECUTED, (message, done.request.outcome)
    scope = {"instrument": "psu", "channels": [2], "voltage": [0, 5], "current_max": 0.5,
             "output_enable": True, "max_writes": 5, "timeout_minutes": 30}
    await _active_plan(gateway, run.id, scope, olga, pete)
    result = await gateway.submit(run.id, "psu", "VOLT 2,(@2)")
    assert result.status == "pending", result
    assert result.request is not None and result.request.plan_id is None
    with own_port(sim.psu_resource_name, panel=True) as panel:
        assert Decimal(panel.query("VOLT? (@3)")) == 0 and Decimal(panel.query("VOLT? (@2)")) == 0
