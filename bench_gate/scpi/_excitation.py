"""A reading that excites: a meter's ``READ?``, ``INIT`` or ``*TRG`` measures with whatever
function is configured now, and when that function drives current into the DUT
(resistance 2- and 4-wire, continuity, diode, capacitance, temperature with an RTD or a
thermistor), so does the reading. Such a reading is ``excites``, held like ``CONF:RES``.

A profile's forms say which headers make the meter measure (``measures: true``), and its
``excitation`` section how to ask which function is configured and which functions drive
the DUT. Instrument knowledge, all of it::

    excitation:
      query: "FUNC?"                    # answers "VOLT", "RES", ...
      passive: [VOLT, "VOLT:AC", CURR]  # measure without driving the DUT
      excites: {RES: "a DC test current ..."}
      then:                             # a function that excites depending on a setting
        TEMP: {query: "TEMP:TRAN:TYPE?", passive: [TC], excites: {RTD: "..."}}

The gateway asks the instrument on the same lane turn as the reading, before it sends it,
and keeps no cache: the function can change from the front panel, which no cache of the
gateway's writes would see. It fails closed (default deny): only an answer that is exactly
one function the profile lists as passive passes; anything else (one it lists as exciting,
one it does not know, several words, an empty answer or garbage, and, in the gateway, no
answer in time) counts as exciting.

    >>> import asyncio
    >>> from bench_gate.scpi import classify, get_profile
    >>> async def meter(query: str) -> str:
    ...     return {"FUNC?": '"RES"'}[query]
    >>> asyncio.run(applied(get_profile("34465a").model.excitation, meter))[:17]
    'a DC test current'
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, field_validator

if TYPE_CHECKING:
    from ._profile import Profile
    from .units import Classification

__all__ = ["ExcitationSpec", "Excites", "applied", "as_exciting", "check_excitation",
           "excitation_now", "function_word", "measures_now", "measuring", "unanswered"]

#: Asks the instrument one query and returns its answer (the lane's link, in the gateway).
Query = Callable[[str], Awaitable[str]]


class ExcitationSpec(BaseModel):
    """How to ask a meter which function it measures with, and what each one applies."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: A read query of the profile whose answer names the function (``FUNC?``, ``CONF?``).
    query: str
    #: Functions, as the query names them, that measure without driving the DUT.
    passive: tuple[str, ...] = ()
    #: Functions that drive the DUT, each with what the meter applies.
    excites: dict[str, str] = Field(default_factory=dict)
    #: Functions whose excitation depends on another setting, asked next.
    then: dict[str, ExcitationSpec] = Field(default_factory=dict)

    @field_validator("query")
    @classmethod
    def _query(cls, v: str) -> str:
        if not v.endswith("?"):
            raise ValueError(f"expected a query ending in '?', got {v!r}")
        return v

    @field_validator("passive")
    @classmethod
    def _upper(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(w.upper() for w in v)

    @field_validator("excites", "then")
    @classmethod
    def _upper_keys(cls, v: dict[str, object]) -> dict[str, object]:
        return {k.upper(): value for k, value in v.items()}


class Excites(Exception):
    """A reading found the meter's function driving the DUT before anything was sent."""

    def __init__(self, applies: str) -> None:
        super().__init__(applies)
        self.applies = applies


#: One function as ``FUNC?`` names it: mnemonics joined by ':' (``VOLT:AC``), nothing else.
FUNCTION = re.compile(r"[A-Za-z0-9]+(?::[A-Za-z0-9]+)*", re.ASCII)


def function_word(answer: str) -> str | None:
    """The one function an answer names, upper case (``"volt:ac"`` -> ``VOLT:AC``), or None
    when it names no single function: ``"VOLT RES"``, ``"VOLT;RES"``, ``""``, garbage.
    Reading only a first word would let ``"VOLT RES"`` pass as VOLT."""
    text = answer.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':  # IEEE 488.2 §8.7.8 string response
        text = text[1:-1].strip()
    return text.upper() if FUNCTION.fullmatch(text) else None  # ASCII: nothing folds into one


def unanswered(spec: ExcitationSpec, why: str) -> str:
    """What a reading applies when the meter did not say which function it measures with."""
    return (f"whatever the function configured now applies: the meter gave no answer to "
            f"{spec.query} ({why}), so it may drive current into the DUT")


async def applied(spec: ExcitationSpec, query: Query) -> str | None:
    """What a measurement drives into the DUT now: None for a passive function, else the
    profile's words; for a function the profile does not know, words that say so."""
    answer = await query(spec.query)
    word = function_word(answer)
    if word is not None and word in spec.then:
        return await applied(spec.then[word], query)
    if word is not None and word in spec.passive:
        return None
    if word is not None and word in spec.excites:
        return spec.excites[word]
    return (f"whatever the function {answer.strip()[:60]!r} (its answer to {spec.query}) "
            "applies: the profile does not know it as one passive function, so it may drive "
            "current into the DUT")


async def excitation_now(spec: ExcitationSpec, query: Query) -> str | None:
    """:func:`applied`, failing closed when the meter gives no answer in time (or the link
    fails): the function configured now is then unknown, so counted as exciting."""
    from ..errors import InstrumentError

    try:
        return await applied(spec, query)
    except InstrumentError as exc:
        return unanswered(spec, exc.message)


def measures_now(profile: Profile, canonical: str) -> bool:
    """The canonical unit makes the meter measure with the function configured now."""
    form = profile.form_of(canonical)
    return form is not None and form.measures


def measuring(c: Classification) -> bool:
    """True when a unit makes the meter measure with the function configured now."""
    return any(u.measures for u in c.units)


def as_exciting(c: Classification, applies: str) -> Classification:
    """``c`` with every measuring unit made ``excites``, saying what the meter applies."""
    from ._schema import Effect

    units = tuple(dataclasses.replace(u, effect=Effect.EXCITES, note=applies) if u.measures
                  else u for u in c.units)
    return dataclasses.replace(c, units=units)


def check_excitation(profile: Profile) -> None:
    """Refuse an excitation section the gateway could not use: every query it asks must be a
    read of the profile, and a profile whose forms measure must say how to ask."""
    from ._schema import Effect, ProfileError

    spec = profile.model.excitation
    measures = [c.header for c in profile.model.commands
                for f in (c.set, c.query) if f is not None and f.measures]
    if spec is None:
        if measures:
            raise ProfileError(f"{profile.name}: {measures[0]} measures, but the profile has "
                               "no excitation section to ask which function is configured")
        return
    pending = [spec]
    while pending:
        step = pending.pop()
        form = profile.form_of(step.query)
        if form is None or form.effect is not Effect.READ:
            found = "not in the profile" if form is None else f"effect {form.effect.value}"
            raise ProfileError(f"{profile.name}: excitation query {step.query!r} must be a "
                               f"read of the profile, found {found}")
        both = sorted(set(step.passive) & (set(step.excites) | set(step.then)))
        if both:
            raise ProfileError(f"{profile.name}: excitation lists {', '.join(both)} as passive "
                               "and as exciting")
        pending.extend(step.then.values())
