"""Messages per second: bench_gate.scpi against labmcp-scpi's CommandPolicy, same messages.

    python bench/classify.py [--seconds 1.0]
    python bench/classify.py --corpus [bench/driver_corpus.txt]

``--corpus``: false holds and unsafe passes on real driver messages (bench/driver_corpus.py
records them): each message's verdict (pass, hold, refuse; policy defaults, no envelope)
against what its instrument's manual says a person must decide, by rules that know nothing
of the profiles (MUST_HOLD below). A false hold is a message that should pass but is held
(or refused); an unsafe pass is one a person must decide that passes.

Three columns, measured side by side in one run on a fixed mix of realistic messages:

- ours, uncached: a full parse and classification of every message (``classify_uncached``,
  bypassing the per-message ``lru_cache``), then the read-only decision;
- ours, cached: ``is_read_only`` as the gateway calls it, after one warm-up pass;
- theirs: ``labmcp_scpi.policy.CommandPolicy``: ``is_safe_query`` (its read-only decision),
  then ``check_command`` (its write check, with a typical denylist) for what is not a query.
"""

from __future__ import annotations

import argparse
import platform
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench_gate.config import PolicyConfig
from bench_gate.policy import decide as policy_decide
from bench_gate.scpi import ScpiError, classify, classify_uncached, get_profile, is_read_only

#: Recorded by bench/driver_corpus.py.
CORPUS = Path(__file__).with_name("driver_corpus.txt")

PROFILE = "e36312a"

#: What drivers and people send to a triple-output supply: reads, setpoints, compounds.
MESSAGES: tuple[str, ...] = (
    "*IDN?",
    "*OPC?",
    "SYST:ERR?",
    "MEAS:VOLT? (@1)",
    "MEAS:CURR? (@2)",
    ":MEASure:SCALar:VOLTage:DC? (@3)",
    "VOLT? (@1)",
    "CURR? MAX,(@2)",
    "OUTP? (@1)",
    "INST:NSEL 2;:MEAS:VOLT?",
    "MEAS:VOLT? (@1);CURR? (@1)",
    "VOLT 5,(@1)",
    "SOUR:VOLT:LEV:IMM:AMPL 12.5,(@2)",
    "CURR 100mA,(@1)",
    "VOLT 5000mV,(@1);:CURR 0.1A,(@1)",
    "APPL CH1,5,0.1",
    "OUTP ON,(@1)",
    "OUTP:STAT? (@1);STAT ON,(@1)",
    "VOLT:PROT 6.5,(@1)",
    "*RST;*CLS",
    "*TST?",
    "MEAS:VOLT? (@1);:OUTP ON,(@1)",
)

THEIR_OPTIONS = {
    "write_denylist": r"^OUTP\d*(:STAT)? (?!OFF\b)|^\*RST|^CAL|^SYST:SEC",
}


def ours_uncached() -> Callable[[str], bool]:
    get_profile(PROFILE)  # loaded once, before anything is timed

    def decide(message: str) -> bool:
        return classify_uncached(message, PROFILE).read_only

    return decide


def ours_cached() -> Callable[[str], bool]:
    def decide(message: str) -> bool:
        return is_read_only(message, profile=PROFILE)

    return decide


def theirs() -> Callable[[str], bool]:
    from labmcp_scpi.policy import CommandPolicy, CommandRefused

    policy = CommandPolicy.from_options(THEIR_OPTIONS)

    def decide(message: str) -> bool:
        if policy.is_safe_query(message):
            return True
        try:
            policy.check_command(message)
        except CommandRefused:
            pass
        return False

    return decide


def _slice(decide: Callable[[str], bool], seconds: float) -> float:
    """Messages per second over the fixed mix, for about ``seconds``."""
    count = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for message in MESSAGES:
            decide(message)
        count += len(MESSAGES)
        now = time.perf_counter()
        if now >= deadline:
            return count / (now - start)


def rates(columns: dict[str, Callable[[str], bool]], seconds: float) -> dict[str, float]:
    """Best slice per column; the columns take turns, so a busy machine slows them alike."""
    for decide in columns.values():  # warm-up (fills our cache for the cached column)
        for message in MESSAGES:
            decide(message)
    best = dict.fromkeys(columns, 0.0)
    for _ in range(10):
        for name, decide in columns.items():
            best[name] = max(best[name], _slice(decide, seconds / 10))
    return best


#: Per profile: a unit a person must decide, by the manual (not by the profile). A supply:
#: anything that sets a level, switches an output, arms or fires a trigger, resets, recalls
#: or self-tests. A meter: selecting a function that sources current into the DUT
#: (resistance, continuity, diode, capacitance, temperature by RTD or thermistor), resetting,
#: recalling or self-testing. An SMU (2450 Reference Manual, section 6): a source level, limit,
#: range, protection or function, the output and what it does while off, the terminals,
#: sweeps and the trigger model, the digital lines, resistance (auto-ohms sources a test
#: current), another command set, resetting, recalling or self-testing.
MUST_HOLD: dict[str, re.Pattern[str]] = {
    "e36312a": re.compile(
        r"^:?(\*(RST|RCL|TRG|TST\?)|(SOUR\w*:)?(VOLT|CURR)\w*(:\w+)*\s|OUTP\w*(:STAT\w*)?\s|"
        r"APPL\w*\s|OUTP\w*:(PAIR|TRAC|PROT|DEL)|INIT|TRIG)", re.IGNORECASE),
    "34465a": re.compile(
        r"^:?(\*(RST|RCL|TST\?)|SYST\w*:PRES|MMEM\w*:LOAD|"
        r"(CONF\w*|MEAS\w*)(:SCAL\w*)?:(RES|FRES|CAP|CONT|DIOD)|"
        r"(SENS\w*:)?FUNC\w*(:ON)?\s+\"(RES|FRES|CAP|CONT|DIOD|TEMP))", re.IGNORECASE),
    "k2450": re.compile(
        r"^:?(\*(RST|RCL|TRG|TST\?|LANG\s)|SOUR\w*:(FUNC\w*(:MODE)?\s|SWE|LIST|CONF)|"
        r"SOUR\w*:(VOLT|CURR)\w*((:LEV\w*)?(:IMM\w*)?(:AMPL\w*)?|"
        r":(ILIM|VLIM|RANG|PROT|HIGH)\w*(:\w+)*)\s|OUTP\w*(:STAT\w*)?\s|OUTP\w*:\w+:SMOD\w*\s|"
        r"ROUT\w*:TERM\w*\s|INIT|TRIG\w*:LOAD|ABOR|DIG\w*:LINE\d*:(STAT|MODE)\w*\s|"
        r"(SENS\w*:)?FUNC\w*(:ON)?\s+['\"]RES|MEAS\w*:RES)", re.IGNORECASE),
    # The E3631A (User's Guide, chapter 4): a level on the selected output or by APPLy,
    # OUTPut (every output at once), tracking, a trigger armed or fired, reset, recall,
    # self-test. A selection alone (INST:NSEL 1) changes nothing.
    "e3631a": re.compile(
        r"^:?(\*(RST|RCL|TRG|TST\?)|(SOUR\w*:)?(VOLT|CURR)\w*(:\w+)*\s|OUTP\w*(:STAT\w*)?\s|"
        r"APPL\w*\s|OUTP\w*:TRAC\w*(:STAT\w*)?\s|INIT|TRIG\w*(:SEQ\w*)?:\w+\s)",
        re.IGNORECASE),
    # The DP832 (DP800 guide, chapter 2): a level or protection on a channel (:SOURce, the
    # selected one too), an output, :APPLy, tracking, a trigger armed or fired, a protection
    # cleared, reset, recall, self-test. A selection alone changes nothing.
    "dp832": re.compile(
        r"^:?(\*(RST|RCL|TRG|TST\?)|(SOUR\w*:)?(VOLT|CURR)\w*(:\w+)*\s|OUTP\w*(:STAT\w*)?\s|"
        r"APPL\w*\s|OUTP\w*:(TRAC|OVP|OCP)\w*(:\w+)*\s|OUTP\w*:(OVP|OCP)\w*:CLE|INIT|TRIG)",
        re.IGNORECASE),
    "dmm6500": re.compile(
        r"^:?(\*(RST|RCL|TST\?|LANG\s)|"
        r"(CONF\w*|MEAS\w*)(:SCAL\w*)?:(RES|FRES|CAP|CONT|DIOD|TEMP)|"
        r"(SENS\w*:)?TEMP\w*:TRAN\w*\s+(RTD|FRTD|THER)|(SENS\w*:)?DIOD\w*:BIAS\w*(:LEV\w*)?\s|"
        r"(SENS\w*:)?FUNC\w*(:ON)?\s+['\"](RES|FRES|CAP|CONT|DIOD|TEMP))", re.IGNORECASE),
}


def must_hold(profile: str, message: str) -> bool:
    return any(MUST_HOLD[profile].match(unit.strip()) for unit in message.split(";"))


def verdict(profile: str, message: str) -> str:
    try:
        c = classify(message, profile)
    except ScpiError:
        return "refuse"
    return policy_decide(c, {}, PolicyConfig()).verdict.value


def corpus_report(path: Path) -> int:
    rows = [line.split("\t", 2) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]
    print(f"{len(rows)} driver messages from {path}")
    worst = 0
    for profile in sorted({p for p, _, _ in rows}):
        mine = [(driver, message) for p, driver, message in rows if p == profile]
        held = falsely = unsafe = refused = 0
        notes = []
        for driver, message in mine:
            got = verdict(profile, message)
            should = must_hold(profile, message)
            held += should
            if not should and got != "pass":
                falsely += got == "hold"
                refused += got == "refuse"
                notes.append(f"  false {got}: {message!r} ({driver})")
            if should and got == "pass":
                unsafe += 1
                notes.append(f"  UNSAFE PASS: {message!r} ({driver})")
        passing = len(mine) - held
        share = (falsely + refused) / passing * 100 if passing else 0.0
        worst = max(worst, unsafe)
        print(f"{profile}: {len(mine)} messages, {held} a person must decide; "
              f"false holds {falsely}, false refusals {refused} "
              f"({share:.1f} % of the {passing} that should pass); unsafe passes {unsafe}")
        if notes:
            print("\n".join(notes))
    return 1 if worst else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="time per column")
    parser.add_argument("--corpus", type=Path, nargs="?", const=CORPUS,
                        help="report false holds and unsafe passes on a driver corpus")
    args = parser.parse_args(argv)
    if args.corpus is not None:
        return corpus_report(args.corpus)

    columns = {
        "bench_gate.scpi, uncached (full parse)": ours_uncached(),
        "bench_gate.scpi, cached (is_read_only)": ours_cached(),
        "labmcp_scpi CommandPolicy": theirs(),
    }
    measured = rates(columns, args.seconds)
    ours_u, ours_c, their = measured.values()

    print(f"{len(MESSAGES)} messages, profile {PROFILE}, Python {platform.python_version()}")
    width = max(len(n) for n in measured)
    print(f"{'':{width}}  {'msg/s':>12}  {'µs/msg':>8}")
    for name, r in measured.items():
        print(f"{name:{width}}  {r:12,.0f}  {1e6 / r:8.2f}")
    print(f"ours uncached / theirs: {ours_u / their:6.2f}x")
    print(f"ours cached   / theirs: {ours_c / their:6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
