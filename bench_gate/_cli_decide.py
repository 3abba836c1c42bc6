"""``bench-gate show``, ``approve`` and ``deny``: a request as its reviewer reads it, and a
decision on exactly the proposal that person was shown (``_cli_shown``), never one fetched
at the moment of deciding."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ._cli_common import CHANGED, CliError, client_for, echo, identity, print_json, say
from ._cli_show import said, summary
from ._cli_shown import recall, remember
from .client import Client, ProposalChangedError
from .doorway import UNDECIDED, exit_code
from .texts import visible

__all__ = ["approve", "deny", "show"]


def _shown(args: argparse.Namespace, tk: dict[str, Any]) -> dict[str, Any]:
    """Print ``tk`` as ``show`` does, and remember that its person was shown this proposal."""
    if args.json:
        print_json(tk)
    else:
        summary(tk)
    url, token = identity(args)
    remember(url, token, str(tk["id"]), str(tk["proposalHash"]))
    return tk


def show(args: argparse.Namespace) -> int:
    with client_for(args) as c:
        _shown(args, c.get(args.request))
    return 0


def _decide(args: argparse.Namespace, c: Client) -> tuple[dict[str, Any], str | None]:
    """Fetch the request (by id or prefix) and the hash to name: ``--hash``, else the
    proposal this person was last shown (``show``, or a decision that printed a changed
    one), never the one fetched now: that may have changed since they read it. None,
    with the proposal printed now and remembered, when this person was never shown it:
    nothing is decided."""
    tk = c.get(args.request)
    url, token = identity(args)
    seen = args.hash or recall(url, token, str(tk["id"]))
    if seen is None:
        _shown(args, tk)
        return tk, None
    return tk, seen


def _decided(args: argparse.Namespace, tk: dict[str, Any], seen: str, doing: str) -> None:
    """What was decided on, printed once the server took the decision: one it refused (a
    requester's, the request's own requester's: 403) prints its error alone, never a
    summary under "approving ..." that reads as if it were happening."""
    if seen == tk["proposalHash"] and not args.json:
        echo(f"{doing}:")
        summary(tk)


def _unseen(tk: dict[str, Any], nothing: str) -> int:
    print(visible(f"bench-gate: {tk['id']} was not shown to you before (bench-gate show "
                  f"{tk['id']}); nothing was {nothing}. It is printed above: decide again to "
                  "decide on exactly this proposal, or name one with --hash"), file=sys.stderr)
    return CHANGED


def _changed(args: argparse.Namespace, request_id: str, exc: ProposalChangedError,
             nothing: str) -> int:
    """The 409 of a decision on a proposal that is no longer current: show the current one."""
    print(visible(f"bench-gate: {request_id} changed since it was shown (proposal "
                  f"{(exc.seen_hash or '?')[:12]}, now {(exc.current_hash or '?')[:12]}); "
                  f"nothing was {nothing}. Read the current proposal and decide again:"),
          file=sys.stderr)
    if exc.current:
        _shown(args, exc.current)
    return CHANGED


def approve(args: argparse.Namespace) -> int:
    kinds = [k for k, on in (("setpoint", args.setpoint), ("output_enable", args.output_enable),
                             ("state", args.state)) if on]
    if not kinds:
        raise CliError("say what you approve: --setpoint, --output-enable and/or --state")
    edits = {}
    for item in args.set or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise CliError(f"--set {item!r}: write it as CH1.voltage=5")
        edits[key.strip()] = value.strip()
    with client_for(args) as c:
        tk, seen = _decide(args, c)
        if seen is None:
            return _unseen(tk, "approved")
        try:
            result = c.grant(tk["id"], kinds, notes=args.notes or "", edits=edits or None,
                             proposal_hash=seen)
        except ProposalChangedError as exc:
            return _changed(args, tk["id"], exc, "approved")
    _decided(args, tk, seen, f"approving {', '.join(kinds)}"
                             + (f" with {', '.join(args.set)}" if edits else ""))
    req = result["request"]
    if args.json:
        print_json(result)
    else:
        say(said(req, result["message"]))
        if req.get("supersededBy"):
            echo(f"fresh request: {req['supersededBy']} (bench-gate show "
                 f"{req['supersededBy']})")
    # The approval is given: 0 whether it ran or waits (for another approval, for its
    # requester's resend, for the bench that owns it); an outcome other than executed (stale,
    # failed...) keeps its exit code.
    return 0 if req["status"] == "executed" or req["status"] in UNDECIDED \
        else exit_code(req["status"])


def deny(args: argparse.Namespace) -> int:
    with client_for(args) as c:
        tk, seen = _decide(args, c)
        if seen is None:
            return _unseen(tk, "denied")
        try:
            req = c.deny(tk["id"], args.notes, proposal_hash=seen)
        except ProposalChangedError as exc:
            return _changed(args, tk["id"], exc, "denied")
    _decided(args, tk, seen, "denying")
    if args.json:
        return print_json(req)
    say(said(req))  # a denial that suspended its run says so in its outcome
    return 0
