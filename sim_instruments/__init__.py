"""A simulated bench for bench-gate: a Keysight E36312A supply and a 34465A meter, and more
instruments served one by one (``SimServedThread("smu")``: a Keithley 2450 SourceMeter;
``SimServedThread("dmm6500")``: a Keithley DMM6500 multimeter;
``SimServedThread("e3631a")``: a Keysight E3631A supply, outputs by selection;
``SimServedThread("dl3021")``: a Rigol DL3021 electronic load;
``SimServedThread("dp832")``: a Rigol DP832 supply, channels named CH1..CH3;
``SimServedThread("spd3303x")``: a Siglent SPD3303X supply, outputs read from status bits).

pyvisa-sim holds the instruments' state (``bench.yaml``); the classes here add what pyvisa-sim
cannot model and serve each instrument on its own raw-socket port, like a LAN instrument::

    python -m sim_instruments serve --psu-port 5555 --dmm-port 5556

>>> from sim_instruments import SimBenchThread
>>> with SimBenchThread() as bench:
...     bench.psu.handle_message("APPL CH1,5,0.1;:VOLT? (@1)")
'+5.00000000E+00'
"""

from ._dl3021 import SimDl3021
from ._dmm import Probe, SimDmm
from ._dmm6500 import DMM6500_PROFILE, SimDmm6500
from ._extra import EXTRA, SimServed, SimServedThread, extra_for_profile, extra_yaml_path
from ._model import ERROR_QUEUE_DEPTH, PANEL, Session, SimInstrument
from ._psu import SimPsu
from ._resources import (
    DMM_PROFILE,
    DMM_RESOURCE,
    PSU_PROFILE,
    PSU_RESOURCE,
    bench_yaml_path,
    load_definition,
    open_fresh_resource_manager,
    open_resource_manager,
)
from ._server import BenchState, BenchStateError, SimBench, SimBenchThread
from ._settings import update_bench_yaml
from ._smu import SMU_PROFILE, SimSmu
from ._spd3303x import SimSpd3303x

__all__ = [
    "DMM6500_PROFILE",
    "DMM_PROFILE",
    "DMM_RESOURCE",
    "ERROR_QUEUE_DEPTH",
    "EXTRA",
    "PANEL",
    "PSU_PROFILE",
    "PSU_RESOURCE",
    "SMU_PROFILE",
    "BenchState",
    "BenchStateError",
    "Probe",
    "Session",
    "SimBench",
    "SimBenchThread",
    "SimDl3021",
    "SimDmm",
    "SimDmm6500",
    "SimInstrument",
    "SimPsu",
    "SimServed",
    "SimServedThread",
    "SimSmu",
    "SimSpd3303x",
    "bench_yaml_path",
    "extra_for_profile",
    "extra_yaml_path",
    "load_definition",
    "open_fresh_resource_manager",
    "open_resource_manager",
    "update_bench_yaml",
]
