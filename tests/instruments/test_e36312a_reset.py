"""What the E36312A holds after ``*RST``, and what the gateway may assume of it.

The profile's per-channel reset values (``ChannelSpec.defaults``: CH1's current limit 5 A,
CH2's and CH3's 1 A) are what ``DEF`` renders; the simulated supply's ``*RST`` now leaves the
same values (before, it left CH1 at 1 A while ``CURR DEF,(@1)`` set 5 A), so a script
rehearsed on the simulator meets, after a reset, the limit a real reset leaves. The CH1
value is unverified against the E36300 Programming Guide (see the profile): 5 A is the
larger guess, so what is judged is never less than what may be there.

A triggered level is never assumed to follow the immediate one (the E3631A's guide says an
unprogrammed one does; the E36300 guide was not read): a stored level equal to the old
setpoint stays where the snapshot read it, and is judged there.
"""

from __future__ import annotations

from decimal import Decimal

from bench_gate.config import ChannelLimits
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Status
from bench_gate.scpi import classify
from sim_instruments import SimBenchThread, SimServedThread
from tests.conftest import own_port
from tests.core.test_review_holes_2 import _everything


def test_rst_leaves_each_channels_def_value(sim: SimBenchThread) -> None:
    """The simulated supply's reset and the profile's ``DEF`` name one value per channel."""
    with own_port(sim.psu_resource_name, panel=True) as res:
        res.write("CURR 0.2,(@1:3);:VOLT 3,(@1:3)")
        res.write("*RST")
        after = [Decimal(res.query(f"CURR? (@{ch})")) for ch in (1, 2, 3)]
    defs = [Decimal(classify(f"CURR DEF,(@{ch})", "e36312a").units[0].value or 0)
            for ch in (1, 2, 3)]
    assert after == defs == [5, 1, 1]


def test_the_simulated_e3631a_resets_and_recalls_an_empty_slot_to_its_table_4_1_values() -> None:
    """E3631A User's Guide, Table 4-1: *RST (DEFault) current 5 A on +6V, 1 A on +-25V; an
    empty slot recalls the *RST values (chapter 4, *RCL). Before, both left +6V at 1 A."""
    with SimServedThread("e3631a") as served:
        supply = served.instrument
        for reset in ("*RST", "*RCL 3"):
            supply.handle_message("INST:NSEL 1;:CURR 0.2")
            supply.handle_message(reset)
            assert [Decimal(supply.handle_message(f"INST:NSEL {ch};:CURR?") or "")
                    for ch in (1, 2, 3)] == [5, 1, 1], reset


async def test_an_output_enable_after_a_reset_is_judged_on_the_current_limit_it_left(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        sim: SimBenchThread) -> None:
    """``*RST`` (every approval) leaves CH1's limit at 5 A; ``OUTP ON,(@1)`` after it, under
    a 1 A bench limit, is refused on the live 5 A. Before, the simulator's reset left 1 A,
    so the enable was held as if the rehearsal were safe, unlike the supply it stands for."""
    gateway.config.envelope["psu"][1] = ChannelLimits(voltage=Decimal(6), current=Decimal(1))
    run = gateway.create_run(script, "script")
    reset = await _everything(gateway, run.id, "psu", "*RST", olga, pete)
    assert reset.request.status is Status.EXECUTED, reset
    result = await gateway.submit(run.id, "psu", "OUTP ON,(@1)")
    assert result.status == "refused" and result.code == -222, result
    assert "CH1 current limit is 5.0 A, above the bench limit of 1.0 A" in result.reason
    with own_port(sim.psu_resource_name, panel=True) as res:
        assert res.query("OUTP? (@1)") == "0"


async def test_a_stored_triggered_level_is_not_assumed_to_follow_the_setpoint(
        gateway: Gateway, script: Principal, sim: SimBenchThread) -> None:
    """CH2 set to 20 V with 20 V stored for a trigger (at the panel), under a 12 V envelope:
    ``VOLT 5,(@2);:OUTP ON,(@2)`` is refused, since the stored 20 V stays where it is. Were
    the triggered level assumed to follow (as on the E3631A), the prediction would move it
    to 5 V and energize CH2 with a trigger away from 20 V on the DUT."""
    gateway.config.envelope["psu"][2] = ChannelLimits(voltage=Decimal(12), current=Decimal(1))
    with own_port(sim.psu_resource_name, panel=True) as res:
        res.write("VOLT 20,(@2);:VOLT:TRIG 20,(@2);:CURR 0.1,(@2)")
    run = gateway.create_run(script, "script")
    result = await gateway.submit(run.id, "psu", "VOLT 5,(@2);:OUTP ON,(@2)")
    assert result.status == "refused" and result.code == -222, result
    assert "triggered voltage" in result.reason
    with own_port(sim.psu_resource_name, panel=True) as res:
        assert res.query("OUTP? (@2)") == "0"
        assert Decimal(res.query("VOLT? (@2)")) == 20
