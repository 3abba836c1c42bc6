"""A meter's safe action: a meter has no output to switch off, but a function that excites
(resistance, continuity, diode, capacitance, an RTD) drives a test current into the DUT.
Its profile's ``safe_action`` (a command alone, scpi ``MeterSafeSpec``) aborts a measurement
in progress and selects a passive function; the read-back is the profile's excitation query
(scpi/_excitation.py), failing closed: only an answer the spec calls passive shows it safe.
Sent is not done, as for an output: anything else is an error, tried again by the hold.
"""

from __future__ import annotations

import contextlib

from .core import Instrument
from .errors import InstrumentError
from .instruments import AsyncLink
from .lockstep import in_step_twice
from .scpi import Profile, classify, excitation_now

__all__ = ["make_passive", "passive_now"]


async def passive_now(link: AsyncLink, profile: Profile, inst: Instrument | None = None
                      ) -> tuple[dict[str, str], str | None]:
    """What the meter measures with now, asked on one connection: (each query's answer,
    None when passive, else what it may drive into the DUT, in words). An answer out of step
    (with ``inst``), or none, proves nothing: not passive."""
    spec = profile.model.excitation
    if spec is None:  # a profile check refuses it: nothing could show it passive
        return {}, "the profile has no excitation query to show its function passive"
    asked: dict[str, str] = {}

    async def query(q: str) -> str:
        try:
            asked[q] = await link.query(q)
        except InstrumentError:
            if inst is not None:  # never the next query's answer
                await inst.lane.drop()
            raise
        return asked[q]

    with inst.lane.one_connection() if inst is not None else contextlib.nullcontext():
        found = await excitation_now(spec, query)
        if found is None and inst is not None:
            try:  # "passive" read out of step proves nothing
                await in_step_twice(link, inst)
            except InstrumentError as exc:
                found = f"its read-back is no proof: {exc.message}"
    return asked, None if found is None else f"the meter may drive the DUT: {found}"


async def make_passive(link: AsyncLink, profile: Profile, inst: Instrument | None = None
                       ) -> tuple[list[str], dict[str, str], list[str]]:
    """The meter's safe action, every unit tried even after one fails, then read back:
    (sent, read back, errors), as ``safety.send_safe_action`` for an output."""
    safe = profile.meter_safe
    sent: list[str] = []
    errors: list[str] = []
    if safe is None:
        return sent, {}, errors
    for unit in classify(safe.command, profile.name).units:
        try:
            await link.write(unit.canonical)
            sent.append(unit.canonical)
        except InstrumentError as exc:
            errors.append(exc.message)
    read, why = await passive_now(link, profile, inst)
    if why is not None:
        errors.append(f"the safe action was sent, but {why}")
    return sent, read, errors
