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
from decimal import Decimal
from typing import Any

import pytest

from bench_gate.errors import InstrumentError
from bench_gate.gateway import Gateway
from bench_gate.models import EventType, Principal, Status
from tests.liar_instrument import LyingInstrument, gw, liar, lied_config

__all__ = ["gw", "liar", "lied_config"]  # the fixtures, for pytest

MEGABYTES = 2_000_000


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
