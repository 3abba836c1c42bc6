"""Checking a profile (``bench-gate profile check``) and walking its queries against an
instrument or a simulator (``bench-gate profile test``). docs/profiles.md explains both.

The checks read the profile only. The walk sends each read-only query (and, with
``passing=True``, every query the profile lets pass) through one callable, so the CLI hands
it a pyvisa resource and the tests anything else.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from .config import ChannelLimits
from .scpi import Effect, Profile, ProfileError, ScpiError, classify, get_profile
from .scpi._examples import PASSING, Example, query_examples
from .scpi._patterns import canonical_header

__all__ = ["Finding", "Level", "Report", "Unanswered", "check_profile", "walk_queries"]


class Level(enum.Enum):
    ERROR = "error"  # the profile is wrong: the gateway would misjudge a command
    WARNING = "warning"  # worth a look: a script or a reviewer may miss something


@dataclass(frozen=True, slots=True)
class Finding:
    level: Level
    header: str  # the header pattern concerned, or "" for the whole profile
    message: str

    def __str__(self) -> str:
        where = f"{self.header}: " if self.header else ""
        return f"{self.level.value}: {where}{self.message}"


@dataclass
class Report:
    path: str
    profile: Profile | None = None
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(f.level is Level.ERROR for f in self.findings)

    def add(self, level: Level, header: str, message: str) -> None:
        self.findings.append(Finding(level, header, message))


#: IEEE 488.2 §4.1.1 mandatory common commands, and the SCPI-99 Vol. 1 §4.2.1 required
#: ones: (header as a client sends it, whether it is a query).
MANDATORY = (("*CLS", False), ("*ESE", False), ("*ESE", True), ("*ESR", True), ("*IDN", True),
             ("*OPC", False), ("*OPC", True), ("*RST", False), ("*SRE", False), ("*SRE", True),
             ("*STB", True), ("*TST", True), ("*WAI", False), ("SYST:ERR", True),
             ("SYST:VERS", True), ("STAT:OPER", True), ("STAT:OPER:COND", True),
             ("STAT:OPER:ENAB", False), ("STAT:OPER:ENAB", True), ("STAT:QUES", True),
             ("STAT:QUES:COND", True), ("STAT:QUES:ENAB", False), ("STAT:QUES:ENAB", True),
             ("STAT:PRES", False))
#: Meter functions that drive current or voltage into the DUT (docs/scpi.md, "Meters").
EXCITING = re.compile(r"^(CONF|MEAS)(:SCAL)?:(RES|FRES|CONT|DIOD|CAP)$")
#: Headers that make a meter measure with the function configured now: they excite whenever
#: that function does (scpi/_excitation.py). Queries: READ?, MEAS? with no function, an
#: acquire. Commands: *TRG, INIT, TRIG (SCPI-99 Vol. 2 §24.2 TRIGger[:IMMediate]), a
#: buffer's trigger (DMM6500 :TRACe:TRIGger), any acquire (<function>:RELative:ACQuire,
#: CALCulate:...:ACQuire), any ONCE (AZERo:ONCE) and auto-zero (its ONCE takes a reading).
MEASURING_QUERY = re.compile(r"^(READ|MEAS)$|(^|:)ACQ$")
#: A command that clears a latched protection (``OUTP:PROT:CLE``, ``VOLT:PROT:CLE``, the
#: DP832's ``OUTP:OVP:CLE``): it may switch the output back on.
CLEARING = re.compile(r"(PROT|OVP|OCP)(:\w+)*:CLE$")
MEASURING_SET = re.compile(r"^(\*TRG|INIT(:IMM)?|TRIG(:IMM)?|TRAC:TRIG)$"
                           r"|(^|:)(ACQ|ONCE|ZERO:AUTO)$")


def check_profile(path: str) -> Report:
    """Load ``path`` and report what is missing or inconsistent."""
    report = Report(path)
    try:
        profile = get_profile(path)
    except ProfileError as exc:
        report.add(Level.ERROR, "", str(exc))
        return report
    report.profile = profile
    _check_mandatory(profile, report)
    _check_forms(profile, report)
    _check_kind(profile, report)
    _check_envelope(profile, report)
    _check_clears(profile, report)
    _check_link(profile, report)
    if not profile.model.identity:
        report.add(Level.WARNING, "", "no identity: the start of the instrument's *IDN? "
                   "answer, which tells a wrong instrument on the resource")
    if profile.complete and not profile.model.source:
        report.add(Level.WARNING, "", "complete, but no source: name the manual (and its "
                   "revision) the command set was taken from")
    return report


def _known(profile: Profile, header: str, query: bool) -> bool:
    try:
        units = classify(header + ("?" if query else ""), profile.name, selected=(
            profile.channels[0] if profile.channels else None)).units
    except ScpiError as exc:
        return exc.code not in (-113,)  # known, with parameters it needs (-109)
    return all(u.effect is not Effect.UNKNOWN for u in units)


def _check_mandatory(profile: Profile, report: Report) -> None:
    lacks = set(profile.model.lacks)  # the manual says the instrument has none of these
    missing = [h + ("?" if q else "") for h, q in MANDATORY
               if not _known(profile, h, q) and h + ("?" if q else "") not in lacks]
    if missing:
        level = Level.ERROR if profile.complete else Level.WARNING
        report.add(level, "", "missing the IEEE 488.2 and SCPI-99 mandatory "
                   f"{', '.join(missing)}" + ("; a complete profile refuses them (-113)"
                                              if profile.complete else "; they are held"))
    cls = profile.lookup(True, ("CLS",))
    if cls is not None and cls.command.set is not None and not cls.command.set.local:
        report.add(Level.WARNING, "*CLS", "not local: sent, it clears every client's error "
                   "queue (docs/scpi.md, 'IEEE 488.2 status commands')")


def _check_forms(profile: Profile, report: Report) -> None:
    seen: dict[str, str] = {}
    for command in profile.model.commands:
        head = command.header
        canonical = canonical_header(command)
        if canonical in seen and seen[canonical] != head:
            report.add(Level.WARNING, head, f"renders as {canonical}, like {seen[canonical]}: "
                       "give one of them a canonical of its own")
        seen.setdefault(canonical, head)
        cmd, query = command.set, command.query
        for form in (cmd, query):
            if form is None:
                continue
            for p in form.params:
                if p.type == "number" and p.field is not None:
                    lacking = [ch for ch in profile.channels
                               if profile.range_of(p.field, ch) is None]
                    if lacking and profile.channels:
                        report.add(Level.ERROR, head, f"{p.name} takes the field {p.field!r}, "
                                   f"which has no range on channel(s) "
                                   f"{', '.join(map(str, lacking))}: MIN, MAX and the bench's "
                                   "limits cannot be judged")
            if form.channel == "list" and profile.channels and not profile.model.select_query \
                    and profile.addressing is None:  # addressing: a connection's default
                report.add(Level.WARNING, head, "channel: list without a select_query: a "
                           "message with no (@...) cannot learn the selected channel")
        if cmd is not None and query is not None:
            # Under addressing, a selection is set by name or number and read per connection.
            by_selection = cmd.effect is Effect.SELECT and profile.addressing is not None
            if cmd.channel != query.channel and "none" not in (cmd.channel, query.channel) \
                    and not by_selection:
                report.add(Level.ERROR, head, f"the command names its channel by "
                           f"{cmd.channel}, the query by {query.channel}")
            if query.effect not in PASSING and query.effect is not Effect.FORBIDDEN:
                report.add(Level.WARNING, head, f"the query is {query.effect.value}: a script "
                           "reading this setting back waits for a person")
        # A field read from a register's bit is read back by the register (SYST:STAT?).
        by_bit = cmd is not None and cmd.field is not None and bool(
            profile.fields[cmd.field].bits)
        if cmd is not None and query is None and cmd.effect in (
                Effect.SETPOINT, Effect.PROTECTION, Effect.OUTPUT) and cmd.params \
                and not by_bit:
            report.add(Level.WARNING, head, f"a {cmd.effect.value} with no query: nobody can "
                       "read it back")
        if query is not None and query.effect is Effect.READ and query.expand:
            for template in query.expand:
                if "?" not in template:
                    report.add(Level.ERROR, head, f"a read expands to {template!r}, which "
                               "is no query")


def _check_kind(profile: Profile, report: Report) -> None:
    kind = profile.kind
    if kind in ("supply", "load", "smu"):
        if profile.safe_action is None:
            report.add(Level.ERROR, "", f"a {kind} without a safe_action: a channel read back "
                       "outside the envelope could not be made safe")
        energizing = [c.header for c in profile.model.commands
                      if c.set is not None and c.set.effect is Effect.OUTPUT]
        if not energizing:
            report.add(Level.ERROR, "", f"a {kind} with no output form: its output (or input) "
                       "on/off must be effect: output")
    if kind == "meter" and profile.safe_action is not None:
        report.add(Level.WARNING, "", "a meter with an output's safe_action: a meter has no "
                   "outputs (its safe_action is a command alone, a passive function)")
    if profile.model.excitation is not None and profile.model.safe_action is None:
        report.add(Level.WARNING, "", "a meter with exciting functions and no safe_action: "
                   "an emergency stop leaves it driving its test current into the DUT")
    if kind == "meter" or profile.model.excitation is not None:
        for command in profile.model.commands:
            for form, measuring in ((command.set, MEASURING_SET),
                                    (command.query, MEASURING_QUERY)):
                if form is None:
                    continue
                canonical = form.canonical or canonical_header(command)
                if EXCITING.match(canonical) and form.effect is not Effect.EXCITES:
                    report.add(Level.ERROR, command.header, f"{canonical} drives current into "
                               f"the DUT, but its effect is {form.effect.value}, not excites")
                if measuring.search(canonical) and not form.measures \
                        and form.effect in PASSING:
                    report.add(Level.ERROR, command.header, f"{canonical} takes a measurement "
                               "with the function configured now, but is not measures: true: "
                               "it would pass while that function drives current into the DUT")


def _check_link(profile: Profile, report: Report) -> None:
    """How the instrument is reached: on a profile that is not complete, a header of its
    interface set-up left out is held, and one approval could cut the gateway off
    (``forbidden_under``); a subtree must not swallow a mandatory command."""
    if not profile.complete and not profile.model.forbidden_under and profile.kind != "other":
        report.add(Level.WARNING, "", "not complete and no forbidden_under: a header of the "
                   "instrument's network or interface set-up left out is held, and an "
                   "approved one cuts the gateway off (docs/profiles.md)")
    for header, query in MANDATORY:
        words = tuple(header.lstrip("*").split(":"))
        inside = None if query or header.startswith("*") else profile.forbidden_under(words)
        if inside is not None:
            report.add(Level.ERROR, header, f"under forbidden_under {inside}: a mandatory "
                       "command would be refused")


def _check_clears(profile: Profile, report: Report) -> None:
    """A protection clear brings the output back as it was before the trip (Keysight,
    OUTPut:PROTection:CLEar), at the levels the channel holds then: a supply's clear that
    does not say ``revives`` would be judged on the channel as it reads, off."""
    if profile.kind not in ("supply", "load", "smu"):
        return
    for command in profile.model.commands:
        form = command.set
        if form is None or form.effect is Effect.FORBIDDEN or form.revives:
            continue
        if CLEARING.search(form.canonical or canonical_header(command)):
            report.add(Level.ERROR, command.header, "clears a protection trip, which may "
                       "switch the output back on, but is not revives: true: the gateway "
                       "would judge the channel as it reads now, off")


def _check_envelope(profile: Profile, report: Report) -> None:
    """A setpoint bounds what reaches the DUT (a level, a limit), so a bench limit must
    apply to its field: its name is an envelope key, or its ``envelope`` names one. A field
    outside every key would let the output leave the envelope through it (an SMU's current
    level and voltage limit while it sources current)."""
    keys = set(ChannelLimits.model_fields)
    for command in profile.model.commands:
        form = command.set
        if form is None or form.effect is not Effect.SETPOINT:
            continue
        names = {form.field, *(p.field for p in form.params)} - {None}
        for name in sorted(n for n in names if n is not None):
            spec = profile.fields.get(name)
            if spec is not None and spec.type == "number" and profile.limit_of(name) not in keys:
                report.add(Level.ERROR, command.header, f"sets {name!r}, which bounds what "
                           "reaches the DUT, but no envelope limit applies to it: give the "
                           f"field envelope: one of {', '.join(sorted(keys))}")


@dataclass(frozen=True, slots=True)
class Unanswered:
    example: Example
    answer: str | None
    error: str | None

    def __str__(self) -> str:
        if self.answer is None:
            why = f"no answer ({self.error})" if self.error else "no answer"
        else:
            why = f"answered {self.answer[:40]!r}, but the instrument reported {self.error}"
        return f"{self.example.message}: {why}"


#: One query to the instrument: its answer, or None if none came (a timeout).
Ask = Callable[[str], "str | None"]


def walk_queries(profile: Profile, ask: Ask, *, passing: bool = False,
                 selected: int | None = None) -> tuple[int, list[Unanswered]]:
    """Send every read-only query of ``profile`` (every passing one with ``passing``) through
    ``ask``, then ``SYST:ERR?`` when the profile has it. Returns how many were sent and
    those that went unanswered or made the instrument report an error. Only reads are sent
    by default: ``MEAS?`` on a meter reconfigures it."""
    effects = PASSING if passing else frozenset({Effect.READ})
    error_queue = profile.lookup(False, ("SYSTEM", "ERROR")) is not None
    sent = 0
    bad: list[Unanswered] = []
    channel = selected if selected is not None else (
        profile.channels[0] if profile.channels else None)
    for example in query_examples(profile, effects):
        try:
            units = classify(example.message, profile.name, selected=channel).units
        except ScpiError as exc:
            bad.append(Unanswered(example, None, f"the profile refuses it: {exc}"))
            continue
        if not {u.effect for u in units} <= effects:
            continue  # MEAS:TEMP? with an RTD probe excites: never sent by a walk
        sent += 1
        answer = ask(example.message)
        error = None
        if error_queue:
            reported = ask("SYST:ERR?")
            if reported is None or not reported.strip().lstrip("+").startswith("0"):
                error = reported or "no answer to SYST:ERR?"
        if answer is None or error is not None:
            bad.append(Unanswered(example, answer, error))
    return sent, bad
