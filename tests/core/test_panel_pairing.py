"""A pairing set at the front panel (the E36312A's ``OUTP:PAIR SER|PAR``, the SPD3303X's
series or parallel tracking) joins two channels' terminals: the DUT sees their sum, which
no channel's limits bound. The gateway refuses to enter one (tests/core/test_review_holes_3.py);
one set at the panel makes the joined channels outside the envelope while energized: an
output enable there is refused whatever its approvals, and a paired channel found
energized is switched off by the next read-back (the safe action). Each proven on the
simulator's own port. Before: each channel was judged on its own limits, so CH2 and CH3
at 10 V each under 12 V limits put 20 V on the DUT with every approval granted."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import pytest

from bench_gate import couplings, envelope
from bench_gate.config import ChannelLimits
from bench_gate.gateway import Gateway
from bench_gate.models import Principal
from bench_gate.scpi import get_profile
from sim_instruments import SimBenchThread, SimServedThread
from tests.conftest import own_port
from tests.core.test_review_holes_2 import _everything
from tests.core.test_review_holes_3 import (  # noqa: F401 (fixtures)
    config,
    dp832_sim,
    e3631a_sim,
    supply_sim,
)


def _psu_outputs(sim: SimBenchThread) -> dict[int, bool]:
    with own_port(sim.psu_resource_name, panel=True) as panel:
        return {ch: panel.query(f"OUTP? (@{ch})").strip() in ("1", "ON") for ch in (1, 2, 3)}


def _spd_outputs(served: SimServedThread) -> tuple[bool, bool]:
    with own_port(served.resource_name) as res:
        word = int(res.query("SYST:STAT?"), 16)
    return bool(word >> 4 & 1), bool(word >> 5 & 1)


@pytest.mark.parametrize(("mode", "channel"), [("SER", 2), ("SER", 3), ("PAR", 3)])
async def test_an_e36312a_output_enable_is_refused_while_paired_at_the_panel(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        sim: SimBenchThread, mode: str, channel: int) -> None:
    run = gateway.create_run(script, "script", goal="a higher voltage")
    sim.bench.psu.execute(f"OUTP:PAIR {mode}", False)  # the front panel's key
    done = await _everything(gateway, run.id, "psu",
                             f"CURR 0.2,(@{channel});:VOLT 10,(@{channel});"
                             f":OUTP ON,(@{channel})", olga, pete)
    assert done.status == "refused" and done.code == -222, done
    assert "pairing" in done.reason and f"CH{channel}" in done.reason, done.reason
    assert _psu_outputs(sim) == {1: False, 2: False, 3: False}


async def test_the_same_enable_passes_unpaired_with_only_ch3_limited(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        sim: SimBenchThread) -> None:
    """The pairing is read on CH2: a write on CH3 alone reads it there, so a bench that
    limits only CH3 is judged (not refused for an unread mode) when unpaired."""
    gateway.config.envelope["psu"] = {3: ChannelLimits(voltage=Decimal(12),
                                                       current=Decimal("0.5"))}
    run = gateway.create_run(script, "script", goal="a rail")
    done = await _everything(gateway, run.id, "psu",
                             "CURR 0.2,(@3);:VOLT 10,(@3);:OUTP ON,(@3)", olga, pete)
    assert done.request.status.value == "executed", done.request.outcome
    assert _psu_outputs(sim)[3] is True


async def test_a_paired_channel_found_energized_is_switched_off_by_the_next_read_back(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        sim: SimBenchThread) -> None:
    """CH2 on at 3 V through the gateway, then paired at the panel: the next write on the
    supply (CH1's setpoint) reads CH2 back as outside and switches it off at once."""
    gateway.config.policy.watch_seconds = 3600  # the write's read-back, not the watch
    run = gateway.create_run(script, "script", goal="a rail")
    done = await _everything(gateway, run.id, "psu",
                             "CURR 0.2,(@2);:VOLT 3,(@2);:OUTP ON,(@2)", olga, pete)
    assert done.request.status.value == "executed", done.request.outcome
    sim.bench.psu.execute("OUTP:PAIR SER", False)
    assert _psu_outputs(sim)[2] is True
    await _everything(gateway, run.id, "psu", "VOLT 1,(@1)", olga, pete)
    assert _psu_outputs(sim)[2] is False


async def test_the_watch_switches_off_a_channel_paired_while_energized(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        sim: SimBenchThread) -> None:
    gateway.config.policy.watch_seconds = 0.2
    run = gateway.create_run(script, "script", goal="a rail")
    done = await _everything(gateway, run.id, "psu",
                             "CURR 0.2,(@3);:VOLT 3,(@3);:OUTP ON,(@3)", olga, pete)
    assert done.request.status.value == "executed", done.request.outcome
    sim.bench.psu.execute("OUTP:PAIR PAR", False)
    for _ in range(100):
        if not _psu_outputs(sim)[3]:
            break
        await asyncio.sleep(0.1)
    assert _psu_outputs(sim)[3] is False


@pytest.mark.parametrize("channel", [1, 2])
async def test_an_spd3303x_output_enable_is_refused_in_series_set_at_the_panel(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        supply_sim: SimServedThread, channel: int) -> None:  # noqa: F811
    run = gateway.create_run(script, "script", goal="a split supply")
    supply_sim.instrument.execute("OUTP:TRACK 1", False)  # the front panel's key
    done = await _everything(gateway, run.id, "spd",
                             f"CH{channel}:CURR 0.2;:CH{channel}:VOLT 3;:OUTP CH{channel},ON",
                             olga, pete)
    assert done.status == "refused" and done.code == -222, done
    assert "series/parallel" in done.reason, done.reason
    assert _spd_outputs(supply_sim) == (False, False)


def test_a_pairing_read_on_one_channel_judges_every_channel_it_joins() -> None:
    """The rule for every shipped profile: a mode field that couples channels judges each
    channel its copies name, read on the channel it is read on."""
    for name in ("e36312a", "spd3303x"):
        profile = get_profile(name)
        for field, spec in profile.fields.items():
            if not (spec.bounded_when and spec.copies):
                continue
            for ch in couplings.joined(profile, field):
                reads = envelope.modes(profile, ch)
                assert any(f == field and profile.has_field(f, on) for on, f in reads), (
                    name, field, ch)
