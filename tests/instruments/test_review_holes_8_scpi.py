"""Hostile review 8, the SCPI side, on the simulated instruments' own ports.

Hole 1: a keyword where an enveloped level goes. The DL3021's current limits in CV, CR and
CP (``VOLT:ILIM``, ``RES:ILIM``, ``POW:ILIM``) take ``MINimum|MAXimum|DEFault`` (DL3000
guide, chapter 2), and the profile passed them on as words: ``:VOLT:ILIM 40`` was refused
(-222) but ``:VOLT:ILIM MAX`` was held, with nothing judged (a word is no number), and with
every approval the load in CV drew 40 A from the DUT under a 10 A envelope until the
read-back switched it off.

Hole 1b, found on the way: those limits named no channel (the DL3021's one input is channel
1 everywhere else), so the prediction set ``cv_ilim`` where no snapshot reads it, and every
approved limit read back as "ambiguous ... no query reads cv_ilim; a person must check".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench_gate import envelope
from bench_gate.config import BenchConfig, ChannelLimits, InstrumentConfig, PolicyConfig
from bench_gate.gateway import Gateway
from bench_gate.models import Action, Principal
from bench_gate.policy import Verdict, decide
from bench_gate.scpi import (
    Classification,
    ScpiError,
    available_profiles,
    classify,
    get_profile,
)
from sim_instruments import SimDl3021, SimServedThread
from tests.conftest import own_port
from tests.instruments.test_review_holes_load import _grant_everything

LIMITS = {1: ChannelLimits(voltage=Decimal(20), current=Decimal(10))}


@pytest.fixture
def load_sim() -> Iterator[SimServedThread]:
    with SimServedThread("dl3021") as served:
        yield served


@pytest.fixture
def config(config: BenchConfig, load_sim: SimServedThread) -> BenchConfig:
    config.instruments.append(InstrumentConfig(name="load", resource=load_sim.resource_name,
                                               profile="dl3021", socket_port=0))
    config.envelope["load"] = dict(LIMITS)
    config.policy.watch_seconds = 0  # the read-back is not what this is about
    return config


def _watch_drawn(load_sim: SimServedThread) -> list[float]:
    """The current the load draws after every unit it takes, from any interface."""
    inst = load_sim.instrument
    assert isinstance(inst, SimDl3021)
    seen: list[float] = []
    perform = inst.perform

    def watched(canonical: str, query: bool) -> str | None:
        answer = perform(canonical, query)
        seen.append(inst.drawn()[1])
        return answer

    inst.perform = watched  # type: ignore[method-assign]
    return seen


@pytest.mark.parametrize(("function", "levels", "limit"), [
    ("VOLT", ":VOLT 0;:VOLT:ILIM 5", "VOLT:ILIM"),  # pulls the DUT to 0 V: all it may
    ("RES", ":RES 0.08;:RES:ILIM 5", "RES:ILIM"),   # 12 V over 80 mOhm: 150 A, up to it
])
@pytest.mark.parametrize("word", ["MAX", "maximum"])
async def test_a_keyword_never_sets_a_level_beyond_the_envelope(
        gateway: Gateway, script: Principal, olga: Principal, load_sim: SimServedThread,
        function: str, levels: str, limit: str, word: str) -> None:
    """Every approval granted. The load draws 5 A in CV (or CR) under a 10 A envelope;
    ``<limit> MAX`` is its 40 A, refused like 40 (-222) and never sent."""
    run = gateway.create_run(script, "script", goal="discharge the DUT")
    for message in (f":FUNC {function};{levels}", ":INP ON"):
        await _grant_everything(gateway, run.id, message, olga)
    with own_port(load_sim.resource_name) as panel:  # drawing 5 A, inside
        assert panel.query("INP?") == "1" and Decimal(panel.query("MEAS:CURR?")) == 5
    drawn = _watch_drawn(load_sim)
    outcome = await _grant_everything(gateway, run.id, f":{limit} {word}", olga)
    assert outcome.startswith("refused -222"), outcome
    assert "40.0 A" in outcome and "10.0 A" in outcome, outcome
    with own_port(load_sim.resource_name) as panel:
        assert Decimal(panel.query(f"{limit}?")) == 5
        assert panel.query("INP?") == "1"
        assert Decimal(panel.query("MEAS:CURR?")) == 5
    assert max(drawn, default=0.0) <= 10, drawn


def test_min_and_def_of_a_limit_are_numbers_judged_like_any() -> None:
    """MIN is the range's low end, sent as a number; DEF is the profile's default where it
    has one, else refused (-224), never a word the envelope cannot judge."""
    for limit in ("VOLT:ILIM", "RES:ILIM", "POW:ILIM"):
        (unit,) = classify(f"{limit} MIN", "dl3021").units
        assert unit.canonical == f"{limit} 0.0,(@1)" and unit.value == 0
        with pytest.raises(ScpiError) as exc:
            classify(f"{limit} DEF", "dl3021")
        assert exc.value.code == -224


_KEYWORDS = ["MIN", "MINIMUM", "MAX", "MAXIMUM", "DEF", "DEFAULT", "INF", "AUTO", "UP"]


def _enveloped_forms() -> list[tuple[str, str, str]]:
    """(profile, a spelling of the header, the parameter's field) for every set form
    with a parameter of a field the envelope bounds (voltage or current)."""
    out = []
    for name in available_profiles():
        profile = get_profile(name)
        for command in profile.model.commands:
            form = command.set
            if form is None or form.expand:
                continue
            for spec in form.params:
                if spec.type == "number" and spec.field and profile.limit_of(spec.field) in (
                        "voltage", "current"):
                    header = "".join(c for c in command.header.replace("#", "1")
                                     if not c.islower() and c not in "[]")
                    out.append((name, header, spec.field))
    return out


@settings(max_examples=300, deadline=None)
@given(case=st.sampled_from(_enveloped_forms()), word=st.sampled_from(_KEYWORDS),
       limit=st.decimals(min_value=0, max_value=1000, places=3))
def test_a_level_the_envelope_bounds_is_a_number_or_never_runs(
        case: tuple[str, str, str], word: str, limit: Decimal) -> None:
    """For every profile and every parameter of an enveloped field, given a keyword: the
    classification refuses it, or each unit that stores the field names a number, and the
    decision under any envelope holds it only when that number is inside."""
    name, header, field = case
    profile = get_profile(name)
    limits = {ch: ChannelLimits(voltage=limit, current=limit) for ch in profile.channels}
    try:
        c = classify(f"{header} {word}", name)
    except ScpiError:
        return  # refused: never runs
    verdict = decide(c, limits, PolicyConfig()).verdict
    for unit in c.units:
        named = [level for f, level in unit.reach if profile.limit_of(f) in ("voltage",
                                                                             "current")]
        if unit.field is not None and profile.limit_of(unit.field) in ("voltage", "current") \
                and unit.value is not None:
            assert isinstance(unit.value, Decimal), (header, word, unit)
            named.append(abs(unit.value))
        if any(level > limit for level in named):
            assert verdict is Verdict.REFUSE, (header, word, unit)
    assert field


@pytest.mark.parametrize("word", ["MAX", "AUTO", "NAN", "5V"])
def test_a_word_for_an_enveloped_level_is_refused_and_never_shown_inside(word: str) -> None:
    """The rule under the classifier (a lab profile may keep a keyword): a unit or an
    action that sets a field the envelope bounds to anything but a number is outside."""
    profile = get_profile("dl3021")
    unit = dataclasses.replace(classify("VOLT:ILIM 5", "dl3021").units[0], value=word)
    assert decide(Classification("x", "dl3021", (unit,), None), LIMITS,
                  PolicyConfig()).verdict is Verdict.REFUSE
    action = Action(index=0, source=0, text="x", effect="state", channel=1, field="cv_ilim",
                    new=word, canonical="x")
    assert envelope.action_breaches(profile, LIMITS, [action])


@pytest.mark.parametrize("limit", ["VOLT:ILIM", "RES:ILIM", "POW:ILIM"])
async def test_an_approved_current_limit_reads_back_as_executed(
        gateway: Gateway, script: Principal, olga: Principal, load_sim: SimServedThread,
        limit: str) -> None:
    run = gateway.create_run(script, "script", goal="discharge the DUT")
    outcome = await _grant_everything(gateway, run.id, f":{limit} 2.5", olga)
    assert outcome.startswith("executed"), outcome
    (unit,) = classify(f"{limit} 2.5", "dl3021").units
    assert unit.channel == 1 and unit.canonical == f"{limit} 2.5,(@1)"
    with own_port(load_sim.resource_name) as panel:
        assert Decimal(panel.query(f"{limit}?")) == Decimal("2.5")
        assert panel.query("SYST:ERR?").startswith("0,")
