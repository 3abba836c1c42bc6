"""A protection clear that switches an output back on, later than anything judged it.

Keysight's supplies restore the output a latched protection switched off when the trip is
cleared ("The output is restored to the state it was in before the fault condition
occurred": OUTPut:PROTection:CLEar, N6900/N7900 guide; VOLTage:PROTection:CLEar, E3632A
and E3633A User's Guides; Rigol's DP2000 guide says the same of
``[:SOURce]:CURRent:PROTection:CLEar``: "clear an OCP event ... and enable the channel
output"). The tripped channel reads off, so whatever it holds is harmless while it stays
off: the panel may set it to 20 V. A clear (every approval) was judged on that off channel
and put 20 V on the DUT until the read-back switched it off. A form that clears a trip says
so (``revives: true``) and the gateway judges the channel as on before it is sent (-222).
Proven on the simulated E36312A's own port, and the refusal on the DP832's.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from bench_gate.config import BenchConfig
from bench_gate.gateway import Gateway
from bench_gate.models import Principal
from bench_gate.profile_check import Level, check_profile
from bench_gate.scpi import available_profiles, get_profile
from sim_instruments import SimBenchThread, SimServedThread
from tests.conftest import own_port, served_bench
from tests.core.test_review_holes_2 import _everything
from tests.core.test_review_holes_8_scpi import _watch_ch2

from .test_dp832 import LIMITS  # the DP832 bench's envelope


@pytest.fixture
def dp832_sim() -> Iterator[SimServedThread]:
    with SimServedThread("dp832") as served:
        yield served


@pytest.fixture
def config(sim: SimBenchThread, dp832_sim: SimServedThread) -> BenchConfig:
    cfg = served_bench(sim, "dp832", dp832_sim, "dp832", LIMITS)
    cfg.policy.watch_seconds = 0  # the primary defence, not the watch's bound
    return cfg


def _tripped_at(front_panel: Any, volts: str) -> None:
    """CH2 on at 3 V, tripped by its OVP level at the panel, then set to ``volts`` with the
    OVP level out of the way: it reads off and tripped."""
    for command in ("VOLT 3,(@2)", "CURR 0.2,(@2)", "OUTP 1,(@2)", "VOLT:PROT 2,(@2)",
                    "VOLT:PROT 27,(@2)", f"VOLT {volts},(@2)"):
        front_panel.write(command)
    assert front_panel.query("*OPC?") == "1"
    assert front_panel.query("VOLT:PROT:TRIP? (@2)") == "1"
    assert front_panel.query("OUTP? (@2)") == "0"


def test_the_simulated_e36312a_restores_the_output_when_its_trip_is_cleared(
        front_panel: Any) -> None:
    _tripped_at(front_panel, "20")
    front_panel.write("OUTP:PROT:CLE (@2)")
    assert front_panel.query("OUTP? (@2)") == "1"
    assert Decimal(front_panel.query("MEAS:VOLT? (@2)")) == 20
    # Switched off while tripped: the clear leaves it off.
    front_panel.write("VOLT 3,(@2);:VOLT:PROT 2,(@2);:VOLT:PROT 27,(@2);:OUTP 0,(@2)")
    front_panel.write("VOLT:PROT:CLE (@2)")
    assert front_panel.query("OUTP? (@2)") == "0"


@pytest.mark.parametrize("clear", ["OUTP:PROT:CLE (@2)", "VOLT:PROT:CLE (@2)",
                                   "outp:prot:clear (@2)", "SOUR:VOLT:PROT:CLE (@2)"])
async def test_a_protection_clear_never_switches_an_output_on_outside_the_envelope(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        sim: SimBenchThread, front_panel: Any, clear: str) -> None:
    """CH2 (envelope 12 V) tripped and off, set to 20 V at the panel: the clear, with every
    approval, would put 20 V on the DUT. Refused before it is sent; CH2 never on."""
    _tripped_at(front_panel, "20")
    seen = _watch_ch2(sim)
    run = gateway.create_run(script, "script", goal="recover CH2")
    done = await _everything(gateway, run.id, "psu", clear, olga, pete)
    assert getattr(done, "status", None) == "refused" and done.code == -222, done
    assert "CH2 voltage setpoint is 20.0 V" in done.reason, done.reason
    assert "back on" in done.reason
    assert all(out == 0 for out, _ in seen), seen
    with own_port(sim.psu_resource_name) as port:
        assert port.query("OUTP? (@2)") == "0"
        assert port.query("VOLT:PROT:TRIP? (@2)") == "1"


async def test_a_protection_clear_inside_the_envelope_still_runs(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        sim: SimBenchThread, front_panel: Any) -> None:
    """The way that works: levels inside, the clear (every approval, the output enable
    among them) brings CH2 back on at 5 V."""
    _tripped_at(front_panel, "5")
    run = gateway.create_run(script, "script", goal="recover CH2")
    done = await _everything(gateway, run.id, "psu", "OUTP:PROT:CLE (@2)", olga, pete)
    assert done.request.status.value == "executed", done.request.outcome
    with own_port(sim.psu_resource_name) as port:
        assert port.query("OUTP? (@2)") == "1"
        assert Decimal(port.query("MEAS:VOLT? (@2)")) == 5


async def test_a_dp832_protection_clear_is_judged_with_its_channel_on(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        dp832_sim: SimServedThread) -> None:
    """The DP832's four clears, on CH1 off at 30 V (set at the panel, envelope 12 V; the
    simulated DP832 does not trip, so this is the refusal alone)."""
    with own_port(dp832_sim.resource_name, panel=True) as panel:
        panel.write("SOUR1:CURR 0.5;:SOUR1:VOLT 30")
        assert panel.query("*OPC?") == "1"
    run = gateway.create_run(script, "script", goal="recover CH1")
    for clear in (":OUTP:OVP:CLE CH1", ":OUTP:OCP:CLE CH1", ":SOUR1:VOLT:PROT:CLE",
                  ":SOUR1:CURR:PROT:CLE"):
        done = await _everything(gateway, run.id, "dp832", clear, olga, pete)
        assert getattr(done, "status", None) == "refused" and done.code == -222, (clear, done)
        assert "back on" in done.reason
    with own_port(dp832_sim.resource_name) as port:
        assert port.query("OUTP? CH1") == "OFF"


def test_every_shipped_clear_of_a_latched_protection_says_it_revives() -> None:
    """A header that clears a protection trip, on every shipped profile, says the output
    may come back on (``revives``), so the gateway judges its channel as on."""
    missing = []
    for name in available_profiles():
        for command in get_profile(name).model.commands:
            form = command.set
            upper = command.header.upper()
            clears = upper.endswith(":CLEAR") and any(
                word in upper for word in ("PROT", "OVP", "OCP"))
            if clears and form is not None and not getattr(form, "revives", False):
                missing.append(f"{name}: {command.header}")
    assert not missing, missing


def test_profile_check_finds_a_clear_that_does_not_revive(tmp_path: Path) -> None:
    """The E36312A's profile without ``revives``: ``bench-gate profile check`` names both
    clears, as errors."""
    assert check_profile("e36312a").ok and check_profile("dp832").ok
    text = (Path(__file__).parents[2] / "bench_gate/profiles/e36312a.yaml").read_text(
        encoding="utf-8")
    assert text.count(", revives: true}") == 2
    text = text.replace(", revives: true}", "}").replace("name: e36312a", "name: e36312a-x")
    path = tmp_path / "e36312a-x.yaml"
    path.write_text(text, encoding="utf-8")
    report = check_profile(str(path))
    flagged = sorted(f.header for f in report.findings
                     if f.level is Level.ERROR and "revives" in f.message)
    assert flagged == ["OUTPut:PROTection:CLEar", "[SOURce:]VOLTage:PROTection:CLEar"]
    assert not report.ok
