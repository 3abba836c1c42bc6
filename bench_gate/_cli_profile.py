"""``bench-gate profile check FILE`` and ``bench-gate profile test FILE --resource ...``:
a lab's own profile, checked and walked against its instrument (docs/profiles.md)."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator

from ._cli_common import CliError, echo, print_json
from .identity import fits, identities
from .profile_check import Level, check_profile, walk_queries
from .scpi import ProfileError, get_profile

__all__ = ["add_commands", "check", "test"]

#: ``profile check`` found an error; ``profile test`` found a query left unanswered.
FOUND = 1


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pf = sub.add_parser("profile", help="check a profile, or walk its queries against an "
                                        "instrument (docs/profiles.md)")
    psub = pf.add_subparsers(dest="profile_command", required=True, metavar="ACTION")
    pc = psub.add_parser("check", help="report headers that are missing or inconsistent")
    pc.add_argument("file", help="a profile's YAML file, or a shipped profile's name")
    pc.set_defaults(fn=check)
    pt = psub.add_parser("test", help="send every read-only query of the profile and report "
                                      "those the instrument does not answer")
    pt.add_argument("file", help="a profile's YAML file, or a shipped profile's name")
    where = pt.add_mutually_exclusive_group(required=True)
    where.add_argument("--resource", help="a VISA resource: TCPIP0::host::5025::SOCKET, "
                                          "USB0::..., or a simulator's")
    where.add_argument("--sim", action="store_true",
                       help="the shipped profile's own simulator, started for the test")
    pt.add_argument("--backend", default="@py",
                    help="the pyvisa backend (default %(default)s; '' for the system VISA)")
    pt.add_argument("--timeout", type=int, default=3000, metavar="MS",
                    help="how long one answer may take (default %(default)s)")
    pt.add_argument("--passing", action="store_true",
                    help="every query the profile lets pass, not only reads: on a meter "
                         "MEAS? reconfigures it, so only on a simulator or a spare instrument")
    pt.add_argument("--channel", type=int, help="the channel a query without (@...) means "
                                                "(default: the first)")
    pt.set_defaults(fn=test)


def check(args: argparse.Namespace) -> int:
    report = check_profile(args.file)
    errors = sum(1 for f in report.findings if f.level is Level.ERROR)
    warnings = len(report.findings) - errors
    profile = report.profile
    if args.json:
        print_json({"file": args.file, "profile": profile.name if profile else None,
                    "headers": len(profile.model.commands) if profile else None,
                    "complete": bool(profile and profile.complete), "ok": report.ok,
                    "errors": errors, "warnings": warnings,
                    "findings": [{"level": f.level.value, "header": f.header,
                                  "message": f.message} for f in report.findings]})
        return 0 if report.ok else FOUND
    for finding in report.findings:
        echo(str(finding))
    if profile is not None:
        commands = len(profile.model.commands)
        complete = ", complete" if profile.complete else ""
        echo(f"{profile.name}: {commands} headers{complete}; {errors} error(s), "
             f"{warnings} warning(s)")
    return 0 if report.ok else FOUND


@contextlib.contextmanager
def _resource(args: argparse.Namespace, profile_name: str) -> Iterator[str]:
    if not args.sim:
        yield str(args.resource)
        return
    from sim_instruments import (
        DMM_PROFILE,
        PSU_PROFILE,
        SimBenchThread,
        SimServedThread,
        extra_for_profile,
    )

    extra = extra_for_profile(profile_name)  # an instrument simulated on its own
    if extra is not None:
        with SimServedThread(extra) as served:
            yield served.resource_name
        return
    which = {PSU_PROFILE: "psu", DMM_PROFILE: "dmm", "generic": "psu"}.get(profile_name)
    if which is None:
        raise CliError(f"no simulator plays {profile_name!r}: give --resource")
    with SimBenchThread() as bench:
        yield bench.psu_resource_name if which == "psu" else bench.dmm_resource_name


def test(args: argparse.Namespace) -> int:
    import pyvisa

    try:
        profile = get_profile(args.file)
    except ProfileError as exc:
        raise CliError(str(exc)) from exc
    with _resource(args, profile.name) as name:
        try:
            rm = pyvisa.ResourceManager(args.backend) if args.backend else \
                pyvisa.ResourceManager()
            res = rm.open_resource(name, read_termination="\n", write_termination="\n",
                                   timeout=args.timeout)
        except (pyvisa.Error, OSError, ValueError) as exc:
            raise CliError(f"cannot open {name!r}: {exc}") from exc
        try:
            idn = _ask(res, "*IDN?")
            if not args.json:
                echo(f"{name}: {idn or '(no answer to *IDN?)'}")
            expected = identities(profile)
            if not fits(expected, idn or ""):  # its "read-only" queries are another model's
                raise CliError(f"{name} answers *IDN? {idn!r}, but the profile describes "
                               f"{' or '.join(repr(e) for e in expected)}: no query was "
                               "sent (one model's read may change another's state)")
            sent, bad = walk_queries(profile, lambda q: _ask(res, q), passing=args.passing,
                                     selected=args.channel)
        except OSError as exc:  # pyvisa-py connects a SOCKET resource on its first write
            raise CliError(f"cannot reach {name!r}: {exc.strerror or exc}") from exc
        finally:
            res.close()
            rm.close()
    if args.json:
        print_json({"profile": profile.name, "resource": name, "idn": idn,
                    "passing": args.passing, "sent": sent, "answered": sent - len(bad),
                    "unanswered": [str(miss) for miss in bad]})
        return 0 if not bad else FOUND
    for miss in bad:
        echo(f"unanswered: {miss}")
    what = "passing queries" if args.passing else "read-only queries"
    echo(f"{profile.name}: {sent} {what} sent, {sent - len(bad)} answered, {len(bad)} not")
    return 0 if not bad else FOUND


def _ask(res: object, query: str) -> str | None:
    import pyvisa

    try:
        answer = str(res.query(query))  # type: ignore[attr-defined]
    except pyvisa.errors.VisaIOError:
        return None
    return answer
