"""Resolve lexed units against a profile, type their parameters, and render canonical SCPI.

Every unit of the result is *atomic and canonical*: one header, at most one channel, at most
one state field, rendered by the gateway itself. ``APPL CH1,5,0.1`` becomes two units
(``VOLT 5.0,(@1)`` and ``CURR 0.1,(@1)``); ``VOLT 5,(@1,2)`` becomes one per channel; a
selection form (``VOLT 5`` after ``INST:NSEL 2``) gets an explicit channel list.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from decimal import Decimal

from ._errors import ScpiError, ScpiExecutionError, ScpiSyntaxError
from ._headers import HeaderResolver
from ._lexer import CACHE_MAX_MESSAGE, ChannelList, CharData, Data, RawUnit, lex
from ._patterns import canonical_header, canonical_with_suffix
from ._profile import Profile, get_profile
from ._schema import CommandSpec, Effect, FormSpec, ParamSpec, ProfileError
from ._separators import check_data, check_rendering, check_wire
from .units import Classification, Unit, Value, render_param

__all__ = ["classify", "classify_uncached", "is_read_only"]

RE_PLACEHOLDER = re.compile(r"\{(\w+)\}")
#: An expansion template's channel list, dropped when the selection names the channel.
RE_CHANNEL_LIST = re.compile(r",?\s*\(@\{ch\}\)")
#: Expansions within expansions a profile may nest (APPL -> VOLT is one).
MAX_EXPANSION = 4
#: Common commands that redefine what other headers mean to the instrument: a macro
#: (IEEE 488.2 §10.7 *DMC, enabled by §10.10 *EMC) expands wherever its label appears, a
#: device header's included (§10.7.6: ``*DMC "DISP:CLE",#0OUTP ON`` makes a harmless header
#: switch an output on), and *DDT (§10.4) says what a trigger does. After one, no unit's
#: meaning could be known: refused on every profile, whatever the profile lists.
REDEFINERS = frozenset({"DMC", "EMC", "DDT"})


def _magnitude(value: Value) -> Decimal:
    return abs(value) if isinstance(value, Decimal) else Decimal(0)


class _Resolver(HeaderResolver):
    """Classifies one message against one profile; holds the selection (and, as a
    HeaderResolver, the header path)."""

    def __init__(self, message: str, profile: Profile, selected: int | None,
                 depth: int = 0) -> None:
        super().__init__(message, profile)
        #: How many expansions deep this message is: a profile's expansion that names its
        #: own header again would never end.
        self.depth = depth
        if selected is None and profile.addressing is not None:
            selected = profile.addressing.default  # never the instrument's own selection
        self.selected = selected
        #: After a recall (``reselects: recalled``): the instrument's selection is the one
        #: the recalled state holds, unknown until it ran (``selected`` is None then).
        self.recalled = False

    def selection(self, pos: int) -> int | None:
        """The selected channel, for a unit that names none. After a recall it is the one
        the recalled state holds, known only once the recall ran: refused, never guessed."""
        if self.recalled:
            spec = self.profile.addressing
            select = spec.select.format(ch="<n>") if spec is not None and spec.select else ""
            raise self.err(ScpiExecutionError, -221, "settings conflict: after the recall "
                           "the selected output is the one the recalled state holds, known "
                           "only once it has run; name the output first"
                           + (f" ({select})" if select else "") + ", or send this in a "
                           "message after the recall", pos)
        return self.selected

    def run(self) -> Classification:
        out: list[Unit] = []
        for raw in lex(self.message):
            out.extend(self.unit(raw))
        return Classification(self.message, self.profile.name, tuple(out), self.selected)

    def unit(self, raw: RawUnit) -> list[Unit]:
        self.numbered = None
        if raw.common and not raw.query and raw.mnemonics[0] in REDEFINERS:
            check_data(self, raw, None)
            unit = dataclasses.replace(self.unknown(raw, "*" + raw.mnemonics[0]),
                                       effect=Effect.FORBIDDEN)
            check_rendering(self, raw, unit, False)
            return [unit]
        resolved = self.resolve(raw)
        if isinstance(resolved, str):
            check_data(self, raw, None)  # an unknown header never gets the opt-in
            if not raw.query and self.profile.forbidden_under(self.words) is not None:
                # How the instrument is reached: never held, whatever the header.
                unit = dataclasses.replace(self.unknown(raw, resolved),
                                           effect=Effect.FORBIDDEN)
                check_rendering(self, raw, unit, False)
                return [unit]
            if self.profile.complete:
                raise self.undefined(raw, resolved)
            units = [self.unknown(raw, resolved)]
            allow = False
        else:
            command, form, suffix_channel = resolved
            check_data(self, raw, form)
            units = self.known(raw, command, form, suffix_channel)
            allow = form.separators_in_data
        for u in units:
            check_rendering(self, raw, u, allow)
            check_wire(self, raw, u)
        return units

    def known(
        self, raw: RawUnit, command: CommandSpec, form: FormSpec, suffix_channel: int | None
    ) -> list[Unit]:
        if form.effect is Effect.FORBIDDEN:
            # Refused whatever its parameters: never worth validating them.
            unit = self.unknown(raw, canonical_header(command))
            return [dataclasses.replace(unit, effect=Effect.FORBIDDEN)]
        params = list(raw.params)
        channels: list[int | None]
        if form.channel == "list":
            if params and isinstance(params[-1], ChannelList):
                listed = params.pop()
                assert isinstance(listed, ChannelList)
                channels = list(listed.channels)
                for ch in channels:
                    self.check_channel(ch, listed.pos)
            else:
                channels = [self.selection(raw.start)]
                self.check_channel(self.selected, raw.start)
        elif form.channel == "every":  # one unit per channel: each is judged as its own
            channels = list(self.profile.channels) or [None]
        elif form.channel == "suffix":
            # SCPI-99 Vol. 1 §6.2.5: no suffix is suffix 1; an instrument that addresses by
            # selection (DP800 guide, :SOURce[<n>]) means its selected channel instead.
            bare = self.selection(raw.start) if self.profile.addressing is not None else 1
            channels = [suffix_channel if suffix_channel is not None else bare]
            self.check_channel(channels[0], raw.start)
            if command.suffixes and channels[0] not in command.suffixes:  # SPD3303X: CH1, CH2
                raise self.err(ScpiSyntaxError, -114, f"{command.header} takes the suffixes "
                               f"{', '.join(map(str, command.suffixes))}, not {channels[0]}",
                               raw.start)
        else:
            channels = [None]
        specs = form.params
        if specs and specs[0].optional and specs[0].name == form.channel_param and not (
                params and isinstance(params[0], CharData)
                and params[0].text in self.profile.channel_names):
            specs = specs[1:]  # [CH1|CH2|CH3,]ON|OFF: the channel left out (DP800 guide)
        more: list[Data] = []  # a repeating last parameter's further values (a list's points)
        if specs and specs[-1].repeat and len(params) > len(specs):
            params, more = params[: len(specs)], params[len(specs) :]
            if 1 + len(more) > specs[-1].repeat:
                raise self.err(ScpiExecutionError, -223, f"{specs[-1].name} takes at most "
                               f"{specs[-1].repeat} values, not {1 + len(more)}",
                               more[specs[-1].repeat - 1].pos)
        if len(params) > len(specs):
            extra = params[len(specs)]
            raise self.err(ScpiSyntaxError, -108, "one parameter too many", extra.pos)
        missing = [s.name for s in specs[len(params) :] if not s.optional]
        if missing:
            raise self.err(ScpiSyntaxError, -109, f"{missing[0]} is missing", raw.end)
        out: list[Unit] = []
        for channel in channels:
            values: dict[str, Value] = {}
            # The channel-naming parameter goes first: the others' ranges depend on it.
            ordered = sorted(zip(specs, params, strict=False),
                             key=lambda sp: sp[0].name != form.channel_param)
            for spec, datum in ordered:
                values[spec.name] = self.convert(spec, datum, channel)
                if spec.name == form.channel_param:
                    channel = int(values[spec.name])
            if form.channel == "param" and form.channel_param not in values:
                channel = self.selection(raw.start)  # APPL? alone: the selected channel's
                if channel is not None and form.channel_param is not None:
                    values[form.channel_param] = channel  # written out, never the panel's
            reach = self.reach(form, values)
            if more:
                last = specs[-1]
                points = [values[last.name], *(self.convert(last, d, channel) for d in more)]
                reach = self.reach(form, {**values, last.name: max(points, key=_magnitude)})
                values[last.name] = ",".join(render_param(last, v) for v in points)
            units = self.emit(raw, command, form, channel, values)
            out.extend(dataclasses.replace(u, reach=reach) if reach else u for u in units)
        return out

    def render(self, spec: ParamSpec, value: Value) -> str:
        """A parameter as this instrument spells it: a channel by its name (``CH1``), a
        boolean in the profile's words (``ON``); anything else as render_param does."""
        if spec.type == "channel_name" and isinstance(value, int) and self.profile.model.channels:
            return self.profile.channel_word(value)
        words = self.profile.model.booleans
        if spec.type == "boolean" and isinstance(value, bool) and words is not None:
            return words[1] if value else words[0]
        return render_param(spec, value)

    @staticmethod
    def reach(form: FormSpec, values: dict[str, Value]) -> tuple[tuple[str, Decimal], ...]:
        """The levels this command stores for a later trigger: for each field its numbers
        name that the form does not set now (``LIST:VOLT``'s points, ``VOLT:TRIG``, a
        sweep's start and stop), the largest magnitude among them."""
        found: dict[str, Decimal] = {}
        for spec in form.params:
            value = values.get(spec.name)
            if spec.field is not None and spec.field != form.field and isinstance(
                    value, Decimal) and not form.expand:
                found[spec.field] = max(found.get(spec.field, Decimal(0)), abs(value))
        return tuple(found.items())

    @staticmethod
    def excitation(form: FormSpec, values: dict[str, Value]) -> str | None:
        """What the unit drives into the DUT, if it does: the form's own words for a form
        that always excites, else those of the value a parameter names."""
        if form.effect is Effect.EXCITES:
            return form.applies
        for spec in form.params:
            value = values.get(spec.name, spec.assumed)
            if spec.excites and isinstance(value, str) and value in spec.excites:
                return spec.excites[value]
        return None

    def emit(
        self,
        raw: RawUnit,
        command: CommandSpec,
        form: FormSpec,
        channel: int | None,
        values: dict[str, Value],
    ) -> list[Unit]:
        if form.expand and self.depth >= MAX_EXPANSION:
            raise self.err(ScpiSyntaxError, -100, f"the profile's expansion of "
                           f"{command.header} does not end", raw.start)
        if form.expand:
            specs = {s.name: s for s in form.params}
            rendered = {k: self.render(specs[k], v) for k, v in values.items()}
            units: list[Unit] = []
            for template in form.expand:
                names = set(RE_PLACEHOLDER.findall(template)) - {"ch"}
                if not names <= rendered.keys():
                    continue  # an optional parameter this form did not get
                if channel is None:  # the selection decides: no channel list at all
                    template = RE_CHANNEL_LIST.sub("", template)
                text = template.format(ch=channel, **rendered)
                resolver = _Resolver(text, self.profile, self.selected, self.depth + 1)
                resolver.selected, resolver.recalled = self.selected, self.recalled
                sub = resolver.run()
                units.extend(dataclasses.replace(u, source=raw.index, position=raw.start,
                                                 text=raw.text) for u in sub.units)
                self.selected, self.recalled = sub.selected, resolver.recalled
            if not units:  # a unit must never vanish from the classification
                missing = next((s.name for s in form.params if s.name not in values), "a value")
                raise self.err(ScpiSyntaxError, -109, f"{missing} is missing", raw.end)
            return units
        header = form.canonical or self.numbered or canonical_header(command)
        if form.channel == "suffix" and channel is not None and form.canonical is None:
            header = canonical_with_suffix(command, channel)  # STAT:QUES:INST:ISUM2:COND
        if raw.query:
            header += "?"
        args = [self.render(s, values[s.name]) for s in form.params if s.name in values]
        if form.channel == "list" and channel is not None:
            args.append(f"(@{channel})")
        canonical = header + (" " + ",".join(args) if args else "")
        value: Value | None = None
        if not raw.query:
            if form.sets is not None:
                value = form.sets
            else:
                value = next((values[s.name] for s in form.params
                              if s.field is not None and s.field == form.field
                              and s.name in values), None)
        if form.effect is Effect.SELECT:
            self.selected, self.recalled = channel, False
        if form.reselects and self.profile.addressing is not None:
            if form.reselects == "recalled":
                self.selected, self.recalled = None, True
            else:
                self.selected, self.recalled = self.profile.addressing.default, False
        effect, note = form.effect, ""
        applied = self.excitation(form, values)
        if applied is not None:
            effect, note = Effect.EXCITES, applied
        return [Unit(raw.index, raw.start, raw.text, header, raw.query, effect,
                     channel, form.field, value, canonical, form.local, note, form.measures)]


def classify_uncached(message: str, profile: str = "generic", *, selected: int | None = None
                      ) -> Classification:
    """:func:`classify` without its cache: a full parse and classification every time."""
    return _Resolver(message, get_profile(profile), selected).run()


@functools.lru_cache(maxsize=16384)
def _classify_cached(message: str, profile: str, selected: int | None) -> Classification:
    return classify_uncached(message, profile, selected=selected)


def classify(message: str, profile: str = "generic", *, selected: int | None = None
             ) -> Classification:
    """Parse one program message and classify every unit against a profile.

    ``selected`` is the channel selected on the instrument (or on the connection) before
    this message. Raises :class:`ScpiError` for a message that is not legal SCPI for the
    profile, and :class:`ProfileError` for an unknown profile. Results for messages up to
    CACHE_MAX_MESSAGE characters are cached per (message, profile, selection): a repeated
    message costs one dictionary lookup.
    """
    if len(message) > CACHE_MAX_MESSAGE:
        return classify_uncached(message, profile, selected=selected)
    return _classify_cached(message, profile, selected)


def is_read_only(message: str, profile: str = "generic", *, selected: int | None = None) -> bool:
    """True only if every unit is a known read (or a selection followed by reads).

    Never raises: a message that cannot be parsed, or an unknown profile, is not read-only.
    """
    if not isinstance(message, str):
        return False
    try:
        return classify(message, profile, selected=selected).read_only
    except (ScpiError, ProfileError):
        return False
