"""Hostile input: fuzz the SCPI parser and classifier, the socket door, and the HTTP API.

    python bench/fuzz_scpi.py --minutes 10            # the parser and classifier
    python bench/fuzz_scpi.py --door-minutes 5        # the socket door, on a served bench
    python bench/fuzz_scpi.py --http-examples 100     # schemathesis, every operation

Each mode may be combined with the others; each prints its figures and exits non-zero on the
first broken invariant (hypothesis shrinks it and prints the smallest example).

Invariants of the SCPI core (``check_message``), for any text and any profile:
- no crash: ``classify`` raises only ScpiError (or ProfileError), ``is_read_only`` never;
- a message with a unit that is not a read is never read-only: checked against the
  grammar's own label of each unit, against the lexer (a read-only message holds only
  queries and channel selections), and by splicing a write in;
- what would be sent is canonical: every unit's canonical text is one printable line that
  lexes to one unit and re-classifies to itself (same text, effect, channel, field, value);
- no separator hidden in data: a canonical text holds no ';' at all (a naive parser splits
  there), and no accepted message has a ';', CR, LF or NUL inside string or block data
  (``check_separator_payloads`` also tries every payload of SEPARATOR_PAYLOADS on every
  header form of every shipped profile: none may be accepted).

Invariants of the doors (``DoorFuzz``, ``http_fuzz``), for any bytes a client sends, and with
no person approving anything:
- the server stays up (a fresh connection still answers ``*IDN?``);
- no write reaches the simulated instrument (its setpoints, outputs and protection levels,
  read directly over pyvisa-py, never change);
- memory stays bounded (RSS before and after, printed).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import socket
import string
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench_gate.scpi import (
    Block,
    Classification,
    Effect,
    ProfileError,
    QuotedString,
    ScpiError,
    classify,
    get_profile,
    is_read_only,
    lex,
    pattern_spellings,
)

PROFILES = ("e36312a", "34465a", "generic")
READ_LIKE = frozenset({Effect.READ, Effect.SELECT})
HIDDEN_SEPARATORS = frozenset(";\r\n\x00")
RE_PRINTABLE_LINE = re.compile(r"[^\s;][\t\x20-\x7e]*")  # tabs only inside data


# --- the grammar of near-valid messages, drawn from the profiles themselves -------------------


@dataclass(frozen=True)
class Form:
    """One form of one header in a profile: what the grammar may say and what it does."""

    spellings: tuple[str, ...]  # every legal header spelling, upper-case
    query: bool
    effect: Effect
    params: tuple[str, ...]  # parameter types, for drawing plausible values
    channel: str
    common: bool


def _forms(profile: str) -> list[Form]:
    out: list[Form] = []
    for command in get_profile(profile).model.commands:
        common = command.header.startswith("*")
        spellings = tuple(("*" if common else "") + ":".join(w)
                          for w in sorted(pattern_spellings(command.header)))
        for form, query in ((command.set, False), (command.query, True)):
            if form is not None:
                out.append(Form(spellings, query, form.effect,
                                tuple(p.type for p in form.params), form.channel, common))
    return out


FORMS = {p: _forms(p) for p in PROFILES}
#: Headers outside the profile's tree (on a complete profile: refused with -113).
CANDIDATE_UNKNOWN = ("VOLTA", "OUTP:PROT:CLE", "SYST:BEEP", "FETC?", "GATE:TOK", "DISP:TEXT",
                     "SOUR1:VOLT", "OUTP2", "*XYZ", "*IDN1?", "VOLT2?", "SYST:ERR:NEXT:X?")


def _unknown_to(profile: str) -> list[str]:
    known = get_profile(profile)
    out = []
    for header in CANDIDATE_UNKNOWN:
        (raw,) = lex(header)
        words = tuple(m.rstrip("0123456789") for m in raw.mnemonics)
        numbered = any(m != w for m, w in zip(raw.mnemonics, words, strict=True))
        if raw.mnemonics[0] == "GATE" or numbered or known.lookup(raw.common, words) is None:
            out.append(header)
    return out


UNKNOWN_HEADERS = {p: _unknown_to(p) for p in PROFILES}

NUMBERS = st.one_of(
    st.decimals(min_value=-100, max_value=100, places=3, allow_nan=False).map(str),
    st.integers(-10**6, 10**6).map(str),
    st.sampled_from(["0", "-0", ".5", "5.", "1e3", "1E-3", "5 E 0", "+7", "1e101", "1e-101",
                     "#H1F", "#Q17", "#B101", "#h", "9" * 40, "0." + "0" * 30 + "1",
                     "1e100", "-1e100", "INF", "NAN", "NINF", "MIN", "MAX", "DEF", "MINimum"]),
)
SUFFIXES = st.sampled_from(["", "", "", "V", "mV", "MV", "kV", "uV", "A", "mA", "MA", "uA",
                            "Hz", "V/s", "mv", "ma", "pV", "GV", "mVV", "m"])
CHANNEL_LISTS = st.one_of(
    st.integers(0, 5).map(lambda c: f"(@{c})"),
    st.sampled_from(["(@1,2)", "(@1:3)", "(@3:1)", "(@1,2,3)", "(@ 1 )", "(@)", "(@1:9999)",
                     "(@1:64)", "(@0:65)", "(1)", "(@1;2)", "(@(1))", "(@1", "(@1,)", "(@-1)"]),
)
WORDS = st.sampled_from(["ON", "OFF", "on", "1", "0", "2", "0.4", "0.6", "CH1", "CH2", "CH3",
                         "CH4", "ch2", "P6V", "P25V", "N25V", "ALL", "MIN", "MAX", "DEF",
                         "IMMediate", "ABCDEFGHIJKLM"])
#: What hides a separator or a terminator inside data (docs/scpi.md, "Separators in data").
SEPARATOR_CONTENT = (";", "a;b", ";:OUTP ON", ";:OUTP ON,(@1)", "\n:OUTP ON", "a\rb",
                     "\r\n*RST", "a\nb;c", "x;CURR 4.5,(@1);OUTP 1,(@1)",
                     "a;VOLT 20.0,(@2);OUTP 1,(@2);X", "\\;", "#0;", "';'", '";"')


def _separator_payloads() -> tuple[str, ...]:
    """Each content as double- and single-quoted string data, a definite and an indefinite
    block."""
    out: list[str] = []
    for content in SEPARATOR_CONTENT:
        length = str(len(content))
        out += ['"' + content.replace('"', '""') + '"', "'" + content.replace("'", "''") + "'",
                f"#{len(length)}{length}{content}", "#0" + content]
    return tuple(out)


SEPARATOR_PAYLOADS = _separator_payloads()
STRINGS = st.one_of(st.text(string.printable, max_size=12).map(lambda s: '"' + s.replace(
    '"', '""') + '"'), st.sampled_from(['"', "''", "'a''b'", '"a""b"', '"unclosed']),
    st.sampled_from([p for p in SEPARATOR_PAYLOADS if p[0] in "'\""]))
BLOCKS = st.one_of(
    st.sampled_from(["#15abcde", "#14abcde", "#0rest of it", "#2", "#9", "#10", "#3100x"]),
    st.sampled_from([p for p in SEPARATOR_PAYLOADS if p[0] == "#"]))


@st.composite
def _param(draw: st.DrawFn, kind: str) -> str:
    if kind in ("number", "integer") and draw(st.integers(0, 3)):
        return draw(NUMBERS) + draw(st.sampled_from(["", " "])) + draw(SUFFIXES)
    if kind in ("boolean", "minmax", "channel_name", "choice") and draw(st.integers(0, 3)):
        return draw(WORDS)
    return draw(st.one_of(NUMBERS, WORDS, STRINGS, BLOCKS, CHANNEL_LISTS))


def _case(draw: st.DrawFn, word: str) -> str:
    mask = draw(st.integers(0, 2 ** min(len(word), 30) - 1))
    return "".join(c.lower() if mask >> (i % 30) & 1 else c for i, c in enumerate(word))


@st.composite
def near_valid_unit(draw: st.DrawFn, profile: str) -> tuple[str, Form | None]:
    """A unit from the profile's own command tree, with plausible (often wrong) parameters;
    sometimes an unknown header. The form is None when the unit is not from the tree."""
    if draw(st.integers(0, 9)) == 0:
        header = draw(st.sampled_from(UNKNOWN_HEADERS[profile]))
        form: Form | None = None
        text = header
    else:
        form = draw(st.sampled_from(FORMS[profile]))
        text = _case(draw, draw(st.sampled_from(form.spellings))) + ("?" if form.query else "")
        if not form.common and draw(st.integers(0, 7)) == 0:  # a numeric suffix: OUTP2
            text = re.sub(r"([A-Za-z])(\?)?$", lambda m: m.group(1) + str(
                draw(st.integers(0, 4))) + (m.group(2) or ""), text)
    n = len(form.params) if form is not None else 0
    count = draw(st.sampled_from([n, n, n, max(0, n - 1), n + 1]))
    kinds = [form.params[i] if form is not None and i < len(form.params) else "any"
             for i in range(count)]
    params = [draw(_param(k)) for k in kinds]
    if form is not None and form.channel == "list" and draw(st.booleans()):
        params.append(draw(CHANNEL_LISTS))
    if params:
        seps = [draw(st.sampled_from([","] * 6 + [", ", " ,", ",,"])) for _ in params[1:]]
        text += draw(st.sampled_from([" ", "\t", "  "])) + params[0] + "".join(
            s + p for s, p in zip(seps, params[1:], strict=True))
    return text, form


@st.composite
def near_valid_message(draw: st.DrawFn, profile: str
                       ) -> tuple[str, list[Form | None], bool]:
    """(text, the form of each unit, whether every header is absolute so the forms hold)."""
    units = draw(st.lists(near_valid_unit(profile), min_size=1, max_size=6))
    texts: list[str] = []
    absolute = True
    for i, (text, _) in enumerate(units):
        if not text.startswith("*"):
            root = draw(st.integers(0, 5)) > 0 if i else draw(st.booleans())
            if root:
                text = ":" + text
            elif i:
                absolute = False  # relative to the previous header's path
        texts.append(text)
    seps = [draw(st.sampled_from([";"] * 12 + [" ;", "; ", ";;"])) for _ in texts[1:]]
    message = texts[0] + "".join(s + t for s, t in zip(seps, texts[1:], strict=True))
    message = draw(st.sampled_from(["", "", " ", "\t"])) + message
    message += draw(st.sampled_from(["", "", "", "\n", "\n", "\r\n", " "] * 3 + ["\r", "\n\n"]))
    return message, [f for _, f in units], absolute


HOSTILE = st.sampled_from([
    *";:*?,()@#\"' \t\n\r\x00\x7f\x80\xff.+-eE0123456789VOLTCURPSAMINX",
    "\u037e", "\uff1b", "\u041e", "\u00a0", "\u2028", "\ufeff", "#15", "#0", "(@1)",
    "OUTP ON", ";:*RST", "GATE:TOK", "VOLT 5,(@1)", "\\n", '"a;b"', "'x;:OUTP ON'", "#14a;bc",
    "#0;:OUTP ON", '"', "'",
])


@st.composite
def mutated_message(draw: st.DrawFn, profile: str) -> str:
    text, _, _ = draw(near_valid_message(profile))
    for _ in range(draw(st.integers(1, 5))):
        i = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["insert", "delete", "replace", "duplicate", "swapcase"]))
        piece = draw(HOSTILE)
        if op == "insert":
            text = text[:i] + piece + text[i:]
        elif op == "delete":
            text = text[:i] + text[i + draw(st.integers(1, 4)):]
        elif op == "replace":
            text = text[:i] + piece + text[i + 1:]
        elif op == "duplicate":
            text = text[:i] + text[i:] + text[i:]
        else:
            text = text[:i] + text[i:].swapcase()
    return text


RAW_TEXT = st.one_of(
    st.text(max_size=300),
    st.binary(max_size=300).map(lambda b: b.decode("latin-1")),
    st.lists(HOSTILE, max_size=60).map("".join),
    st.integers(8180, 8200).map(lambda n: "MEAS:VOLT? (@1);" * (n // 16) + "X" * (n % 16)),
)


@st.composite
def any_case(draw: st.DrawFn) -> tuple[str, str, int | None, list[Form | None] | None]:
    """(profile, text, selected channel, the unit forms when the grammar knows them)."""
    profile = draw(st.sampled_from(PROFILES))
    selected = draw(st.sampled_from([None, None, 1, 2, 3, 0, 4]))
    kind = draw(st.integers(0, 9))
    if kind < 5:
        text, forms, absolute = draw(near_valid_message(profile))
        return profile, text, selected, forms if absolute else None
    if kind < 8:
        return profile, draw(mutated_message(profile)), selected, None
    return profile, draw(RAW_TEXT), selected, None


# --- the invariants ---------------------------------------------------------------------------


class Stats:
    def __init__(self) -> None:
        self.cases = 0
        self.parsed = 0
        self.read_only = 0
        self.refused: dict[int, int] = {}
        self.effects: dict[str, int] = {}


STATS = Stats()


def _classify(text: str, profile: str, selected: int | None) -> Classification | None:
    try:
        return classify(text, profile, selected=selected)
    except ScpiError as exc:
        assert isinstance(exc.code, int) and -399 <= exc.code <= -100, exc
        assert exc.message and str(exc), exc
        STATS.refused[exc.code] = STATS.refused.get(exc.code, 0) + 1
        return None


def assert_canonical(result: Classification, profile: str) -> None:
    """Every unit's canonical text is one printable line, one unit (to the lexer and to a
    parser that splits at every ';'), and classifies to itself."""
    for u in result.units:
        text = u.canonical
        assert RE_PRINTABLE_LINE.fullmatch(text), (text, u)
        assert ";" not in text and text.split(";") == [text], (text, u)
        assert len(lex(text)) == 1, (text, lex(text))
        again = classify(text, profile).units
        assert len(again) == 1, (text, again)
        (v,) = again
        assert (v.canonical, v.header, v.query, v.effect, v.channel, v.field, v.value) == (
            u.canonical, u.header, u.query, u.effect, u.channel, u.field, u.value), (text, u, v)
        assert type(v.value) is type(u.value), (text, u.value, v.value)


def check_message(profile: str, text: str, selected: int | None = None,
                  forms: list[Form | None] | None = None) -> None:
    """Every invariant of the SCPI core for one message; AssertionError if one breaks."""
    STATS.cases += 1
    try:
        result = _classify(text, profile, selected)
    except ProfileError as exc:  # pragma: no cover - only shipped profiles are fuzzed
        raise AssertionError(f"ProfileError for a shipped profile: {exc}") from exc
    verdict = is_read_only(text, profile=profile, selected=selected)
    assert verdict is (result is not None and result.read_only), (text, verdict)
    if result is None:
        return
    STATS.parsed += 1
    assert result.units, text
    hidden = [d for raw in lex(text) for d in raw.params
              if isinstance(d, QuotedString | Block)
              and not HIDDEN_SEPARATORS.isdisjoint(d.text if isinstance(d, QuotedString)
                                                   else d.data)]
    assert not hidden, (text, hidden)  # no shipped profile opts in (separators_in_data)
    for u in result.units:
        STATS.effects[u.effect.value] = STATS.effects.get(u.effect.value, 0) + 1
    assert_canonical(result, profile)
    # A unit that is not a read makes the message not read-only (three independent views).
    non_read = [u for u in result.units if u.effect not in READ_LIKE]
    if non_read:
        assert not result.read_only, (text, non_read)
    if forms is not None:
        if any(f is None or f.effect not in READ_LIKE for f in forms):
            assert not result.read_only, (text, forms)
    if result.read_only:
        STATS.read_only += 1
        for raw in lex(text):
            # Only queries and channel selections (independent of the classifier: the lexer).
            mine = [u for u in result.units if u.source == raw.index]
            assert raw.query or (mine and all(u.effect is Effect.SELECT for u in mine)), (
                text, raw)
        assert all(u.query or u.effect is Effect.SELECT for u in result.units), text
        assert result.units[-1].effect is Effect.READ, text
        spliced = text.rstrip("\r\n") + ";:*RST"
        assert not is_read_only(spliced, profile=profile, selected=selected), spliced
        if profile == "e36312a":
            spliced = ":VOLT 1,(@1);" + text.lstrip(" \t:")
            assert not is_read_only(spliced, profile=profile, selected=selected), spliced


def check_separator_payloads(profiles: tuple[str, ...] = PROFILES) -> int:
    """Every SEPARATOR_PAYLOADS entry on every header form of every shipped profile, alone,
    after a channel-like parameter, before a channel list and followed by another unit: never
    accepted (-151 for string data, -161 for block data, -102 for a line break). Returns the
    number of messages tried."""
    tried = 0
    for profile in profiles:
        opted = [c.header for c in get_profile(profile).model.commands
                 for f in (c.set, c.query) if f is not None and f.separators_in_data]
        assert not opted, f"{profile} opts in to separators in data: {opted}"
        for form in FORMS[profile] + [Form(("DISP:TEXT", "FOO"), False, Effect.UNKNOWN, (),
                                           "none", False)]:
            head = form.spellings[0] + ("?" if form.query else "")
            for payload in SEPARATOR_PAYLOADS:
                shapes = [f"{head} {payload}", f"{head} 1,{payload}", f"{head} CH1,{payload}"]
                if not payload.startswith("#0"):
                    root = "" if form.common else ":"
                    shapes += [f"{head} {payload},(@1)", f"*IDN?;{root}{head} {payload};*RST"]
                for message in shapes:
                    tried += 1
                    try:
                        result = classify(message, profile)
                    except ScpiError as exc:
                        line_break = "\r" in payload or "\n" in payload
                        expected = -102 if line_break else -161 if payload[0] == "#" else -151
                        assert exc.code == expected, (profile, message, exc)
                        continue
                    raise AssertionError(f"{profile}: accepted {message!r} as "
                                         f"{result.canonical!r}")
    return tried


# --- the parser fuzz run -------------------------------------------------------------------


def scpi_property(max_examples: int) -> Callable[[], None]:
    @settings(max_examples=max_examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(any_case())
    def prop(case: tuple[str, str, int | None, list[Form | None] | None]) -> None:
        profile, text, selected, forms = case
        check_message(profile, text, selected, forms)

    return prop  # type: ignore[no-any-return]


def fuzz_scpi(seconds: float, batch: int = 2000) -> Stats:
    """Run batches of hypothesis examples (a fresh random seed each) until time is up."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        scpi_property(batch)()
    return STATS


# --- the socket door ------------------------------------------------------------------------

#: What the fuzz reads back from the simulated PSU after every case: a write shows up here.
PSU_STATE = tuple(f"{q} (@{ch})" for ch in (1, 2, 3)
                  for q in ("VOLT?", "CURR?", "OUTP?", "VOLT:PROT?"))


def psu_state(resource: Any) -> dict[str, str]:
    return {q: str(resource.query(q)).strip() for q in PSU_STATE}


@st.composite
def door_payload(draw: st.DrawFn) -> list[bytes]:
    """The packets of one hostile client: random bytes, partial messages, many messages in
    one packet, one message split over many packets, very long lines."""
    kind = draw(st.sampled_from(["bytes", "many", "split", "long", "partial", "mixed"]))
    msgs = [m.encode("latin-1", "replace") for m in draw(st.lists(
        st.one_of(mutated_message("e36312a"), near_valid_message("e36312a").map(lambda t: t[0]),
                  st.sampled_from(["*IDN?", "MEAS:VOLT? (@1)", "VOLT 5,(@1)", "OUTP ON,(@1)",
                                   "*RST", "GATE:STAT?", 'GATE:TOK "bg_nope"', "SYST:ERR?",
                                   "*OPC?", "APPL CH1,5,1", "INST:NSEL 2;:VOLT 3"])),
        min_size=1, max_size=30))]
    if kind == "bytes":
        return [draw(st.binary(min_size=1, max_size=2000)) for _ in range(draw(st.integers(1, 5)))]
    if kind == "many":
        return [b"".join(m.rstrip(b"\r\n") + draw(st.sampled_from([b"\n", b"\r\n"]))
                         for m in msgs)]
    if kind == "split":
        blob = b"\n".join(m.rstrip(b"\r\n") for m in msgs) + b"\n"
        cuts = sorted(draw(st.lists(st.integers(0, len(blob)), max_size=40)))
        return [blob[a:b] for a, b in zip([0, *cuts], [*cuts, len(blob)], strict=True)
                if blob[a:b]]
    if kind == "long":
        n = draw(st.sampled_from([8191, 8192, 8193, 9000, 70000, 300_000]))
        filler = draw(st.sampled_from([b"A", b"VOLT 5,(@1);", b"\x00", b"MEAS:VOLT? (@1);"]))
        line = (filler * (n // len(filler) + 1))[:n]
        tail = draw(st.sampled_from([b"\n", b"\nVOLT 5,(@1)\n", b"", b"\n*IDN?\n"]))
        return [line[i:i + 65536] for i in range(0, len(line), 65536)] + [tail]
    if kind == "partial":
        return [msgs[0].rstrip(b"\r\n")[:draw(st.integers(0, 20))]]
    return [draw(st.binary(max_size=200)) + b"\n" + m for m in msgs]


@dataclass
class DoorFuzz:
    """A served bench (HTTP API and socket doors over the simulated bench), its PSU read
    directly, and a count of what the fuzz sent."""

    tmp: Path
    cases: int = 0
    bytes_sent: int = 0
    _stack: list[Any] = field(default_factory=list)

    def __enter__(self) -> DoorFuzz:
        import pyvisa

        from bench_gate.auth import Tokens
        from bench_gate.config import default_config
        from bench_gate.server import ServerThread
        from bench_gate.store import open_store
        from sim_instruments import SimBenchThread

        self.sim = SimBenchThread()
        self._stack.append(self.sim.close)
        config = default_config(self.sim.psu_port, self.sim.dmm_port)
        for ic in config.instruments:
            ic.socket_port = 0
        self.store = open_store(self.tmp / "fuzz.db")
        self._stack.append(self.store.close)
        self.tokens = {"bot": Tokens(self.store).create("bot", "requester")[1],
                       "olga": Tokens(self.store).create("olga", "operator")[1]}
        self.server = ServerThread(config, self.store)
        self._stack.append(self.server.close)
        assert self.server.running is not None
        self.door = self.server.running.doors["psu"]
        self.rm = pyvisa.ResourceManager("@py")
        self.front = self.rm.open_resource(self.sim.psu_resource_name, read_termination="\n",
                                           write_termination="\n", timeout=5000)
        self._stack.append(self.front.close)
        self.before = psu_state(self.front)
        return self

    def __exit__(self, *exc: object) -> None:
        while self._stack:
            try:
                self._stack.pop()()
            except Exception:  # pragma: no cover - best effort teardown
                pass

    def send(self, packets: list[bytes], linger: float = 0.05) -> None:
        """One hostile client: connect, send the packets (with short gaps), read whatever
        comes back for a moment, hang up."""
        with socket.create_connection(self.door, timeout=5) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for p in packets:
                s.sendall(p)
                self.bytes_sent += len(p)
            s.settimeout(linger)
            try:
                while s.recv(65536):
                    pass
            except (TimeoutError, OSError):
                pass
        self.cases += 1

    def query(self, message: str, timeout: float = 10.0) -> str:
        """A well-behaved client on the door: one query, one answer line."""
        with socket.create_connection(self.door, timeout=timeout) as s:
            s.sendall(message.encode() + b"\n")
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    raise ConnectionError(f"the door hung up on {message!r}")
                buf += chunk
        return buf.decode().strip()

    def check(self) -> None:
        """The server is up and the instrument unchanged."""
        assert "E36312A" in self.query("*IDN?"), "the door stopped answering *IDN?"
        after = psu_state(self.front)
        assert after == self.before, {k: (self.before[k], after[k])
                                      for k in after if after[k] != self.before[k]}

    def executed_writes(self) -> int:
        from bench_gate.models import Status
        gw = self.server.running.gateway if self.server.running else None
        assert gw is not None
        return len(gw.list_requests(status=Status.EXECUTED, limit=10_000))


def door_property(fz: DoorFuzz, max_examples: int) -> Callable[[], None]:
    @settings(max_examples=max_examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(door_payload())
    def prop(packets: list[bytes]) -> None:
        fz.send(packets)
        fz.check()

    return prop  # type: ignore[no-any-return]


def fuzz_door(seconds: float, tmp: Path) -> dict[str, Any]:
    with DoorFuzz(tmp) as fz:
        fz.check()
        warm = time.monotonic() + min(30.0, seconds / 4)
        while time.monotonic() < warm:
            door_property(fz, 20)()
        rss0 = rss_mib(fz)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            door_property(fz, 50)()
        rss1 = rss_mib(fz)
        fz.check()
        return {"cases": fz.cases, "bytes": fz.bytes_sent, "rss_before": rss0,
                "rss_after": rss1, "executed": fz.executed_writes()}


def rss_mib(_: object = None) -> float:
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0  # pragma: no cover


# --- the HTTP API -------------------------------------------------------------------------


def http_fuzz(examples: int, tmp: Path, who: str = "bot") -> dict[str, Any]:
    """schemathesis over every operation, ``examples`` cases each, as ``who``; then the
    stateful run (links between operations); the PSU must not change (nobody approves)."""
    import schemathesis
    from schemathesis.checks import not_a_server_error

    with DoorFuzz(tmp) as fz:
        url = fz.server.url
        schema = schemathesis.openapi.from_url(url + "/openapi.json").exclude(path="/v1/events")
        headers = {"Authorization": f"Bearer {fz.tokens[who]}"}
        calls = 0
        rss0 = rss_mib()
        for result in schema.get_all_operations():
            operation = result.ok()

            @given(case=operation.as_strategy())
            @settings(max_examples=examples, deadline=None, database=None,
                      suppress_health_check=list(HealthCheck))
            def check(case: Any) -> None:
                nonlocal calls
                response = case.call(headers=headers, timeout=70)
                calls += 1
                case.validate_response(response, checks=[not_a_server_error])

            check()
            fz.check()
        rss1 = rss_mib()
        fz.check()
        return {"calls": calls, "rss_before": rss0, "rss_after": rss1,
                "executed": fz.executed_writes()}


# --- main -------------------------------------------------------------------------------------


def _print_scpi(stats: Stats, seconds: float) -> None:
    print(f"scpi: {stats.cases} messages in {seconds:.0f} s ({stats.cases / seconds:.0f}/s); "
          f"parsed {stats.parsed}, read-only {stats.read_only}, refused "
          f"{sum(stats.refused.values())}")
    print("  refusals by code: " + ", ".join(
        f"{k}:{v}" for k, v in sorted(stats.refused.items(), key=lambda kv: -kv[1])[:12]))
    print("  units by effect:  " + ", ".join(
        f"{k}:{v}" for k, v in sorted(stats.effects.items(), key=lambda kv: -kv[1])))


def main(argv: list[str] | None = None) -> int:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=0.0, help="fuzz the SCPI core")
    parser.add_argument("--door-minutes", type=float, default=0.0, help="fuzz the socket door")
    parser.add_argument("--http-examples", type=int, default=0,
                        help="schemathesis cases per HTTP operation")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    if not (args.minutes or args.door_minutes or args.http_examples):
        args.minutes = 1.0
    if args.seed is not None:
        random.seed(args.seed)
    if args.minutes:
        t0 = time.monotonic()
        rss0 = rss_mib()
        print(f"separators in data: {check_separator_payloads()} messages with a ';' or a line "
              "break hidden in string or block data, every one refused")
        stats = fuzz_scpi(args.minutes * 60)
        _print_scpi(stats, time.monotonic() - t0)
        print(f"  RSS {rss0:.1f} -> {rss_mib():.1f} MiB (classify's cache holds 16384 entries)")
    if args.door_minutes:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.monotonic()
            r = fuzz_door(args.door_minutes * 60, Path(tmp))
            took = time.monotonic() - t0
        print(f"door: {r['cases']} hostile connections, {r['bytes'] / 1e6:.1f} MB in "
              f"{took:.0f} s; PSU unchanged after every one; writes executed {r['executed']}")
        print(f"  RSS (server and client, one process) {r['rss_before']:.1f} -> "
              f"{r['rss_after']:.1f} MiB after warm-up")
    if args.http_examples:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.monotonic()
            r = http_fuzz(args.http_examples, Path(tmp))
            took = time.monotonic() - t0
        print(f"http: {r['calls']} schemathesis calls in {took:.0f} s, no 5xx; PSU unchanged; "
              f"writes executed {r['executed']}; RSS {r['rss_before']:.1f} -> "
              f"{r['rss_after']:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
