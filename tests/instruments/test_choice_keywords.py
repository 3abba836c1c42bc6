"""A keyword parameter that ends in digits keeps them on the wire: ``PIN2`` is not ``PIN``.

The short form of a choice was its upper-case letters alone, so the E36312A's trigger
sources PIN1, PIN2 and PIN3 all went out as ``PIN`` (and ``PIN`` alone was taken for
PIN1), its ``DISP:VIEW METER3`` as ``METER`` (and ``SYST:PON:STAT RCL0``, now refused), the
DMM6500's ``MOHM10`` as ``MOHM`` and the DP832's data lines D0 to D3 as ``D``: canonical
SCPI that meant something else than the command judged, or nothing. The digits a keyword
ends with are part of its short form, as a header node's fixed number is.
"""

from __future__ import annotations

import pytest

from bench_gate.gateway import Gateway
from bench_gate.models import Principal
from bench_gate.scpi import ScpiError, available_profiles, classify, get_profile, keyword_short
from sim_instruments import SimBenchThread
from tests.conftest import own_port


@pytest.mark.parametrize(("profile", "message", "canonical"), [
    ("e36312a", "TRIG:SOUR PIN2,(@1)", "TRIG:SOUR PIN2,(@1)"),
    ("e36312a", "TRIG:SOUR pin3,(@2)", "TRIG:SOUR PIN3,(@2)"),
    ("e36312a", "DISP:VIEW METER3", "DISP:VIEW METER3"),
    ("e36312a", "TRIG:SOUR IMMEDIATE,(@1)", "TRIG:SOUR IMM,(@1)"),
    ("dmm6500", "VOLT:INP MOHM10", "VOLT:INP MOHM10"),
    ("dp832", "TRIG:IN D3,OFF", "TRIG:IN D3,OFF"),
])
def test_a_keyword_keeps_the_digits_it_ends_with(profile: str, message: str,
                                                 canonical: str) -> None:
    assert [u.canonical for u in classify(message, profile).units] == [canonical]


def test_a_keyword_cut_before_its_digits_is_no_choice() -> None:
    with pytest.raises(ScpiError, match="-224"):
        classify("TRIG:SOUR PIN,(@1)", "e36312a")


@pytest.mark.parametrize("name", available_profiles())
def test_every_choice_of_every_shipped_profile_goes_out_as_itself(name: str) -> None:
    """Two choices of one parameter never render alike (PIN1, PIN2 -> PIN)."""
    for command in get_profile(name).model.commands:
        for form in (command.set, command.query):
            for spec in (form.params if form is not None else ()):
                if spec.type != "choice" or len(spec.choices) < 2:
                    continue
                shorts = [keyword_short(c) for c in spec.choices]
                assert len(set(shorts)) == len(shorts), (name, command.header, spec.choices)


async def test_the_view_the_gateway_sends_is_the_one_asked_for(
        gateway: Gateway, script: Principal, sim: SimBenchThread) -> None:
    """Through the gateway (a harmless display setting, passed): the supply's own port
    shows METER3, not the METER it was sent before."""
    run = gateway.create_run(script, "script", goal="show channel 3")
    result = await gateway.submit(run.id, "psu", "DISP:VIEW METER3")
    assert result.status == "executed", result
    with own_port(sim.psu_resource_name) as res:
        assert res.query("DISP:VIEW?") == "METER3"
