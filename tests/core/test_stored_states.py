"""A recall is judged on the state it brings back, before it is sent (bench_gate/memories.py).

``*RCL`` of a state saved with an energized channel outside the envelope used to be held
for every approval and made safe by the read-back: for the length of one round trip the
DUT saw the recalled levels. Now the gateway records the state every save through it
stores, and a recall is judged on that record like any proposed state; a slot it did not
see saved is refused. Every check reads the simulator's own port (``front_panel``).
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from bench_gate import envelope
from bench_gate.config import ChannelLimits
from bench_gate.gateway import Gateway
from bench_gate.memories import memory_of, mixes
from bench_gate.models import Principal, Status
from bench_gate.scpi import get_profile
from bench_gate.store import SqliteStore

from .test_envelope_state import energized_outside, grant_all, panel


async def _run_through(gw: Gateway, run_id: str, message: str, who: Principal) -> Any:
    """``message`` held, then given every approval by ``who``: the request at its end."""
    req = (await gw.submit(run_id, "psu", message)).request
    assert req is not None, message
    return (await grant_all(gw, req.id, who)).request


def at_panel(front_panel: Any, command: str) -> None:
    """``command`` at the front panel, taken by the supply before the gateway reads next
    (``*OPC?`` on the same connection: the panel's and the gateway's are two sockets)."""
    front_panel.write(command)
    assert front_panel.query("*OPC?").strip() == "1"


async def test_a_slot_saved_at_the_front_panel_is_refused_before_anything_is_sent(
        gateway: Gateway, script: Principal, front_panel: Any) -> None:
    """20 V on CH2 with its output on, saved at the panel, then ``*RST``: ``*RCL 3``
    through the gateway is refused at once (-222), never held, and CH2 stays off."""
    for command in ("VOLT 20,(@2)", "CURR 0.4,(@2)", "OUTP 1,(@2)", "*SAV 3", "*RST"):
        at_panel(front_panel, command)
    run = gateway.create_run(script, "script")
    for spelling in ("*RCL 3", "*rcl 3", "*RCL 3;:CURR 0.1,(@1)"):
        result = await gateway.submit(run.id, "psu", spelling)
        assert result.status == "refused" and result.code == -222, (spelling, result)
        assert "slot 3" in (result.reason or "") and "did not see saved" in (result.reason or "")
    assert gateway.list_requests() == []
    assert panel(front_panel, "OUTP? (@2)") == 0 and panel(front_panel, "VOLT? (@2)") == 0


async def test_a_state_saved_through_the_gateway_comes_back_as_shown(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any) -> None:
    """CH1 at 5 V, 0.5 A, on, saved through the gateway; ``*RST`` at the panel; the recall
    shows the approver CH1 coming back on at 5 V, and brings exactly that back."""
    run = gateway.create_run(script, "script")
    on = await _run_through(gateway, run.id, "VOLT 5,(@1);:CURR 0.5,(@1);:OUTP ON,(@1)", olga)
    assert on.status is Status.EXECUTED, on.outcome
    saved = await _run_through(gateway, run.id, "*SAV 3", olga)
    assert saved.status is Status.EXECUTED, saved.outcome
    assert saved.receipt.stored["slot 3"]["ch1.voltage"] == "5.0"
    assert saved.receipt.stored["slot 3"]["ch1.output"] == "1"
    at_panel(front_panel, "*RST")
    assert panel(front_panel, "OUTP? (@1)") == 0
    req = (await gateway.submit(run.id, "psu", "*RCL 3")).request
    assert req is not None and req.status is Status.PENDING
    assert req.snapshot.recalled["slot 3"]["ch1.voltage"] == "5.0"
    assert req.handoff["proposed"]["ch1.output"] == "1"
    assert req.handoff["diff"]["ch1.voltage"] == ["0.0", "5.0"]
    done = (await grant_all(gateway, req.id, olga)).request
    assert done.status is Status.EXECUTED, done.outcome
    assert panel(front_panel, "OUTP? (@1)") == 1 and panel(front_panel, "VOLT? (@1)") == 5
    assert energized_outside(front_panel) == []


async def test_a_state_recorded_outside_the_envelope_is_never_recalled(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any) -> None:
    """Someone at the panel put CH2 on at 20 V; a script's ``*SAV 2`` through the gateway
    stores it (its read-back then switches CH2 off). The record says what the slot holds,
    so ``*RCL 2`` is refused before it is sent."""
    for command in ("VOLT 20,(@2)", "CURR 0.4,(@2)", "OUTP 1,(@2)"):
        at_panel(front_panel, command)
    run = gateway.create_run(script, "script")
    saved = await _run_through(gateway, run.id, "*SAV 2", olga)
    assert saved.receipt.stored["slot 2"]["ch2.voltage"] == "20.0"
    assert panel(front_panel, "OUTP? (@2)") == 0, "the save's read-back made CH2 safe"
    at_panel(front_panel, "*RST")
    result = await gateway.submit(run.id, "psu", "*RCL 2")
    assert result.status == "refused" and result.code == -222, result
    assert "CH2 voltage setpoint is 20.0 V" in (result.reason or "")
    assert panel(front_panel, "OUTP? (@2)") == 0


async def test_a_slot_saved_again_at_the_panel_is_still_made_safe_by_the_read_back(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any) -> None:
    """The one change a record cannot see: the slot saved again at the front panel after
    the gateway recorded it. The read-back after the recall finds CH2 outside and switches
    it off at once, as it does for anything done at the panel."""
    run = gateway.create_run(script, "script")
    assert (await _run_through(gateway, run.id, "*SAV 4", olga)).status is Status.EXECUTED
    for command in ("VOLT 20,(@2)", "CURR 0.4,(@2)", "OUTP 1,(@2)", "*SAV 4", "*RST"):
        at_panel(front_panel, command)
    done = await _run_through(gateway, run.id, "*RCL 4", olga)
    assert done.status is Status.AMBIGUOUS, done.outcome
    assert "CH2 voltage setpoint is 20.0 V" in (done.outcome or "")
    assert panel(front_panel, "OUTP? (@2)") == 0
    assert energized_outside(front_panel) == []


async def test_a_slot_saved_again_through_the_gateway_sends_the_recall_back_for_review(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any) -> None:
    """The approver was shown slot 5 holding CH1 off; before the grant it was saved again
    with CH1 on. The grant runs nothing: the request goes stale, and its successor shows
    the state the slot holds now."""
    run = gateway.create_run(script, "script")
    assert (await _run_through(gateway, run.id, "*SAV 5", olga)).status is Status.EXECUTED
    recall = (await gateway.submit(run.id, "psu", "*RCL 5")).request
    assert recall is not None and recall.handoff["proposed"]["ch1.output"] == "0"
    assert (await _run_through(gateway, run.id, "VOLT 2,(@1);:CURR 0.2,(@1);:OUTP ON,(@1)",
                               olga)).status is Status.EXECUTED
    assert (await _run_through(gateway, run.id, "*SAV 5", olga)).status is Status.EXECUTED
    at_panel(front_panel, "OUTP 0,(@1)")
    stale = (await grant_all(gateway, recall.id, olga)).request
    assert stale.status is Status.STALE, stale.outcome
    assert stale.superseded_by is not None
    fresh = gateway.get_request(stale.superseded_by)
    assert "slot 5 (stored state)" in fresh.handoff["stale_diff"]
    assert fresh.handoff["proposed"]["ch1.output"] == "1"
    assert panel(front_panel, "OUTP? (@1)") == 0


async def test_the_record_survives_a_restart_and_binds_the_proposal(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any,
        db_path: Path, config: Any, clock: Any) -> None:
    """Saved through one gateway, recalled through the next one on the same store."""
    run = gateway.create_run(script, "script")
    assert (await _run_through(gateway, run.id, "*SAV 6", olga)).status is Status.EXECUTED
    await gateway.close()
    again = Gateway(config, SqliteStore(db_path), clock=clock)
    await again.start()
    try:
        fresh = again.create_run(script, "script")
        req = (await again.submit(fresh.id, "psu", "*RCL 6")).request
        assert req is not None and "slot 6" in req.snapshot.recalled
        done = (await grant_all(again, req.id, olga)).request
        assert done.status is Status.EXECUTED, done.outcome
    finally:
        await again.close()
        again.store.close()


async def test_an_instrument_without_envelope_limits_holds_an_unknown_recall(
        gateway: Gateway, script: Principal) -> None:
    """The meter has no envelope to judge a stored state against: its ``*RCL`` is held for
    every approval as before, never refused for an unknown slot."""
    run = gateway.create_run(script, "script")
    result = await gateway.submit(run.id, "dmm", "*RCL 1")
    assert result.status == "pending", result


async def test_a_field_the_recall_may_not_restore_is_judged_at_its_live_value_too(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any) -> None:
    """Slot 7 holds CH1 on at 5 V with its over-voltage protection on (the bench's ovp
    limit makes it a guard). The profile does not say that ``*RCL`` restores the
    protection's on/off: with it off now, the recall may switch CH1 on unprotected, so
    it is refused before it is sent. With the protection on, it runs."""
    gateway.config.envelope["psu"][1] = ChannelLimits(voltage=Decimal(6), current=Decimal(1),
                                                      ovp=Decimal("6.2"))
    for command in ("VOLT 5,(@1)", "CURR 0.5,(@1)", "VOLT:PROT 6,(@1)", "OUTP 1,(@1)"):
        at_panel(front_panel, command)
    run = gateway.create_run(script, "script")
    saved = await _run_through(gateway, run.id, "*SAV 7", olga)
    assert saved.status is Status.EXECUTED, saved.outcome
    assert saved.receipt.stored["slot 7"]["ch1.ovp_enabled"] == "1"
    at_panel(front_panel, "OUTP 0,(@1);:VOLT:PROT:STAT 0,(@1)")
    result = await gateway.submit(run.id, "psu", "*RCL 7")
    assert result.status == "refused" and result.code == -222, result
    assert "may leave the instrument outside" in (result.reason or "")
    assert "over-voltage protection" in (result.reason or "")
    assert panel(front_panel, "OUTP? (@1)") == 0
    at_panel(front_panel, "VOLT:PROT:STAT 1,(@1)")
    done = await _run_through(gateway, run.id, "*RCL 7", olga)
    assert done.status is Status.EXECUTED, done.outcome
    assert panel(front_panel, "OUTP? (@1)") == 1 and energized_outside(front_panel) == []


PROFILE = get_profile("e36312a")
BENCH = {ch: ChannelLimits(voltage=Decimal(12), current=Decimal("0.5")) for ch in (1, 2, 3)}
_values = {"voltage": ["0.0", "3.0", "11.0", "20.0"], "current": ["0.1", "0.4", "0.9"],
           "output": ["0", "1"], "ovp": ["6.6", "13.0", "30.0"], "ovp_enabled": ["0", "1"],
           "ovp_tripped": ["0"]}
_states = st.fixed_dictionaries({f"ch{ch}.{f}": st.sampled_from(v)
                                 for ch in (1, 2, 3) for f, v in _values.items()})


@given(live=_states, record=_states, data=st.data())
def test_every_partial_restore_outside_is_found_by_some_mix(
        live: dict[str, str], record: dict[str, str], data: st.DataObject) -> None:
    """For every set of fields an instrument may restore, a state outside the envelope
    after the recall is outside in some mix the gateway judges (or it refuses to mix)."""
    restored = data.draw(st.sets(st.sampled_from(sorted(record))))
    actual = {**live, **{k: record[k] for k in restored}}
    if not envelope.breaches(PROFILE, BENCH, actual, set(BENCH)):
        return
    mixed = mixes(PROFILE, live, record)
    assert mixed is None or any(envelope.breaches(PROFILE, BENCH, m, set(BENCH))
                                for m in mixed)


@given(canonical=st.sampled_from(['*RCL 3', '*SAV 12', 'MMEM:LOAD:STAT "a,""b"".sta"',
                                  'MMEM:STOR:STAT "x.sta"', 'MMEM:DEL "x.sta"']))
def test_a_stored_state_is_named_by_its_first_parameter_as_rendered(canonical: str) -> None:
    memory = memory_of(PROFILE, canonical)
    assert memory is not None
    role, key = memory
    assert role == {"*RCL": "recall", "*SAV": "save", "MMEM:LOAD:STAT": "recall",
                    "MMEM:STOR:STAT": "save", "MMEM:DEL": "forget"}[canonical.split(" ")[0]]
    if role != "forget":
        assert canonical.endswith(key.split(" ", 1)[1])


async def test_a_command_that_may_change_stored_states_forgets_every_record(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any) -> None:
    """``MMEM:DEL`` (``memory: forget``) may remove or rewrite what a slot holds: after it,
    a recall of a slot recorded before is refused, as one never saved would be."""
    run = gateway.create_run(script, "script")
    assert (await _run_through(gateway, run.id, "*SAV 8", olga)).status is Status.EXECUTED
    held = (await gateway.submit(run.id, "psu", "*RCL 8")).request
    assert held is not None and held.status is Status.PENDING
    await _run_through(gateway, run.id, 'MMEM:DEL "state8.sta"', olga)
    result = await gateway.submit(run.id, "psu", "*RCL 8")
    assert result.status == "refused" and result.code == -222, result
    assert "did not see saved" in (result.reason or "")
    late = (await grant_all(gateway, held.id, olga)).request  # shown before the delete
    assert late.status is Status.STALE and late.superseded_by is None, late.outcome

