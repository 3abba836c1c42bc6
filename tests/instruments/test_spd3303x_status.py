"""The SPD3303X's ``SYSTem:STATus?`` word is hexadecimal (SPD3303X/XE Programming Guide,
Command Description, SYSTem:STATus?: "the return info is hexadecimal format", typical
return ``0x0224``): bit 3 paired, bit 4 CH1's output, bit 5 CH2's. Every spelling of a hex
word is read as hex (``0010`` is bit 4, never decimal ten, bits 1 and 3); an answer in no
such spelling is unreadable, so the output is unknown, never off. Also at the profile: a
field read from a register's bits must name the register's radix."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from bench_gate.errors import InstrumentError
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Status
from bench_gate.scpi import ProfileError, get_profile
from bench_gate.snapshots import normalize
from sim_instruments import SimServedThread, SimSpd3303x
from tests.doors.proxy.test_proxy import in_thread, next_pending

from . import test_spd3303x as spd
from .test_spd3303x import PROFILE

SPELLINGS = ["0x{:04X}", "0x{:04x}", "0X{:04X}", "0x{:X}", "{:04X}", "{:04x}", "{:X}",
             " 0x{:04X}\n", '"0x{:04X}"', '"{:04X}"']


@given(word=st.integers(0, 0x3FF), spelling=st.sampled_from(SPELLINGS))
def test_every_hex_spelling_reads_the_guides_bits(word: int, spelling: str) -> None:
    profile = get_profile(PROFILE)
    text = spelling.format(word)
    assert normalize(profile, "output", text, channel=1) == str(word >> 4 & 1)
    assert normalize(profile, "output", text, channel=2) == str(word >> 5 & 1)
    assert normalize(profile, "paired", text, channel=1) == str(word >> 3 & 1)


@pytest.mark.parametrize("answer", ["", "0x", "x10", "-0x10", "+10", "-1", "1_0", "0x_10",
                                    "0x1G", "16.0", "1.5", "0x0010 0x0000", "0x0010,0",
                                    "ON", "0x123456789", "garbled"])
def test_an_answer_in_no_hex_spelling_is_unknown_never_off(answer: str) -> None:
    profile = get_profile(PROFILE)
    for ch in (1, 2):
        with pytest.raises(InstrumentError, match="unreadable"):
            normalize(profile, "output", answer, channel=ch)


def test_a_register_field_without_its_radix_is_refused(tmp_path: Path) -> None:
    doc = yaml.safe_load((Path(__file__).parents[2] / "bench_gate/profiles/spd3303x.yaml")
                         .read_text())
    del doc["fields"]["output"]["radix"]
    doc["name"] = "spd-no-radix"
    path = tmp_path / "spd-no-radix.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ProfileError, match="radix"):
        get_profile(str(path))


# The SPD3303X bench of test_spd3303x.py: its simulator, the gateway's config, a script's
# socket-door connection and the simulator's own port.
supply_sim, config, supply, panel = spd.supply_sim, spd.config, spd.supply, spd.panel


def spelled(served: SimServedThread, spelling: str) -> None:
    """The simulated supply writes its SYST:STAT? word as ``spelling`` from now on."""
    supply = served.instrument
    assert isinstance(supply, SimSpd3303x)
    supply.status_format = spelling


@pytest.mark.parametrize(("spelling", "outcome"), [
    ("{:04X}", Status.EXECUTED),  # no 0x: 0014 is bit 4 (on), not decimal fourteen (off)
    ("0x{:04X}", Status.EXECUTED),
])
async def test_output_on_is_read_back_in_hex_however_the_word_is_spelled(
        supply: Any, gateway: Gateway, olga: Principal, supply_sim: SimServedThread,
        panel: Any, spelling: str, outcome: Status) -> None:
    panel.write("CH1:CURR 0.2;:CH1:VOLT 3")
    spelled(supply_sim, spelling)
    task = asyncio.ensure_future(in_thread(supply.write, "OUTP CH1,ON"))
    req = await next_pending(gateway)
    result = await gateway.grant(req.id, olga, list(req.required),
                                 proposal_hash=req.proposal_hash)
    await task
    assert result.request.status is outcome, result.request.outcome


async def test_an_unreadable_word_writes_nothing(
        supply: Any, gateway: Gateway, supply_sim: SimServedThread, panel: Any) -> None:
    """The state an output change is judged on cannot be read: nothing is held for a
    person to approve on a guess, nothing is written."""
    panel.write("CH1:CURR 0.2;:CH1:VOLT 3")
    spelled(supply_sim, "status {:04X}")

    def script() -> str:
        supply.write("OUTP CH1,ON")
        return str(supply.query("SYST:ERR?"))

    error = await in_thread(script)
    assert error.startswith("-240,") and "unreadable" in error, error
    assert not gateway.list_requests(status=Status.PENDING)
    spelled(supply_sim, "0x{:04X}")
    assert int(panel.query("SYST:STAT?"), 16) >> 4 & 1 == 0
