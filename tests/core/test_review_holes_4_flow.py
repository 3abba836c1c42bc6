"""The fourth hostile review, of the flow: approvals, plans, the setpoint cover, the handoff
and the shared store. Each attack is proven on the simulator's own port (never the
gateway's word for it) and closed as a class (docs/reliability.md section 7).

1. another bench's instrument of the same name: on one PostgreSQL store, a run may write
   through two gateways, and two benches may both have a ``psu``. A plan approved for
   bench A's psu ran writes on bench B's psu unattended (B's DUT energized with nobody
   asked); a run's pending writes on A's psu were shown as the state B's would start from;
   and a lease on A's psu was overwritten by one on B's, so A's output outlived its client.
2. a setpoint approval of one field standing in for another: ``CURR 0.1,(@1);:OUTP ON,(@1)``
   with CH1's voltage turned to 5.9 V at the panel needed a setpoint approval that said
   only "CH1 current limit 1.000 A → 0.100 A"; the DUT got 5.9 V nobody approved, and the
   gateway then remembered that voltage as approved by her (the cover of later enables).
3. an edit that leaves the handoff behind: approve-with-edits re-rendered the action and
   its hash, but the margins, their warnings, the change and the reversibility stayed those
   of the value before the edit: 1 V edited to 5.9 V against 6 V still read "margin 5.000 V
   (83%)" and "ch1.voltage 0.0 → 1.0" to the second approver (console and ``show``).
4. a plan's scope on a channel already on: a plan for CH1 "0 to 5 V, current limit at most
   0.1 A, output enable NOT included" ran ``VOLT 5,(@1)`` unattended on CH1 switched on
   earlier (another approval) at a 1 A limit: 5 V with 1 A behind it, outside the scope.
5. the words beside a plan's boxes: the console offered "I approve the setpoint: the
   setpoint this output needs" and "the output of  turns ON" for a standing plan, and the
   journal's ``meaning`` (the proof of what was approved) said the same, nothing of a plan
   or its scope.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench_gate.errors import IdempotencyKeyReused
from bench_gate.gateway import Gateway
from bench_gate.models import EventType, Principal, Status
from bench_gate.plans import Plan, PlanScope, covers
from bench_gate.scpi import classify, get_profile
from tests import pg
from tests._http_bench import Bench, shown_hash, start_bench
from tests.conftest import own_port
from tests.core.test_multibench import OLGA, PETE, SCRIPT, benches, panel, sims
from tests.core.test_review_holes_2 import _everything

pg_cluster = pg.pg_cluster
__all__ = ["benches", "pg_cluster", "sims"]  # fixtures, used by name

PLAN = {"instrument": "psu", "channels": [1], "voltage": [0, 5], "current_max": "0.5",
        "output_enable": True, "max_writes": 10}


def _psu(sim: Any, query: str) -> Decimal:
    res = panel(sim)
    try:
        return Decimal(res.query(query))
    finally:
        res.close()


async def _plan(gw: Gateway, run_id: str) -> None:
    """A plan for ``gw``'s psu CH1, both halves approved by two people."""
    asked = await gw.request_plan(run_id, PLAN)
    await gw.grant(asked.id, OLGA, ["setpoint"], proposal_hash=asked.proposal_hash)
    done = await gw.grant(asked.id, PETE, ["output_enable"], proposal_hash=asked.proposal_hash)
    assert done.request.status is Status.EXECUTED, done.message


# ------------------------------------------------------------ 1. another bench's psu
async def test_a_plan_never_runs_writes_on_another_benchs_instrument_of_that_name(
        benches: tuple[str, Gateway, Gateway], sims: Any) -> None:
    """A plan approved on bench A for "psu" CH1 (0 to 5 V, outputs included): the same run's
    ``CURR 0.5``, ``VOLT 5`` and ``OUTP ON`` sent through bench B's gateway to B's psu ran
    at once, inside A's plan, and B's CH1 read 5 V and on. Each is now held for a person on
    B, and A's own writes still run inside the plan."""
    _, a, b = benches
    run = a.create_run(SCRIPT, "script", goal="sweep the DUT on bench A")
    await _plan(a, run.id)
    for message in ("CURR 0.5,(@1)", "VOLT 5,(@1)", "OUTP ON,(@1)"):
        result = await b.submit(run.id, "psu", message)
        assert result.status == "pending", (message, result)
        assert result.request is not None and result.request.plan_id is None
        assert result.request.bench == "bench-b"
    assert _psu(sims[1], "VOLT? (@1)") == 0
    assert _psu(sims[1], "OUTP? (@1)") == 0, "B's DUT was energized under A's plan"
    inside = await a.submit(run.id, "psu", "VOLT 2,(@1)")  # A's plan still works on A
    assert inside.status == "executed", inside
    assert _psu(sims[0], "VOLT? (@1)") == 2


async def test_a_runs_writes_on_one_bench_are_not_the_state_of_another_benchs_instrument(
        benches: tuple[str, Gateway, Gateway], sims: Any) -> None:
    """A run's pending ``VOLT 4,(@2)`` on A's psu was applied to the snapshot of its next
    request on B's psu ("after tk-… executes: ch2.voltage 4.0"): B's request was judged and
    shown on a state B's instrument never had, and could only go stale."""
    _, a, b = benches
    run = a.create_run(SCRIPT, "script", goal="two benches")
    first = await a.submit(run.id, "psu", "VOLT 4,(@2)")
    assert first.status == "pending"
    second = await b.submit(run.id, "psu", "CURR 0.2,(@2)")
    assert second.request is not None
    assert "after_earlier" not in second.request.handoff, second.request.handoff
    assert second.request.snapshot.values["ch2.voltage"] == "0.0"
    done = await a.grant(second.request.id, OLGA, ["setpoint"],
                         proposal_hash=second.request.proposal_hash)
    assert done.request.status is Status.EXECUTED, done.message
    assert _psu(sims[1], "CURR? (@2)") == Decimal("0.2")


async def test_a_lease_on_one_benchs_psu_is_never_overwritten_by_anothers(
        benches: tuple[str, Gateway, Gateway]) -> None:
    """One run energizes CH1 of A's psu, then CH2 of B's: both benches keep their lease (one
    key per run and instrument name let B's replace A's, so A's output would outlive its
    client)."""
    _, a, b = benches
    run = a.create_run(SCRIPT, "script", goal="two benches")
    for gw in (a, b):
        ch = 1 if gw is a else 2
        asked = await gw.submit(run.id, "psu", f"VOLT 1,(@{ch});:CURR 0.1,(@{ch});"
                                               f":OUTP ON,(@{ch})")
        assert asked.request is not None
        await gw.grant(asked.request.id, OLGA, ["setpoint"],
                       proposal_hash=asked.request.proposal_hash)
        done = await gw.grant(asked.request.id, PETE, ["output_enable"],
                              proposal_hash=asked.request.proposal_hash)
        assert done.request.status is Status.EXECUTED, done.message
    assert [(x["instrument"], x["channels"]) for x in a.leases()] == [("psu", [1])]
    assert [(x["instrument"], x["channels"]) for x in b.leases()] == [("psu", [2])]


async def test_an_idempotency_key_never_answers_for_another_benchs_instrument(
        benches: tuple[str, Gateway, Gateway], sims: Any) -> None:
    """The run's ``VOLT 3,(@3)`` with key k1 on A's psu, then the same with k1 through B:
    B answered with A's request (its status, its outcome) and B's psu got nothing. The key
    names another request, so it is refused, and A's is untouched."""
    _, a, b = benches
    run = a.create_run(SCRIPT, "script", goal="two benches")
    first = await a.submit(run.id, "psu", "VOLT 3,(@3)", idempotency_key="k1")
    assert first.status == "pending" and first.request is not None
    with pytest.raises(IdempotencyKeyReused) as refused:
        await b.submit(run.id, "psu", "VOLT 3,(@3)", idempotency_key="k1")
    assert refused.value.differences[0] == "bench", refused.value.differences
    assert _psu(sims[1], "VOLT? (@3)") == 0
    assert a.get_request(first.request.id).status is Status.PENDING


# ------------------------------------------------------------ 2. one field for another
async def test_an_energize_that_sets_one_field_has_the_other_approved_as_it_is(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal, sim: Any,
        front_panel: Any) -> None:
    """CH1 at 5.9 V from the panel (inside its 6 V), no setpoint approved: ``CURR 0.1,(@1);
    :OUTP ON,(@1)``. Its setpoint approval said only the current; the voltage the DUT got
    was approved by nobody, yet remembered as olga's. Now the request shows the voltage as
    a setpoint it approves as it is, and olga's approval says so in the journal."""
    front_panel.write("VOLT 5.9,(@1)")
    run = gateway.create_run(script, "script", goal="power the DUT at a low current")
    held = await gateway.submit(run.id, "psu", "CURR 0.1,(@1);:OUTP ON,(@1)")
    req = held.request
    assert req is not None and held.status == "pending", held
    assert req.handoff.get("setpoint_needed") == [{"channel": 1, "voltage": "5.9"}], \
        req.handoff.get("setpoint_needed")
    await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    done = await gateway.grant(req.id, pete, ["output_enable"], proposal_hash=req.proposal_hash)
    assert done.request.status is Status.EXECUTED, done.message
    meanings = [e.data["meaning"] for e in gateway.store.journal(run.id, limit=500)
                if e.type is EventType.APPROVAL_GRANTED and e.data.get("kind") == "setpoint"]
    assert meanings == ["I approve the setpoint: CH1 current limit 1.000 A → 0.100 A; "
                        "CH1 voltage setpoint 5.900 V as it is now"], meanings
    with own_port(sim.psu_resource_name, panel=True) as psu:  # what she approved is what ran
        assert Decimal(psu.query("VOLT? (@1)")) == Decimal("5.9")
        assert Decimal(psu.query("CURR? (@1)")) == Decimal("0.1")
        assert psu.query("OUTP? (@1)").strip() == "1"


@pytest.mark.parametrize("energize", [True, False])
@pytest.mark.parametrize("sets", [(), ("voltage",), ("current",), ("voltage", "current")])
async def test_every_setpoint_field_of_an_energized_channel_is_approved_by_someone(
        gateway: Gateway, script: Principal, front_panel: Any, sets: tuple[str, ...],
        energize: bool) -> None:
    """Whatever an energize (or a setpoint) sets itself, with no setpoint in force every
    other field of the channel's setpoint is shown as one its setpoint approval approves as
    it is."""
    if not sets and not energize:
        return  # nothing on the channel is approved: nothing to show
    front_panel.write("VOLT 4.5,(@1)")
    command = {"voltage": "VOLT 5,(@1)", "current": "CURR 0.2,(@1)"}
    message = ";:".join([*(command[f] for f in sets), *(["OUTP ON,(@1)"] if energize else [])])
    run = gateway.create_run(script, "script", goal="energize")
    held = await gateway.submit(run.id, "psu", message)
    assert held.request is not None, held
    needed = held.request.handoff.get("setpoint_needed") or []
    shown = {f for entry in needed for f in entry if f != "channel"}
    assert shown | set(sets) == {"voltage", "current"}, (message, needed)
    assert not shown & set(sets), (message, needed)
    assert "setpoint" in [k.value for k in held.request.required]


async def test_a_setpoint_of_one_field_never_remembers_another_as_approved(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal, sim: Any,
        front_panel: Any) -> None:
    """The same, split in two: ``CURR 0.1,(@1)`` approved by olga ("CH1 current limit 1.000
    A → 0.100 A"), with CH1 at 5.9 V from the panel, was remembered as a setpoint of 5.9 V
    and 0.1 A by olga, so ``OUTP ON,(@1)`` needed only an output enable, its cover naming
    olga for a voltage she never saw as hers. Now her approval names the voltage as it is,
    and the cover is what she approved."""
    front_panel.write("VOLT 5.9,(@1)")
    run = gateway.create_run(script, "script", goal="power the DUT at a low current")
    held = await gateway.submit(run.id, "psu", "CURR 0.1,(@1)")
    req = held.request
    assert req is not None
    assert req.handoff.get("setpoint_needed") == [{"channel": 1, "voltage": "5.9"}]
    done = await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    assert done.request.status is Status.EXECUTED, done.message
    [meaning] = [e.data["meaning"] for e in gateway.store.journal(run.id, limit=500)
                 if e.type is EventType.APPROVAL_GRANTED]
    assert meaning.endswith("; CH1 voltage setpoint 5.900 V as it is now"), meaning
    enable = await gateway.submit(run.id, "psu", "OUTP ON,(@1)")
    assert enable.request is not None
    assert [k.value for k in enable.request.required] == ["output_enable"]
    [cover] = enable.request.handoff["setpoint_cover"]
    assert {f["field"]: (f["value"], f["by"]) for f in cover["fields"]} == {
        "voltage": ("5.9", ["olga"]), "current": ("0.1", ["olga"])}
    on = await gateway.grant(enable.request.id, pete, ["output_enable"],
                             proposal_hash=enable.request.proposal_hash)
    assert on.request.status is Status.EXECUTED, on.message
    with own_port(sim.psu_resource_name, panel=True) as psu:
        assert Decimal(psu.query("VOLT? (@1)")) == Decimal("5.9")


async def test_a_plan_step_never_remembers_a_value_outside_its_plan_as_approved(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal, sim: Any,
        front_panel: Any) -> None:
    """CH1's current limit at 0.9 A from the panel; a plan for 0 to 5 V and at most 0.1 A
    (olga); its step ``VOLT 5,(@1)`` was remembered as a setpoint of 5 V and 0.9 A approved
    by olga, so an ordinary ``OUTP ON,(@1)`` needed only an output enable, its cover naming
    olga's plan for 0.9 A. A value outside the plan is nobody's approval: the enable asks
    for the present setpoint to be approved."""
    front_panel.write("CURR 0.9,(@1)")
    run = gateway.create_run(script, "script", goal="a ramp")
    asked = await gateway.request_plan(run.id, {
        "instrument": "psu", "channels": [1], "voltage": [0, 5], "current_max": "0.1",
        "output_enable": False, "max_writes": 10})
    await gateway.grant(asked.id, olga, ["setpoint"], proposal_hash=asked.proposal_hash)
    step = await gateway.submit(run.id, "psu", "VOLT 5,(@1)")
    assert step.status == "executed" and step.request is not None, step
    assert step.request.plan_id is not None
    enable = await gateway.submit(run.id, "psu", "OUTP ON,(@1)")
    req = enable.request
    assert req is not None
    assert [k.value for k in req.required] == ["setpoint", "output_enable"], req.required
    assert "setpoint_cover" not in req.handoff, req.handoff["setpoint_cover"]
    assert req.handoff["setpoint_needed"] == [{"channel": 1, "voltage": "5.0", "current": "0.9"}]
    with own_port(sim.psu_resource_name, panel=True) as psu:
        assert psu.query("OUTP? (@1)").strip() == "0"


# ------------------------------------------------------------ 3. the handoff after an edit
async def test_an_edit_shows_the_next_approver_the_margins_of_the_edited_value(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        sim: Any) -> None:
    """olga approves the output enable of ``VOLT 1,(@1);:OUTP ON,(@1)`` with the edit
    CH1.voltage=5.9; pete, deciding the setpoint next, read the margin of 1 V (83 %), no
    "within 2 %" warning and the change 0.0 → 1.0. Now every part of the handoff made from
    the actions is made again, journaled with the edit, and the value read back is it."""
    run = gateway.create_run(script, "script", goal="power the DUT")
    req = (await gateway.submit(run.id, "psu", "VOLT 1,(@1);:OUTP ON,(@1)")).request
    assert req is not None
    await gateway.grant(req.id, olga, ["output_enable"], edits={"CH1.voltage": "5.9"},
                        proposal_hash=req.proposal_hash)
    edited = gateway.get_request(req.id)
    h = edited.handoff
    assert [m["words"] for m in h["risk"]["envelope"]] == [
        "CH1 voltage 5.900 V of limit 6.000 V: margin 0.100 V (2%)"], h["risk"]
    assert "CH1 voltage within 2% of the bench limit" in h["risk"]["signals"], h["risk"]
    assert h["diff"]["ch1.voltage"] == ["0.0", "5.9"], h["diff"]
    assert h["proposal_hash"] == edited.proposal_hash != req.proposal_hash
    [event] = [e for e in gateway.store.journal(run.id, limit=500)
               if e.type is EventType.PROPOSAL_EDITED]
    assert event.data["risk"] == h["risk"] and event.data["diff"] == h["diff"]
    done = await gateway.grant(req.id, pete, ["setpoint"], proposal_hash=edited.proposal_hash)
    assert done.request.status is Status.EXECUTED, done.message
    with own_port(sim.psu_resource_name, panel=True) as psu:
        assert Decimal(psu.query("VOLT? (@1)")) == Decimal("5.9")


# ------------------------------------------------------------ 4. a plan on a channel that is on
async def test_a_plan_never_runs_a_channel_that_is_on_outside_its_scope(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        sim: Any) -> None:
    """CH1 on at 1 V with a 1 A limit (approved by two people), then a plan for CH1: 0 to
    5 V, current limit at most 0.1 A, outputs not included. ``VOLT 5,(@1)`` ran at once and
    the simulator read 5 V at 1 A. Now it is held for a person; once CH1's limit is inside
    the plan (0.1 A, approved), the same write runs inside the plan."""
    run = gateway.create_run(script, "script", goal="a gentle ramp")
    on = await _everything(gateway, run.id, "psu", "VOLT 1,(@1);:CURR 1,(@1);:OUTP ON,(@1)",
                           olga, pete)
    assert on.request.status is Status.EXECUTED, on
    asked = await gateway.request_plan(run.id, {
        "instrument": "psu", "channels": [1], "voltage": [0, 5], "current_max": "0.1",
        "output_enable": False, "max_writes": 10})
    await gateway.grant(asked.id, olga, ["setpoint"], proposal_hash=asked.proposal_hash)
    held = await gateway.submit(run.id, "psu", "VOLT 5,(@1)")
    assert held.status == "pending" and held.request is not None, held
    assert held.request.plan_id is None
    with own_port(sim.psu_resource_name, panel=True) as psu:
        assert Decimal(psu.query("VOLT? (@1)")) == 1, "ran unattended outside the plan"
    await gateway.cancel(held.request.id, script)
    lowered = await _everything(gateway, run.id, "psu", "CURR 0.1,(@1)", olga, pete)
    assert lowered.request.status is Status.EXECUTED, lowered
    inside = await gateway.submit(run.id, "psu", "VOLT 5,(@1)")
    assert inside.status == "executed" and inside.request is not None, inside
    assert inside.request.plan_id is not None
    with own_port(sim.psu_resource_name, panel=True) as psu:
        assert (Decimal(psu.query("VOLT? (@1)")), Decimal(psu.query("CURR? (@1)"))) == (
            Decimal(5), Decimal("0.1"))


_LEVEL = st.decimals(min_value=0, max_value=5, places=2)  # inside CH1's ranges
_UNIT = st.one_of(st.tuples(st.just("VOLT"), _LEVEL), st.tuples(st.just("CURR"), _LEVEL),
                  st.tuples(st.just("OUTP"), st.sampled_from(["ON", "OFF"])))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(units=st.lists(_UNIT, min_size=1, max_size=4), voltage=_LEVEL, current=_LEVEL,
       output=st.booleans(), low=st.decimals(min_value=0, max_value=2, places=1),
       high=st.decimals(min_value=2, max_value=6, places=1),
       cmax=st.decimals(min_value=0, max_value=1, places=2), enable=st.booleans())
def test_a_plan_covers_only_states_inside_its_scope_wherever_a_channel_is_on(
        units: list[tuple[str, Any]], voltage: Decimal, current: Decimal, output: bool,
        low: Decimal, high: Decimal, cmax: Decimal, enable: bool) -> None:
    """For any live state of CH1 and any scope: a message the plan covers leaves CH1, after
    every unit that leaves it on, at a voltage in the scope's range and a current limit at
    most its ceiling (the plan is an envelope inside the envelope, about state)."""
    profile = get_profile("e36312a")
    message = ";:".join(f"{head} {value},(@1)" for head, value in units)
    scope = PlanScope(instrument="psu", channels=[1], voltage=(low, high), current_max=cmax,
                      output_enable=enable, max_writes=10)
    plan = Plan(id="plan-1", run_id="run-1", request_id="tk-1", scope=scope,
                scope_hash=scope.digest(), created_at=datetime.now(UTC))
    live = {"ch1.voltage": str(voltage), "ch1.current": str(current),
            "ch1.output": "1" if output else "0", "ch1.ovp": "6.6", "ch1.ovp_tripped": "0"}
    parsed = classify(message, profile.name).units
    if covers(plan, "psu", parsed, live, profile) is not None:
        return
    state: dict[str, Any] = {"voltage": voltage, "current": current, "on": output}
    for head, value in units:
        if head == "OUTP":
            state["on"] = value == "ON"
        else:
            state["voltage" if head == "VOLT" else "current"] = Decimal(value)
        if state["on"]:
            assert low <= Decimal(state["voltage"]) <= high, (message, live, scope)
            assert Decimal(state["current"]) <= cmax, (message, live, scope)


# ------------------------------------------------------------ 5. a plan's boxes, in words
@pytest.fixture
def http_bench(tmp_path: Path) -> Iterator[Bench]:
    yield from start_bench(tmp_path)


def _signed_in(bench: Bench, who: str) -> tuple[Any, str]:
    import httpx

    c = httpx.Client(base_url=bench.url, timeout=30, follow_redirects=False)
    csrf = re.compile(r'name="csrf" value="([^"]+)"')
    found = csrf.search(c.get("/login").text)
    assert found
    r = c.post("/login", data={"csrf": found.group(1), "token": bench.tokens[who], "next": "/"})
    assert r.status_code == 303
    again = csrf.search(c.get("/").text)
    assert again
    return c, again.group(1)


def test_a_plans_approvals_say_they_approve_a_standing_plan_and_its_scope(
        http_bench: Bench) -> None:
    """The console's two boxes for a plan request, and the meaning journaled with each
    approval, name the standing plan and its scope: the words the approver ticked."""
    with http_bench.http("bot") as h:
        run = h.post("/v1/runs", json={"kind": "script", "goal": "an IV sweep"}).json()["id"]
        r = h.post(f"/v1/runs/{run}/plans", json={
            "instrument": "psu", "channels": [1], "voltage": [0, 5], "currentMax": 0.5,
            "outputEnable": True, "maxWrites": 40, "timeoutMinutes": 30})
        assert r.status_code == 202, r.text
        tk = r.json()["takeover"]["id"]
    labels = re.compile(r'<label class="decision">(.*?)</label>', re.S)
    shown = {}
    for who, kind in (("olga", "setpoint"), ("oscar", "output_enable")):
        console, csrf = _signed_in(http_bench, who)
        try:
            page = console.get(f"/requests/{tk}").text
            words = {re.search(r'value="([a-z_]+)"', lab).group(1):  # type: ignore[union-attr]
                     " ".join(html.unescape(re.sub(r"<[^>]+>", " ", lab)).split())
                     .replace(" :", ":") for lab in labels.findall(page)}
            shown[kind] = words[kind]
            form = {"csrf": csrf, "kind": kind,
                    "shown_hash": shown_hash(http_bench.http("olga"), tk),
                    "shown_live": html.unescape(re.search(  # type: ignore[union-attr]
                        r'name="shown_live" value="([^"]*)"', page).group(1))}
            assert console.post(f"/requests/{tk}/approve", data=form).status_code in (200, 303)
        finally:
            console.close()
    assert shown["setpoint"].startswith("I approve the setpoint: a standing plan: every "
                                        "write inside it runs without asking again: psu CH1: "
                                        "voltage setpoints from 0.0 V to 5.0 V"), shown
    assert "outputs on, unattended" in shown["output_enable"], shown
    assert "the output of turns ON" not in shown["output_enable"], shown
    with http_bench.http("ada") as h:
        events = h.get(f"/v1/runs/{run}/journal").json()
        events = events["events"] if isinstance(events, dict) else events
        meanings = {e["data"]["kind"]: e["data"]["meaning"] for e in events
                    if e["type"] == "approval_granted"}
    assert meanings == shown, (meanings, shown)
