"""``bench-gate``: serve the bench, manage tokens, and decide requests from a terminal.

``serve``, ``token`` and ``journal verify|export|archive`` work locally (on the store);
every other command talks to a running server (``--url``, token from ``--token`` or
``BENCH_GATE_TOKEN``). The global options (``--url``, ``--token``, ``--json``) go before or
after the command. A request is named by its id or by a unique prefix of it.

``bench-gate wait TK`` exits with the outcome: 0 executed, 3 denied, 4 expired, 5 stale,
6 failed or ambiguous, 7 cancelled, 8 still undecided at ``--timeout``; 1 is any other error
and 2 a usage error. ``approve`` and ``deny`` print the proposal they decide on and name its
hash; they exit 9 when the request changed since (nothing is decided; the current proposal
is printed). ``journal verify`` exits 0 when the chain is intact and 10 when it is not.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from . import _cli_decide as decide
from . import _cli_local as local
from . import _cli_remote as remote
from ._cli_common import BROKEN, CHANGED, ERROR, CliError, finite, port, seconds, whole
from ._cli_profile import add_commands as profile_commands
from ._cli_profile import check as profile_check
from ._cli_profile import test as profile_test
from .client import ApiError
from .config import MAX_KEEP_DAYS
from .doorway import EXIT_CODES, problem_named, problem_of
from .terms import MAX_TERM, MIN_TERM
from .texts import visible

__all__ = ["BROKEN", "CHANGED", "ERROR", "EXIT_CODES", "EXIT_HELP", "CliError", "main", "parser"]

#: ``journal ACTION``; anything else after ``journal`` is a run (``journal RUN`` shows it).
JOURNAL_ACTIONS = ("show", "verify", "export", "archive")
_REQUEST = "a request id, or a unique prefix of one (tk-731969e3)"
#: Options that take a value, among the global ones (``_legacy_journal`` skips them).
_VALUED = ("--url", "--token")

#: ``wait``'s exit codes, for ``--help`` (the README lists the same).
EXIT_HELP = """exit codes:
  0  executed
  3  denied
  4  expired
  5  stale (the instrument changed since approval; its fresh request is printed)
  6  failed or ambiguous
  7  cancelled
  8  still undecided at --timeout
  1  any other error (a clear one-line message), 2 a usage error"""


def _legacy_journal(argv: list[str]) -> list[str]:
    """``journal RUN`` (before verify, export and archive) still shows a run's journal."""
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] in _VALUED else 1
    if i + 1 < len(argv) and argv[i] == "journal" and argv[i + 1] not in JOURNAL_ACTIONS \
            and not argv[i + 1].startswith("-"):
        return [*argv[:i + 1], "show", *argv[i + 1:]]
    return argv


# ------------------------------------------------------------------------- parser
def _global_options(p: argparse.ArgumentParser, default: bool) -> None:
    """``--url``, ``--token`` and ``--json``: on the top parser with their defaults, and on
    every command with none (``SUPPRESS``), so one given after the command wins and one
    given before it is kept."""
    def d(value: object) -> object:
        return value if default else argparse.SUPPRESS

    p.add_argument("--url", default=d(os.environ.get("BENCH_GATE_URL",
                                                     "http://127.0.0.1:8000")),
                   help="the server (default http://127.0.0.1:8000, or BENCH_GATE_URL)")
    p.add_argument("--token", default=d(None),
                   help="bearer token (default: BENCH_GATE_TOKEN)")
    p.add_argument("--json", action="store_true", default=d(False),
                   help="print JSON (camelCase, as the API) instead of text, where the "
                        "command has it")


#: Commands that work on this machine, never on a server: no ``--url``/``--token``.
_LOCAL: set[Callable[[argparse.Namespace], int]] = {
    local.serve, local.token_create, local.token_list, local.token_revoke,
    local.journal_verify, local.journal_export, local.journal_archive, profile_check,
    profile_test}
#: Commands whose output JSON means nothing for: a server's banner, MCP's own stdio.
NO_JSON: dict[Callable[[argparse.Namespace], int], str] = {
    local.serve: "serve prints its banner, no JSON (the API at --url is JSON)",
    local.mcp: "mcp speaks MCP (JSON-RPC) on stdout already"}


def _takes(p: argparse.ArgumentParser) -> tuple[bool, bool]:
    """Whether ``p`` (a command, or a group of them) talks to a server and prints JSON."""
    fn = p._defaults.get("fn")
    if fn is not None:
        return fn not in _LOCAL, fn not in NO_JSON
    remote = json_ = False
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sp in action.choices.values():
                r, j = _takes(sp)
                remote, json_ = remote or r, json_ or j
    return remote, json_


def _every_command(p: argparse.ArgumentParser) -> None:
    """Give every command (at any depth) the global options it uses: ``--url`` and
    ``--token`` if it talks to a server, ``--json`` if it prints JSON; its help lists
    exactly what it takes."""
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sp in dict.fromkeys(action.choices.values()):
                _every_command(sp)
                if "--json" in sp._option_string_actions \
                        or "--url" in sp._option_string_actions:
                    continue
                remote, json_ = _takes(sp)
                if remote:
                    sp.add_argument("--url", default=argparse.SUPPRESS,
                                    help="the server (default http://127.0.0.1:8000, or "
                                         "BENCH_GATE_URL)")
                    sp.add_argument("--token", default=argparse.SUPPRESS,
                                    help="bearer token (default: BENCH_GATE_TOKEN)")
                if json_:
                    sp.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                                    help="print JSON (camelCase, as the API) instead of text")


def parser() -> argparse.ArgumentParser:
    """The whole command line: every command with its options and help."""
    p = argparse.ArgumentParser(prog="bench-gate", description=(
        "An approval gateway for lab-bench instruments: queries pass, writes wait for a "
        "person."), epilog="`bench-gate wait`'s " + EXIT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    _global_options(p, default=True)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def cmd(name: str, fn: Callable[[argparse.Namespace], int], help: str,
            epilog: str | None = None) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help, description=help, epilog=epilog,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        sp.set_defaults(fn=fn)
        return sp

    s = cmd("serve", local.serve, "serve the bench (the simulated one unless --config says "
                             "otherwise)")
    s.add_argument("--config", help="a bench.toml (instruments, envelope, policy, server)")
    s.add_argument("--db", help="the store: a SQLite file (default: in the data directory) "
                                "or a postgresql:// URL shared by several benches")
    s.add_argument("--bench", help="this gateway's bench name (default: from --config, or "
                                   "sim-bench)")
    s.add_argument("--host", help="HTTP address (default 127.0.0.1)")
    s.add_argument("--port", type=port, help="HTTP port (default 8000)")
    s.add_argument("--sim", action="store_true", help="start the simulated bench with --config")
    s.add_argument("--sim-psu-port", type=port, default=5555, help="(default %(default)s)")
    s.add_argument("--sim-dmm-port", type=port, default=5556, help="(default %(default)s)")
    s.add_argument("--door", action="append", metavar="NAME=PORT",
                   help="the raw-SCPI socket door of instrument NAME on PORT (0: a free one); "
                        "repeat per instrument (default: psu=5025, dmm=5026 on the simulated "
                        "bench)")
    s.add_argument("-v", "--verbose", action="store_true", help="log every HTTP request")

    t = sub.add_parser("token", help="create, list and revoke tokens (on the local store)")
    t.add_argument("--db", help="the store: a SQLite file or a postgresql:// URL")
    tsub = t.add_subparsers(dest="token_command", required=True, metavar="ACTION")
    tc = tsub.add_parser("create", help="print a new token (shown once)")
    tc.add_argument("--name", required=True)
    tc.add_argument("--role", required=True, choices=["requester", "operator", "admin"])
    tc.set_defaults(fn=local.token_create)
    tl = tsub.add_parser("list", help="every token (never the secrets)")
    tl.set_defaults(fn=local.token_list)
    tr = tsub.add_parser("revoke", help="revoke a token by id, or every token of a name")
    tr.add_argument("id_or_name")
    tr.set_defaults(fn=local.token_revoke)
    for sp in (tc, tl, tr):
        sp.add_argument("--db", default=argparse.SUPPRESS, help=(
            "the store: a SQLite file (default: in the data directory) or a postgresql:// "
            "URL; the one `serve` printed"))

    pe = cmd("pending", remote.pending, "the requests waiting for a decision, a page at a time, "
                                  "with how many wait in all")
    pe.add_argument("--sort", choices=["expiry", "newest"], default="expiry",
                    help="expiry: soonest first, what must be decided before it is lost "
                         "(the default); newest: created last, first")
    pe.add_argument("--limit", type=whole(1, 1000), default=100,
                    help="rows per page (1 to 1000; default %(default)s)")
    pe.add_argument("--offset", type=whole(0, 2**31 - 1), default=0,
                    help="skip this many (default 0)")
    pe.add_argument("--instrument", help="only this instrument's")
    sh = cmd("show", decide.show, "one request with everything the console's request page "
                                  "shows: actions, margins, approvals given and missing, the "
                                  "outcome and its read-back")
    sh.add_argument("request", help=_REQUEST)
    a = cmd("approve", decide.approve, "give approvals; the write runs when none is missing")
    a.add_argument("request", help=_REQUEST)
    a.add_argument("--setpoint", action="store_true",
                   help="approve the values it sets (voltage, current limit)")
    a.add_argument("--output-enable", action="store_true",
                   help="approve switching an output on (energizing the DUT)")
    a.add_argument("--state", action="store_true",
                   help="approve a change of state the gateway cannot predict or that "
                        "drives the DUT (a reset, a meter that sources current)")
    a.add_argument("--set", action="append", metavar="CH1.voltage=5",
                   help="approve with a changed value (repeatable)")
    a.add_argument("--notes", help="a note kept with the approval and shown to the requester")
    d = cmd("deny", decide.deny, "deny a request; the notes go back to the requester")
    d.add_argument("request", help=_REQUEST)
    d.add_argument("--notes", required=True, help="why: the requester reads it")
    for sp in (a, d):
        sp.add_argument("--hash", metavar="PROPOSAL_HASH", help=(
            "decide only on this proposal (the hash `show` printed); without it, on the "
            "proposal you were last shown (a request never shown to you is printed and "
            "nothing is decided). A proposal that changed exits 9"))
    st = cmd("stop", remote.stop, "EMERGENCY STOP: every output off at once, pending requests "
                            "cancelled, writes refused until an operator clears it")
    where = st.add_mutually_exclusive_group()
    where.add_argument("--all", action="store_true", help="every instrument (the default)")
    where.add_argument("--instrument", help="only this instrument")
    st.add_argument("--clear", action="store_true", help="end the stop (operators)")
    r = cmd("release", remote.release, "end a takeover or a suspension: the run's writes go "
                                       "on (a suspension: not by the run's own requester)")
    r.add_argument("run")
    cmd("status", remote.status, "the instruments, and whether each is locked to the "
                                 "gateway (a warning when not)")
    cmd("runs", remote.runs, "the runs (a requester: its own)")
    j = sub.add_parser("journal", help="a run's journal (over HTTP); verify, export and "
                                       "archive the journal's hash chain (on the local store)")
    jsub = j.add_subparsers(dest="journal_command", required=True, metavar="ACTION")
    jw = jsub.add_parser("show", help="a run's journal, oldest first (`journal RUN` too)")
    jw.add_argument("run")
    jw.set_defaults(fn=remote.journal)
    jv = jsub.add_parser("verify", help="walk the hash chain of the store (and its archived "
                                        "segments), or of an exported file; exit 10 if broken")
    jv.add_argument("--file", help="an export or a segment file, checked without the store "
                                   "(with --db too: also against the store, both ways)")
    jv.set_defaults(fn=local.journal_verify)
    je = jsub.add_parser("export", help="a run's events with their hashes, as a self-contained "
                                        "JSON Lines file that `verify --file` checks anywhere")
    je.add_argument("--run", required=True)
    je.add_argument("-o", "--output", help="the file (default: journal-RUN.jsonl)")
    je.set_defaults(fn=local.journal_export)
    ja = jsub.add_parser("archive", help="move the oldest events to segment files and delete "
                                         "them from the store ([journal] keep_days)")
    ja.add_argument("--before", metavar="DATE", help="archive events journaled before this "
                                                    "(ISO 8601; a time without zone is UTC)")
    ja.add_argument("--keep-days", type=whole(1, MAX_KEEP_DAYS), metavar="N",
                    help="archive events older than N days (1 to 36525)")
    ja.add_argument("--config", help="a bench.toml: its [journal] keep_days and archive_dir")
    ja.set_defaults(fn=local.journal_archive)
    for sp in (jv, je, ja):
        sp.add_argument("--db", help="the store: a SQLite file (default: in the data "
                                     "directory) or a postgresql:// URL")
        sp.add_argument("--archive-dir", metavar="DIR", help=(
            "where segment files are (written to, for archive; default: [journal] "
            "archive_dir, else journal-archive beside a SQLite store, else in the data "
            "directory)"))
    wt = cmd("watch", remote.watch, "request and run changes, live, each with its command")
    wt.add_argument("--timeout", type=seconds, metavar="SECONDS",
                    help="stop watching after this many seconds (exit 0)")
    w = cmd("wait", remote.wait, "wait for a request's decision; the exit code tells the "
            "outcome. On a terminal a status line shows the approvals given and missing and "
            "the time left; piped, only the outcome is printed", epilog=EXIT_HELP)
    w.add_argument("request", help=_REQUEST)
    w.add_argument("--timeout", type=seconds, help="give up after this many seconds (exit 8)")
    mc = cmd("mcp", local.mcp, "serve MCP on stdio for an agent, acting for the token's "
                              "requester (BENCH_GATE_TOKEN) against --url")
    mc.add_argument("--heartbeat-seconds", type=whole(MIN_TERM, MAX_TERM), default=60,
                    metavar="N", help=(
        "the session's run closes (its undecided requests cancelled) if this process is "
        "not heard from for N seconds: killed, out of memory, a laptop lid shut. It "
        "heartbeats four times a term (default 60; 2 to 86400)"))
    qs = cmd("questions", remote.questions, "questions agents asked the operator (open ones)")
    qs.add_argument("--all", action="store_true", help="answered and expired ones too")
    an = cmd("answer", remote.answer, "answer an agent's questions, one answer each in order (an "
                                "option's label, or free text)")
    an.add_argument("question")
    an.add_argument("answers", nargs="+", metavar="ANSWER")
    an.add_argument("--notes")

    pl = sub.add_parser("plan", help="ask for or revoke a standing plan (docs/plans.md)")
    plsub = pl.add_subparsers(dest="plan_command", required=True, metavar="ACTION")
    pr = plsub.add_parser("request", help="ask for a plan for a run; decided with `approve`")
    pr.add_argument("run")
    pr.add_argument("--instrument", required=True)
    pr.add_argument("--channels", required=True, nargs="+", type=int, metavar="CH")
    pr.add_argument("--voltage", required=True, nargs=2, type=finite, metavar=("MIN", "MAX"))
    pr.add_argument("--current-max", required=True, type=finite, metavar="A")
    pr.add_argument("--max-step", type=finite, metavar="V",
                    help="largest change from the live setpoint (default: no limit)")
    pr.add_argument("--output-enable", action="store_true",
                    help="include switching the channels on (needs its own approval)")
    pr.add_argument("--max-writes", required=True, type=int)
    pr.add_argument("--timeout", type=int, default=60, metavar="MINUTES",
                    help="how long the plan lives once approved (default %(default)s)")
    pr.add_argument("--rationale")
    pr.set_defaults(fn=remote.plan_request)
    pv = plsub.add_parser("revoke", help="end a plan now (operators): the next write is held")
    pv.add_argument("run")
    pv.add_argument("plan")
    pv.set_defaults(fn=remote.plan_revoke)
    ps = cmd("plans", remote.plans, "a run's plans with their status and writes left")
    ps.add_argument("run")
    profile_commands(sub)
    _every_command(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from .errors import GatewayError

    p = parser()
    args = p.parse_args(_legacy_journal(list(sys.argv[1:] if argv is None else argv)))
    if args.json and args.fn in NO_JSON:  # given before the command: never ignored
        p.error(f"--json: {NO_JSON[args.fn]}")
    try:
        code: int = args.fn(args)
        return code
    except ApiError as exc:
        hint = ""
        if exc.status == 401:
            hint = " (check --token or BENCH_GATE_TOKEN)"
        print(visible(f"bench-gate: {exc}{hint}"), file=sys.stderr)
        row = problem_named(str(exc.problem.get("type") or "").rpartition("/")[2])
        return row.exit if row is not None else ERROR
    except GatewayError as exc:
        print(visible(f"bench-gate: {exc}"), file=sys.stderr)
        return problem_of(exc).exit
    except CliError as exc:
        print(visible(f"bench-gate: {exc}"), file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    return ERROR


if __name__ == "__main__":
    sys.exit(main())
