"""The read path: canonical units run on an instrument's lane, and a repeated read's
shortcut.

A read is what a busy bench does most, and most reads repeat: a script polls the same
``MEAS:VOLT? (@1)`` thousands of times. What intake works out for a message before it runs
(door-only screen, classification, decision) depends only on the message, the run's
selected channel, the instrument's profile, the bench's envelope and policy, so a read that
passed is kept as a :class:`ReadPlan` with its journal text half made. The next identical
read on that instrument, with the same selection and nothing else attached to it
(rationale, confidence, step, idempotency key, timeout), runs from the plan. What can change
between two reads is checked every time as before: the run (known and not closed), the
reading's timing, what the meter's function applies (asked on the lane's turn), the
instrument lock, and the journal record written before the answer leaves. A message held
for a person has its readings asked about on a lane turn of their own (:func:`excites_now`).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime

from .core import Instrument
from .errors import InstrumentError
from .instruments import AsyncLink
from .policy import unpredictable
from .scpi import Classification, Effect, Excites, Unit, excitation_now, unanswered
from .store import ReadRow, ReadTemplate

__all__ = ["PLANS_KEPT", "SELECT_NAME_QUERY", "ReadPlan", "ReadPlans", "excites_now",
           "join_answers", "run_plan", "run_units"]

#: The channel-name form of the selection query (``INST:SEL?`` answers ``CH2``).
SELECT_NAME_QUERY = "INST:SEL?"
#: Read plans kept at most (then they are all dropped and made again as reads come).
PLANS_KEPT = 4096


def join_answers(units: list[Unit], answers: dict[int, str]) -> str:
    """IEEE 488.2 §8.4.1: ',' joins the parts of one unit's answer, ';' joins units."""
    groups: dict[int, list[str]] = {}
    for i, unit in enumerate(units):
        if i in answers:
            groups.setdefault(unit.source, []).append(answers[i])
    return ";".join(",".join(parts) for parts in groups.values())


async def run_units(inst: Instrument, units: list[Unit], selected: int | None = None, *,
                    read_only: bool = False) -> str:
    """Send canonical units in order on the lane; selections are per run, never sent,
    so a selection query is answered from the run's selection, not the instrument's."""
    nsel = inst.profile.model.select_query
    # A reading measures with the meter's function now: ask it first (scpi/_excitation).
    excitation = inst.profile.model.excitation if any(u.measures for u in units) else None

    async def job(link: AsyncLink) -> dict[int, str]:
        with inst.lane.one_connection() if excitation is not None else nullcontext():
            return await units_on(link)

    async def units_on(link: AsyncLink) -> dict[int, str]:
        if excitation is not None:  # asked on this turn: no cache, the panel may change it
            found = await excitation_now(excitation, link.query)
            if found is not None:
                raise Excites(found)
        current = selected
        answers: dict[int, str] = {}
        for i, unit in enumerate(units):
            if unit.effect is Effect.SELECT:
                if unit.channel is not None:
                    current = unit.channel
                continue
            if unit.local:  # *CLS: the instrument's status is every client's; the
                continue    # door clears its own connection's view (IEEE 488.2 §10.3)
            if unit.query and current is not None and nsel and unit.canonical in (
                    nsel, SELECT_NAME_QUERY):
                answers[i] = str(current) if unit.canonical == nsel else f"CH{current}"
                continue
            if unit.query:
                answers[i] = await link.query(unit.canonical, inst.extra_seconds(unit))
            else:
                await link.write(unit.canonical)
            inst.ran(unit)  # what it set decides how long the next reading may take
        return answers
    return join_answers(units, await inst.lane.run(job, whole=not read_only))


async def run_plan(inst: Instrument, plan: ReadPlan, selected: int | None) -> str:
    """A kept read's units on the lane: what :func:`run_units` does for them, with what it
    works out from the units alone (which to send, whether one measures) worked out once,
    when the plan was kept. The excitation check, each query's timeout, what a unit set
    (``Instrument.ran``) and the lane's turn with its instrument lock are as there."""
    if not plan.plain:
        return await run_units(inst, plan.units, selected, read_only=True)
    units = plan.units
    excitation = inst.profile.model.excitation if plan.measures else None

    async def job(link: AsyncLink) -> list[str]:
        answers = []
        if excitation is None:
            for unit in units:
                answers.append(await link.query(unit.canonical, inst.extra_seconds(unit)))
                inst.ran(unit)
            return answers
        # The function asked stands for the connection it was asked on: a meter that
        # restarts in between measures with another one on a new connection (kept_to).
        with inst.lane.one_connection():
            found = await excitation_now(excitation, link.query)  # asked on this turn
            if found is not None:
                raise Excites(found)
            for unit in units:
                answers.append(await link.query(unit.canonical, inst.extra_seconds(unit)))
                inst.ran(unit)
        return answers
    answers = await inst.lane.run(job, whole=False)
    return answers[0] if len(answers) == 1 else join_answers(
        units, dict(enumerate(answers)))


async def excites_now(inst: Instrument, c: Classification) -> str | None:
    """What a held message's readings would drive into the DUT with the function
    configured now, asked on a lane turn of its own; None when none measures unshown."""
    excitation = inst.profile.model.excitation
    if excitation is None or not any(u.measures and u.effect is not Effect.EXCITES
                                     for u in c.units):
        return None
    for u in c.units:  # a recall or an unknown header first: the function it leaves
        if u.measures:  # is not the one the meter answers now (default deny)
            break
        if unpredictable(u.effect, u.value):
            return (f"whatever function the meter measures with after {u.canonical}, which "
                    "the gateway cannot predict: it may drive current into the DUT")
    spec = excitation

    async def job(link: AsyncLink) -> str | None:
        return await excitation_now(spec, link.query)
    try:
        return await inst.lane.run(job, whole=False)
    except InstrumentError as exc:  # the lane's link is down: unknown counts as exciting
        return unanswered(spec, exc.message)


def plain_reads(inst: Instrument, units: list[Unit]) -> bool:
    """Every unit a query sent as it is: none selects a channel, none is the gateway's own
    (``local``), none is a selection query answered from the run's selection."""
    nsel = inst.profile.model.select_query
    return all(u.query and u.effect is not Effect.SELECT and not u.local
               and u.canonical not in (nsel, SELECT_NAME_QUERY) for u in units)


@dataclass(frozen=True, slots=True)
class ReadPlan:
    """A read that passed, as intake worked it out, with what it was worked out from."""

    classification: Classification
    units: list[Unit]
    profile: object
    limits: object
    policy: object
    #: What ``command_received`` holds, and the two events' journal text but the times
    #: and the answer.
    received: dict[str, str | float | list[str] | None]
    journal: ReadTemplate
    #: Every unit a plain query (:func:`plain_reads`): run by :func:`run_plan`'s own job.
    plain: bool = False
    #: Some unit takes a reading: the meter's function is asked on the lane's turn.
    measures: bool = False

    def rows(self, run_id: str, received_at: datetime, executed_at: datetime,
             response: str) -> list[ReadRow]:
        return self.journal.rows(run_id, received_at, executed_at, response)


class ReadPlans:
    """Read plans by (instrument, message, the run's selected channel, origin)."""

    def __init__(self) -> None:
        self._plans: dict[tuple[str, str, int | None, str], ReadPlan] = {}

    def get(self, inst: Instrument, message: str, selected: int | None, origin: str,
            limits: object, policy: object) -> ReadPlan | None:
        """The plan, if one was kept under the same profile, envelope and policy."""
        plan = self._plans.get((inst.config.name, message, selected, origin))
        if plan is None or plan.profile is not inst.profile or plan.limits is not limits \
                or plan.policy is not policy:
            return None
        return plan

    def keep(self, inst: Instrument, message: str, selected: int | None, origin: str,
             c: Classification, limits: object, policy: object,
             received: dict[str, str | float | list[str] | None]) -> None:
        if len(self._plans) >= PLANS_KEPT:
            self._plans.clear()
        units = list(c.units)
        self._plans[(inst.config.name, message, selected, origin)] = ReadPlan(
            c, units, inst.profile, limits, policy, dict(received),
            ReadTemplate(received, message, list(c.canonical)),
            plain_reads(inst, units), any(u.measures for u in units))
