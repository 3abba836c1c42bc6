"""A run's requests on one instrument are judged against the state its earlier requests
will leave: VOLT, then CURR, then OUTP ON, approved in that order, never go stale on each
other; a change from outside still does. Checked on the simulator's own port."""

from __future__ import annotations

from typing import Any

from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Status, TakeoverRequest
from tests.conftest import Clock


async def held(gw: Gateway, run_id: str, message: str) -> TakeoverRequest:
    req = (await gw.submit(run_id, "psu", message)).request
    assert req is not None and req.status is Status.PENDING
    return req


async def approve(gw: Gateway, req: TakeoverRequest, who: Principal) -> TakeoverRequest:
    return (await gw.grant(req.id, who, [k.value for k in req.missing()],
                           proposal_hash=req.proposal_hash)).request


async def test_the_natural_order_does_not_go_stale(gateway: Gateway, script: Principal,
                                                    olga: Principal, front_panel: Any,
                                                    clock: Clock) -> None:
    run = gateway.create_run(script, "script")
    volt = await held(gateway, run.id, "VOLT 5,(@1)")
    clock.advance(seconds=1)  # the test's clock stands still unless told
    curr = await held(gateway, run.id, "CURR 0.1,(@1)")
    clock.advance(seconds=1)
    on = await held(gateway, run.id, "OUTP ON,(@1)")
    assert on.snapshot.values["ch1.voltage"] == "5.0"
    assert on.snapshot.values["ch1.current"] == "0.1"
    assert [e["request"] for e in on.handoff["after_earlier"]] == [volt.id, curr.id]
    assert on.handoff["live"]["ch1.current"] == "1.0"
    for req in (volt, curr, on):
        done = await approve(gateway, req, olga)
        assert done.status is Status.EXECUTED, done.outcome
    assert int(front_panel.query("OUTP? (@1)")) == 1
    assert float(front_panel.query("CURR? (@1)")) == 0.1


async def test_an_earlier_request_denied_sends_the_later_one_back(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any) -> None:
    run = gateway.create_run(script, "script")
    volt = await held(gateway, run.id, "VOLT 5,(@1)")
    on = await held(gateway, run.id, "OUTP ON,(@1)")
    await gateway.deny(volt.id, olga, "not 5 V", proposal_hash=volt.proposal_hash)
    final = await approve(gateway, on, olga)
    assert final.status is Status.STALE, final.outcome
    assert int(front_panel.query("OUTP? (@1)")) == 0


async def test_an_outside_change_still_goes_stale(gateway: Gateway, script: Principal,
                                                  olga: Principal, front_panel: Any) -> None:
    run = gateway.create_run(script, "script")
    volt = await held(gateway, run.id, "VOLT 5,(@1)")
    curr = await held(gateway, run.id, "CURR 0.1,(@1)")
    assert (await approve(gateway, volt, olga)).status is Status.EXECUTED
    front_panel.write("VOLT 2,(@1)")  # someone at the bench
    final = await approve(gateway, curr, olga)
    assert final.status is Status.STALE
    assert float(front_panel.query("CURR? (@1)")) == 1.0


async def test_a_queue_on_one_field_names_only_the_request_its_value_comes_from(
        gateway: Gateway, script: Principal, clock: Clock) -> None:
    """However many earlier setpoints wait, the handoff names per field the one whose value
    the request is judged against (it stays small: a parked request costs little)."""
    run = gateway.create_run(script, "script")
    volts = []
    for n in range(6):
        volts.append(await held(gateway, run.id, f"VOLT {n + 1},(@1)"))
        clock.advance(seconds=1)
    curr = await held(gateway, run.id, "CURR 0.2,(@1)")
    clock.advance(seconds=1)
    on = await held(gateway, run.id, "OUTP ON,(@1)")
    shown = on.handoff["after_earlier"]
    assert [e["request"] for e in shown] == [volts[-1].id, curr.id]
    assert shown[0]["changes"] == {"ch1.voltage": "6.0"}
    assert shown[0]["words"] == f"after {volts[-1].id} executes: ch1.voltage 6.0"
    assert on.snapshot.values["ch1.voltage"] == "6.0"
    assert on.snapshot.values["ch1.current"] == "0.2"
