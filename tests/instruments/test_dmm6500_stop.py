"""An emergency stop makes the Keithley DMM6500 safe (its profile's ``safe_action``:
``:ABOR;:SENS:FUNC "VOLT:DC"``): resistance or capacitance selected at its panel drives a
test current into the DUT; the stop leaves it measuring DC volts, and the hold selects DC
volts again when the panel picks an exciting function under the stop. Read on the
simulator's own port."""

from __future__ import annotations

from bench_gate.gateway import Gateway
from bench_gate.models import Principal
from sim_instruments import SimServedThread
from tests.conftest import own_port
from tests.instruments.test_dmm6500 import config, dmm_sim
from tests.waits import until

__all__ = ["config", "dmm_sim"]



async def test_a_stop_and_its_hold_leave_the_dmm6500_measuring_dc_volts(
        dmm_sim: SimServedThread, gateway: Gateway, olga: Principal) -> None:
    with own_port(dmm_sim.resource_name, panel=True) as panel:
        panel.write(':SENS:FUNC "RES"')
        assert panel.query(":SENS:FUNC?") == '"RES"'
        done = await gateway.emergency_stop(olga, "test", "dmm6500")
        assert panel.query(":SENS:FUNC?") == '"VOLT:DC"', "the stop left the meter exciting"
        meter = done["instruments"]["dmm6500"]
        assert meter["sent"] == ["ABOR", 'FUNC "VOLT"'] and not meter["errors"], meter
        panel.write(':SENS:FUNC "CAP"')  # a person at the panel, under the stop
        assert await until(lambda: panel.query(":SENS:FUNC?") == '"VOLT:DC"'), \
            "an exciting function left on under a stop"
        assert panel.query("SYST:ERR?").lstrip("+").startswith("0")
