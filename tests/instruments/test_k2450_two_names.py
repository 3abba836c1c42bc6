"""One instrument reached under two names (or from two benches on one store): its stored
states are the instrument's, not the name's.

Hole 4: records were kept per bench and instrument name. With the same Keithley 2450
configured as ``smu`` and ``smu-b``, ``*SAV 1`` through ``smu`` recorded the output off;
with 20 V on from the panel (envelope 10 V), ``*SAV 1`` through ``smu-b`` stored it in the
same slot under the other name; ``*RCL 1`` through ``smu``, judged on its own record, put
20 V on the DUT with every approval. A save or forget now drops the records of every name
whose instrument answered the same ``*IDN?``. The simulator's own port says the rest.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from bench_gate.config import BenchConfig, ChannelLimits, InstrumentConfig
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Status
from bench_gate.store import open_store
from sim_instruments import SimBenchThread, SimServedThread
from tests import pg
from tests.conftest import own_port, served_bench
from tests.core.test_envelope_state import grant_all

LIMITS = ChannelLimits(voltage=Decimal(10), current=Decimal("0.1"))


@pytest.fixture
def smu_sim() -> Iterator[SimServedThread]:
    with SimServedThread("smu") as served:
        yield served


@pytest.fixture
def config(sim: SimBenchThread, smu_sim: SimServedThread) -> BenchConfig:
    cfg = served_bench(sim, "smu", smu_sim, "k2450", {1: LIMITS})
    cfg.instruments.append(InstrumentConfig(name="smu-b", resource=smu_sim.resource_name,
                                            profile="k2450", socket_port=0))
    cfg.envelope["smu-b"] = {1: LIMITS}
    return cfg


async def _approved(gw: Gateway, run_id: str, instrument: str, message: str,
                    who: Principal) -> Any:
    result = await gw.submit(run_id, instrument, message)
    if result.request is None or result.status != "pending":
        return result
    return (await grant_all(gw, result.request.id, who)).request


async def test_a_save_under_another_name_drops_the_record(
        gateway: Gateway, script: Principal, olga: Principal,
        smu_sim: SimServedThread) -> None:
    run = gateway.create_run(script, "script")
    first = await _approved(gateway, run.id, "smu", "*SAV 1", olga)
    assert first.status is Status.EXECUTED, first
    with own_port(smu_sim.resource_name, panel=True) as panel:
        panel.write(":SOUR:FUNC VOLT;:SOUR:VOLT 20;:OUTP ON")
        assert panel.query(":OUTP?") == "1"
    again = await _approved(gateway, run.id, "smu-b", "*SAV 1", olga)
    assert again.receipt.stored["slot 1"]["ch1.voltage"] == "20.0", again.receipt.stored
    with own_port(smu_sim.resource_name, panel=True) as panel:
        assert panel.query(":OUTP?") == "0", "the save's read-back made the SMU safe"
    done = await _approved(gateway, run.id, "smu", "*RCL 1", olga)
    assert getattr(done, "status", None) == "refused" and done.code == -222, done
    assert "did not see saved" in done.reason
    with own_port(smu_sim.resource_name, panel=True) as panel:
        assert panel.query(":OUTP?") == "0"
        assert Decimal(panel.query(":SOUR:VOLT?")) == 20


pg_cluster = pg.pg_cluster


async def test_a_save_from_another_bench_on_the_store_drops_the_record(
        pg_cluster: pg.PgCluster, smu_sim: SimServedThread, script: Principal,
        olga: Principal) -> None:
    """The same slot from two benches sharing a PostgreSQL store (each its own gateway,
    both reaching the one SMU): the save through bench B drops bench A's record."""
    url = pg_cluster.new_database()
    with SimBenchThread() as sim_a, SimBenchThread() as sim_b:
        gws = []
        for bench, sim in (("bench-a", sim_a), ("bench-b", sim_b)):
            cfg = served_bench(sim, "smu", smu_sim, "k2450", {1: LIMITS})
            for ic in cfg.instruments:
                ic.socket_port = 0
            cfg.bench = bench
            gw = Gateway(cfg, open_store(url))
            await gw.start()
            gws.append(gw)
        a, b = gws
        try:
            run_a, run_b = a.create_run(script, "script"), b.create_run(script, "script")
            assert (await _approved(a, run_a.id, "smu", "*SAV 1", olga)).status \
                is Status.EXECUTED
            with own_port(smu_sim.resource_name, panel=True) as panel:
                panel.write(":SOUR:FUNC VOLT;:SOUR:VOLT 20;:OUTP ON")
                assert panel.query(":OUTP?") == "1"
            again = await _approved(b, run_b.id, "smu", "*SAV 1", olga)
            assert again.receipt.stored["slot 1"]["ch1.voltage"] == "20.0"
            done = await _approved(a, run_a.id, "smu", "*RCL 1", olga)
            assert getattr(done, "status", None) == "refused" and done.code == -222, done
            with own_port(smu_sim.resource_name, panel=True) as panel:
                assert panel.query(":OUTP?") == "0"
        finally:
            for gw in gws:
                await gw.close()
                gw.store.close()
