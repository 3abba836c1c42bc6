"""Review 4: the identity check and the answers in step, attacked through other paths.

An overlong ``*IDN?``: the snapshot's reads refuse an identification longer than
``answers.MAX_TEXT`` (an instrument's megabytes are no answer), but the lane's own ``*IDN?``
(identity.py, before the first job of a connection), the emergency stop's and a lost
client's went straight to the identity: kept whole as what answered, shown by the status
(as fitting, when it began with the profile's identity), journaled and alerted, and quoted
whole in every refusal. The PSU is a real simulator behind a lying raw-socket server
(tests/liar_instrument.py); what it really did is read on the simulator's own port."""

from __future__ import annotations

import json
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import bench_gate
from bench_gate.config import BenchConfig
from bench_gate.errors import InstrumentError
from bench_gate.gateway import Gateway
from bench_gate.identity import fits, identities
from bench_gate.models import EventType, Principal, Status
from bench_gate.scpi import ProfileError, get_profile
from tests.conftest import Clock
from tests.liar_instrument import LyingInstrument, gw, liar, lied_config, lied_gateway

__all__ = ["gw", "liar", "lied_config"]  # the fixtures, for pytest

MEGABYTES = 2_000_000
PROFILES = Path(bench_gate.__file__).with_name("profiles")


@pytest.mark.parametrize("answer", [
    "Keysight Technologies,E36312A," + "9" * MEGABYTES,  # fits by its first two fields
    "A" * MEGABYTES,  # fits nothing
])
async def test_megabytes_for_the_lanes_own_identity_are_no_identity(
        gw: Gateway, liar: LyingInstrument, script: Principal, olga: Principal,
        front_panel: Any, answer: str) -> None:
    run = gw.create_run(script, "script")
    assert (await gw.submit(run.id, "psu", "*IDN?")).status == "executed"
    liar.cut()  # a new connection: the lane asks *IDN? alone before its next job
    liar.answer("*IDN?", answer)
    with pytest.raises(InstrumentError) as caught:
        await gw.submit(run.id, "psu", "VOLT 2,(@1)")
    assert len(caught.value.message) < 2000, len(caught.value.message)
    assert liar.fired
    shown = gw.instrument_identity("psu")
    assert len(json.dumps(shown)) < 4000, len(json.dumps(shown))
    assert shown["fits"] is False  # never "fits" on an answer that is no identification
    events = [e for e in gw.journal(f"bench:{gw.config.bench}:locks")
              if e.type is EventType.INSTRUMENT_IDENTITY]
    assert all(len(json.dumps(e.data)) < 4000 for e in events)
    # The real identity next: it fits again, and a write runs.
    req = (await gw.submit(run.id, "psu", "VOLT 2,(@1)")).request
    assert req is not None
    done = (await gw.grant(req.id, olga, ["setpoint"],
                           proposal_hash=req.proposal_hash)).request
    assert done.status is Status.EXECUTED, done.outcome
    assert gw.instrument_identity("psu")["fits"] is True
    assert Decimal(front_panel.query("VOLT? (@1)")) == 2


async def test_megabytes_for_the_stops_identity_are_kept_nowhere(
        gw: Gateway, liar: LyingInstrument, olga: Principal, front_panel: Any) -> None:
    """The emergency stop asks who answered (its other names stop too) and keeps it with
    the stop, for the other gateways on the store: 2 MB were kept whole."""
    front_panel.write("OUTP ON,(@1)")
    liar.answer("*IDN?", "Keysight Technologies,E36312A," + "9" * MEGABYTES, times=100)
    done = await gw.emergency_stop(olga, "test", "psu")
    assert int(front_panel.query("OUTP? (@1)")) == 0
    assert len(json.dumps(done, default=str)) < 20_000
    assert len(gw.core.instrument("psu").idn or "") <= 1024


@pytest.mark.parametrize("identity", [
    "RIGOL TECHNOLOGIES",  # no model: every instrument of the maker fits (a DL3021 load)
    "RIGOL TECHNOLOGIES,",  # an empty model, the same
    ",DP832",  # no manufacturer
    ",",  # nothing at all: no check (as a generic profile), silently
    " ",
])
def test_an_identity_names_its_manufacturer_and_model(tmp_path: Path, identity: str) -> None:
    """A profile's identity is the manufacturer and model fields of its ``*IDN?``: one
    that names fewer made every model of the maker fit it (the DP832's rules judged a
    DL3021 electronic load), or checked nothing, with no word at load or ``profile
    check``. Now such a profile does not load."""
    text = (PROFILES / "dp832.yaml").read_text(encoding="utf-8")
    assert 'identity: "RIGOL TECHNOLOGIES,DP832"' in text
    path = tmp_path / "dp832x.yaml"
    path.write_text(text.replace('identity: "RIGOL TECHNOLOGIES,DP832"',
                                 f"identity: {json.dumps(identity)}").replace(
        "name: dp832", f"name: dp832x{uuid.uuid4().hex[:8]}", 1), encoding="utf-8")
    with pytest.raises(ProfileError) as caught:
        get_profile(str(path))
    assert "manufacturer and model" in str(caught.value)
    # The same goes for the other identities of a model (a vendor renamed).
    path.write_text(text.replace("name: dp832", f"name: dp832y{uuid.uuid4().hex[:8]}", 1).replace(
        'identity: "RIGOL TECHNOLOGIES,DP832"', 'identity: "RIGOL TECHNOLOGIES,DP832"\n'
        f"identities: [{json.dumps(identity)}]"), encoding="utf-8")
    with pytest.raises(ProfileError):
        get_profile(str(path))


def test_an_identity_with_its_serial_still_loads(tmp_path: Path) -> None:
    """One unit pinned by its serial number (three fields) is a stricter identity: kept."""
    text = (PROFILES / "dp832.yaml").read_text(encoding="utf-8")
    path = tmp_path / "dp832z.yaml"
    path.write_text(text.replace('identity: "RIGOL TECHNOLOGIES,DP832"',
                                 'identity: "RIGOL TECHNOLOGIES,DP832,DP8C1234"').replace(
        "name: dp832", f"name: dp832z{uuid.uuid4().hex[:8]}", 1), encoding="utf-8")
    profile = get_profile(str(path))
    assert fits(identities(profile), "RIGOL TECHNOLOGIES,DP832,DP8C1234,00.01.16")
    assert not fits(identities(profile), "RIGOL TECHNOLOGIES,DP832,DP8C9999,00.01.16")


@pytest.mark.parametrize("io", ["auto", "pyvisa"])
async def test_a_new_connection_inside_a_job_is_asked_who_answers(
        lied_config: BenchConfig, db_path: Path, clock: Clock, liar: LyingInstrument,
        script: Principal, olga: Principal, front_panel: Any, io: str) -> None:
    """The lane asked ``*IDN?`` only before a job. A read-back that fails drops the
    connection, and the failed read-back's safe action read the channels one by one on a
    new one, never asked who answers there (asked only when a field went unanswered): a
    compatible model (an E36313A, same commands) that answered every field got the
    E36312A's safe action on a reading it judged by the E36312A's envelope. Now every
    command of a job on a connection not yet asked ``*IDN?`` asks it first: nothing is
    sent to another model (its CH1 is left as it is, read on its own port)."""
    gw = lied_gateway(lied_config, db_path, clock, io)
    await gw.start()
    try:
        await cut_off_read_back_reaches_another_model(gw, liar, script, olga, front_panel)
    finally:
        await gw.close()
        gw.store.close()


async def cut_off_read_back_reaches_another_model(
        gw: Gateway, liar: LyingInstrument, script: Principal, olga: Principal,
        front_panel: Any, answers_as: str = "Keysight Technologies,E36313A,MY00000001,1.0",
        fits: bool = False) -> None:
    for text in ("CURR 0.5,(@1)", "VOLT 1,(@1)", "OUTP ON,(@1)"):
        front_panel.write(text)
    run = gw.create_run(script, "script")
    req = (await gw.submit(run.id, "psu", "VOLT 2,(@1)")).request
    assert req is not None
    # After the write: the read-back's sync point is cut off, and the connection after
    # it reaches another instrument (``answers_as``: another model answering the same
    # commands, or another unit of this one), whose CH1 reads 8 V.
    read_back = "LIST:CURR? (@3);*IDN?"  # only the read-back reads CH3
    liar.drop("*IDN?", landed=False, after=read_back)  # its sync point: cut off
    liar.answer("*IDN?", answers_as, times=1000, after=read_back)
    liar.answer("VOLT? (@1)", "8", times=1000, after=read_back)
    done = (await gw.grant(req.id, olga, ["setpoint"],
                           proposal_hash=req.proposal_hash)).request
    assert done.status is Status.AMBIGUOUS, done.outcome
    sent_after = liar.received[liar.received.index("VOLT 2.0,(@1)") + 1:]
    assert not [line for line in sent_after if "?" not in line], sent_after
    assert int(front_panel.query("OUTP? (@1)")) == 1
    assert gw.instrument_identity("psu")["fits"] is fits


@pytest.mark.parametrize("io", ["auto", "pyvisa"])
async def test_a_connection_reopened_inside_a_job_must_reach_the_same_instrument(
        lied_config: BenchConfig, db_path: Path, clock: Clock, liar: LyingInstrument,
        script: Principal, olga: Principal, front_panel: Any, io: str) -> None:
    """As above, but the connection after the cut reaches another unit of the same model
    (another serial: two E36312A on one bench, their addresses swapped): its model fits
    the profile, so the failed read-back's safe action went to an instrument nobody had
    judged. A connection reopened inside a job must reach the very instrument the job
    began on; else nothing more is sent on that turn."""
    gw = lied_gateway(lied_config, db_path, clock, io)
    await gw.start()
    try:
        await cut_off_read_back_reaches_another_model(
            gw, liar, script, olga, front_panel,
            answers_as="Keysight Technologies,E36312A,MY99999999,1.0", fits=True)
    finally:
        await gw.close()
        gw.store.close()


async def test_an_answer_holding_a_semicolon_shifts_no_value_into_a_snapshot(
        gw: Gateway, liar: LyingInstrument, script: Principal, front_panel: Any) -> None:
    """A compound read splits its answer on ';'. One answer holding a ';' shifted every
    later one a field on, the identity last (so it did not fit); ``*IDN?`` asked alone then
    fitted, and the shifted values were kept: the hold showed CH1's list of currents as its
    list of voltages (and a save's record, read twice alike, would keep it). Now a
    compound whose identity does not fit while the instrument does is no reading."""
    front_panel.write("LIST:VOLT 1,2,(@1)")
    run = gw.create_run(script, "script")
    liar.answer("CURR:TRIG? (@1)", "0;0")
    with pytest.raises(InstrumentError) as caught:
        await gw.submit(run.id, "psu", "VOLT 2,(@1)")
    assert "shift" in caught.value.message, caught.value.message
    assert liar.fired
    req = (await gw.submit(run.id, "psu", "VOLT 2,(@1)")).request
    assert req is not None
    assert req.snapshot.values["ch1.list_voltage"] == "1.0,2.0"
    assert req.snapshot.values["ch1.list_current"] != "1.0,2.0"
