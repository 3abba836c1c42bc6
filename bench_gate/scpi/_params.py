"""Typing a unit's parameters against its profile (SCPI-99 Vol. 1 §7: numeric, boolean,
character and string data): ranges per channel, unit suffixes and their multipliers,
``MIN|MAX|DEF``, keywords, choices and channel names. Every refusal is an
:class:`ScpiError` with its number and where in the message it stands.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from ._errors import ScpiError, ScpiExecutionError, ScpiSyntaxError
from ._lexer import Block, ChannelList, CharData, Data, Number, QuotedString
from ._patterns import keyword_short
from ._profile import Profile
from ._schema import ParamSpec
from .units import Value, format_number

__all__ = ["ParamReader", "bound"]

#: SCPI-99 Vol. 1 §7.7.3 suffix multipliers that mean the same in SCPI and in SI.
#: Upper-case 'M' is milli to SCPI and mega to SI, so it is refused as ambiguous.
MULTIPLIERS = {"": 0, "p": -12, "P": -12, "n": -9, "N": -9, "u": -6, "U": -6, "m": -3,
               "k": 3, "K": 3, "G": 9, "g": 9}
#: Units whose 'M' prefix SCPI reads as mega, not milli (SCPI-99 Vol. 1 §7.7.3).
MEGA_UNITS = frozenset({"OHM", "HZ"})
KEYWORD_FORMS = {"MIN": "MIN", "MINIMUM": "MIN", "MAX": "MAX", "MAXIMUM": "MAX",
                 "DEF": "DEF", "DEFAULT": "DEF"}
NOT_A_NUMBER = frozenset({"INF", "NINF", "NAN"})


class ParamReader:
    """Converts the parameters of one message for one profile."""

    def __init__(self, message: str, profile: Profile) -> None:
        self.message = message
        self.profile = profile

    def err(self, cls: type[ScpiError], code: int, detail: str, pos: int) -> ScpiError:
        return cls(code, detail, self.message, pos)

    def check_channel(self, channel: int | None, pos: int) -> None:
        if channel is not None and channel not in self.profile.channels:
            have = ", ".join(str(c) for c in self.profile.channels) or "none"
            raise self.err(ScpiExecutionError, -222,
                           f"channel {channel} does not exist (channels: {have})", pos)

    def convert(self, spec: ParamSpec, datum: Data, channel: int | None) -> Value:
        try:
            return self._convert(spec, datum, channel)
        except ScpiExecutionError as exc:
            if not spec.refused or exc.code not in (-222, -224):
                raise
            raise self.err(ScpiExecutionError, exc.code, f"{exc.detail} ({spec.refused})",
                           datum.pos) from None

    def _convert(self, spec: ParamSpec, datum: Data, channel: int | None) -> Value:
        kind = spec.type
        pos = datum.pos
        if spec.keywords and isinstance(datum, CharData):
            word = _keyword(spec.keywords, datum.text)
            if kind == "number" and spec.field and word in ("MIN", "MAX", "DEF"):
                # A level of a state field is judged against the envelope like a setpoint:
                # MAX passed on as a word is a number nobody judged (the DL3021's
                # VOLT:ILIM MAX is 40 A), so it is resolved, rendered and judged as one.
                return self.number(spec, datum, channel)
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
            words = {c.upper() for c in spec.choices}
            if isinstance(datum, Number) and not datum.suffix and {"ON", "OFF"} & words:
                # SCPI-99 §7.3: 1 is ON, 0 is OFF, also where one of them is refused
                word = "OFF" if datum.value.to_integral_value(ROUND_HALF_UP) == 0 else "ON"
                if word in words:
                    return word
            if isinstance(datum, CharData):
                for choice in spec.choices:
                    short = keyword_short(choice)
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
        if kind == "channels":  # ALL, NONE, a channel list or a channel's name (INST:COUP)
            if isinstance(datum, ChannelList):
                if self.profile.addressing is not None:
                    names = ", ".join(self.profile.channel_word(c)
                                      for c in self.profile.channels)
                    raise self.err(ScpiExecutionError, -224,
                                   f"{spec.name}: this instrument takes no channel list; "
                                   f"name its outputs ({names}), ALL or NONE", pos)
                for ch in datum.channels:
                    self.check_channel(ch, pos)
                return "(@" + ",".join(str(c) for c in datum.channels) + ")"
            if isinstance(datum, CharData) and (datum.text in ("ALL", "NONE")
                                                or datum.text in self.profile.channel_names):
                return datum.text
            raise self.err(ScpiExecutionError, -224, f"{spec.name} must be ALL, NONE, a "
                           "channel list or channel names", pos)
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
        pos = datum.pos
        field = self.profile.fields.get(spec.field) if spec.field else None
        bounds = spec.range or self.widest(spec.field, channel)
        if isinstance(datum, CharData):
            keyword = KEYWORD_FORMS.get(datum.text)
            if keyword is None:
                detail = "is not allowed" if datum.text in NOT_A_NUMBER else "is not a number"
                raise self.err(ScpiExecutionError, -224, f"{spec.name} {datum.text} {detail}", pos)
            if keyword == "DEF":
                return self.default(spec, channel, pos)
            if bounds is None:
                raise self.err(ScpiExecutionError, -224,
                               f"{spec.name} has no {keyword} on this instrument", pos)
            return bound(bounds, keyword)
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

    def default(self, spec: ParamSpec, channel: int | None, pos: int) -> Decimal:
        """The value ``DEF`` names (the *RST value): the channel's own where the profile
        gives one (ChannelSpec.defaults: the E3631A's +6V output resets to 5 A, the others
        to 1 A), else the field's. With no channel known, only a value every channel shares."""
        found = {self.profile.default_of(spec.field, c)
                 for c in ([channel] if channel is not None else self.profile.channels)
                 } if spec.field else set()
        if channel is None and not found and spec.field:
            found = {self.profile.default_of(spec.field, None)}
        if len(found) == 1 and isinstance(value := next(iter(found)), Decimal):
            return value
        why = "differs per channel: name the channel" if len(found) > 1 else \
            "has no DEF value in this profile"
        raise self.err(ScpiExecutionError, -224, f"{spec.name} {why}", pos)

    def widest(self, field: str | None, channel: int | None) -> tuple[Decimal, Decimal] | None:
        if field is None:
            return None
        if channel is not None:
            return self.profile.range_of(field, channel)
        ranges = [r for c in self.profile.channels if (r := self.profile.range_of(field, c))]
        if not ranges:
            return None
        return min(r[0] for r in ranges), max(r[1] for r in ranges)


def bound(bounds: tuple[Decimal, Decimal], keyword: str) -> Decimal:
    """The value ``MIN`` or ``MAX`` names in a range. On a range with no positive value the
    manuals count magnitudes: the E3631A's -25V output programs 0 to -25.75 V, and its MIN
    is 0 V, its MAX -25.75 V (User's Guide, Table 4-1), so MIN never means the farthest
    from zero. Elsewhere the lower and the upper end."""
    low, high = bounds
    if high <= 0 and low < 0:
        low, high = high, low
    return high if keyword == "MAX" else low


def _keyword(keywords: tuple[str, ...], text: str) -> str | None:
    """The short form of the keyword ``text`` spells (``MAXimum`` -> ``MAX``), or None."""
    for word in keywords:
        short = keyword_short(word)
        if text in (short, word.upper()):
            return short
    return None
