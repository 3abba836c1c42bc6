"""What a profile's settings look like to pyvisa-sim, and the keywords it cannot read.

pyvisa-sim keeps one property per setting and matches strings exactly, so every setting a
profile lists (a header with a command form and a query form, and one value) needs a
property whose getter is the canonical query and whose setter is the canonical command, one
per channel. :func:`setting_properties` derives them from the profile; bench.yaml holds the
result (``python -m sim_instruments settings PROFILE`` prints it, to paste), and a test checks
that bench.yaml still covers every setting of every shipped profile.

pyvisa-sim cannot read ``MIN``, ``MAX``, ``DEF`` or ``INF`` either: :func:`resolve_keywords`
turns them into numbers from the profile's ranges and defaults, as the instrument would.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from bench_gate.scpi import CommandSpec, Effect, FormSpec, ParamSpec, Profile, lex
from bench_gate.scpi._examples import sample_value
from bench_gate.scpi._lexer import ChannelList, CharData
from bench_gate.scpi._params import bound
from bench_gate.scpi._patterns import canonical_header, canonical_with_suffix, keyword_short

__all__ = [
    "ON_OFF",
    "action_dialogues",
    "actions_yaml",
    "answer_limit",
    "property_name",
    "resolve_keywords",
    "setting_properties",
    "settings_yaml",
    "update_bench_yaml",
]

#: A choice of ON, OFF (and ONCE) is kept as 1 or 0, as the instrument answers it.
ON_OFF = frozenset({"ON", "OFF", "ONCE"})


def on_off_choice(spec: ParamSpec) -> bool:
    """A choice the simulator keeps as 1/0: ON with OFF (or ONCE). OFF alone (the
    E36312A's ``OUTP:PAIR``, narrowed by its profile) is a word like any other."""
    words = {c.upper() for c in spec.choices}
    return "ON" in words and words <= ON_OFF
#: SCPI-99 Vol. 1 §7.2.1.4: INFinity is 9.9E37.
INFINITY = Decimal("9.9E37")
#: Common commands bench.yaml models by hand (IEEE 488.2 status enables, saved states).
HAND_MODELLED = frozenset({"*ESE", "*SRE", "*SAV", "*RCL"})
#: Settings whose value the simulator models itself (a field of the profile).
MODELLED = frozenset({Effect.SETPOINT, Effect.OUTPUT, Effect.SELECT, Effect.FORBIDDEN})


def _short(word: str) -> str:
    return keyword_short(word) or word


def _value_param(form: FormSpec) -> ParamSpec | None:
    values = [p for p in form.params if p.name != form.channel_param]
    return values[0] if len(values) == 1 else None


def _kind(spec: ParamSpec | None) -> str:
    """The pyvisa-sim type of a setting: ``int``, ``float`` or ``str``."""
    if spec is None or spec.repeat:  # a list's points are kept as one string
        return "str"
    if spec.type == "number":
        return "float"
    if spec.type in ("integer", "boolean"):
        return "int"
    if spec.type == "choice" and on_off_choice(spec):
        return "int"
    return "str"


_FORMATS = {"float": ("{:+.8E}", "{:f}"), "int": ("{:d}", "{:d}"), "str": ("{:s}", "{:s}")}


def property_name(header: str, channel: int | None) -> str:
    name = "set_" + re.sub(r"[^a-z0-9]+", "_", header.lower()).strip("_")
    return name + (f"_ch{channel}" if channel is not None else "")


def _default(spec: ParamSpec | None, kind: str, form: FormSpec, profile: Profile) -> str:
    if spec is None:  # several values, kept as one string: the first legal ones
        return ",".join(sample_value(p, profile) for p in form.params
                        if p.name != form.channel_param)
    if spec.default is not None:
        return str(int(spec.default)) if kind == "int" else str(spec.default)
    if spec.type in ("word", "channels"):  # a list or a keyword (INST:COUP answers NONE)
        return "NONE"
    if kind == "int":
        return str(int(spec.range[0])) if spec.range is not None else "0"
    if kind == "float":
        low = spec.range[0] if spec.range is not None else Decimal(0)
        return str(max(low, Decimal(0)) if spec.range and spec.range[1] >= 0 else low)
    if spec.choices:
        return canonical_choice(spec, spec.choices[0])
    return ""


def canonical_choice(spec: ParamSpec, choice: str) -> str:
    return canonical_header(CommandSpec(header=choice)) if spec.type == "string" \
        else _short(choice)


def setting_properties(profile: Profile) -> dict[str, dict[str, Any]]:
    """The pyvisa-sim properties for every setting of ``profile``, by property name."""
    out: dict[str, dict[str, Any]] = {}
    for command in profile.model.commands:
        cmd, query = command.set, command.query
        if not _is_setting(command) or cmd is None or query is None:
            continue
        spec = _value_param(cmd)
        if spec is None and any(p.name != cmd.channel_param for p in cmd.params):
            spec = None  # several values (a date): kept as one string
        kind = _kind(spec)
        get_fmt, set_fmt = _FORMATS[kind]
        if spec is not None and spec.type == "string":
            get_fmt, set_fmt = '"{:s}"', '"{:s}"'
        channels: list[int | None] = [None]
        if cmd.channel in ("list", "suffix", "param") and profile.channels:
            channels = list(profile.channels)
        elif command.suffixes and not cmd.canonical:  # a canonical of its own: one setting
            channels = list(command.suffixes)
        for ch in channels:
            if ch is not None and (cmd.channel == "suffix" or command.suffixes):
                set_head = get_head = canonical_with_suffix(command, ch)
            else:
                set_head = cmd.canonical or canonical_header(command)
                get_head = query.canonical or canonical_header(command)
            where = f"(@{ch})" if cmd.channel == "list" and ch is not None else ""
            getter = f"{get_head}?" + (f" {where}" if where else "")
            setter = f"{set_head} {set_fmt}" + (f",{where}" if where else "")
            if cmd.channel == "param" and ch is not None:  # OUTP:OVP CH1,ON (DP800 guide)
                getter = f"{get_head}? {profile.channel_word(ch)}"
                setter = f"{set_head} {profile.channel_word(ch)},{set_fmt}"
            prop: dict[str, Any] = {
                "default": _default(spec, kind, cmd, profile),
                "getter": {"q": getter, "r": get_fmt},
                "setter": {"q": setter},
                "specs": {"type": kind},
            }
            # A range the gateway narrows (``refused``) is not the instrument's: the
            # simulated one takes what the panel or another interface may set.
            if spec is not None and spec.range is not None and kind != "str" \
                    and not spec.refused:
                low, high = spec.range
                prop["specs"]["min"] = str(int(low)) if kind == "int" else str(low)
                if any(_short(k) == "INF" for k in spec.keywords):
                    high = INFINITY
                prop["specs"]["max"] = str(int(high)) if kind == "int" else str(high)
            if kind == "int" and spec is not None and spec.type in ("boolean", "choice"):
                prop["specs"]["valid"] = ["0", "1"]
            out[property_name(get_head, ch)] = prop
    return out


def _is_setting(command: CommandSpec) -> bool:
    cmd, query = command.set, command.query
    return not (cmd is None or query is None or cmd.expand or query.expand or query.field
                or cmd.effect in MODELLED or command.header in HAND_MODELLED
                or not any(p.name != cmd.channel_param for p in cmd.params))  # *OPC


#: Common commands bench.yaml or the models answer by hand (IEEE 488.2 §10).
COMMON_ELSEWHERE = frozenset({"*RST", "*CLS", "*OPC", "*WAI", "*SAV", "*RCL", "*ESE", "*SRE",
                              "*TST", "*IDN", "*STB", "*ESR", "*CAL", "*LRN", "*OPT", "*PSC"})
#: Answers of queries that act (a self-test, a lock) when bench.yaml gives none.
ACTION_ANSWER = "+0"


def action_dialogues(profile: Profile) -> list[tuple[str, str | None]]:
    """pyvisa-sim dialogues for every command of ``profile`` that is no setting and not
    modelled (``SYST:BEEP``, ``INIT``, ``MMEM:STOR:STAT *``), and for queries that act.
    ``*`` after the header: any parameters (the simulator accepts them, see _model)."""
    out: list[tuple[str, str | None]] = []
    for command in profile.model.commands:
        if _is_setting(command) or command.header in COMMON_ELSEWHERE:
            continue
        for form, query in ((command.set, False), (command.query, True)):
            if form is None or form.effect in MODELLED or form.expand or form.field:
                continue
            if query and form.effect not in (Effect.STATE, Effect.EXCITES):
                continue  # a passing query is answered by a dialogue of its own
            head = form.canonical or canonical_header(command)
            takes = bool(form.params) or form.channel in ("list", "param") or "#" in \
                command.header
            q = head + ("?" if query else "") + (" *" if takes else "")
            out.append((q, ACTION_ANSWER if query else None))
    return list(dict.fromkeys(out))


def actions_yaml(profile: Profile) -> str:
    lines = []
    for q, r in action_dialogues(profile):
        lines.append(f"      - {{q: {_flow(q)}" + (f", r: {_flow(r)}}}" if r else "}"))
    return "\n".join(lines) + "\n"


def settings_yaml(profile: Profile) -> str:
    """The properties as bench.yaml lines (flow style, one setting a line)."""
    lines = []
    for name, prop in setting_properties(profile).items():
        specs = ", ".join(f"{k}: {_flow(v)}" for k, v in prop["specs"].items())
        lines.append(
            f"      {name}: {{default: {_flow(prop['default'])}, "
            f"getter: {{q: {_flow(prop['getter']['q'])}, r: {_flow(prop['getter']['r'])}}}, "
            f"setter: {{q: {_flow(prop['setter']['q'])}}}, specs: {{{specs}}}}}")
    return "\n".join(lines) + "\n"


BEGIN = "      # settings of {name}: generated, python -m sim_instruments settings --write"
END = "      # end of the settings of {name}"


ACTIONS_BEGIN = "      # commands of {name}: generated, python -m sim_instruments settings --write"
ACTIONS_END = "      # end of the commands of {name}"


def update_bench_yaml(text: str, profile: Profile) -> str:
    """``text`` (bench.yaml) with the profile's generated blocks (settings, commands)
    replaced."""
    for begin, end, body in ((BEGIN, END, settings_yaml(profile)),
                             (ACTIONS_BEGIN, ACTIONS_END, actions_yaml(profile))):
        first, last = begin.format(name=profile.name), end.format(name=profile.name)
        start, stop = text.index(first), text.index(last)
        text = text[:start] + first + "\n" + body + text[stop:]
    return text


def _flow(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    text = str(value)
    return "'" + text.replace("'", "''") + "'"


def _spec_for(profile: Profile, canonical: str) -> tuple[FormSpec, bool] | None:
    units = lex(canonical)
    if len(units) != 1:
        return None
    raw = units[0]
    words = tuple(m.rstrip("0123456789") for m in raw.mnemonics)
    entry = profile.lookup(raw.common, words)
    if entry is None:
        return None
    form = entry.command.query if raw.query else entry.command.set
    return (form, raw.query) if form is not None else None


def _number(spec: ParamSpec, keyword: str) -> Decimal | None:
    if keyword == "INF":
        return INFINITY
    if keyword == "DEF":
        return spec.default if spec.default is not None else (
            spec.range[0] if spec.range is not None else None)
    if spec.range is None or keyword not in ("MIN", "MAX"):
        return None
    return bound(spec.range, keyword)  # the gateway's reading of MIN and MAX, manuals' too


def _render(value: Decimal, spec: ParamSpec) -> str:
    if spec.type == "integer":
        return str(int(value))
    text = format(value, "f")
    return text if "." in text else text + ".0"


def resolve_keywords(profile: Profile, canonical: str) -> str:
    """``VOLT:NPLC MAX`` -> ``VOLT:NPLC 100.0``; ``RANG:AUTO ON`` -> ``RANG:AUTO 1``: a
    command as pyvisa-sim can match it. Anything else comes back as it was."""
    found = _spec_for(profile, canonical)
    if found is None or found[1]:
        return canonical
    form = found[0]
    raw = lex(canonical)[0]
    params = list(raw.params)
    texts: list[str] = []
    for i, datum in enumerate(params):
        end = params[i + 1].pos if i + 1 < len(params) else len(canonical)
        text = canonical[datum.pos:end].rstrip().rstrip(",").rstrip()
        spec = form.params[i] if i < len(form.params) else None
        if spec is not None and isinstance(datum, CharData):
            if spec.keywords and datum.text in {_short(k) for k in spec.keywords}:
                value = _number(spec, datum.text)
                text = _render(value, spec) if value is not None else text
            elif spec.type == "boolean" or (
                    spec.type == "choice" and on_off_choice(spec)):
                text = "1" if datum.text == "ON" else "0"
        texts.append(text)
    return canonical.split(" ", 1)[0] + (" " + ",".join(texts) if texts else "")


def answer_limit(profile: Profile, canonical: str) -> str | None:
    """The answer to ``VOLT:NPLC? MAX`` (a setting's MIN, MAX or DEF) from the profile's
    ranges and defaults; None if ``canonical`` is no such query."""
    found = _spec_for(profile, canonical)
    if found is None or not found[1]:
        return None
    raw = lex(canonical)[0]
    if not raw.params or not isinstance(raw.params[0], CharData):
        return None
    keyword = raw.params[0].text
    if keyword not in ("MIN", "MAX", "DEF"):
        return None
    words = tuple(m.rstrip("0123456789") for m in raw.mnemonics)
    entry = profile.lookup(False, words)
    if entry is None or entry.command.set is None:
        return None
    spec = _value_param(entry.command.set)
    if spec is None or spec.type not in ("number", "integer"):
        return None
    if spec.range is None and spec.field is not None:  # VOLT:PROT? MAX,(@2)
        channel = next((p.channels[0] for p in raw.params if isinstance(p, ChannelList)
                        and p.channels), None)
        bounds = profile.range_of(spec.field, channel)
        if bounds is None:
            return None
        spec = spec.model_copy(update={"range": bounds})
    value = _number(spec, keyword)
    if value is None:
        return None
    return str(int(value)) if spec.type == "integer" else f"{float(value):+.8E}"
