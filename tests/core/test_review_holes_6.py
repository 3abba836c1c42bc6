"""The sixth hostile review, of the newest code (the grant's overlapped commit and one lane
turn, the envelope watch, read plans, selections, the compound recheck). Each attack is
proven on the simulator's own port (never the gateway's word for it) and closed as a class
(docs/reliability.md section 7).

1. a write whose caller is cancelled: a plan step (or any execution) runs in its caller's
   task; the write's lane job runs to its end in the lane's driver even when that caller is
   cancelled (an MCP ``notifications/cancelled``, a session that ends), but the rest of the
   execution (the judged read-back, the receipt, the lease on what it switched on, the
   setpoint remembered) ran in the caller and was lost: the supply was on, the request stayed
   ``executing`` with no receipt, and no lease, so a lost client left the DUT energized.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from decimal import Decimal
from pathlib import Path

import pytest

from bench_gate.config import BenchConfig
from bench_gate.gateway import Gateway
from bench_gate.instruments import PyvisaLink
from bench_gate.models import Principal, Status
from bench_gate.store import SqliteStore
from sim_instruments import SimBenchThread
from tests.conftest import own_port

PLAN = {"instrument": "psu", "channels": [1], "voltage": [0, 5], "current_max": "0.5",
        "output_enable": True, "max_writes": 10}


class SlowAfterWrite:
    """A link that holds the lane a moment on the first query after a matching write (the
    read-back of a write that has landed): the write's lane job is then certainly running,
    with the instrument already changed, when the test acts."""

    def __init__(self, inner: PyvisaLink, match: str, seconds: float) -> None:
        self.inner = inner
        self.match = match
        self.seconds = seconds
        self.landed = threading.Event()
        self.armed = False

    @property
    def opens(self) -> int:
        return self.inner.opens

    @property
    def connected(self) -> bool:
        return self.inner.connected

    def write(self, command: str) -> None:
        self.inner.write(command)
        if self.armed and self.match in command:
            self.armed = False
            self.inner.query("*OPC?")  # handled before another connection looks
            self.landed.set()
            time.sleep(self.seconds)

    def query(self, command: str, extra_seconds: float = 0.0) -> str:
        return self.inner.query(command, extra_seconds)

    def close(self) -> None:
        self.inner.close()


@pytest.fixture
async def slow_gateway(config: BenchConfig, db_path: Path
                       ) -> AsyncIterator[tuple[Gateway, SlowAfterWrite]]:
    psu = config.instrument("psu")
    assert psu is not None
    link = SlowAfterWrite(PyvisaLink(psu), "OUTP 1", 0.5)
    gw = Gateway(config, SqliteStore(db_path), links={"psu": link})
    await gw.start()
    yield gw, link
    await gw.close()
    gw.store.close()


async def _until(check: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "did not happen in time"
        await asyncio.sleep(0.02)


def _psu(sim: SimBenchThread, query: str) -> Decimal:
    with own_port(sim.psu_resource_name, panel=True) as res:
        return Decimal(res.query(query))


# ------------------------------------------------------------ 1. a cancelled caller
async def test_a_write_whose_caller_is_cancelled_is_still_concluded_and_leased(
        slow_gateway: tuple[Gateway, SlowAfterWrite], sim: SimBenchThread,
        olga: Principal, pete: Principal, script: Principal) -> None:
    """A plan step ``VOLT 2;CURR 0.4;OUTP ON`` on CH1, its caller cancelled once the output
    is on (an MCP tool call cancelled, a session ending): the supply is on (its own port),
    so the request must end ``executed`` with its receipt, and the run must hold a lease on
    CH1, so that losing the client switches it off (``on_client_lost = safe``). Before, the
    request stayed ``executing`` with no receipt and no lease: the DUT stayed on for good."""
    gw, link = slow_gateway
    gw.config.policy.lease_seconds = 1.0
    run = gw.create_run(script, "agent", goal="energize CH1 inside a plan")
    asked = await gw.request_plan(run.id, PLAN)
    await gw.grant(asked.id, olga, ["setpoint"], proposal_hash=asked.proposal_hash)
    done = await gw.grant(asked.id, pete, ["output_enable"], proposal_hash=asked.proposal_hash)
    assert done.request.status is Status.EXECUTED, done.message
    link.armed = True
    step = asyncio.ensure_future(gw.submit(run.id, "psu", "VOLT 2,(@1);:CURR 0.4,(@1);"
                                                          ":OUTP ON,(@1)"))
    await asyncio.to_thread(link.landed.wait, 10)
    step.cancel()
    with pytest.raises(asyncio.CancelledError):
        await step

    def concluded() -> bool:
        return not [r for r in gw.list_requests(run_id=run.id)
                    if r.status in (Status.APPROVED, Status.EXECUTING)]

    await _until(concluded, 5)
    # (the simulator's own port only now: pyvisa closes every session of its manager, the
    # gateway's link included, when a test's own connection closes it)
    assert _psu(sim, "OUTP? (@1)") == 1  # the write landed: the DUT is energized
    req = next(gw.get_request(r.id) for r in gw.list_requests(run_id=run.id)
               if r.message.startswith("VOLT 2"))
    assert req.status is Status.EXECUTED, (req.status, req.outcome)
    assert req.receipt is not None and req.receipt.after.get("ch1.output") == "1"
    assert [(x["instrument"], x["channels"]) for x in gw.leases()] == [("psu", [1])]
    # The client is gone: its lease runs out and the safe action switches CH1 off.
    gw.client_connected(run.id, False)
    await _until(lambda: _psu(sim, "OUTP? (@1)") == 0, 5)
