"""The live recheck before a granted write reads the supply's fields and ``*IDN?`` in one
compound query (scpi/compound.py, the E36312A profile's ``compound_queries``): every field
is still read and compared, and a reply that does not split one answer per query, or
answers anything but a number where one is asked, fails closed: nothing is written. The
recheck and the write share one lane turn: no other job reaches the supply between them."""

from __future__ import annotations

import asyncio
import re
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench_gate.config import BenchConfig
from bench_gate.errors import InstrumentError
from bench_gate.gateway import Gateway
from bench_gate.instruments import Link, PyvisaLink
from bench_gate.models import Approval, ApprovalKind, Event, EventType, Principal, Status
from bench_gate.scpi import get_profile
from bench_gate.snapshots import normalize
from bench_gate.store import SqliteStore
from tests.conftest import Clock
from tests.faults import Fault, FaultLink


class _Mangled:
    """The supply's link: once armed, the next compound query's reply is changed; once
    ``held``, the next compound query waits for ``go`` (on the lane's thread)."""

    def __init__(self, inner: Link) -> None:
        self.inner = inner
        self.calls: list[str] = []
        self.mangle: Any = None
        self.held = False
        self.reached = threading.Event()
        self.go = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def write(self, command: str) -> None:
        self.calls.append(command)
        self.inner.write(command)

    def query(self, command: str, *args: Any) -> str:
        self.calls.append(command)
        if self.held and ";" in command:
            self.held = False
            self.reached.set()
            self.go.wait(10)
        answer = self.inner.query(command, *args)
        if self.mangle is not None and ";" in command:
            answer, self.mangle = self.mangle(answer), None
        return answer

    def close(self) -> None:
        self.inner.close()


async def _grant(config: BenchConfig, db_path: Path, clock: Clock, link: Any,
                 script: Principal, olga: Principal, arm: Any) -> Any:
    gw = Gateway(config, SqliteStore(db_path), links={"psu": link}, clock=clock)
    await gw.start()
    try:
        run = gw.create_run(script, "script")
        req = (await gw.submit(run.id, "psu", "VOLT 2.5,(@1)")).request
        assert req is not None and req.status is Status.PENDING
        link.calls.clear()
        arm()
        return (await gw.grant(req.id, olga, ["setpoint"],
                               proposal_hash=req.proposal_hash)).request
    finally:
        await gw.close()
        gw.store.close()


def _written(link: Any) -> bool:
    return any(c.startswith("VOLT 2.5") for c in link.calls)


async def test_the_recheck_is_one_compound_query_and_every_field_is_compared(
        config: BenchConfig, db_path: Path, clock: Clock, script: Principal,
        olga: Principal, front_panel: Any) -> None:
    psu = config.instrument("psu")
    assert psu is not None
    link = _Mangled(PyvisaLink(psu))
    done = await _grant(config, db_path, clock, link, script, olga, lambda: None)
    assert done.status is Status.EXECUTED, done.outcome
    before_write = link.calls[: link.calls.index("VOLT 2.5,(@1)")]
    # One compound query, then the sync point (lockstep.py): its answers were in step.
    assert len(before_write) == 2 and before_write[0].endswith(";*IDN?"), before_write
    assert before_write[1] == "*IDN?", before_write
    profile = get_profile("e36312a")
    asked = before_write[0].split(";")
    for key in done.snapshot.values:  # every field the approver saw was asked again
        ch, name = key.split(".", 1)
        assert ":" + profile.field_query(name, int(ch.removeprefix("ch"))) in asked, key
    assert Decimal(front_panel.query("VOLT? (@1)")) == Decimal("2.5")


@pytest.mark.parametrize("mangle, status", [
    # one answer missing: the reply does not split one per query
    (lambda a: ";".join(a.split(";")[:1] + a.split(";")[2:]), Status.FAILED),
    # one answer added: every later field shifts (the identity read is not the one the
    # approver saw: it took the last value with it); a number shifted into a boolean's
    # place (the OVP level where its trip state is asked) is no boolean: unreadable
    (lambda a: "0;" + a, Status.FAILED),
    # a word where a number is asked
    (lambda a: "OOPS;" + a.split(";", 1)[1], Status.FAILED),
    # the value the approver saw, but its neighbour's answer in its place
    (lambda a: ";".join([a.split(";")[1], a.split(";")[0], *a.split(";")[2:]]), Status.STALE),
])
async def test_a_reply_that_does_not_split_exactly_writes_nothing(
        config: BenchConfig, db_path: Path, clock: Clock, script: Principal,
        olga: Principal, front_panel: Any, mangle: Any, status: Status) -> None:
    psu = config.instrument("psu")
    assert psu is not None
    link = _Mangled(PyvisaLink(psu))

    def arm() -> None:
        link.mangle = mangle

    done = await _grant(config, db_path, clock, link, script, olga, arm)
    assert done.status is status, done.outcome
    assert "nothing was written" in (done.outcome or ""), done.outcome
    assert not _written(link)
    assert Decimal(front_panel.query("VOLT? (@1)")) == 0


async def test_one_garbled_answer_inside_the_compound_reply_fails_closed(
        config: BenchConfig, db_path: Path, clock: Clock, script: Principal,
        olga: Principal, front_panel: Any) -> None:
    psu = config.instrument("psu")
    assert psu is not None
    link = FaultLink(PyvisaLink(psu), "psu")
    done = await _grant(config, db_path, clock, link, script, olga,
                        lambda: link.arm(Fault.GARBLED, match="CURR?"))
    assert done.status is Status.FAILED, done.outcome
    assert "CURR? (@1)" in (done.outcome or "") and "not a number" in (done.outcome or "")
    assert not _written(link)
    assert Decimal(front_panel.query("VOLT? (@1)")) == 0


@pytest.mark.parametrize("long_way", [False, True])
async def test_no_other_job_reaches_the_supply_between_the_recheck_and_the_write(
        config: BenchConfig, db_path: Path, clock: Clock, script: Principal,
        olga: Principal, long_way: bool) -> None:
    """A read sent while the recheck is on the wire runs after the write and its
    read-back: for a grant that runs at once, and for a request found approved at a
    restart (the long way: recheck, start, write)."""
    psu = config.instrument("psu")
    assert psu is not None
    link = _Mangled(PyvisaLink(psu))
    gw = Gateway(config, SqliteStore(db_path), links={"psu": link}, clock=clock)
    await gw.start()
    run = gw.create_run(script, "script")
    req = (await gw.submit(run.id, "psu", "VOLT 2.5,(@1)")).request
    assert req is not None
    link.calls.clear()
    link.held = True
    try:
        if long_way:
            stored = gw.store.get_request(req.id)
            assert stored is not None
            stored.approvals.append(Approval(kind=ApprovalKind.SETPOINT, by=olga.name,
                                             proposal_hash=stored.proposal_hash))
            stored.status = Status.APPROVED
            assert gw.store.save_request(stored, stored.version, [Event(  # as a grant does
                run_id=run.id, request_id=req.id, type=EventType.APPROVAL_GRANTED,
                data={"kind": "setpoint", "by": olga.name,
                      "proposal_hash": stored.proposal_hash})])
            await gw.close()
            gw.store.close()
            gw = Gateway(config, SqliteStore(db_path), links={"psu": link}, clock=clock)
            await gw.start()  # runs what it finds approved
        else:
            granting = asyncio.ensure_future(gw.grant(req.id, olga, ["setpoint"],
                                                      proposal_hash=req.proposal_hash))
        assert await asyncio.to_thread(link.reached.wait, 10), "the recheck never started"
        read = asyncio.ensure_future(gw.submit(run.id, "psu", "MEAS:VOLT? (@3)"))
        await asyncio.sleep(0.2)
        link.go.set()
        await asyncio.wait_for(read, 10)
        if not long_way:
            await asyncio.wait_for(granting, 10)
        for _ in range(500):
            if gw.get_request(req.id).status is Status.EXECUTED:
                break
            await asyncio.sleep(0.01)
        assert gw.get_request(req.id).status is Status.EXECUTED
        write = link.calls.index("VOLT 2.5,(@1)")
        assert link.calls.index("MEAS:VOLT? (@3)") > write, link.calls
        assert link.calls[write - 1] == "*IDN?", link.calls  # the recheck's sync point
        assert link.calls[write - 2].endswith(";*IDN?"), link.calls  # the recheck
    finally:
        link.go.set()
        await gw.close()
        gw.store.close()


async def test_pyvisa_sims_own_backend_is_read_one_query_a_message(
        db_path: Path, clock: Clock, script: Principal, olga: Principal) -> None:
    """pyvisa-sim (``<bench.yaml>@sim``) matches each message whole, so a compound
    snapshot got one answer for ten queries and every write's hold failed ("unreadable"):
    on that backend each field is asked alone, and the write is held with what it read.
    Granted, it executes: bench.yaml had no ``SYST:LOCK:REQ?``, so the lane's lock request
    left -113 in the error queue and every granted write there ended "ambiguous"."""
    from bench_gate.config import InstrumentConfig
    from sim_instruments import PSU_RESOURCE, bench_yaml_path

    config = BenchConfig(instruments=[InstrumentConfig(
        name="psu", resource=PSU_RESOURCE, profile="e36312a",
        backend=f"{bench_yaml_path()}@sim")])
    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    try:
        run = gw.create_run(script, "script")
        req = (await gw.submit(run.id, "psu", "VOLT 2.5,(@1)")).request
        assert req is not None and req.status is Status.PENDING, req
        assert req.snapshot.idn.startswith("Keysight Technologies,E36312A")
        asked = [k for k in req.snapshot.values if k.startswith("ch1.")]
        assert len(asked) >= 5, req.snapshot.values  # each field read, one at a time
        done = await gw.grant(req.id, olga, list(req.required),
                              proposal_hash=req.proposal_hash)
        assert done.request.status is Status.EXECUTED, done.message
        assert done.request.receipt is not None
        assert Decimal(done.request.receipt.after["ch1.voltage"]) == Decimal("2.5")
    finally:
        await gw.close()
        gw.store.close()


@pytest.mark.parametrize("pairing, status", [
    ('"OFF"', {Status.FAILED}),  # string data where one word is asked
    # a ';' inside: every later answer shifts (a word where a number is asked), and the
    # identity with them
    ("OFF;OFF", {Status.FAILED, Status.STALE}),
    ("", {Status.FAILED}),
])
async def test_a_pairing_answer_that_is_not_one_word_writes_nothing(
        config: BenchConfig, db_path: Path, clock: Clock, script: Principal,
        olga: Principal, front_panel: Any, pairing: str, status: set[Status]) -> None:
    """OUTP:PAIR? joins CH2's compound query as one word (``word: true``): an answer that
    is not one word fails closed, and one with a ';' shifts every later answer."""
    psu = config.instrument("psu")
    assert psu is not None
    link = _Mangled(PyvisaLink(psu))

    def swap(answer: str) -> str:
        asked = link.calls[-1].split(";")
        parts = answer.split(";")
        parts[asked.index(":OUTP:PAIR?")] = pairing
        return ";".join(parts)

    gw = Gateway(config, SqliteStore(db_path), links={"psu": link}, clock=clock)
    await gw.start()
    try:
        run = gw.create_run(script, "script")
        req = (await gw.submit(run.id, "psu", "VOLT 2.5,(@2)")).request
        assert req is not None and req.status is Status.PENDING
        assert req.snapshot.values["ch2.pairing"] == "OFF"
        link.calls.clear()
        link.mangle = swap
        done = (await gw.grant(req.id, olga, ["setpoint"],
                               proposal_hash=req.proposal_hash)).request
    finally:
        await gw.close()
        gw.store.close()
    recheck = [c for c in link.calls if c.endswith(";*IDN?")]
    assert recheck and ":OUTP:PAIR?" in recheck[0].split(";"), link.calls
    assert "OUTP:PAIR?" not in link.calls  # never asked alone
    assert done.status in status, done.outcome
    assert "nothing was written" in (done.outcome or ""), done.outcome
    assert not any(c.startswith("VOLT 2.5") for c in link.calls)
    assert Decimal(front_panel.query("VOLT? (@2)")) == 0


@given(answer=st.text(max_size=12))
def test_a_word_field_takes_one_word_or_fails_closed(answer: str) -> None:
    """Any answer to a ``word`` field: one word (IEEE 488.2 §8.7.1) is its value, anything
    else an I/O failure, never a value."""
    profile = get_profile("e36312a")
    word = re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", answer.strip())
    if word:
        assert normalize(profile, "pairing", answer) == answer.strip()
    else:
        with pytest.raises(InstrumentError, match="not one word"):
            normalize(profile, "pairing", answer)
