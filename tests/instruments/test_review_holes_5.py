"""The fifth hostile review: a level stored where no write the gateway judged put it (the
front panel, ``*RCL``), then applied by a trigger after the read-back.

1. the E36312A's list (``LIST:VOLT``) and triggered levels (``VOLT:TRIG``) stored at the
   panel: ``VOLT:MODE LIST`` / ``STEP`` and ``TRIG`` through the gateway, with every
   approval, applied them; the read-back saw the first point, the later ones ran unchecked.
   Now each stored level is a field of the channel bounded by the envelope: an energized
   channel with one outside is a breach (refused before a write, made safe by the read-back
   and the watch), and a write whose effect cannot be predicted (a trigger) is never sent
   while the live state it starts from is already outside.
"""

from __future__ import annotations

from decimal import Decimal

from sim_instruments import SimBenchThread
from tests.conftest import own_port


def _ch2(sim: SimBenchThread) -> tuple[Decimal, str]:
    """What CH2's DUT sees on the E36312A's own port: volts at the terminals, output."""
    with own_port(sim.psu_resource_name, panel=True) as res:
        return Decimal(res.query("MEAS:VOLT? (@2)")), res.query("OUTP? (@2)")


def test_the_simulated_e36312a_runs_its_list_and_triggered_levels(sim: SimBenchThread) -> None:
    """The model the tests below rely on: STEP applies VOLT:TRIG on a trigger; LIST applies
    its points one after another, each after its dwell."""
    with own_port(sim.psu_resource_name, panel=True) as res:
        res.write("SIM:LOAD 1000,(@2)")
        res.write("VOLT 1,(@2);:CURR 0.5,(@2);:OUTP 1,(@2)")
        res.write("VOLT:TRIG 4,(@2);:VOLT:MODE STEP,(@2);:TRIG (@2)")
        assert Decimal(res.query("MEAS:VOLT? (@2)")) == 4
        res.write("LIST:VOLT 2,7,(@2);:LIST:DWEL 0.2,0.2,(@2);:VOLT:MODE LIST,(@2);:TRIG (@2)")
        assert Decimal(res.query("MEAS:VOLT? (@2)")) == 2
    import time
    time.sleep(0.5)
    assert _ch2(sim)[0] == 7
