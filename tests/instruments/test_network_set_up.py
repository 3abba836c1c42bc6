"""The gateway's own link, on every shipped profile. A command that changes how the
instrument is reached (its LAN address, mask, gateway, DHCP, AutoIP or manual IP, a LAN
apply or restart, an interface switched off, its GPIB address, its serial settings) cuts
the gateway off, and with it the safe action of every output. The incomplete profiles left
these subsystems out, so such a command was held as unknown and one careless approval ran
it. Each is refused with -203 whatever the approvals, never held; the set-up's queries
still read; and a profile with such a subsystem cannot leave it to a person.
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from bench_gate.config import BenchConfig, ChannelLimits, PolicyConfig, default_config
from bench_gate.gateway import Gateway
from bench_gate.models import Principal
from bench_gate.policy import Verdict, decide
from bench_gate.scpi import Effect, ScpiError, available_profiles, classify, get_profile
from bench_gate.store import SqliteStore
from sim_instruments import SimBenchThread, SimServedThread, extra_for_profile
from tests.conftest import served_bench
from tests.core.test_review_holes_2 import _everything

#: Every spelling tried, by profile: the manuals' set-up commands (short, long and mixed
#: forms), and on the incomplete profiles a header under the subtree that no list names.
FORBIDDEN: dict[str, list[str]] = {
    # DP800 Programming Guide, chapter 2, :SYSTem:COMMunicate:GPIB, :LAN and :RS232.
    "dp832": [':SYST:COMM:LAN:IPAD "10.0.0.5"', ":SYSTem:COMMunicate:LAN:DHCP:STATe OFF",
              ":SYST:COMM:LAN:DHCP 0", ":SYST:COMM:LAN:AUTO OFF", ":SYST:COMM:LAN:MAN ON",
              ':SYST:COMM:LAN:SMASK "255.255.0.0"', ':SYST:COMM:LAN:GATE "10.0.0.1"',
              ':SYST:COMM:LAN:DNS "10.0.0.2"', ":SYST:COMM:LAN:APPL",
              ":SYST:COMM:GPIB:SELF:ADDR 3", ":syst:comm:gpib:addr 3",
              ":SYST:COMM:RS232:BAUD 9600", ":SYST:COMM:RS232:PARI ODD",
              ':SYST:COMM:LAN:HOST "bench"', ":SYST:COMM:USB:MODE TMC",
              ":SYST:COMMU:LAN:HOST \"bench\""],
    # DL3000 Programming Guide, chapter 2, :SYSTem:COMMunicate.
    "dl3021": [':SYST:COMM:LAN:IPAD "10.0.0.5"', ":SYST:COMM:LAN:DHCP OFF",
               ':SYST:COMM:LAN:SMAS "255.255.0.0"', ':SYST:COMM:LAN:GAT "10.0.0.1"',
               ":SYST:COMM:LAN:APPL", ":SYST:COMM:LAN:AUTO OFF",
               ":SYST:COMM:RS232:BAUD 9600", ":SYST:COMM:GPIB:ADDR 3"],
    # 2450 Reference Manual, section 6: :SYSTem:COMMunication:LAN:CONFigure,
    # :SYSTem:GPIB:ADDRess, :SYSTem:PASSword:NEW.
    "k2450": [':SYST:COMM:LAN:CONF "MANual,10.0.0.5,255.255.255.0,10.0.0.1"',
              ':SYSTem:COMMunicate:LAN:CONFigure "AUTO"', ":SYST:GPIB:ADDR 3",
              ":SYSTem:GPIB:ADDRess 3", ':SYST:PASS:NEW "open"',
              ':SYST:COMM:LAN:DNS "10.0.0.2"'],
    # DMM6500 Reference Manual, SCPI command reference, the same commands.
    "dmm6500": [':SYST:COMM:LAN:CONF "MANual,10.0.0.5,255.255.255.0,10.0.0.1"',
                ':syst:comm:lan:conf "auto"', ":SYST:GPIB:ADDR 3", ':SYST:PASS:NEW "open"',
                ":SYST:GPIB:TERM LF"],
    # SPD3303X/XE Programming Guide: DHCP, IPaddr, MASKaddr, GATEaddr.
    "spd3303x": ["DHCP ON", "dhcp off", 'IPaddr "10.0.0.5"', 'IP "10.0.0.5"',
                 'MASKaddr "255.255.0.0"', 'GATEaddr "10.0.0.1"'],
    # E36312A and 34465A (complete): SYSTem:COMMunicate and LXI subsystems.
    "e36312a": ['SYST:COMM:LAN:IPAD "10.0.0.5"', "SYST:COMM:LAN:DHCP 0",
                'SYST:COMM:LAN:SMAS "255.255.0.0"', 'SYST:COMM:LAN:GAT "10.0.0.1"',
                'SYST:COMM:LAN:DNS2 "10.0.0.2"', 'SYST:COMM:LAN:HOST "bench"',
                "SYST:COMM:LAN:UPD", "SYST:COMM:ENAB 0,LAN", "SYST:COMM:GPIB:ADDR 3",
                "LXI:RES", "LXI:REST", "LXI:MDNS:ENAB 0"],
    "34465a": ['SYST:COMM:LAN:IPAD "10.0.0.5"', "SYSTem:COMMunicate:LAN:DHCP OFF",
               'SYST:COMM:LAN:WINS1 "10.0.0.3"', "SYST:COMM:LAN:UPD",
               "SYST:COMM:ENAB OFF,LAN", "SYST:COMM:GPIB:ADDR 3", "LXI:RES", "LXI:REST"],
}
#: The queries of the set-up, which only answer: read, unattended.
READS: dict[str, list[str]] = {
    "dp832": [":SYST:COMM:LAN:IPAD?", ":SYST:COMM:LAN:DHCP?", ":SYST:COMM:LAN:MAC?",
              ":SYST:COMM:GPIB:ADDR?", ":SYST:COMM:RS232:BAUD?", ":SYST:COMM:LAN:SMASK?"],
    "dl3021": [":SYST:COMM:LAN:IPAD?", ":SYST:COMM:LAN:DHCP?", ":SYST:COMM:LAN:MAC?"],
    "k2450": [":SYST:COMM:LAN:CONF?", ":SYST:COMM:LAN:MAC?", ":SYST:GPIB:ADDR?"],
    "dmm6500": [":SYST:COMM:LAN:CONF?", ":SYST:COMM:LAN:MAC?", ":SYST:GPIB:ADDR?"],
    "spd3303x": ["DHCP?", "IP?", "MASK?", "GATE?"],
    "e36312a": ["SYST:COMM:LAN:IPAD?", "SYST:COMM:LAN:DHCP?", "SYST:COMM:GPIB:ADDR?"],
    "34465a": ["SYST:COMM:LAN:IPAD?", "SYST:COMM:LAN:DHCP?", "SYST:COMM:GPIB:ADDR?"],
}
#: Envelopes the gateway starts with (a meter has none).
LIMITS: dict[str, dict[int, ChannelLimits] | None] = {
    "dp832": {1: ChannelLimits(voltage=Decimal(5), current=Decimal(1))},
    "dl3021": {1: ChannelLimits(voltage=Decimal(5), current=Decimal(1))},
    "k2450": {1: ChannelLimits(voltage=Decimal(5), current=Decimal("0.1"))},
    "dmm6500": None,
    "spd3303x": {1: ChannelLimits(voltage=Decimal(5), current=Decimal(1))},
}
#: A node of a header that sets how the instrument is reached.
LINK = re.compile(r"(^|:)\[?(COMM|LAN|GPIB|RS232|LXI|DHCP|IPADDR|MASKADDR|GATEADDR|PASS|USB)",
                  re.IGNORECASE)
#: Where a profile that is not complete must forbid a whole subtree.
SUBTREE = re.compile(r"(^|:)(COMM|LAN|GPIB|RS232|DHCP|IPADDR|MASKADDR|GATEADDR)",
                     re.IGNORECASE)
#: The link's headers whose command form leaves the link alone, and why.
LEAVES_THE_LINK = {
    "LXI:IDENtify[:STATe]": "blinks the LXI indicator on the panel",
    "SYSTem:COMMunicate:LAN:TELNet:PROMpt": "the text of a Telnet session's prompt",
    "SYSTem:COMMunicate:LAN:TELNet:WMESsage": "the text of a Telnet session's welcome",
    "SYSTem:USB:HOST:ENABle": "the front USB host port (a flash drive), no remote interface",
}


async def _refused_with_every_approval(config: BenchConfig, name: str, message: str,
                                       db: Path, clock: Any, people: tuple[Principal, ...]
                                       ) -> Any:
    gw = Gateway(config, SqliteStore(db), clock=clock)
    await gw.start()
    try:
        run = gw.create_run(people[0], "script", goal="tidy the network")
        return await _everything(gw, run.id, name, message, *people[1:])
    finally:
        await gw.close()
        gw.store.close()


@pytest.mark.parametrize(("profile", "message"),
                         [(p, m) for p, forms in FORBIDDEN.items() for m in forms])
async def test_no_network_set_up_is_changed_through_the_gateway(
        sim: SimBenchThread, tmp_path: Path, clock: Any, script: Principal, olga: Principal,
        pete: Principal, profile: str, message: str) -> None:
    """Through the gateway, every approval granted that it asks for: refused with -203,
    never held (before: held as an unknown header on the incomplete profiles, and one
    approval sent it)."""
    people = (script, olga, pete)
    db = tmp_path / "gate.db"
    if profile in ("e36312a", "34465a"):  # the default bench's PSU and DMM
        name = "psu" if profile == "e36312a" else "dmm"
        result = await _refused_with_every_approval(
            default_config(sim.psu_port, sim.dmm_port), name, message, db, clock, people)
    else:
        extra = extra_for_profile(profile)
        assert extra is not None, profile
        with SimServedThread(extra) as served:
            cfg = served_bench(sim, "inst", served, profile, LIMITS[profile])
            result = await _refused_with_every_approval(cfg, "inst", message, db, clock,
                                                        people)
    assert getattr(result, "request", None) is None, (message, result)
    assert result.status == "refused" and result.code == -203, (message, result)


@pytest.mark.parametrize(("profile", "message"),
                         [(p, m) for p, forms in FORBIDDEN.items() for m in forms])
def test_a_network_set_up_is_refused_never_held(profile: str, message: str) -> None:
    """The same spellings, as the policy judges them: refused, whatever is approved."""
    try:
        c = classify(message, profile)
    except ScpiError as exc:  # a truncation between a node's forms: refused too
        assert exc.code == -113, (message, exc)
        return
    assert [u.effect for u in c.units] == [Effect.FORBIDDEN] * len(c.units), c.units
    assert decide(c, {}, PolicyConfig()).verdict is Verdict.REFUSE


@pytest.mark.parametrize(("profile", "query"),
                         [(p, q) for p, forms in READS.items() for q in forms])
def test_the_network_set_up_still_reads(profile: str, query: str) -> None:
    c = classify(query, profile)
    assert [u.effect for u in c.units] == [Effect.READ], c.units
    assert decide(c, {}, PolicyConfig()).verdict is Verdict.PASS


def test_the_e3631a_has_no_network_set_up_to_send() -> None:
    """The E3631A (GPIB and RS-232): its address and serial settings are set at the front
    panel only (User's Guide, chapter 3, "Remote interface configuration"); its complete
    profile refuses any such header (-113), never holds it."""
    for message in ("SYST:COMM:GPIB:ADDR 3", "SYST:COMM:SER:BAUD 9600",
                    "SYST:COMM:RS232:BAUD 9600"):
        with pytest.raises(ScpiError, match="-113"):
            classify(message, "e3631a")


def test_every_shipped_profile_forbids_its_network_set_up() -> None:
    """A new profile cannot forget: every header of a shipped profile that sets how the
    instrument is reached forbids its command form (or leaves the link alone, and says
    why here); a supply, load, SMU or meter profile that is not complete names the
    subtrees (forbidden_under), and every such header it lists is under one, so a header
    it left out is refused, never held."""
    wrong = []
    for name in available_profiles():
        profile = get_profile(name)
        for command in profile.model.commands:
            if not LINK.search(command.header) or command.set is None:
                continue
            if command.header not in LEAVES_THE_LINK \
                    and command.set.effect is not Effect.FORBIDDEN:
                wrong.append(f"{name}: {command.header} is {command.set.effect.value}")
        if profile.complete or profile.kind == "other":
            continue
        if not profile.model.forbidden_under:
            wrong.append(f"{name}: not complete and no forbidden_under")
        for command in profile.model.commands:
            words = tuple(w.upper() for w in re.sub(r"\[[^]]*\]", "", command.header)
                          .replace("#", "").split(":"))
            if SUBTREE.search(command.header) and profile.forbidden_under(words) is None:
                wrong.append(f"{name}: {command.header} is under no forbidden_under")
    assert wrong == []
