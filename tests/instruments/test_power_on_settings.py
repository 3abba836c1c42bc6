"""Power-on settings: a state brought back at the next power-on, later than anything judged it.

The E36312A's ``SYST:PON:STAT RCL0`` (E36300 guide, SYSTem:PON:STATe; Keysight's N6900
guide words the same setting "the power-on state ... 0" as the state stored in slot 0)
makes the next power-on recall slot 0, which this profile's ``*RCL`` says restores every
channel's levels and output; the 2450's ``:SYST:POS SAV0``..``SAV4`` (Reference Manual,
:SYSTem:POSetup) brings back a saved setup; the DP832's ``:SYST:POW LAST`` (DP800
guide, :SYSTem:POWeron) the configuration of the last power-off. Whatever they bring back
was saved at the panel or by anything else, and it arrives at a power cycle (a mains dip, a
person at the switch) with no write, no prediction and no read-back: only the envelope
watch, once the gateway reconnects. Each was a `state` write (every approval, or held as
unknown on the DP832) that ran; now only the reset state at power-on passes (-224, with
why). A power-on setting changed at the front panel is left to the watch.
"""

from __future__ import annotations

from typing import Any

import pytest

from bench_gate.gateway import Gateway
from bench_gate.models import Principal
from bench_gate.scpi import Effect, ScpiError, classify
from sim_instruments import SimBenchThread
from tests.conftest import own_port
from tests.core.test_review_holes_2 import _everything

REFUSED = [
    ("e36312a", "SYST:PON:STAT RCL0"),
    ("e36312a", "syst:pon:state rcl0"),
    ("e36312a", ":SYSTem:PON:STATe RCL0"),
    ("k2450", ":SYST:POS SAV0"),
    ("k2450", ":SYSTem:POSetup SAV4"),
    ("k2450", "syst:pos sav2"),
    ("dp832", ":SYST:POW LAST"),
    ("dp832", ":SYSTem:POWeron LAST"),
]

TAKEN = [
    ("e36312a", "SYST:PON:STAT RST"),
    ("k2450", ":SYST:POS RST"),
    ("dp832", ":SYST:POW DEF"),
    ("dp832", ":SYSTem:POWeron DEFault"),
]


@pytest.mark.parametrize(("profile", "message"), REFUSED)
def test_no_power_on_setting_brings_back_a_stored_state(profile: str, message: str) -> None:
    with pytest.raises(ScpiError) as caught:
        classify(message, profile)
    assert caught.value.code == -224, caught.value
    assert "power-on" in caught.value.message, caught.value.message


@pytest.mark.parametrize(("profile", "message"), TAKEN)
def test_the_reset_state_at_power_on_is_still_taken(profile: str, message: str) -> None:
    (unit,) = classify(message, profile).units
    assert unit.effect is Effect.STATE


async def test_the_e36312a_power_on_recall_is_refused_on_its_own_port(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        sim: SimBenchThread, front_panel: Any) -> None:
    """With every approval there is to give: refused, and the supply still powers on in
    its reset state."""
    run = gateway.create_run(script, "script", goal="keep the bench's state over a restart")
    done = await _everything(gateway, run.id, "psu", "SYST:PON:STAT RCL0", olga, pete)
    assert getattr(done, "status", None) == "refused" and done.code == -224, done
    with own_port(sim.psu_resource_name) as port:
        assert port.query("SYST:PON:STAT?") == "RST"
