"""Attacks on stored states (bench_gate/memories.py), on the simulated E36312A's own port.

Hole 1: a recall judged on a record its own message replaced. A recall is judged on the
record of what its slot held when the message arrived; a save (or a forget) before it in
the same message changes what the slot holds by the time the recall runs. With CH2 on at
20 V (set at the panel, envelope 12 V) and slot 3 recorded with CH2 off, ``*SAV 3;:OUTP
0,(@2);:*RCL 3`` was shown ending with CH2 off and, with every approval, switched CH2 back
on at 20 V after switching it off. Now a recall after a save or forget in one message is
refused (-221) at every door: the recall goes in a message of its own, judged on the record
the save made.

Hole 2: a file's record under another spelling of the same file (case, path, drive,
spaces, the folder changed): see its test. The simulated supply keeps state files
(sim_instruments/_files.py) as the Keysight guides describe their names.

Hole 3: the state changed at the panel between the gateway's read and the save: see its
test.
"""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any

import pytest

from bench_gate.config import PolicyConfig
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Status
from bench_gate.policy import Verdict, decide
from bench_gate.scpi import ScpiError, available_profiles, classify, command_examples, get_profile
from sim_instruments import SimBenchThread
from tests.conftest import own_port

from .test_envelope_state import grant_all


def _watch_ch2(sim: SimBenchThread) -> list[tuple[int, float]]:
    """(output, voltage) of CH2 after every unit the supply takes, from any interface."""
    psu = sim.psu
    seen: list[tuple[int, float]] = []
    perform = psu.perform

    def watched(canonical: str, query: bool) -> str | None:
        answer = perform(canonical, query)
        seen.append((int(perform("OUTP? (@2)", True) or 0),
                     float(perform("VOLT? (@2)", True) or 0)))
        return answer

    psu.perform = watched  # type: ignore[method-assign]
    return seen


def _switched_back_on(seen: list[tuple[int, float]]) -> bool:
    """CH2 on at 20 V after it was seen off."""
    off = next((i for i, (out, _) in enumerate(seen) if out == 0), len(seen))
    return any(out == 1 and volts == 20 for out, volts in seen[off:])


async def _approved(gw: Gateway, run_id: str, message: str, who: Principal) -> Any:
    result = await gw.submit(run_id, "psu", message)
    if result.request is None or result.status != "pending":
        return result
    return (await grant_all(gw, result.request.id, who)).request


@pytest.mark.parametrize("message", [
    "*SAV 3;:OUTP 0,(@2);*RCL 3",
    "*sav 3;:outp 0,(@2);*rcl 3",
    'MMEM:DEL "x.sta";:OUTP 0,(@2);*RCL 3',
])
async def test_a_recall_after_a_save_in_its_own_message_is_refused(
        gateway: Gateway, script: Principal, olga: Principal, sim: SimBenchThread,
        front_panel: Any, message: str) -> None:
    run = gateway.create_run(script, "script")
    saved = await _approved(gateway, run.id, "*SAV 3", olga)  # slot 3: CH2 off
    assert saved.status is Status.EXECUTED, saved
    for command in ("VOLT 20,(@2)", "CURR 0.4,(@2)", "OUTP 1,(@2)"):
        front_panel.write(command)  # someone at the panel
    assert front_panel.query("*OPC?") == "1"
    seen = _watch_ch2(sim)
    done = await _approved(gateway, run.id, message, olga)
    assert getattr(done, "status", None) == "refused" and done.code == -221, done
    assert "message of its own" in done.reason
    assert not _switched_back_on(seen), seen
    with own_port(sim.psu_resource_name) as port:
        assert port.query("OUTP? (@2)") == "1", "nothing was sent: the panel's state stays"
        assert Decimal(port.query("VOLT? (@2)")) == 20


async def test_the_save_and_the_recall_one_after_the_other_are_each_judged(
        gateway: Gateway, script: Principal, olga: Principal, sim: SimBenchThread,
        front_panel: Any) -> None:
    """The same steps in messages of their own: the recall is judged on the record the
    save made (CH2 on at 20 V) and refused before it is sent."""
    run = gateway.create_run(script, "script")
    assert (await _approved(gateway, run.id, "*SAV 3", olga)).status is Status.EXECUTED
    for command in ("VOLT 20,(@2)", "CURR 0.4,(@2)", "OUTP 1,(@2)"):
        front_panel.write(command)
    assert front_panel.query("*OPC?") == "1"
    saved = await _approved(gateway, run.id, "*SAV 3", olga)
    assert saved.receipt.stored["slot 3"]["ch2.voltage"] == "20.0"
    assert front_panel.query("OUTP? (@2)") == "0", "the save's read-back made CH2 safe"
    seen = _watch_ch2(sim)
    done = await _approved(gateway, run.id, "*RCL 3", olga)
    assert getattr(done, "status", None) == "refused" and done.code == -222, done
    assert all(out == 0 for out, _ in seen), seen


@pytest.mark.parametrize("name", available_profiles())
def test_no_profile_lets_a_recall_follow_a_save_or_forget(name: str) -> None:
    """Every profile's every save or forget, then every recall, in one message: -221."""
    profile = get_profile(name)
    by_role: dict[str, list[str]] = {"save": [], "forget": [], "recall": []}
    for example in command_examples(profile):
        try:
            units = classify(example.message, name).units
        except ScpiError:  # an example some other unit's rules refuse
            continue
        form = profile.form_of(units[0].canonical) if len(units) == 1 else None
        if form is not None and form.memory is not None:
            by_role[form.memory].append(example.message)
    assert by_role["recall"] or name not in ("e36312a", "dp832"), by_role
    for first in by_role["save"] + by_role["forget"]:
        for recall in by_role["recall"]:
            message = f"{first};{recall if recall.startswith('*') else ':' + recall.lstrip(':')}"
            try:
                c = classify(message, name)
            except ScpiError:  # a message the classifier refuses never runs
                continue
            decision = decide(c, {}, PolicyConfig())
            assert decision.verdict is Verdict.REFUSE and decision.code == -221, (
                name, message, decision)


@pytest.mark.parametrize(("again", "before_recall"), [
    ('"A.STA"', None),             # another case
    ('"./a.sta"', None),           # with a path
    ('" a.sta "', None),           # with spaces around
    ('"INT:/a.sta"', None),        # with its drive
    ('"sub/a.sta"', 'MMEM:CDIR "sub"'),  # the folder changed since
])
async def test_a_file_is_never_recalled_on_a_record_under_another_name(
        gateway: Gateway, script: Principal, olga: Principal, sim: SimBenchThread,
        front_panel: Any, again: str, before_recall: str | None) -> None:
    """Hole 2: a file's record was kept under its name as written, but the instrument
    resolves a name against its own folder (``MMEM:CDIR``, reset by ``*RST``), drive and
    naming rules. ``a.sta`` recorded with CH2 off, then the same file saved as
    ``A.STA`` (or ``./a.sta``, ...) with CH2 on at 20 V from the panel: the recall of
    ``a.sta`` was judged on the first record and, with every approval, put CH2 on at
    20 V. A state loaded from a file is now never judged on a record: refused (-222)."""
    run = gateway.create_run(script, "script")
    first = await _approved(gateway, run.id, 'MMEM:STOR:STAT "a.sta"', olga)
    assert first.status is Status.EXECUTED, first
    assert first.receipt.stored == {}, "a file's state is never kept, nor said to be"
    for command in ("VOLT 20,(@2)", "CURR 0.4,(@2)", "OUTP 1,(@2)"):
        front_panel.write(command)
    assert front_panel.query("*OPC?") == "1"
    await _approved(gateway, run.id, f"MMEM:STOR:STAT {again}", olga)
    assert front_panel.query("OUTP? (@2)") == "0", "the save's read-back made CH2 safe"
    if before_recall is not None:
        assert (await gateway.submit(run.id, "psu", before_recall)).status == "executed"
    seen = _watch_ch2(sim)
    done = await _approved(gateway, run.id, 'MMEM:LOAD:STAT "a.sta"', olga)
    assert getattr(done, "status", None) == "refused" and done.code == -222, done
    assert "file" in done.reason and "*SAV" in done.reason
    assert all(out == 0 for out, _ in seen), seen
    with own_port(sim.psu_resource_name) as port:
        assert port.query("OUTP? (@2)") == "0"


async def test_a_state_changed_at_the_panel_while_it_was_saved_leaves_no_record(
        gateway: Gateway, script: Principal, olga: Principal, sim: SimBenchThread) -> None:
    """Hole 3: the state changed at the front panel between the gateway's read and the
    save. The record said CH2 off; the slot held CH2 on at 20 V; ``*RCL 3`` was judged on
    the record and, with every approval, put CH2 on at 20 V. The state is read again right
    after the save: a change means the slot is unknown, and the recall is refused."""
    psu = sim.psu
    perform = psu.perform

    def panel_first(canonical: str, query: bool) -> str | None:
        if canonical == "*SAV 3":  # someone at the panel, just before the save lands
            for command in ("VOLT 20,(@2)", "CURR 0.4,(@2)", "OUTP 1,(@2)"):
                perform(command, False)
            answer = perform(canonical, query)
            perform("OUTP 0,(@2)", False)  # and off again before the read-back
            return answer
        return perform(canonical, query)

    psu.perform = panel_first  # type: ignore[method-assign]
    run = gateway.create_run(script, "script")
    saved = await _approved(gateway, run.id, "*SAV 3", olga)
    psu.perform = perform  # type: ignore[method-assign]
    seen = _watch_ch2(sim)
    done = await _approved(gateway, run.id, "*RCL 3", olga)
    assert getattr(done, "status", None) == "refused" and done.code == -222, done
    assert "did not see saved" in done.reason
    assert all(out == 0 for out, _ in seen), seen
    assert "slot 3" not in saved.receipt.stored, saved.receipt.stored
    with own_port(sim.psu_resource_name) as port:
        assert port.query("OUTP? (@2)") == "0"


async def test_the_socket_door_refuses_a_recall_after_a_save_in_its_message(
        gateway: Gateway, open_client: Any, front_panel: Any) -> None:
    """The same rule through pyvisa on the socket door: the script reads -221 in its error
    queue, and nothing reached the supply."""
    psu = open_client("psu")
    await asyncio.to_thread(psu.write, "*SAV 3;:OUTP 0,(@2);*RCL 3")
    error = await asyncio.to_thread(psu.query, "SYST:ERR?")
    assert error.startswith("-221,"), error
    assert "message of its own" in error
    assert gateway.list_requests() == []
    assert front_panel.query("OUTP? (@2)") == "0"
