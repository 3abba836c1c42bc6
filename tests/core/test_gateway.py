"""The takeover core on the simulated bench, for real: pyvisa-py over sockets to pyvisa-sim,
and a real SQLite file."""

from __future__ import annotations

import asyncio
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from bench_gate.config import BenchConfig, InstrumentConfig
from bench_gate.errors import InvalidInput, NotFound, PermissionDenied, TransitionError
from bench_gate.gateway import Gateway
from bench_gate.models import ApprovalKind, EventType, Principal, Role, RunKind, Status
from bench_gate.store import SqliteStore
from tests.conftest import Clock


def live(front_panel: Any, query: str) -> Decimal:
    return Decimal(front_panel.query(query))


def events(gw: Gateway, run_id: str) -> list[str]:
    return [e.type.value for e in gw.store.journal(run_id, limit=10_000)]


async def test_read_passes_and_is_journaled(gateway: Gateway, script: Principal) -> None:
    run = gateway.create_run(script, "script", goal="check the bench")
    result = await gateway.submit(run.id, "psu", "*IDN?;MEAS:VOLT? (@1)")
    assert result.status == "executed"
    idn, volts = result.response.split(";")  # type: ignore[union-attr]
    assert idn.startswith("Keysight Technologies,E36312A")
    assert Decimal(volts) == 0
    assert events(gateway, run.id)[-2:] == ["command_received", "read_executed"]


async def test_query_of_several_channels_joins_with_commas(gateway: Gateway,
                                                           script: Principal) -> None:
    run = gateway.create_run(script, "script")
    result = await gateway.submit(run.id, "psu", "VOLT? (@1:3)")
    assert result.response is not None and len(result.response.split(",")) == 3


async def test_write_is_held_until_granted(gateway: Gateway, script: Principal,
                                           olga: Principal, front_panel: Any) -> None:
    run = gateway.create_run(script, "script", goal="bring up the DUT")
    result = await gateway.submit(run.id, "psu", "VOLT 3.3,(@1)", rationale="3V3 rail")
    assert result.status == "pending" and result.request is not None
    req = result.request
    assert req.id.startswith("tk-")
    assert req.required == [ApprovalKind.SETPOINT]
    assert req.actions[0].words == "CH1 voltage setpoint 0.000 V → 3.300 V"
    assert req.handoff["goal"] == "bring up the DUT"
    assert req.handoff["rationale"] == "3V3 rail"
    assert req.handoff["diff"] == {"ch1.voltage": ["0.0", "3.3"]}
    assert live(front_panel, "VOLT? (@1)") == 0, "nothing is written before a decision"
    granted = await gateway.grant(req.id, olga, ["setpoint"], notes="ok",
                                  proposal_hash=req.proposal_hash)
    assert granted.request.status is Status.EXECUTED
    assert live(front_panel, "VOLT? (@1)") == Decimal("3.3")
    receipt = granted.request.receipt
    assert receipt is not None
    assert receipt.sent == ["VOLT 3.3,(@1)"]
    assert receipt.before["ch1.voltage"] == "0.0" and receipt.after["ch1.voltage"] == "3.3"
    assert [a.by for a in receipt.approvals] == ["olga"]
    journal = events(gateway, run.id)
    for expected in ("takeover_requested", "approval_granted", "step_started",
                     "step_completed"):
        assert expected in journal
    shown = next(e for e in gateway.store.journal(run.id, limit=100)
                 if e.type is EventType.TAKEOVER_REQUESTED)
    assert shown.data["actions"][0]["words"] == "CH1 voltage setpoint 0.000 V → 3.300 V"


async def test_output_enable_needs_a_setpoint_approval_too(gateway: Gateway, script: Principal,
                                                           olga: Principal,
                                                           front_panel: Any) -> None:
    run = gateway.create_run(script, "script")
    req = (await gateway.submit(run.id, "psu", "OUTP ON,(@1)")).request
    assert req is not None
    assert req.required == [ApprovalKind.SETPOINT, ApprovalKind.OUTPUT_ENABLE]
    partial = await gateway.grant(req.id, olga, ["output_enable"], proposal_hash=req.proposal_hash)
    assert partial.request.status is Status.PENDING
    assert partial.missing == [ApprovalKind.SETPOINT]
    assert partial.message == ("CH1 output enable approved, but no approved setpoint for CH1: "
                               "approve a setpoint first")
    assert live(front_panel, "OUTP? (@1)") == 0
    done = await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    assert done.request.status is Status.EXECUTED
    assert live(front_panel, "OUTP? (@1)") == 1


async def test_setpoint_then_output_enable_in_one_message(gateway: Gateway, script: Principal,
                                                          olga: Principal,
                                                          front_panel: Any) -> None:
    run = gateway.create_run(script, "script")
    req = (await gateway.submit(run.id, "psu", "APPL CH1,5,0.5;:OUTP ON,(@1)")).request
    assert req is not None
    assert req.required == [ApprovalKind.SETPOINT, ApprovalKind.OUTPUT_ENABLE]
    partial = await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    assert partial.missing == [ApprovalKind.OUTPUT_ENABLE]
    assert "CH1 still needs its own approval" in partial.message
    assert live(front_panel, "OUTP? (@1)") == 0 and live(front_panel, "VOLT? (@1)") == 0
    done = await gateway.grant(req.id, olga, ["output_enable"], proposal_hash=req.proposal_hash)
    assert done.request.status is Status.EXECUTED, done.request.outcome
    assert live(front_panel, "VOLT? (@1)") == 5 and live(front_panel, "OUTP? (@1)") == 1
    assert live(front_panel, "MEAS:VOLT? (@1)") == 5


async def test_earlier_approved_setpoint_covers_a_later_output_enable(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any) -> None:
    run = gateway.create_run(script, "script")
    front_panel.write("CURR 0.4,(@3)")  # CH3's default 1 A is above its 0.5 A envelope
    first = (await gateway.submit(run.id, "psu", "VOLT 2,(@3)")).request
    assert first is not None
    await gateway.grant(first.id, olga, ["setpoint"], proposal_hash=first.proposal_hash)
    second = (await gateway.submit(run.id, "psu", "OUTP ON,(@3)")).request
    assert second is not None and second.required == [ApprovalKind.OUTPUT_ENABLE]
    # Someone turns the knob before the output enable is approved: it must go stale.
    front_panel.write("VOLT 9.0,(@3)")
    result = await gateway.grant(second.id, olga, ["output_enable"],
                                 proposal_hash=second.proposal_hash)
    assert result.request.status is Status.STALE
    assert live(front_panel, "OUTP? (@3)") == 0
    fresh = gateway.get_request(result.request.superseded_by or "")
    assert fresh.status is Status.PENDING
    assert fresh.required == [ApprovalKind.SETPOINT, ApprovalKind.OUTPUT_ENABLE]
    assert fresh.handoff["stale_diff"] == {"ch3.voltage": ["2.0", "9.0"]}


async def test_output_enable_alone_never_runs(gateway: Gateway, script: Principal,
                                              olga: Principal, pete: Principal,
                                              front_panel: Any) -> None:
    run = gateway.create_run(script, "script")
    req = (await gateway.submit(run.id, "psu", "VOLT 1,(@1);:OUTP 1,(@1)")).request
    assert req is not None
    for who in (olga, pete):
        result = await gateway.grant(req.id, who, ["output_enable"],
                                     proposal_hash=req.proposal_hash)
        assert result.request.status is Status.PENDING
    assert live(front_panel, "OUTP? (@1)") == 0


async def test_approve_with_changes(gateway: Gateway, script: Principal, olga: Principal,
                                    front_panel: Any) -> None:
    run = gateway.create_run(script, "agent")
    req = (await gateway.submit(run.id, "psu", "VOLT 12,(@2)")).request
    assert req is not None
    old_hash = req.proposal_hash
    result = await gateway.grant(req.id, olga, ["setpoint"], edits={"CH2.voltage": "5"},
                                 proposal_hash=req.proposal_hash)
    assert result.request.status is Status.EXECUTED
    assert result.request.proposal_hash != old_hash
    assert result.request.receipt is not None
    assert result.request.receipt.sent == ["VOLT 5.0,(@2)"]
    assert live(front_panel, "VOLT? (@2)") == 5
    edited = next(e for e in gateway.store.journal(run.id, limit=100)
                  if e.type is EventType.PROPOSAL_EDITED)
    assert edited.data["old_commands"] == ["VOLT 12.0,(@2)"]
    assert edited.data["new_commands"] == ["VOLT 5.0,(@2)"]


async def test_edit_outside_the_envelope_is_refused(gateway: Gateway, script: Principal,
                                                    olga: Principal) -> None:
    run = gateway.create_run(script, "agent")
    req = (await gateway.submit(run.id, "psu", "VOLT 10,(@2)")).request
    assert req is not None
    with pytest.raises(InvalidInput, match="bench limit of 12"):
        await gateway.grant(req.id, olga, ["setpoint"], edits={"CH2.voltage": "20"},
                            proposal_hash=req.proposal_hash)
    with pytest.raises(InvalidInput, match="sets no current"):
        await gateway.grant(req.id, olga, ["setpoint"], edits={"CH2.current": "0.1"},
                            proposal_hash=req.proposal_hash)
    assert gateway.get_request(req.id).status is Status.PENDING


async def test_deny_notes_reach_the_requester(gateway: Gateway, script: Principal,
                                              olga: Principal, front_panel: Any) -> None:
    run = gateway.create_run(script, "script")
    req = (await gateway.submit(run.id, "psu", "VOLT 6,(@1)")).request
    assert req is not None
    waiter = asyncio.create_task(gateway.wait(req.id, timeout=10))
    await asyncio.sleep(0.05)
    await gateway.deny(req.id, olga, "6 V would damage the DUT, use 3.3 V",
                       proposal_hash=req.proposal_hash)
    decided = await waiter
    assert decided.status is Status.DENIED
    assert decided.notes == "6 V would damage the DUT, use 3.3 V"
    assert decided.outcome == "denied by olga: 6 V would damage the DUT, use 3.3 V"
    assert live(front_panel, "VOLT? (@1)") == 0
    with pytest.raises(InvalidInput):
        await gateway.deny(req.id, olga, "   ", proposal_hash=req.proposal_hash)


async def test_live_recheck_catches_front_panel_change(gateway: Gateway, script: Principal,
                                                       olga: Principal,
                                                       front_panel: Any) -> None:
    run = gateway.create_run(script, "script")
    req = (await gateway.submit(run.id, "psu", "VOLT 4,(@1)")).request
    assert req is not None
    front_panel.write("VOLT 1.5,(@1)")
    result = await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    assert result.request.status is Status.STALE
    assert "ch1.voltage 0.0 → 1.5" in (result.request.outcome or "")
    assert live(front_panel, "VOLT? (@1)") == Decimal("1.5"), "nothing was written"
    fresh = gateway.get_request(result.request.superseded_by or "")
    assert fresh.supersedes == req.id and fresh.status is Status.PENDING
    assert fresh.actions[0].old == "1.5"
    # A waiter on the old request follows it to the fresh one.
    waiter = asyncio.create_task(gateway.wait(req.id, timeout=10))
    await asyncio.sleep(0.05)
    await gateway.grant(fresh.id, olga, ["setpoint"], proposal_hash=fresh.proposal_hash)
    assert (await waiter).status is Status.EXECUTED
    assert live(front_panel, "VOLT? (@1)") == 4
    assert "takeover_stale" in events(gateway, run.id)


async def test_output_tripped_or_switched_is_stale(gateway: Gateway, script: Principal,
                                                   olga: Principal, front_panel: Any) -> None:
    run = gateway.create_run(script, "script")
    req = (await gateway.submit(run.id, "psu", "CURR 0.3,(@2)")).request
    assert req is not None
    front_panel.write("OUTP 1,(@2)")
    result = await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    assert result.request.status is Status.STALE
    assert live(front_panel, "CURR? (@2)") != Decimal("0.3")


@pytest.mark.parametrize(("message", "code", "reason"), [
    ("VOLT 13,(@2)", -222, "above the bench limit of 12.0 V"),
    ("CURR 0.8,(@3)", -222, "above the bench limit of 0.5 A"),
    ("VOLT MAX,(@2)", -222, "above the bench limit"),
    ("VOLT 30,(@2)", -222, "outside 0.0 to 25.0 V"),
    ("CAL:STAT ON", -203, "forbidden"),
    ("*CAL?", -203, "forbidden"),
    ("VOLT 5;\nOUTP ON", -102, "line break"),
    ("VOLT 5V0", -121, ""),
])
async def test_refusals_write_nothing(gateway: Gateway, script: Principal, front_panel: Any,
                                      message: str, code: int, reason: str) -> None:
    run = gateway.create_run(script, "script")
    result = await gateway.submit(run.id, "psu", message)
    assert result.status == "refused"
    assert result.code == code
    assert reason in result.reason
    assert gateway.list_requests(run_id=run.id) == []
    assert events(gateway, run.id)[-1] == "write_refused"


async def test_unknown_command_is_held_not_passed(config: BenchConfig, db_path: Path,
                                                  clock: Clock, script: Principal) -> None:
    # An instrument on the generic profile (the DMM's port): what it does not know is held.
    config.instruments.append(InstrumentConfig(
        name="gen", resource=config.instruments[1].resource, profile="generic"))
    gateway = Gateway(config, SqliteStore(db_path), clock=clock)
    await gateway.start()
    try:
        run = gateway.create_run(script, "script")
        result = await gateway.submit(run.id, "gen", "SYST:BEEP")
        assert result.status == "pending" and result.request is not None
        # Its effect cannot be predicted: it needs every approval.
        assert result.request.required == [ApprovalKind.SETPOINT, ApprovalKind.OUTPUT_ENABLE,
                                           ApprovalKind.STATE]
        assert result.request.actions[0].effect == "unknown"
    finally:
        await gateway.close()
        gateway.store.close()


async def test_a_complete_profile_refuses_what_it_does_not_know(
        gateway: Gateway, script: Principal) -> None:
    run = gateway.create_run(script, "script")
    beep = await gateway.submit(run.id, "psu", "SYST:BEEP")
    assert beep.status == "executed"  # known to the E36312A's profile: harmless
    typo = await gateway.submit(run.id, "psu", "SYST:BEEPP")
    assert (typo.status, typo.code) == ("refused", -113)
    assert "closest: SYSTem:BEEPer[:IMMediate]" in typo.reason
    assert gateway.list_requests(run_id=run.id) == []


async def test_idempotent_retry_returns_the_same_request(gateway: Gateway, script: Principal,
                                                         olga: Principal) -> None:
    run = gateway.create_run(script, "script")
    first = await gateway.submit(run.id, "psu", "VOLT 1,(@1)", idempotency_key="step-1")
    again = await gateway.submit(run.id, "psu", "VOLT 1,(@1)", idempotency_key="step-1")
    assert first.request is not None and again.request is not None
    assert first.request.id == again.request.id
    await gateway.grant(first.request.id, olga, ["setpoint"],
                        proposal_hash=first.request.proposal_hash)
    third = await gateway.submit(run.id, "psu", "VOLT 1,(@1)", idempotency_key="step-1")
    assert third.status == "executed" and third.request is not None
    assert third.request.id == first.request.id
    assert len(gateway.list_requests(run_id=run.id)) == 1


async def test_expiry_is_a_denial(gateway: Gateway, script: Principal, olga: Principal,
                                  clock: Clock, front_panel: Any) -> None:
    run = gateway.create_run(script, "script")
    req = (await gateway.submit(run.id, "psu", "VOLT 2,(@1)", timeout_minutes=5)).request
    assert req is not None
    clock.advance(minutes=4)
    assert await gateway.sweep() == 0
    clock.advance(minutes=2)
    with pytest.raises(TransitionError, match="expired"):
        await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    expired = gateway.get_request(req.id)
    assert expired.status is Status.EXPIRED
    # A sentence for people names its time in RFC 3339 with Z on every door (the socket
    # door's SYST:ERR? and GATE:STAT? pass it on verbatim).
    assert expired.outcome is not None and "+00:00" not in expired.outcome
    assert expired.outcome.endswith("Z; nothing was written"), expired.outcome
    assert live(front_panel, "VOLT? (@1)") == 0
    assert "takeover_expired" in events(gateway, run.id)
    with pytest.raises(InvalidInput):
        await gateway.submit(run.id, "psu", "VOLT 2,(@1)", timeout_minutes=0)
    with pytest.raises(InvalidInput):
        await gateway.submit(run.id, "psu", "VOLT 2,(@1)", timeout_minutes=1441)


async def test_self_approval_is_refused(gateway: Gateway, olga: Principal) -> None:
    run = gateway.create_run(olga, "script")
    req = (await gateway.submit(run.id, "psu", "VOLT 2,(@1)")).request
    assert req is not None
    with pytest.raises(PermissionDenied, match="cannot approve it"):
        await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    requester = Principal(name="bot", role=Role.REQUESTER)
    with pytest.raises(PermissionDenied, match="needs an operator"):
        await gateway.grant(req.id, requester, ["setpoint"], proposal_hash=req.proposal_hash)


async def test_engineer_confirms_own_change_one_kind_at_a_time(
        gateway: Gateway, olga: Principal, front_panel: Any) -> None:
    run = gateway.create_run(olga, RunKind.ENGINEER)
    req = (await gateway.submit(run.id, "psu", "VOLT 1,(@1);:OUTP ON,(@1)")).request
    assert req is not None
    with pytest.raises(InvalidInput, match="separately"):
        await gateway.grant(req.id, olga, ["setpoint", "output_enable"],
                            proposal_hash=req.proposal_hash)
    await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    done = await gateway.grant(req.id, olga, ["output_enable"], proposal_hash=req.proposal_hash)
    assert done.request.status is Status.EXECUTED
    assert live(front_panel, "OUTP? (@1)") == 1


async def test_independent_approver_and_two_person_rule(gateway: Gateway, olga: Principal,
                                                        pete: Principal,
                                                        script: Principal) -> None:
    gateway.config.policy.independent_approver = True
    gateway.config.policy.two_person_output_enable = True
    own = gateway.create_run(olga, "engineer")
    req = (await gateway.submit(own.id, "psu", "VOLT 1,(@1)")).request
    assert req is not None
    with pytest.raises(PermissionDenied, match="someone other than the requester"):
        await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    run = gateway.create_run(script, "script")
    both = (await gateway.submit(run.id, "psu", "VOLT 1,(@1);:OUTP ON,(@1)")).request
    assert both is not None
    with pytest.raises(PermissionDenied, match="two different people"):
        await gateway.grant(both.id, olga, ["setpoint", "output_enable"],
                            proposal_hash=both.proposal_hash)
    await gateway.grant(both.id, olga, ["setpoint"], proposal_hash=both.proposal_hash)
    with pytest.raises(PermissionDenied, match="second person"):
        await gateway.grant(both.id, olga, ["output_enable"], proposal_hash=both.proposal_hash)
    done = await gateway.grant(both.id, pete, ["output_enable"], proposal_hash=both.proposal_hash)
    assert done.request.status is Status.EXECUTED


async def test_concurrent_grant_and_deny_give_one_outcome(gateway: Gateway, script: Principal,
                                                          olga: Principal,
                                                          pete: Principal) -> None:
    for _ in range(5):
        # A run of its own each round: a deny may win every race (the grant's commit runs
        # on a worker thread, executor.run_granted), and three in a row suspend a run.
        run = gateway.create_run(script, "script")
        req = (await gateway.submit(run.id, "psu", "VOLT 1.25,(@1)")).request
        assert req is not None
        outcomes = await asyncio.gather(
            gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash),
            gateway.deny(req.id, pete, "no", proposal_hash=req.proposal_hash),
            gateway.grant(req.id, pete, ["setpoint"], proposal_hash=req.proposal_hash),
            return_exceptions=True)
        winners = [o for o in outcomes if not isinstance(o, Exception)]
        losers = [o for o in outcomes if isinstance(o, Exception)]
        assert all(isinstance(e, TransitionError) for e in losers), losers
        final = gateway.get_request(req.id)
        assert final.status in (Status.EXECUTED, Status.DENIED)
        decided = [e for e in gateway.store.journal(run.id, limit=10_000)
                   if e.request_id == req.id and e.type in (EventType.STEP_COMPLETED,
                                                            EventType.TAKEOVER_DENIED)]
        assert len(decided) == 1
        assert winners


async def test_two_operators_approve_the_two_halves_at_once(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        front_panel: Any) -> None:
    run = gateway.create_run(script, "script")
    req = (await gateway.submit(run.id, "psu", "VOLT 2,(@1);:OUTP ON,(@1)")).request
    assert req is not None
    results = await asyncio.gather(gateway.grant(req.id, olga, ["setpoint"],
                                                 proposal_hash=req.proposal_hash),
                                   gateway.grant(req.id, pete, ["output_enable"],
                                                 proposal_hash=req.proposal_hash))
    assert gateway.get_request(req.id).status is Status.EXECUTED
    assert any(r.request.status is Status.EXECUTED for r in results)
    completed = [e for e in gateway.store.journal(run.id, limit=1000)
                 if e.type is EventType.STEP_COMPLETED]
    assert len(completed) == 1
    assert live(front_panel, "OUTP? (@1)") == 1


async def test_cancel_and_closed_run(gateway: Gateway, script: Principal, olga: Principal
                                     ) -> None:
    run = gateway.create_run(script, "script")
    req = (await gateway.submit(run.id, "psu", "VOLT 2,(@1)")).request
    assert req is not None
    gateway.close_run(run.id)
    assert gateway.get_request(req.id).status is Status.CANCELLED
    with pytest.raises(TransitionError):
        await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)


async def test_taken_over_run_holds_harmless_writes_until_release(
        gateway: Gateway, script: Principal, olga: Principal) -> None:
    run = gateway.create_run(script, "script")
    assert (await gateway.submit(run.id, "psu", "*CLS")).status == "executed"
    gateway.take_over(run.id, olga, "checking the wiring")
    held = await gateway.submit(run.id, "psu", "*CLS")
    assert held.status == "pending"
    assert (await gateway.submit(run.id, "psu", "*IDN?")).status == "executed"
    gateway.release(run.id, olga)
    assert (await gateway.submit(run.id, "psu", "*CLS")).status == "executed"
    assert "takeover_released" in events(gateway, run.id)


async def test_selection_is_per_run(gateway: Gateway, script: Principal, olga: Principal
                                    ) -> None:
    a = gateway.create_run(script, "script")
    b = gateway.create_run(script, "script")
    await gateway.submit(a.id, "psu", "INST:NSEL 2")
    await gateway.submit(b.id, "psu", "INST:SEL CH3")
    req = (await gateway.submit(a.id, "psu", "VOLT 1")).request
    assert req is not None and req.actions[0].canonical == "VOLT 1.0,(@2)"
    req = (await gateway.submit(b.id, "psu", "VOLT 1")).request
    assert req is not None and req.actions[0].canonical == "VOLT 1.0,(@3)"


async def test_unknown_things_are_clear_errors(gateway: Gateway, script: Principal,
                                               olga: Principal) -> None:
    run = gateway.create_run(script, "script")
    with pytest.raises(NotFound, match="no instrument 'scope'"):
        await gateway.submit(run.id, "scope", "*IDN?")
    with pytest.raises(NotFound):
        await gateway.submit("run-nope", "psu", "*IDN?")
    with pytest.raises(InvalidInput):
        gateway.create_run(script, "robot")
    req = (await gateway.submit(run.id, "psu", "VOLT 1,(@1)")).request
    assert req is not None
    with pytest.raises(InvalidInput, match="does not need output_enable"):
        await gateway.grant(req.id, olga, ["output_enable"], proposal_hash=req.proposal_hash)
    with pytest.raises(InvalidInput):
        await gateway.grant(req.id, olga, ["everything"], proposal_hash=req.proposal_hash)


async def test_waiting_holds_no_thread(gateway: Gateway, script: Principal) -> None:
    run = gateway.create_run(script, "script")
    reqs = [(await gateway.submit(run.id, "psu", f"VOLT {i / 100},(@1)")).request
            for i in range(30)]
    # The loop's default executor (threads "asyncio_N") may grow meanwhile for the
    # heartbeat's or the watch's commit; a waiter must add no thread of any other kind.
    def own() -> set[str]:
        return {t.name for t in threading.enumerate() if not t.name.startswith("asyncio_")}

    before = own()
    waits = [asyncio.create_task(gateway.wait(r.id, timeout=0.5)) for r in reqs if r]
    await asyncio.sleep(0.1)
    assert own() == before
    assert threading.active_count() < len(waits)
    done = await asyncio.gather(*waits)
    assert all(r.status is Status.PENDING for r in done)


def test_envelope_holds_an_unknown_channel_to_the_strictest_limit() -> None:
    from bench_gate.config import default_config
    from bench_gate.policy import envelope_breach
    from bench_gate.scpi import classify

    limits = default_config().envelope["psu"]
    unit = classify("VOLT 10", "e36312a").units[0]
    assert unit.channel is None
    assert "above the bench limit of 6.0 V" in (envelope_breach(unit, limits) or "")
    assert envelope_breach(classify("VOLT 10,(@2)", "e36312a").units[0], limits) is None


async def test_many_waiters_on_one_request_all_wake(gateway: Gateway, script: Principal,
                                                    olga: Principal) -> None:
    run = gateway.create_run(script, "script")
    req = (await gateway.submit(run.id, "psu", "VOLT 0.5,(@1)")).request
    assert req is not None
    waits = [asyncio.create_task(gateway.wait(req.id, timeout=10)) for _ in range(5)]
    await asyncio.sleep(0.05)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await gateway.deny(req.id, olga, "no", proposal_hash=req.proposal_hash)
    done = await asyncio.gather(*waits)
    assert all(r.status is Status.DENIED for r in done)
    assert loop.time() - started < 0.5, "every waiter is woken, not left to time out"
    assert gateway.waiting_on(req.id) == 0


@pytest.mark.parametrize("message", [
    'GATE:TOK "bg_abcdefghijklmnopqrstuvwxyz0123"',
    '*IDN?;:GATE:GOAL "x"',
    'SYST:BEEP "bg_abcdefghijklmnopqrstuvwxyz0123"',
])
async def test_tokens_and_gate_commands_never_reach_the_journal_or_an_instrument(
        gateway: Gateway, script: Principal, message: str) -> None:
    run = gateway.create_run(script, "script")
    result = await gateway.submit(run.id, "psu", message)
    assert result.status == "refused" and result.code in (-113, -203)
    assert gateway.list_requests(run_id=run.id) == []
    journal = str([e.data for e in gateway.store.journal(run.id, limit=100)])
    assert "abcdefghijklmnopqrstuvwxyz0123" not in journal


async def test_a_requester_sees_the_cover_but_not_another_runs_request(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any) -> None:
    """The setpoint approval behind an output enable is shown to everyone who may see the
    request; the id of a request in someone else's run only to those who may open it."""
    other = Principal(name="bot2", role=script.role)
    theirs = gateway.create_run(other, "script")
    front_panel.write("CURR 0.4,(@3)")
    first = (await gateway.submit(theirs.id, "psu", "VOLT 2,(@3)")).request
    assert first is not None
    await gateway.grant(first.id, olga, ["setpoint"], proposal_hash=first.proposal_hash)
    mine = gateway.create_run(script, "script")
    on = (await gateway.submit(mine.id, "psu", "OUTP ON,(@3)")).request
    assert on is not None and on.required == [ApprovalKind.OUTPUT_ENABLE]
    for who, named in ((olga, first.id), (script, None)):
        [cover] = gateway.find_request(who, on.id[:12]).handoff["setpoint_cover"]
        voltage = next(f for f in cover["fields"] if f["field"] == "voltage")
        assert voltage["value"] == "2.0" and voltage["by"] == ["olga"]
        assert voltage["request"] == named
    # The stored request keeps the whole cover (the copy shown is not saved back).
    stored = gateway.get_request(on.id).handoff["setpoint_cover"][0]["fields"]
    assert any(f["request"] == first.id for f in stored)


async def test_a_heartbeat_in_flight_at_close_never_claims_the_bench_again(
        config: BenchConfig, db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench claim's heartbeat commits off the event loop; a close during one waits for
    it, so the claim released at close stays released (a restart is not refused as 'served
    by a live gateway')."""
    gw = Gateway(config, SqliteStore(db_path))
    await gw.start()
    registry = gw.registry
    real = registry.beat
    started, done = threading.Event(), threading.Event()

    def slow_beat() -> None:  # a beat on a slow disk
        started.set()
        time.sleep(1.2)
        real()
        done.set()

    monkeypatch.setattr(registry, "beat", slow_beat)
    for _ in range(100):
        if started.is_set():
            break
        await asyncio.sleep(0.05)
    assert started.is_set()
    await gw.close()
    try:
        assert await asyncio.to_thread(done.wait, 10)
        assert not registry.alive(config.bench)
    finally:
        gw.store.close()
