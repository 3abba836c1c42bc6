"""The E36312A's rear digital port (E36300 Programming Guide, ``[SOURce:]DIGital:PIN<n>:
FUNCtion``): a pin set to ONCouple takes an output-on signal from outside, and the outputs
come on when it arrives (Keysight's output couple control: "OnCouple and OffCouple signals
enable and disable the output"). That happens long after the read-back that judged the
command, with no output enable and at whatever levels the channels hold then: one set at
the panel beyond the envelope, harmless while off. Held as a mere ``state`` change, it ran
with every approval, read back every output off and said "executed"; the next signal gave
CH2's DUT 20 V against a 12 V envelope. The same class as the DP832's trigger input
(tests/instruments/test_dp832_trigger_in.py): now ONCouple is refused (-224, with why) in
every spelling, on every pin. Proved on the simulator's own port, where
``execute("SIM:EDGE PIN<n>")`` is the signal arriving at pin n.
"""

from __future__ import annotations

import itertools
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench_gate.config import BenchConfig
from bench_gate.gateway import Gateway
from bench_gate.models import Principal
from bench_gate.scpi import Effect, ScpiError, classify
from sim_instruments import SimBenchThread
from tests.conftest import own_port
from tests.core.test_review_holes_2 import _everything


def _ch2(sim: SimBenchThread) -> tuple[Decimal, str]:
    """What CH2's DUT sees on the E36312A's own port: volts at the terminals, output."""
    with own_port(sim.psu_resource_name, panel=True) as res:
        return Decimal(res.query("MEAS:VOLT? (@2)")), res.query("OUTP? (@2)")


def _signal_every_pin(sim: SimBenchThread) -> None:
    for pin in (1, 2, 3):
        sim.psu.execute(f"SIM:EDGE PIN{pin}", False)  # a signal from outside, not an interface


def test_the_simulated_e36312a_switches_its_outputs_at_a_couple_signal(
        sim: SimBenchThread) -> None:
    """The model the test below relies on: a signal at a pin set to ONCouple switches the
    outputs on (OFFCouple off); at a pin with any other function it does nothing."""
    with own_port(sim.psu_resource_name, panel=True) as res:
        res.write("VOLT 4,(@2);:CURR 0.1,(@2)")
        assert res.query("*OPC?") == "1"
    _signal_every_pin(sim)
    assert _ch2(sim) == (Decimal(0), "0")  # every pin DIO after *RST: nothing
    sim.psu.execute("DIG:PIN2:FUNC ONC", False)  # the panel's menu: the profile refuses it
    sim.psu.execute("SIM:EDGE PIN2", False)
    assert _ch2(sim) == (Decimal(4), "1")
    sim.psu.execute("DIG:PIN3:FUNC OFFC", False)
    sim.psu.execute("SIM:EDGE PIN3", False)
    assert _ch2(sim) == (Decimal(0), "0")


@pytest.mark.parametrize("message", [
    "DIG:PIN1:FUNC ONC",
    "SOURce:DIGital:PIN2:FUNCtion ONCouple",
    ":sour:dig:pin3:func oncouple",
    "DIG:PIN1:FUNC DIO;:DIG:PIN1:FUNC ONC",  # after a function that is taken
])
async def test_an_output_couple_pin_never_switches_an_output_on_later(
        gateway: Gateway, config: BenchConfig, script: Principal, olga: Principal,
        pete: Principal, sim: SimBenchThread, message: str) -> None:
    """CH2 off at 20 V set at the panel (beyond its 12 V envelope, harmless while off).
    Making a pin an output-on couple input is refused (-224, saying why) however it is
    spelled: with every approval it read back CH2 off and said "executed", and the next
    signal at the pin gave the DUT 20 V. On the supply's own port: the pin keeps its
    function and the signal leaves CH2 off."""
    config.policy.watch_seconds = 0  # the primary defence, not the watch's bound
    with own_port(sim.psu_resource_name, panel=True) as panel:
        panel.write("VOLT 20,(@2);:CURR 0.4,(@2)")  # 0.4 A into its 100 ohm DUT: 20 V
        assert panel.query("*OPC?") == "1"
    run = gateway.create_run(script, "script", goal="sequence the outputs from the fixture")
    result = await _everything(gateway, run.id, "psu", message, olga, pete)
    _signal_every_pin(sim)
    assert _ch2(sim) == (Decimal(0), "0")  # before: (20, "1"), the outcome "executed"
    assert getattr(result, "status", None) == "refused" and result.code == -224, result
    assert "output" in result.reason and "signal" in result.reason, result.reason
    with own_port(sim.psu_resource_name, panel=True) as panel:
        assert [panel.query(f"DIG:PIN{n}:FUNC?") for n in (1, 2, 3)] == ["DIO"] * 3


def _spellings(word: str, short: str) -> list[str]:
    """Every truncation the profile takes, in a few cases: the short form and the long."""
    return [w for form in (short, word) for w in (form, form.lower(), form.capitalize())]


@given(pin=st.sampled_from([1, 2, 3]),
       header=st.sampled_from(["DIG:PIN{n}:FUNC", "DIGital:PIN{n}:FUNCtion",
                               "SOUR:DIG:PIN{n}:FUNC", ":SOURce:DIGital:PIN{n}:FUNCtion"]),
       word=st.sampled_from([*_spellings("ONCOUPLE", "ONC"), "OnCouple"]))
def test_no_spelling_makes_a_pin_an_output_on_input(pin: int, header: str, word: str) -> None:
    """On every pin, in every spelling of the header and the word: refused before anything
    is sent, with why."""
    with pytest.raises(ScpiError) as caught:
        classify(f"{header.format(n=pin)} {word}", "e36312a")
    assert caught.value.code == -224 and "signal" in caught.value.detail


@pytest.mark.parametrize("function, pin", list(itertools.product(
    ["DIO", "DINP", "TOUT", "TINP", "FAUL", "INH", "OFFC"], [1, 2, 3])))
def test_the_other_pin_functions_are_still_held_for_every_approval(function: str,
                                                                   pin: int) -> None:
    """Nothing else changes: an inhibit or an off couple only ever switches outputs off,
    a trigger input applies levels the snapshot already judges (points fields)."""
    (unit,) = classify(f"DIG:PIN{pin}:FUNC {function}", "e36312a").units
    assert unit.effect is Effect.STATE and unit.canonical == f"DIG:PIN{pin}:FUNC {function}"
