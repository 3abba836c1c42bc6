"""Every spelling of an SPD3303X header is judged as the header at the socket door too,
proven on the simulator's own port: the timer's start is refused however ``TIMEr`` is
spelled (the guide's casing makes TIME, SCPI-99 Vol. 1 §6.2.1's rule TIM), so levels
stored at the panel never reach the DUT; a cut between a node's two forms (``OUTPU``),
which a lenient parser could run as the header, is refused, never held or sent.
"""

from __future__ import annotations

from typing import Any

import pytest

from bench_gate.gateway import Gateway
from bench_gate.models import Status
from tests.doors.proxy.test_proxy import in_thread

from . import test_spd3303x as spd
from .test_spd3303x import NO_ERROR, outputs

# The SPD3303X bench of test_spd3303x.py: its simulator, the gateway's config, a script's
# socket-door connection and the simulator's own port.
supply_sim, config, supply, panel = spd.supply_sim, spd.config, spd.supply, spd.panel


def sent(supply: Any, message: str) -> str:
    supply.write(message)
    return str(supply.query("SYST:ERR?"))


@pytest.mark.parametrize("message", ["TIM CH1,ON", "tim ch1,1", "TIMER CH1,ON",
                                     ":TIME CH1,ON", "TIM:SET? CH1;:TIM CH1,ON"])
async def test_the_timer_start_is_refused_however_it_is_spelled(
        supply: Any, gateway: Gateway, panel: Any, message: str) -> None:
    panel.write("CH1:CURR 0.2;:CH1:VOLT 1;:TIME:SET CH1,1,30,1,5")  # a group set at the panel
    error = await in_thread(sent, supply, message)
    assert error.startswith("-224,") and "timer" in error, error
    assert panel.query("CH1:VOLT?") == "1.000"  # the stored 30 V never applied
    assert not gateway.list_requests(status=Status.PENDING)


@pytest.mark.parametrize("message", ["OUTPU CH1,ON", "outpu ch1,on", "OUTP:TRACK 0;:OUTPU CH1,ON",
                                     "CH1:VOLTA 5;:OUTP CH1,ON", "INSTR CH2"])
async def test_a_cut_between_the_two_forms_is_refused_and_nothing_is_sent(
        supply: Any, gateway: Gateway, panel: Any, message: str) -> None:
    panel.write("CH1:CURR 0.2;:CH1:VOLT 1")
    error = await in_thread(sent, supply, message)
    assert error.startswith("-113,") and "no spelling of" in error, error
    assert outputs(panel) == (False, False)
    assert panel.query("CH1:VOLT?") == "1.000"
    assert panel.query("SYST:ERR?") == NO_ERROR
    assert not gateway.list_requests(status=Status.PENDING)
