"""The envelope on the Keithley 2450 in both source functions (docs/reliability.md, section
7: "a field that bounds the output under another name"). Through the socket door with real
pyvisa clients, proven on the simulator's own port: the current-source function's level and
voltage limit are judged like the voltage source level and the current limit (before a
write, at the live recheck, on the read-back); an energize over an untouched voltage limit
outside the envelope is refused; a sweep or list with a point outside is refused -222 before
it is stored; a reading with the resistance function set at the panel is held as excites;
and for any sequence of approved commands no energized state is outside the envelope.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import pyvisa
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import bench_gate
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Status
from bench_gate.profile_check import check_profile
from sim_instruments import SimServedThread, SimSmu
from tests.doors.proxy.test_proxy import in_thread, next_pending
from tests.instruments import test_k2450

smu_sim = test_k2450.smu_sim
config = test_k2450.config
smu = test_k2450.smu
panel = test_k2450.panel
VOLTS, AMPS = Decimal(10), Decimal("0.1")  # test_k2450.LIMITS
PROFILES = Path(bench_gate.__file__).parent / "profiles"


def _error_after(client: Any, message: str) -> str:
    client.write(message)
    return str(client.query("SYST:ERR?"))


def _terminals(smu_sim: SimServedThread) -> tuple[float, float]:
    inst = smu_sim.instrument
    assert isinstance(inst, SimSmu)
    return inst.terminals()


def _inside(smu_sim: SimServedThread) -> bool:
    volts, amps = _terminals(smu_sim)
    return abs(volts) <= float(VOLTS) + 1e-9 and abs(amps) <= float(AMPS) + 1e-9


async def _refused(client: Any, gateway: Gateway, message: str) -> str:
    error = await in_thread(_error_after, client, message)
    assert error.startswith("-222,"), (message, error)
    assert not gateway.list_requests(status=Status.PENDING)
    return error


# ------------------------------------------------------------------ the profile says it

def test_profile_check_flags_an_output_bound_with_no_envelope_limit(tmp_path: Path) -> None:
    """The 2450 profile without its two envelope keys: its current level and voltage limit
    are setpoints no bench limit applies to, and the check says so on exactly those."""
    assert check_profile("k2450").ok
    text = (PROFILES / "k2450.yaml").read_text()
    assert text.count(", envelope: current}") == 1 and text.count(", envelope: voltage}") == 1
    text = text.replace(", envelope: current}", "}").replace(", envelope: voltage}", "}")
    path = tmp_path / "k2450_unbounded.yaml"
    path.write_text(text.replace("name: k2450\n", "name: k2450_unbounded\n"))
    report = check_profile(str(path))
    flagged = {f.header for f in report.findings if "no envelope limit" in f.message}
    assert flagged == {"SOURce#:CURRent[:LEVel][:IMMediate][:AMPLitude]",
                       "SOURce#:CURRent:VLIMit[:LEVel]"}, report.findings
    assert not report.ok


def test_the_console_shows_every_bounded_field_against_its_limit() -> None:
    """The console's panel flags the current-source fields and a negative level by their
    magnitude, and offers the voltage limit up to the envelope's voltage."""
    from bench_gate.scpi import get_profile
    from bench_gate.web import limits_of, over_envelope

    profile = get_profile("k2450")
    limits = {1: test_k2450.LIMITS}
    over = over_envelope(profile, limits, "1", {
        "voltage": "-12.0", "current": "0.05", "current_level": "0.5", "vlim": "200.0",
        "output": "0"})
    assert set(over) == {"voltage", "current_level", "vlim"}, over
    assert "10" in over["vlim"] and "0.1" in over["current_level"]
    assert limits_of(profile, limits, 1, "vlim")[1] == VOLTS
    assert limits_of(profile, limits, 1, "current_level")[1] == AMPS


# ------------------------------------------------------------------ the two reproductions

async def test_the_current_source_function_stays_inside_the_envelope(
        smu: Any, gateway: Gateway, olga: Principal, panel: Any,
        smu_sim: SimServedThread) -> None:
    """Reproduction A: the function is approved, but its level and voltage limit are
    judged against the envelope like any setpoint; the output never goes on."""
    task = asyncio.ensure_future(in_thread(smu.write, ":SOUR:FUNC CURR"))
    req = await next_pending(gateway)
    result = await gateway.grant(req.id, olga, list(req.required),
                                 proposal_hash=req.proposal_hash)
    assert result.request.status is Status.EXECUTED, result.request.outcome
    await task
    error = await _refused(smu, gateway, ":SOUR:CURR:VLIM 200")
    assert "vlim (bounded by the voltage limit) 200.0 V" in error
    error = await _refused(smu, gateway, ":SOUR:CURR 1")
    assert "current_level (bounded by the current limit) 1.0 A" in error
    # The untouched voltage limit (21 V, the 2450's default) is outside: no energize.
    error = await _refused(smu, gateway, ":OUTP ON")
    assert "voltage limit (while sourcing current) is 21.0 V" in error
    assert panel.query(":OUTP?") == "0"
    assert Decimal(panel.query(":SOUR:CURR:VLIM?")) == 21
    assert _terminals(smu_sim) == (0.0, 0.0)


async def test_an_energize_over_a_panel_set_current_source_is_refused(
        smu: Any, gateway: Gateway, smu_sim: SimServedThread) -> None:
    """Reproduction B: another LAN client (the 2450 has no lock) leaves the SMU sourcing
    1 A with a 200 V limit, output off; the requester's OUTP ON is judged on them."""
    rm = pyvisa.ResourceManager("@py")
    lan: Any = rm.open_resource(smu_sim.resource_name, read_termination="\n",
                                write_termination="\n", timeout=2000)
    try:
        lan.write(":SOUR:FUNC CURR;:SOUR:CURR 1;:SOUR:CURR:VLIM 200")
        error = await _refused(smu, gateway, ":OUTP ON")
        assert "current source level is 1.0 A" in error and "200.0 V" in error, error
        assert lan.query(":OUTP?") == "0"
    finally:
        lan.close()
        rm.close()
    assert _terminals(smu_sim) == (0.0, 0.0)


async def test_the_live_recheck_judges_a_voltage_limit_moved_after_the_proposal(
        smu: Any, gateway: Gateway, olga: Principal, panel: Any,
        smu_sim: SimServedThread) -> None:
    """Approved on a safe state, the voltage limit moved at the panel before the grant:
    the recheck reads it and the output stays off."""
    panel.write(":SOUR:CURR:VLIM 5")
    task = asyncio.ensure_future(in_thread(smu.write, ":OUTP ON"))
    req = await next_pending(gateway)
    assert gateway.get_request(req.id).handoff["setpoint_needed"][0]["vlim"] == "5.0"
    panel.write(":SOUR:FUNC CURR;:SOUR:CURR:VLIM 150;:SOUR:CURR 0.05")
    result = await gateway.grant(req.id, olga, list(req.required),
                                 proposal_hash=req.proposal_hash)
    assert result.request.status is not Status.EXECUTED, result.request.outcome
    await task
    assert panel.query(":OUTP?") == "0"
    assert _terminals(smu_sim) == (0.0, 0.0)


# ------------------------------------------------------------------ sweeps, lists, readings

@pytest.mark.parametrize(("message", "words"), [
    (":SOUR:SWE:VOLT:LIN -200,200,5", "voltage 200.0 V is above the bench limit of 10.0 V"),
    (":SOUR:SWE:VOLT:LIN 0,-11", "voltage 11.0 V is above"),
    (":SOUR:SWE:VOLT:LOG 1,20,3", "voltage 20.0 V is above"),
    (":SOUR:SWE:VOLT:LIN:STEP 0,12,1", "voltage 12.0 V is above"),
    (":SOUR:SWE:CURR:LIN 0,0.5,5", "current_level (bounded by the current limit) 0.5 A"),
    (":SOUR:LIST:VOLT 1,2,3,50", "voltage 50.0 V is above"),
    (":SOUR:LIST:CURR:APP 0.01,-0.2", "0.2 A is above the bench limit of 0.1 A"),
])
async def test_a_sweep_or_list_point_outside_the_envelope_is_refused(
        smu: Any, gateway: Gateway, message: str, words: str) -> None:
    error = await _refused(smu, gateway, message)
    assert words in error and "stores for a later trigger" in error, error


async def test_sweeps_inside_are_held_and_configuration_lists_refused(
        smu: Any, gateway: Gateway, olga: Principal) -> None:
    task = asyncio.ensure_future(in_thread(smu.write, ":SOUR:SWE:VOLT:LIN -5,5,3"))
    req = await next_pending(gateway)
    assert [a.effect for a in req.actions] == ["state"]
    await gateway.deny(req.id, olga, "test", proposal_hash=req.proposal_hash)
    await task
    for message in (':SOUR:CONF:LIST:CRE "cfg"', ':SOUR:CONF:LIST:REC "cfg",1',
                    ":SOUR:SWE:VOLT:LIST 1,0.1"):
        error = await in_thread(_error_after, smu, message)
        assert error.startswith("-203,"), (message, error)
    assert not gateway.list_requests(status=Status.PENDING)


async def test_a_reading_with_resistance_set_at_the_panel_is_held_as_excites(
        smu: Any, gateway: Gateway, olga: Principal, panel: Any) -> None:
    assert (await in_thread(smu.query, ":READ?"))  # the voltage function: passes
    assert not gateway.list_requests()
    panel.write(':SENS:FUNC "RES"')
    task = asyncio.ensure_future(in_thread(smu.query, ":READ?"))
    req = await next_pending(gateway)
    assert [a.effect for a in req.actions] == ["excites"]
    assert "test current" in req.actions[0].applies
    result = await gateway.grant(req.id, olga, list(req.required),
                                 proposal_hash=req.proposal_hash)
    assert result.request.status is Status.EXECUTED, result.request.outcome
    assert Decimal(await task) > 0  # the DUT's resistance, measured once approved


# ------------------------------------------------------------------ for every sequence

# Levels inside the envelope as often as outside it: a state with all four inside is where
# the output goes on, and the property is about energized states.
LEVEL_V = st.one_of(st.decimals(-10, 10, places=1), st.decimals(-30, 30, places=1))
LEVEL_A = st.one_of(st.decimals(Decimal("-0.1"), Decimal("0.1"), places=3),
                    st.decimals(Decimal("-0.3"), Decimal("0.3"), places=3))
COMMANDS = st.one_of(
    st.just(":OUTP ON"),
    st.sampled_from([":SOUR:FUNC VOLT", ":SOUR:FUNC CURR", ":OUTP OFF"]),
    LEVEL_V.map(lambda v: f":SOUR:VOLT {v}"),
    LEVEL_A.map(lambda a: f":SOUR:CURR {a}"),
    st.decimals(Decimal("0.001"), Decimal("0.3"), places=3).map(
        lambda a: f":SOUR:VOLT:ILIM {a}"),
    st.decimals(Decimal("0.1"), Decimal(30), places=1).map(lambda v: f":SOUR:CURR:VLIM {v}"),
)
#: What the panel (or another client) left before the script starts, output off.
PANEL = st.tuples(st.sampled_from(["VOLT", "CURR"]), LEVEL_V, LEVEL_A,
                  st.one_of(st.decimals(Decimal("0.1"), Decimal(12), places=1),
                            st.decimals(Decimal("0.1"), Decimal(200), places=1)))


async def test_no_sequence_of_approved_commands_leaves_the_envelope(
        smu: Any, gateway: Gateway, olga: Principal, panel: Any,
        smu_sim: SimServedThread) -> None:
    loop = asyncio.get_running_loop()
    pool = concurrent.futures.ThreadPoolExecutor(1)
    seen = {"granted": 0, "energized": 0}

    def on_loop(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(30)

    async def pending() -> list[Any]:
        return gateway.list_requests(status=Status.PENDING)

    def send(message: str) -> str:
        smu.write(message)
        # Answered once the message is done (a held one: once decided and run), and read so
        # that a refusal's error never stays for the next message.
        return str(smu.query("SYST:ERR?"))

    def run(message: str) -> None:
        """Send one message; grant every approval it is held for; wait for its end."""
        done = pool.submit(send, message)
        for _ in range(500):  # bounded: 10 s
            if done.done():
                break
            for req in on_loop(pending()):
                on_loop(gateway.grant(req.id, olga, list(req.required),
                                      proposal_hash=req.proposal_hash))
                seen["granted"] += 1
            concurrent.futures.wait([done], 0.02)
        done.result(10)

    # No shrinking: each step is a real exchange over sockets; a failure names its sequence.
    @settings(max_examples=30, deadline=None, derandomize=True, database=None,
              phases=(Phase.explicit, Phase.generate), suppress_health_check=list(HealthCheck))
    @given(PANEL, st.lists(COMMANDS, min_size=1, max_size=8))
    def prop(start: tuple[str, Decimal, Decimal, Decimal], steps: list[str]) -> None:
        function, volts, amps, vlim = start
        panel.write(":OUTP OFF")
        panel.write(f":SOUR:FUNC {function};:SOUR:VOLT {volts};:SOUR:CURR {amps};"
                    f":SOUR:CURR:VLIM {vlim}")
        for message in steps:
            run(message)
            if panel.query(":OUTP?") == "1":
                seen["energized"] += 1
                assert _inside(smu_sim), (start, steps, message, _terminals(smu_sim))
                state = {q: Decimal(panel.query(q)) for q in (
                    ":SOUR:VOLT?", ":SOUR:VOLT:ILIM?", ":SOUR:CURR?", ":SOUR:CURR:VLIM?")}
                assert abs(state[":SOUR:VOLT?"]) <= VOLTS and state[":SOUR:CURR:VLIM?"] <= VOLTS
                assert abs(state[":SOUR:CURR?"]) <= AMPS and state[":SOUR:VOLT:ILIM?"] <= AMPS

    try:
        await in_thread(prop)
    finally:
        pool.shutdown()
    # The property held over states that ran: writes approved and outputs on, not only refusals.
    assert seen["granted"] >= 10 and seen["energized"] >= 3, seen
