"""Instrument faults between the gateway and the simulated PSU (served on a socket, reached
through pyvisa-py and a fault-injecting Link): each ends in a defined, journaled outcome
with a clear message, and the DMM keeps answering while the PSU is faulted."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from bench_gate.config import BenchConfig
from bench_gate.errors import InstrumentError
from bench_gate.gateway import Gateway
from bench_gate.instruments import PyvisaLink
from bench_gate.models import EventType, Principal, Status, TakeoverRequest
from bench_gate.store import SqliteStore
from tests.conftest import Clock
from tests.faults import OTHER_IDN, Fault, FaultLink


@pytest.fixture
async def faulty(config: BenchConfig, db_path: Path, clock: Clock
                 ) -> AsyncIterator[tuple[Gateway, FaultLink]]:
    psu = config.instrument("psu")
    assert psu is not None
    psu.timeout_ms = 1000
    link = FaultLink(PyvisaLink(psu), "psu")
    gw = Gateway(config, SqliteStore(db_path), links={"psu": link}, clock=clock)
    await gw.start()
    yield gw, link
    await gw.close()
    gw.store.close()


def volts(front_panel: Any, ch: int) -> Decimal:
    return Decimal(front_panel.query(f"VOLT? (@{ch})"))


def last(gw: Gateway, req: TakeoverRequest) -> tuple[str, dict[str, Any]]:
    """The request's terminal journal event (exactly one)."""
    terminal = {EventType.STEP_COMPLETED, EventType.STEP_FAILED, EventType.TAKEOVER_STALE}
    found = [e for e in gw.store.journal(req.run_id, limit=10_000)
             if e.request_id == req.id and e.type in terminal]
    assert len(found) == 1, found
    return found[0].type.value, found[0].data


async def held(gw: Gateway, who: Principal, message: str) -> TakeoverRequest:
    run = gw.create_run(who, "script")
    req = (await gw.submit(run.id, "psu", message)).request
    assert req is not None and req.status is Status.PENDING
    return req


# ---------------------------------------------------------------- timeouts on read
async def test_read_timeout_at_submit_is_a_journaled_failure(
        faulty: tuple[Gateway, FaultLink], script: Principal) -> None:
    gw, link = faulty
    run = gw.create_run(script, "script")
    link.arm(Fault.READ_TIMEOUT, match="VOLT?")
    # The supply answers compound queries: the fields go in one message (scpi/compound.py).
    with pytest.raises(InstrumentError, match=r"psu: query ':VOLT\? \(@1\);[^']*' timed out"):
        await gw.submit(run.id, "psu", "VOLT 2,(@1)")
    ev = gw.store.journal(run.id, limit=100)[-1]
    assert ev.type is EventType.STEP_FAILED and ev.data["reason"].startswith("no snapshot")
    assert gw.list_requests(run_id=run.id) == [], "no request held on a snapshot we lack"
    # The lane reconnected: the next command works.
    assert (await gw.submit(run.id, "psu", "VOLT? (@1)")).status == "executed"


async def test_read_timeout_at_recheck_fails_and_writes_nothing(
        faulty: tuple[Gateway, FaultLink], script: Principal, olga: Principal,
        front_panel: Any) -> None:
    gw, link = faulty
    req = await held(gw, script, "VOLT 2,(@1)")
    link.arm(Fault.READ_TIMEOUT, match="*IDN?")
    done = (await gw.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)).request
    assert done.status is Status.FAILED
    assert "could not re-read" in (done.outcome or "") and "nothing was written" in (
        done.outcome or "")
    assert last(gw, done)[0] == "step_failed"
    assert volts(front_panel, 1) == 0
    assert not any(c.startswith("VOLT 2") for c in link.calls)


async def test_read_timeout_at_read_back_is_ambiguous(
        faulty: tuple[Gateway, FaultLink], script: Principal, olga: Principal,
        front_panel: Any) -> None:
    gw, link = faulty
    req = await held(gw, script, "VOLT 2,(@1)")
    # Fire on the read-back only: arm once the write has gone out.
    orig_write = link.write

    def write_then_arm(command: str) -> None:
        orig_write(command)
        if command.startswith("VOLT 2"):
            link.arm(Fault.READ_TIMEOUT, match="VOLT?")

    link.write = write_then_arm  # type: ignore[method-assign]
    done = (await gw.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)).request
    assert done.status is Status.AMBIGUOUS
    assert "could not be read back" in (done.outcome or "")
    assert "a person must check" in (done.outcome or "")
    assert last(gw, done)[0] == "step_failed"
    assert volts(front_panel, 1) == 2, "the write itself landed"


# ---------------------------------------------------------------- timeouts on write
async def test_write_timeout_before_it_lands_fails(
        faulty: tuple[Gateway, FaultLink], script: Principal, olga: Principal,
        front_panel: Any) -> None:
    gw, link = faulty
    req = await held(gw, script, "VOLT 2,(@1)")
    link.arm(Fault.WRITE_TIMEOUT, match="VOLT")
    done = (await gw.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)).request
    assert done.status is Status.FAILED
    assert "timed out" in (done.outcome or "") and "read back 0 of 1" in (done.outcome or "")
    assert done.receipt is not None and done.receipt.reconciled
    assert volts(front_panel, 1) == 0
    assert sum(c.startswith("VOLT 2") for c in link.calls) == 1, "never retried"


async def test_write_timeout_after_it_landed_is_reconciled(
        faulty: tuple[Gateway, FaultLink], script: Principal, olga: Principal,
        front_panel: Any) -> None:
    gw, link = faulty
    req = await held(gw, script, "VOLT 2,(@1)")
    link.arm(Fault.WRITE_LANDED, match="VOLT")
    done = (await gw.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)).request
    assert done.status is Status.EXECUTED
    assert (done.outcome or "").startswith("executed (reconciled from read-back)")
    assert done.receipt is not None and done.receipt.reconciled
    assert volts(front_panel, 1) == 2
    assert sum(c.startswith("VOLT 2") for c in link.calls) == 1, "never retried"


async def test_write_timeout_of_an_unverifiable_command_is_ambiguous(
        faulty: tuple[Gateway, FaultLink], script: Principal, olga: Principal) -> None:
    """``*RST`` changes nothing a read-back can tell from "not sent" when the bench is
    already at its defaults: a failed send is neither executed nor failed, a person checks."""
    gw, link = faulty
    req = await held(gw, script, "*RST")
    link.arm(Fault.WRITE_TIMEOUT, match="*RST")
    done = (await gw.grant(req.id, olga, list(req.required),
                           proposal_hash=req.proposal_hash)).request
    assert done.status is Status.AMBIGUOUS, done.outcome
    assert "cannot be confirmed by a read-back" in (done.outcome or "")
    assert last(gw, done)[0] == "step_failed"


# ---------------------------------------------------------------- dropped connection
async def test_dropped_connection_fails_then_the_lane_reconnects(
        faulty: tuple[Gateway, FaultLink], script: Principal, olga: Principal,
        front_panel: Any) -> None:
    gw, link = faulty
    req = await held(gw, script, "VOLT 2,(@1)")
    link.arm(Fault.DROP, match="VOLT 2")
    done = (await gw.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)).request
    assert done.status is Status.FAILED
    assert "connection reset" in (done.outcome or "")
    assert volts(front_panel, 1) == 0
    again = await held(gw, script, "VOLT 2.5,(@1)")
    assert (await gw.grant(again.id, olga, ["setpoint"],
                           proposal_hash=again.proposal_hash)).request.status is Status.EXECUTED
    assert volts(front_panel, 1) == Decimal("2.5")


# ---------------------------------------------------------------- garbled or empty replies
@pytest.mark.parametrize("fault", [Fault.GARBLED, Fault.EMPTY])
async def test_garbled_snapshot_holds_nothing(faulty: tuple[Gateway, FaultLink],
                                              script: Principal, fault: Fault) -> None:
    gw, link = faulty
    run = gw.create_run(script, "script")
    link.arm(fault, match="VOLT?")
    with pytest.raises(InstrumentError, match=r"psu: .*VOLT\? \(@1\).* not a number"):
        await gw.submit(run.id, "psu", "VOLT 2,(@1)")
    assert gw.list_requests(run_id=run.id) == []
    assert gw.store.journal(run.id, limit=100)[-1].type is EventType.STEP_FAILED


@pytest.mark.parametrize("fault", [Fault.GARBLED, Fault.EMPTY])
async def test_garbled_read_back_is_ambiguous(faulty: tuple[Gateway, FaultLink],
                                              script: Principal, olga: Principal,
                                              front_panel: Any, fault: Fault) -> None:
    gw, link = faulty
    req = await held(gw, script, "VOLT 2,(@1)")
    orig_write = link.write

    def write_then_arm(command: str) -> None:
        orig_write(command)
        if command.startswith("VOLT 2"):
            link.arm(fault, match="VOLT?")

    link.write = write_then_arm  # type: ignore[method-assign]
    done = (await gw.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)).request
    assert done.status is Status.AMBIGUOUS, done.outcome
    assert "could not be read back" in (done.outcome or "")
    assert volts(front_panel, 1) == 2


# ---------------------------------------------------------------- instrument error
async def test_instrument_error_after_write_is_ambiguous(
        faulty: tuple[Gateway, FaultLink], script: Principal, olga: Principal) -> None:
    gw, link = faulty
    req = await held(gw, script, "VOLT 2,(@1)")
    link.arm(Fault.INSTRUMENT_ERROR, match="VOLT 2")
    done = (await gw.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)).request
    assert done.status is Status.AMBIGUOUS
    assert 'instrument reported -222,"Data out of range"' in (done.outcome or "")
    kind, data = last(gw, done)
    assert kind == "step_failed" and "-222" in data["reason"]


# ---------------------------------------------------------------- another instrument
async def test_wrong_idn_after_reconnect_fails_naming_both(
        faulty: tuple[Gateway, FaultLink], script: Principal, olga: Principal,
        front_panel: Any) -> None:
    """Another model answers after the reconnect: the write fails at its recheck, naming
    what its profile describes and what answered. It no longer goes stale: a fresh request
    would be judged by the E36312A's profile on a DP832 (identity.py)."""
    gw, link = faulty
    req = await held(gw, script, "VOLT 2,(@1)")
    link.arm(Fault.WRONG_IDN)  # the next call drops; what answers then is a DP832
    with pytest.raises(InstrumentError):
        await gw.submit(gw.create_run(script, "script").id, "psu", "VOLT? (@2)")
    done = (await gw.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)).request
    assert done.status is Status.FAILED, done.outcome
    assert OTHER_IDN in (done.outcome or "") and "Keysight Technologies,E36312A" in (
        done.outcome or "") and "nothing was written" in (done.outcome or "")
    assert volts(front_panel, 1) == 0, "nothing written to whatever answered"
    assert gw.get_request(req.id).superseded_by is None, "no fresh request on a DP832"


async def test_wrong_idn_answering_the_read_back_is_ambiguous(
        faulty: tuple[Gateway, FaultLink], script: Principal, olga: Principal) -> None:
    """The connection drops during the write and another instrument answers the reconnect:
    its values say nothing about ours, so the outcome is for a person, never "failed"."""
    gw, link = faulty
    req = await held(gw, script, "VOLT 2,(@1)")
    link.arm(Fault.WRONG_IDN, match="VOLT 2")
    done = (await gw.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)).request
    assert done.status is Status.AMBIGUOUS, done.outcome
    assert "another instrument answered" in (done.outcome or "")


# ---------------------------------------------------------------- lanes are independent
async def test_dmm_answers_while_the_psu_lane_is_faulted(
        faulty: tuple[Gateway, FaultLink], script: Principal) -> None:
    gw, link = faulty
    run = gw.create_run(script, "script")
    link.arm(Fault.READ_TIMEOUT, match="*IDN?", delay=1.5)
    psu = asyncio.ensure_future(gw.submit(run.id, "psu", "*IDN?"))
    await asyncio.sleep(0.1)  # the PSU lane is now stuck in its timeout
    started = time.monotonic()
    dmm = await gw.submit(run.id, "dmm", "*IDN?")
    took = time.monotonic() - started
    assert dmm.status == "executed" and "34465A" in (dmm.response or "")
    assert took < 0.5, f"the DMM waited {took:.2f} s on the PSU's fault"
    with pytest.raises(InstrumentError, match="timed out"):
        await psu
    assert (await gw.submit(run.id, "psu", "*IDN?")).status == "executed"


async def test_one_garbled_read_back_answer_never_stops_the_safe_action(
        faulty: tuple[Gateway, FaultLink], script: Principal, olga: Principal,
        front_panel: Any) -> None:
    """``*RCL`` of a state with CH2 on at 20 V (saved through the gateway, then again at
    the front panel), and the read-back's answer to an unrelated field is garbage: the
    read-back fails, yet every enveloped field is read again one by one, CH2 is found
    outside and switched off at once."""
    gw, link = faulty
    save = await held(gw, script, "*SAV 4")
    assert (await gw.grant(save.id, olga, ["setpoint", "output_enable", "state"],
                           proposal_hash=save.proposal_hash)).request.status is Status.EXECUTED
    for command in ("VOLT 20,(@2)", "CURR 0.1,(@2)", "OUTP 1,(@2)", "*SAV 4", "*RST"):
        front_panel.write(command)
    req = await held(gw, script, "*RCL 4")
    orig_write = link.write

    def write_then_arm(command: str) -> None:
        orig_write(command)
        if command.startswith("*RCL"):
            link.arm(Fault.GARBLED, match="VOLT:PROT:TRIP? (@1)")

    link.write = write_then_arm  # type: ignore[method-assign]
    done = (await gw.grant(req.id, olga, ["setpoint", "output_enable", "state"],
                           proposal_hash=req.proposal_hash)).request
    assert done.status is Status.AMBIGUOUS, done.outcome
    assert "envelope breach" in (done.outcome or "")
    assert int(front_panel.query("OUTP? (@2)")) == 0, "the safe action ran"
    kinds = [e.type.value for e in gw.store.journal(done.run_id, limit=100)]
    assert "envelope_breach" in kinds


async def test_a_save_the_instrument_answers_with_an_error_leaves_no_record(
        faulty: tuple[Gateway, FaultLink], script: Principal, olga: Principal) -> None:
    """``*SAV 2`` answered with an error in the instrument's queue: the slot may still hold
    what it held before, so the gateway keeps no record of it, and ``*RCL 2`` is refused
    before it is sent (bench_gate/memories.py)."""
    gw, link = faulty
    save = await held(gw, script, "*SAV 2")
    link.arm(Fault.INSTRUMENT_ERROR, match="*SAV 2")
    done = (await gw.grant(save.id, olga, ["setpoint", "output_enable", "state"],
                           proposal_hash=save.proposal_hash)).request
    assert done.receipt is not None and done.receipt.stored == {}, done.outcome
    recall = await gw.submit(done.run_id, "psu", "*RCL 2")
    assert recall.status == "refused" and recall.code == -222, recall
    assert "did not see saved" in (recall.reason or "")


async def test_the_watch_sends_no_safe_action_once_another_model_answers_mid_check(
        faulty: tuple[Gateway, FaultLink], front_panel: Any) -> None:
    """The connection drops in the middle of a watch check, on a field's query, and what
    answers after the reconnect is a DP832 (its ``*IDN?``): the field left unread would
    count as outside, but the E36312A's safe action is never sent to another model
    (bench_gate/identity.py); the gateway shows who answers instead."""
    gw, link = faulty
    link.arm(Fault.WRONG_IDN, match="VOLT? (@2)")  # the watch reads every field alone
    for command in ("VOLT 20,(@2)", "CURR 0.1,(@2)", "OUTP 1,(@2)"):  # CH2's limit: 12 V
        front_panel.write(command)
    for _ in range(300):  # 15 s at most; the watch looks every second
        if gw.instrument_identity("psu")["fits"] is False:
            break
        await asyncio.sleep(0.05)
    shown = gw.instrument_identity("psu")
    assert shown["fits"] is False and shown["answered"] == OTHER_IDN, shown
    assert int(front_panel.query("OUTP? (@2)")) == 1, "a safe action went to another model"
    assert not any(c.startswith("OUTP 0") for c in link.calls), link.calls
