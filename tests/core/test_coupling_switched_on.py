"""A coupling switched on is judged before it is sent, like a setpoint: the copies it makes
at once are predicted, never left to the read-back.

E36300 guide, OUTPut:TRACk: while on, CH3's voltage setpoint follows CH2's; the simulator
(as the E36312A) copies CH2's setpoint into CH3 the moment tracking comes on. With CH2 set to
10 V (off, inside its 12 V) and CH3 on at 3 V under a 5 V envelope, ``OUTP:TRAC ON`` with
every approval given put CH3's DUT at 10 V until the read-back after it switched CH3 off:
one round trip outside (the class of docs/reliability.md's "A recall judged only after it
ran")."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from bench_gate import couplings
from bench_gate.config import ChannelLimits
from bench_gate.gateway import Gateway
from bench_gate.models import EventType, Principal, Status
from bench_gate.scpi import get_profile
from tests.conftest import own_port
from tests.core.test_review_holes_2 import _everything


def _watch_sent(sim: Any) -> list[tuple[str, str]]:
    """Every unit the simulated PSU runs, with CH3's output and setpoint just after it."""
    inst = sim.psu
    seen: list[tuple[str, str]] = []
    perform = inst.perform

    def watched(canonical: str, query: bool) -> str | None:
        answer = perform(canonical, query)
        if not query:
            on, volts = perform("OUTP? (@3)", True), perform("VOLT? (@3)", True)
            seen.append((canonical, f"{str(on).strip()}@{Decimal(str(volts))}"))
        return answer

    inst.perform = watched
    return seen


async def test_tracking_switched_on_is_judged_before_it_is_sent(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        sim: Any) -> None:
    gateway.config.envelope["psu"][3] = ChannelLimits(voltage=Decimal(5),
                                                      current=Decimal("0.5"))
    run = gateway.create_run(script, "script", goal="a symmetric bias")
    for message in ("VOLT 10,(@2)", "CURR 0.2,(@3);:VOLT 3,(@3);:OUTP ON,(@3)"):
        done = await _everything(gateway, run.id, "psu", message, olga, pete)
        assert done.request.status is Status.EXECUTED, (message, done.request.outcome)
    sent = _watch_sent(sim)
    result = await _everything(gateway, run.id, "psu", "OUTP:TRAC ON", olga, pete)
    outside = [s for s in sent if s[1].startswith("1@") and Decimal(s[1][2:]) > 5]
    assert not outside, f"CH3 on above its 5 V envelope after {outside}: {result}"
    assert getattr(result, "status", None) == "refused" and result.code == -222, result
    assert "CH3 voltage setpoint is 10.0 V, above the bench limit of 5.0 V" in result.reason
    with own_port(sim.psu_resource_name, panel=True) as panel:
        assert panel.query("OUTP:TRAC?").strip() == "0"
        assert Decimal(panel.query("VOLT? (@3)")) == 3
        assert panel.query("OUTP? (@3)").strip() == "1"
    assert not [e for e in gateway.store.journal(run.id, limit=1000)
                if e.type is EventType.ENVELOPE_BREACH]
    # Inside, it runs: CH2 at 4 V, tracking on, CH3 follows to 4 V.
    inside = await _everything(gateway, run.id, "psu", "VOLT 4,(@2);:OUTP:TRAC ON", olga, pete)
    assert inside.request.status is Status.EXECUTED, inside.request.outcome
    assert inside.request.actions[-1].words == (
        "CH3 tracks CH2 OFF → ON (CH3 follows CH2's voltage setpoint)")
    with own_port(sim.psu_resource_name, panel=True) as panel:
        assert Decimal(panel.query("VOLT? (@3)")) == 4 and panel.query("OUTP? (@3)") == "1"


def test_a_coupling_both_ways_is_judged_at_the_farther_value() -> None:
    """Which output of a pair takes the other's level when tracking comes on is the
    instrument's (the DP832's CH1 and CH2, the E3631A's ±25 V): each is judged at the
    farther of its own and the one it may take; one way (the E36312A), the follower takes
    the source's."""
    dp832 = get_profile("dp832")
    state = {"ch1.voltage": "10.0", "ch2.voltage": "3.0", "ch1.current": "0.1",
             "ch2.current": "2.0"}
    both = couplings.switched_on(dp832, state, "tracking")
    assert both == {"ch1.voltage": "10.0", "ch2.voltage": "10.0", "ch1.current": "2.0",
                    "ch2.current": "2.0"}
    e3631a = get_profile("e3631a")
    signed = couplings.switched_on(e3631a, {"ch2.voltage": "4.0", "ch3.voltage": "-9.0"},
                                   "tracking")
    assert signed == {"ch2.voltage": "9.0", "ch3.voltage": "-9.0"}
    e36312a = get_profile("e36312a")
    one_way = couplings.switched_on(e36312a, {"ch2.voltage": "2.0", "ch3.voltage": "9.0"},
                                    "tracking")
    assert one_way == {"ch2.voltage": "2.0", "ch3.voltage": "2.0"}
