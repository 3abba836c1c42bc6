"""Resolve lexed units against a profile, type their parameters, and render canonical SCPI.

Every unit of the result is *atomic and canonical*: one header, at most one channel, at most
one state field, rendered by the gateway itself. ``APPL CH1,5,0.1`` becomes two units
(``VOLT 5.0,(@1)`` and ``CURR 0.1,(@1)``); ``VOLT 5,(@1,2)`` becomes one per channel; a
selection form (``VOLT 5`` after ``INST:NSEL 2``) gets an explicit channel list.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from ._errors import ScpiError, ScpiExecutionError, ScpiSyntaxError
from ._lexer import (
    CACHE_MAX_MESSAGE,
    Block,
    ChannelList,
    CharData,
    Data,
    Expression,
    Number,
    QuotedString,
    RawUnit,
    lex,
)
from ._profile import (
    CommandSpec,
    Effect,
    FormSpec,
    ParamSpec,
    Profile,
    ProfileError,
    canonical_with_suffix,
    get_profile,
)
from ._profile import canonical_header as _canonical_header

__all__ = [
    "Classification",
    "Unit",
    "Value",
    "classify",
    "format_number",
    "is_read_only",
    "render_value",
]

Value = Decimal | bool | int | str

#: SCPI-99 Vol. 1 §7.7.3 suffix multipliers that mean the same in SCPI and in SI.
#: Upper-case 'M' is milli to SCPI and mega to SI, so it is refused as ambiguous.
MULTIPLIERS = {"": 0, "p": -12, "P": -12, "n": -9, "N": -9, "u": -6, "U": -6, "m": -3,
               "k": 3, "K": 3, "G": 9, "g": 9}
#: Units whose 'M' prefix SCPI reads as mega, not milli (SCPI-99 Vol. 1 §7.7.3).
MEGA_UNITS = frozenset({"OHM", "HZ"})
KEYWORD_FORMS = {"MIN": "MIN", "MINIMUM": "MIN", "MAX": "MAX", "MAXIMUM": "MAX",
                 "DEF": "DEF", "DEFAULT": "DEF"}
NOT_A_NUMBER = frozenset({"INF", "NINF", "NAN"})
RE_PLACEHOLDER = re.compile(r"\{(\w+)\}")
#: An expansion template's channel list, dropped when the selection names the channel.
RE_CHANNEL_LIST = re.compile(r",?\s*\(@\{ch\}\)")
#: What a naive instrument parser splits a message at, or ends it at, whatever surrounds it:
#: ';' between units (IEEE 488.2 §7.4.1), LF and CR as terminators, NUL in C firmware. The
#: lexer refuses CR, LF and NUL anywhere in a message; ';' is refused here, inside string
#: data (§7.7.5) and block data (§7.7.6), which such a parser does not know.
UNIT_BREAKERS = frozenset(";\r\n\x00")
#: What ``separators_in_data: true`` still refuses inside data: it allows ';' only.
LINE_BREAKERS = UNIT_BREAKERS - {";"}


@dataclass(frozen=True, slots=True)
class Unit:
    """One atomic, canonical message unit with its effect."""

    source: int  # index of the message unit, as the client sent it, that this came from
    position: int  # column of that unit in the message (0-based)
    text: str  # that unit as sent
    header: str  # canonical header, with '?' for a query
    query: bool
    effect: Effect
    channel: int | None
    field: str | None
    value: Value | None  # the new value of ``field`` for a write
    canonical: str
    local: bool = False  # answered by the gateway itself, never sent (``*CLS``)
    note: str = ""  # for ``excites``: what the instrument applies to whatever is connected

    @property
    def writes(self) -> bool:
        return self.effect not in (Effect.READ, Effect.SELECT)


@dataclass(frozen=True, slots=True)
class Classification:
    message: str
    profile: str
    units: tuple[Unit, ...]
    selected: int | None  # the selected channel after this message

    @property
    def read_only(self) -> bool:
        """Every unit reads, or selects a channel for reads that follow it."""
        select_pending = False
        for unit in self.units:
            if unit.effect is Effect.READ:
                select_pending = False
            elif unit.effect is Effect.SELECT:
                select_pending = True
            else:
                return False
        return bool(self.units) and not select_pending

    @property
    def effects(self) -> frozenset[Effect]:
        return frozenset(u.effect for u in self.units)

    @property
    def canonical(self) -> tuple[str, ...]:
        return tuple(u.canonical for u in self.units)


def format_number(value: Decimal) -> str:
    """Plain decimal with a point: ``5.0``, ``0.1``, ``0.000001``; never an exponent."""
    if value == 0:
        return "0.0"
    text = format(value, "f")  # exact: normalize() would round to the context's 28 digits
    if "." not in text:
        return text + ".0"
    text = text.rstrip("0")
    return text + "0" if text.endswith(".") else text


def render_value(value: Value) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, Decimal):
        return format_number(value)
    return str(value)


def _quote(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def _block(data: str) -> str:
    """Definite arbitrary block data (IEEE 488.2 §7.7.6.2), whatever form it came in."""
    length = str(len(data))
    return f"#{len(length)}{length}{data}"


def _render_param(spec: ParamSpec, value: Value) -> str:
    """A known header's parameter: strings quoted and blocks definite, so each stays one datum."""
    if spec.type == "string":
        return _quote(str(value))
    if spec.type == "block":
        return _block(str(value))
    return render_value(value)


def _render_data(datum: Data) -> str:
    """Render a parameter of a header the profile does not know, in a normalised form."""
    if isinstance(datum, Number):
        return format_number(datum.value) + datum.suffix
    if isinstance(datum, CharData):
        return datum.text
    if isinstance(datum, QuotedString):
        return _quote(datum.text)
    if isinstance(datum, ChannelList):
        return "(@" + ",".join(str(c) for c in datum.channels) + ")"
    if isinstance(datum, Expression):
        return "(" + datum.text + ")"
    return _block(datum.data)


def _split_suffix(mnemonic: str) -> tuple[str, int | None]:
    stem = mnemonic.rstrip("0123456789")
    return stem, (int(mnemonic[len(stem) :]) if len(stem) < len(mnemonic) else None)


class _Resolver:
    """Classifies one message against one profile; holds the header path and selection."""

    def __init__(self, message: str, profile: Profile, selected: int | None) -> None:
        self.message = message
        self.profile = profile
        self.selected = selected
        self.path: tuple[str, ...] = ()
        #: The canonical header of the unit being resolved when a '#' keeps its number.
        self.numbered: str | None = None

    def err(self, cls: type[ScpiError], code: int, detail: str, pos: int) -> ScpiError:
        return cls(code, detail, self.message, pos)

    def run(self) -> Classification:
        out: list[Unit] = []
        for raw in lex(self.message):
            out.extend(self.unit(raw))
        return Classification(self.message, self.profile.name, tuple(out), self.selected)

    def unit(self, raw: RawUnit) -> list[Unit]:
        self.numbered = None
        resolved = self.resolve(raw)
        if isinstance(resolved, str):
            self.check_data(raw, None)  # an unknown header never gets the opt-in
            if self.profile.complete:
                raise self.undefined(raw, resolved)
            units = [self.unknown(raw, resolved)]
            allow = False
        else:
            command, form, suffix_channel = resolved
            self.check_data(raw, form)
            units = self.known(raw, command, form, suffix_channel)
            allow = form.separators_in_data
        for u in units:
            self.check_rendering(raw, u, allow)
        return units

    def check_data(self, raw: RawUnit, form: FormSpec | None) -> None:
        """Refuse string or block data that a naive parser would split the message at."""
        breakers = LINE_BREAKERS if form is not None and form.separators_in_data else UNIT_BREAKERS
        for datum in raw.params:
            if isinstance(datum, QuotedString):
                text, code = datum.text, -151
            elif isinstance(datum, Block):
                text, code = datum.data, -161
            else:
                continue  # the lexer admits no ';' in numbers, words, lists or expressions
            if breakers.isdisjoint(text):
                continue
            bad = next(c for c in text if c in breakers)
            pos = self.message.find(bad, datum.pos)
            if code == -151:
                detail = f"a {bad!r} inside string data would split the message on many instruments"
            else:
                detail = (f"many instruments do not parse block data, so a {bad!r} inside it "
                          "would split the message")
                if self.message.startswith("#0", datum.pos):
                    detail = "indefinite block data (#0) runs to the end of the message; " + detail
            raise self.err(ScpiSyntaxError, code, detail, pos if pos >= 0 else datum.pos)

    def check_rendering(self, raw: RawUnit, unit: Unit, allow_semicolon: bool) -> None:
        """The last guard before anything can be sent (DESIGN.md rule 1): a canonical text is
        exactly one unit, to this lexer and to a parser that splits at every ';'."""
        text = unit.canonical
        breakers = LINE_BREAKERS if allow_semicolon else UNIT_BREAKERS
        try:
            one = breakers.isdisjoint(text) and len(lex(text)) == 1
        except ScpiError:
            one = False
        if not one:  # a renderer bug; the text is not echoed, it may hold what a client sent
            raise self.err(ScpiSyntaxError, -100, f"the canonical rendering of {unit.header} "
                           "would not reach an instrument as exactly one unit", raw.start)

    def resolve(self, raw: RawUnit) -> str | tuple[CommandSpec, FormSpec, int | None]:
        """The unit's command, form and suffix channel; or the name of an unknown header."""
        if raw.common:
            words: tuple[str, ...] = raw.mnemonics
            suffixes: tuple[int | None, ...] = (None,)
            if _split_suffix(raw.mnemonics[0])[1] is not None:
                return "*" + raw.mnemonics[0]
        else:
            split = [_split_suffix(m) for m in raw.mnemonics]
            stems = tuple(s for s, _ in split)
            # SCPI-99 Vol. 1 §6.2.4: after ';' a header without ':' is relative to the
            # previous header's path; common commands leave the path alone.
            base = () if raw.absolute else self.path
            words = base + stems
            suffixes = (None,) * len(base) + tuple(n for _, n in split)
            self.path = words[:-1]
        entry = self.profile.lookup(raw.common, words)
        if entry is not None and any(
                node is not None and node.fixed is not None and number != node.fixed
                for node, number in zip(entry.nodes, suffixes, strict=True)):
            entry = None  # DATA is not DATA2: another header, one the profile does not know
        if entry is None:
            return ("*" if raw.common else "") + ":".join(
                w + (str(n) if n is not None else "") for w, n in zip(words, suffixes, strict=True)
            )
        suffix_channel: int | None = None
        for node, number in zip(entry.nodes, suffixes, strict=True):
            if node is not None and node.fixed is not None:
                continue
            if number is None or node is None:
                continue
            if not node.suffix:
                raise self.err(
                    ScpiSyntaxError, -114, f"{node.short} takes no numeric suffix", raw.start
                )
            suffix_channel = number
        command = entry.command
        form = command.query if raw.query else command.set
        if form is None:
            detail = "is a query only" if not raw.query else "has no query form"
            raise self.err(ScpiSyntaxError, -113, f"{command.header} {detail}", raw.start)
        if form.channel != "suffix" and suffix_channel is not None:
            if command.suffixes and suffix_channel not in command.suffixes:
                raise self.err(ScpiSyntaxError, -114, f"{command.header} takes the suffixes "
                               f"{', '.join(map(str, command.suffixes))}, not {suffix_channel}",
                               raw.start)
            self.numbered = canonical_with_suffix(command, suffix_channel)
        return command, form, suffix_channel

    def undefined(self, raw: RawUnit, name: str) -> ScpiError:
        """A header a complete profile does not know is a typo: -113 with the closest one."""
        text = name + ("?" if raw.query else "")
        hint = self.profile.closest(raw.common, name, raw.query)
        where = f"; closest: {hint}" if hint else ""
        return self.err(ScpiSyntaxError, -113, f"{text} is not a command of the "
                        f"{self.profile.model.title}{where}", raw.start)

    def unknown(self, raw: RawUnit, name: str) -> Unit:
        text = name + ("?" if raw.query else "")
        if raw.params:
            text += " " + ",".join(_render_data(p) for p in raw.params)
        return Unit(raw.index, raw.start, raw.text, name + ("?" if raw.query else ""),
                    raw.query, Effect.UNKNOWN, None, None, None, text)

    def known(
        self, raw: RawUnit, command: CommandSpec, form: FormSpec, suffix_channel: int | None
    ) -> list[Unit]:
        if form.effect is Effect.FORBIDDEN:
            # Refused whatever its parameters: never worth validating them.
            unit = self.unknown(raw, _canonical_header(command))
            return [Unit(unit.source, unit.position, unit.text, unit.header, unit.query,
                         Effect.FORBIDDEN, None, None, None, unit.canonical, unit.local)]
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
                channels = [self.selected]
                self.check_channel(self.selected, raw.start)
        elif form.channel == "suffix":
            channels = [suffix_channel if suffix_channel is not None else 1]
            self.check_channel(channels[0], raw.start)
        else:
            channels = [None]
        specs = form.params
        if len(params) > len(specs):
            extra = params[len(specs)]
            raise self.err(ScpiSyntaxError, -108, "one parameter too many", _pos(extra, raw))
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
                channel = self.selected  # APPL? alone: the selected channel's
            out.extend(self.emit(raw, command, form, channel, values))
        return out

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
        if form.expand:
            specs = {s.name: s for s in form.params}
            rendered = {k: _render_param(specs[k], v) for k, v in values.items()}
            units: list[Unit] = []
            for template in form.expand:
                names = set(RE_PLACEHOLDER.findall(template)) - {"ch"}
                if not names <= rendered.keys():
                    continue  # an optional parameter this form did not get
                if channel is None:  # the selection decides: no channel list at all
                    template = RE_CHANNEL_LIST.sub("", template)
                text = template.format(ch=channel, **rendered)
                sub = _Resolver(text, self.profile, self.selected).run()
                for u in sub.units:
                    units.append(Unit(raw.index, raw.start, raw.text, u.header, u.query,
                                      u.effect, u.channel, u.field, u.value, u.canonical,
                                      u.local))
                self.selected = sub.selected
            if not units:  # a unit must never vanish from the classification
                missing = next((s.name for s in form.params if s.name not in values), "a value")
                raise self.err(ScpiSyntaxError, -109, f"{missing} is missing", raw.end)
            return units
        header = form.canonical or self.numbered or _canonical_header(command)
        if form.channel == "suffix" and channel is not None and form.canonical is None:
            header = canonical_with_suffix(command, channel)  # STAT:QUES:INST:ISUM2:COND
        if raw.query:
            header += "?"
        args = [_render_param(s, values[s.name]) for s in form.params if s.name in values]
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
            self.selected = channel
        effect, note = form.effect, ""
        applied = self.excitation(form, values)
        if applied is not None:
            effect, note = Effect.EXCITES, applied
        return [Unit(raw.index, raw.start, raw.text, header, raw.query, effect,
                     channel, form.field, value, canonical, form.local, note)]

    def check_channel(self, channel: int | None, pos: int) -> None:
        if channel is not None and channel not in self.profile.channels:
            have = ", ".join(str(c) for c in self.profile.channels) or "none"
            raise self.err(ScpiExecutionError, -222,
                           f"channel {channel} does not exist (channels: {have})", pos)

    def convert(self, spec: ParamSpec, datum: Data, channel: int | None) -> Value:
        kind = spec.type
        pos = _pos(datum, None)
        if spec.keywords and isinstance(datum, CharData):
            word = _keyword(spec.keywords, datum.text)
            if word is None:
                raise self.err(ScpiExecutionError, -224,
                               f"{spec.name} must be a number or one of "
                               f"{', '.join(spec.keywords)}", pos)
            return word
        if kind == "number":
            return self.number(spec, datum, channel)
        if kind == "integer":
            if isinstance(datum, Number):
                if datum.suffix:
                    raise self.err(ScpiSyntaxError, -138,
                                   f"{spec.name} takes no unit suffix", pos)
                value = int(datum.value.to_integral_value(ROUND_HALF_UP))
                if spec.range is not None and not spec.range[0] <= value <= spec.range[1]:
                    raise self.err(ScpiExecutionError, -222,
                                   f"{spec.name} {value} is outside "
                                   f"{format_number(spec.range[0])} to "
                                   f"{format_number(spec.range[1])}", pos)
                return value
            raise self.err(ScpiSyntaxError, -104, f"{spec.name} must be an integer", pos)
        if kind == "boolean":
            # SCPI-99 Vol. 1 §7.3: ON|OFF, or a number rounded to an integer, non-zero is ON.
            if isinstance(datum, CharData) and datum.text in ("ON", "OFF"):
                return datum.text == "ON"
            if isinstance(datum, Number) and not datum.suffix:
                return datum.value.to_integral_value(ROUND_HALF_UP) != 0
            raise self.err(ScpiSyntaxError, -104, f"{spec.name} must be ON, OFF, 1 or 0", pos)
        if kind == "minmax":
            if isinstance(datum, CharData) and datum.text in KEYWORD_FORMS:
                form = KEYWORD_FORMS[datum.text]
                if form != "DEF":
                    return form
            raise self.err(ScpiExecutionError, -224, f"{spec.name} must be MIN or MAX", pos)
        if kind == "channel_name":
            if isinstance(datum, CharData) and datum.text in self.profile.channel_names:
                return self.profile.channel_names[datum.text]
            names = ", ".join(sorted(self.profile.channel_names))
            raise self.err(ScpiExecutionError, -224,
                           f"{spec.name} must name a channel ({names})", pos)
        if kind == "choice":
            if isinstance(datum, Number) and not datum.suffix and {"ON", "OFF"} <= {
                    c.upper() for c in spec.choices}:  # SCPI-99 §7.3: 1 is ON, 0 is OFF
                return "OFF" if datum.value.to_integral_value(ROUND_HALF_UP) == 0 else "ON"
            if isinstance(datum, CharData):
                for choice in spec.choices:
                    short = "".join(c for c in choice if c.isupper())
                    if datum.text in (short, choice.upper()):
                        return short
            raise self.err(ScpiExecutionError, -224,
                           f"{spec.name} must be one of {', '.join(spec.choices)}", pos)
        if kind == "word":  # a number or a keyword, passed on as it is (a probe type)
            if isinstance(datum, Number) and not datum.suffix:
                return format_number(datum.value)
            if isinstance(datum, CharData):
                return datum.text
            raise self.err(ScpiSyntaxError, -104, f"{spec.name} must be a number or a word", pos)
        if kind == "block":
            if isinstance(datum, Block):
                return datum.data
            raise self.err(ScpiSyntaxError, -104, f"{spec.name} must be block data", pos)
        if isinstance(datum, QuotedString):
            if not spec.choices:
                return datum.text
            named = self.profile.string_choice(spec, datum.text)
            if named is None:
                raise self.err(ScpiExecutionError, -224,
                               f"{spec.name} must be one of {', '.join(spec.choices)}", pos)
            return named
        raise self.err(ScpiSyntaxError, -104, f"{spec.name} must be a quoted string", pos)

    def number(self, spec: ParamSpec, datum: Data, channel: int | None) -> Decimal:
        pos = _pos(datum, None)
        field = self.profile.fields.get(spec.field) if spec.field else None
        bounds = spec.range or self.widest(spec.field, channel)
        if isinstance(datum, CharData):
            keyword = KEYWORD_FORMS.get(datum.text)
            if keyword is None:
                detail = "is not allowed" if datum.text in NOT_A_NUMBER else "is not a number"
                raise self.err(ScpiExecutionError, -224, f"{spec.name} {datum.text} {detail}", pos)
            if keyword == "DEF":
                if field is not None and isinstance(field.default, Decimal):
                    return field.default
                raise self.err(ScpiExecutionError, -224,
                               f"{spec.name} has no DEF value in this profile", pos)
            if bounds is None:
                raise self.err(ScpiExecutionError, -224,
                               f"{spec.name} has no {keyword} on this instrument", pos)
            return bounds[1] if keyword == "MAX" else bounds[0]
        if not isinstance(datum, Number):
            raise self.err(ScpiSyntaxError, -104, f"{spec.name} must be a number", pos)
        unit = spec.unit or (field.unit if field else "")
        value = datum.value.scaleb(self.multiplier(datum, unit, spec.name)).normalize()
        if bounds is not None and not bounds[0] <= value <= bounds[1]:
            where = f" on channel {channel}" if channel is not None else ""
            raise self.err(ScpiExecutionError, -222,
                           f"{spec.name} {format_number(value)} {unit} is outside "
                           f"{format_number(bounds[0])} to {format_number(bounds[1])} "
                           f"{unit}{where}", pos)
        return value

    def multiplier(self, datum: Number, unit: str, name: str) -> int:
        suffix = datum.suffix
        if not suffix:
            return 0
        pos = datum.pos
        if not unit:
            raise self.err(ScpiSyntaxError, -138, f"{name} takes no unit suffix", pos)
        if not suffix.upper().endswith(unit.upper()):
            raise self.err(ScpiSyntaxError, -131,
                           f"suffix {suffix!r} is not a unit of {name} ({unit})", pos)
        prefix = suffix[: len(suffix) - len(unit)]
        if prefix.upper() == "M" and unit.upper() in MEGA_UNITS:
            return 6  # SCPI-99 Vol. 1 §7.7.3: MOHM and MHZ are mega, whatever the case
        if prefix == "M":
            raise self.err(ScpiSyntaxError, -131,
                           f"suffix {suffix!r} is ambiguous (SCPI reads milli, SI reads mega); "
                           f"write m{unit} for milli", pos)
        if prefix not in MULTIPLIERS:
            raise self.err(ScpiSyntaxError, -131, f"unknown multiplier in {suffix!r}", pos)
        return MULTIPLIERS[prefix]

    def widest(self, field: str | None, channel: int | None) -> tuple[Decimal, Decimal] | None:
        if field is None:
            return None
        if channel is not None:
            return self.profile.range_of(field, channel)
        ranges = [r for c in self.profile.channels if (r := self.profile.range_of(field, c))]
        if not ranges:
            return None
        return min(r[0] for r in ranges), max(r[1] for r in ranges)


def _keyword(keywords: tuple[str, ...], text: str) -> str | None:
    """The short form of the keyword ``text`` spells (``MAXimum`` -> ``MAX``), or None."""
    for word in keywords:
        short = "".join(c for c in word if c.isupper())
        if text in (short, word.upper()):
            return short
    return None


def _pos(datum: Data, raw: RawUnit | None) -> int:
    return datum.pos


@functools.lru_cache(maxsize=16384)
def _classify_cached(message: str, profile: str, selected: int | None) -> Classification:
    return _Resolver(message, get_profile(profile), selected).run()


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
        return _Resolver(message, get_profile(profile), selected).run()
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
