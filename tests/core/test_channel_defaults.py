"""``DEF`` names the *RST value of the channel it is sent to: on the E3631A (User's Guide,
Table 4-1) and the E36312A that replaces it, the current limit resets to 5 A on the 6 V
output and to 1 A on the others. The gateway renders the number (never ``DEF``), so what it
judges and shows is what the supply receives: the right channel's value, proven on the
simulator's own port.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from bench_gate.config import ChannelLimits
from bench_gate.gateway import Gateway
from bench_gate.models import Principal
from bench_gate.scpi import ScpiError, classify
from tests.core.test_envelope_state import grant_all, panel


@pytest.mark.parametrize(("profile", "message", "sent"), [
    ("e36312a", "CURR DEF,(@1)", ["CURR 5.0,(@1)"]),
    ("e36312a", "CURR DEF,(@2)", ["CURR 1.0,(@2)"]),
    ("e36312a", "CURR DEF,(@1:3)", ["CURR 5.0,(@1)", "CURR 1.0,(@2)", "CURR 1.0,(@3)"]),
    ("e36312a", "VOLT DEF,(@1)", ["VOLT 0.0,(@1)"]),
    ("e3631a", "CURR DEF", ["CURR 5.0,(@1)"]),  # P6V: the power-on selection
    ("e3631a", "INST:NSEL 2;:CURR DEF", ["INST:NSEL 2", "CURR 1.0,(@2)"]),
    ("e3631a", "APPL P6V,1,DEF", ["INST:NSEL 1", "VOLT 1.0,(@1)", "CURR 5.0,(@1)"]),
])
def test_def_is_the_channels_own_reset_value(profile: str, message: str,
                                             sent: list[str]) -> None:
    assert [u.canonical for u in classify(message, profile).units] == sent


def test_def_with_no_channel_and_values_that_differ_is_refused() -> None:
    """The E36312A's current with no channel list names no one *RST value: -224."""
    with pytest.raises(ScpiError, match="differs per channel"):
        classify("CURR DEF", "e36312a")


async def test_def_on_the_6v_output_is_judged_at_5_a(
        gateway: Gateway, script: Principal, front_panel: Any) -> None:
    run = gateway.create_run(script, "script")
    refused = await gateway.submit(run.id, "psu", "CURR DEF,(@1)")  # under a 1 A limit
    assert refused.status == "refused" and refused.code == -222
    assert "5.0 A is above the bench limit of 1.0 A" in refused.reason
    assert panel(front_panel, "CURR? (@1)") == 1


async def test_a_def_inside_reaches_the_supply_as_judged(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any) -> None:
    gateway.config.envelope["psu"][2] = ChannelLimits(voltage=Decimal(12), current=Decimal(1))
    front_panel.write("CURR 0.3,(@2)")
    run = gateway.create_run(script, "script")
    req = (await gateway.submit(run.id, "psu", "CURR DEF,(@2)")).request
    assert req is not None and req.actions[0].new == "1.0"
    await grant_all(gateway, req.id, olga)
    assert panel(front_panel, "CURR? (@2)") == 1
