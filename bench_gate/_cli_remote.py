"""``bench-gate`` commands that talk to a running server through the HTTP API: the queue,
decisions, runs, journals, plans, questions, the emergency stop, and ``wait``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime
from typing import Any

import httpx

from ._cli_common import CHANGED, CliError, ago, client_for, echo, table
from .client import ApiError, Client, ProposalChangedError
from .doorway import exit_code, follow_remote

__all__ = ["answer", "approve", "deny", "journal", "pending", "plan_request", "plan_revoke",
           "plans", "questions", "release", "runs", "show", "stop", "wait", "watch"]


# ------------------------------------------------------------------------- remote
_SORT_WORDS = {"expiry": "soonest expiry first", "newest": "newest first"}


def pending(args: argparse.Namespace) -> int:
    with client_for(args) as c:
        page, total = c.pending_page(args.instrument, sort=args.sort, limit=args.limit,
                                     offset=args.offset)
    rows = [[tk["id"], tk["runId"], tk["instrument"], tk["message"][:40],
             ",".join(tk["approvalsMissing"]) or "-",
             ",".join(a["kind"] for a in tk["approvalsGiven"]) or "-",
             ago(tk["expiresAt"])] for tk in page]
    table(["REQUEST", "RUN", "INSTR", "COMMAND", "NEEDS", "GIVEN", "EXPIRES IN"], rows)
    if page:
        shown = f"{args.offset + 1}-{args.offset + len(page)} of {total}"
    else:
        shown = f"none of {total} at offset {args.offset}" if total else "0"
    line = f"{shown} pending, {_SORT_WORDS[args.sort]}"
    if args.offset + len(page) < total:
        line += f"; next page: --offset {args.offset + len(page)}"
    echo(line)
    return 0


def show(args: argparse.Namespace) -> int:
    with client_for(args) as c:
        tk = c.get(args.request)
    if args.json:
        echo(json.dumps(tk, indent=2))
        return 0
    _summary(tk)
    return 0


def _summary(tk: dict[str, Any]) -> None:
    """A request as a reviewer reads it (``show``, and what ``approve``/``deny`` decide)."""
    h = tk.get("handoff") or {}
    echo(f"{tk['id']}  {tk['status'].upper()}  on {tk['instrument']}  (run {tk['runId']})")
    echo(f"  command       {tk['message']}")
    echo(f"  requester     {h.get('run', {}).get('principal')} "
         f"({h.get('run', {}).get('kind')}), goal: {h.get('goal') or '-'}")
    echo(f"  rationale     {h.get('rationale') or '-'}")
    echo("  actions")
    for a in h.get("actions", []):
        echo(f"    - {a.get('words') or a.get('canonical')}")
    echo(f"  reversibility {h.get('reversibility', '-')}")
    for signal in (h.get("risk") or {}).get("signals", []):
        echo(f"  risk          {signal}")
    for key, (old, new) in (h.get("diff") or {}).items():
        echo(f"  change        {key}: {old} → {new}")
    echo(f"  required      {', '.join(tk['required'])}")
    given = ", ".join(f"{a['kind']} by {a['by']}" for a in tk["approvalsGiven"]) or "-"
    echo(f"  given         {given}")
    echo(f"  missing       {', '.join(tk['approvalsMissing']) or '-'}")
    echo(f"  expires       {tk['expiresAt']} ({ago(tk['expiresAt'])})")
    if tk.get("outcome"):
        echo(f"  outcome       {tk['outcome']}")
    echo(f"  proposal      {tk['proposalHash']}")


def _shown(c: Client, args: argparse.Namespace, doing: str) -> str:
    """Fetch the request and print what is being decided; the hash to name. A ``--hash``
    pinned earlier is named as it is (if it is no longer current the server says so)."""
    tk = c.get(args.request)
    if args.hash is None or args.hash == tk["proposalHash"]:
        echo(f"{doing}:")
        _summary(tk)
    return str(args.hash or tk["proposalHash"])


def _changed(request_id: str, exc: ProposalChangedError, nothing: str) -> int:
    """The 409 of a decision on a proposal that is no longer current: show the current one."""
    print(f"bench-gate: {request_id} changed since it was shown (proposal "
          f"{(exc.seen_hash or '?')[:12]}, now {(exc.current_hash or '?')[:12]}); nothing "
          f"was {nothing}. Read the current proposal and decide again:", file=sys.stderr)
    if exc.current:
        _summary(exc.current)
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
        seen = _shown(c, args, f"approving {', '.join(kinds)}"
                               + (f" with {', '.join(args.set)}" if edits else ""))
        try:
            result = c.grant(args.request, kinds, notes=args.notes or "", edits=edits or None,
                             proposal_hash=seen)
        except ProposalChangedError as exc:
            return _changed(args.request, exc, "approved")
    req = result["request"]
    echo(f"{req['id']}: {req['status']}" + (f" — {result['message']}" if result["message"]
                                             else ""))
    return 0 if req["status"] in ("executed", "pending") else exit_code(req["status"])


def deny(args: argparse.Namespace) -> int:
    with client_for(args) as c:
        seen = _shown(c, args, "denying")
        try:
            req = c.deny(args.request, args.notes, proposal_hash=seen)
        except ProposalChangedError as exc:
            return _changed(args.request, exc, "denied")
    echo(f"{req['id']}: {req['status']} — {req.get('outcome') or ''}")
    return 0


def stop(args: argparse.Namespace) -> int:
    """The emergency stop, or (an operator) clearing it."""
    with client_for(args) as c:
        if args.clear:
            cleared = c.clear_stop(args.instrument)
            echo(f"stop cleared: {', '.join(cleared) or 'nothing was stopped'}")
            return 0
        done = c.emergency_stop(args.instrument)
    for name, result in done["instruments"].items():
        state = ", ".join(f"{k}={v}" for k, v in result.get("read_back", {}).items())
        echo(f"{name}: sent {'; '.join(result.get('sent', [])) or 'nothing'}"
             + (f"; read back {state}" if state else "")
             + (f"; ERRORS {'; '.join(result['errors'])}" if result.get("errors") else ""))
    echo(f"stopped in {done['seconds'] * 1000:.0f} ms; {len(done['cancelled'])} requests "
         f"cancelled, {len(done['suspended'])} runs suspended; writes are refused until an "
         "operator runs `bench-gate stop --clear`")
    return 0


def status(args: argparse.Namespace) -> int:
    """Each instrument, and whether the gateway holds its lock: a warning is never hidden."""
    with client_for(args) as c:
        found: list[dict[str, Any]] = c.request("GET", "/v1/instruments")
    if getattr(args, "json", False):
        echo(json.dumps(found, indent=2))
        return 0
    table(["INSTRUMENT", "PROFILE", "RESOURCE", "LOCK"],
          [[i["name"], i["profile"], i["resource"], i["lock"]] for i in found])
    for i in found:
        if i.get("lockWarning"):
            echo(f"WARNING {i['name']}: {i['lock']}: {i['lockWarning']}")
    return 0


def release(args: argparse.Namespace) -> int:
    with client_for(args) as c:
        run = c.release(args.run)
    echo(f"{run['id']}: {run['status']}")
    return 0


def runs(args: argparse.Namespace) -> int:
    with client_for(args) as c:
        rows = [[r["id"], r["kind"], r["principal"], r["status"], (r.get("goal") or "")[:40]]
                for r in c.runs()]
    table(["RUN", "KIND", "PRINCIPAL", "STATUS", "GOAL"], rows)
    return 0


def journal(args: argparse.Namespace) -> int:
    with client_for(args) as c:
        events = c.journal(args.run)
    for e in events:
        d = e.get("data") or {}
        what = d.get("message") or d.get("command") or d.get("outcome") or d.get("reason") \
            or d.get("by") or d.get("status") or ""
        echo(f"{e['seq']:>6}  {e['at'][:19]}  {e['type']:<20} {e.get('requestId') or '':<40} "
             f"{what}".rstrip())
    return 0


def watch(args: argparse.Namespace) -> int:
    c = client_for(args)
    headers = {"Accept": "text/event-stream"}
    echo(f"watching {args.url}/v1/events (Ctrl-C stops)")
    try:
        with c._http.stream("GET", "/v1/events", headers=headers, timeout=None) as r:
            if r.status_code >= 400:
                r.read()
                raise ApiError(r.status_code, r.json().get("reason", r.reason_phrase))
            for line in r.iter_lines():
                if not line.startswith("data: "):
                    continue
                m = json.loads(line[6:])
                stamp = datetime.now().strftime("%H:%M:%S")
                if m["type"] == "request":
                    echo(f"{stamp}  request  {m['id']}  {m['status']:<10} {m['instrument']} "
                         f"(run {m['run_id']})")
                elif m["type"] == "question":
                    echo(f"{stamp}  question {m['id']}  {m['status']:<10} asked by "
                         f"{m['asked_by']} (run {m['run_id']})")
                else:
                    echo(f"{stamp}  run      {m['id']}  {m['status']}")
    except httpx.HTTPError as exc:
        raise CliError(f"lost {args.url}: {exc}") from exc
    finally:
        c.close()
    return 0


def wait(args: argparse.Namespace) -> int:
    tty = sys.stdout.isatty()
    start = time.monotonic()

    def stale(tk: dict[str, Any]) -> None:
        echo(f"{tk['id']} went stale; following {tk['supersededBy']}")

    def waiting(tk: dict[str, Any]) -> None:
        line = (f"{tk['id']}: {tk['status']}, missing "
                f"{', '.join(tk['approvalsMissing']) or 'nothing'}, "
                f"{int(time.monotonic() - start)}s, expires in {ago(tk['expiresAt'])}")
        if tty:
            print("\r" + line, end="", flush=True)
        else:
            echo(line)

    with client_for(args) as c:
        tk = follow_remote(lambda rid, wait: c.get(rid, wait=wait), args.request,
                           args.timeout, poll=10.0, on_stale=stale, on_wait=waiting)
    if tty:
        print()
    echo(f"{tk['id']}: {tk['status']}" + (f" — {tk['outcome']}" if tk.get("outcome") else "")
         + (f" (notes: {tk['notes']})" if tk.get("notes") else ""))
    return exit_code(tk["status"])


# ------------------------------------------------------------------------- plans
def plan_request(args: argparse.Namespace) -> int:
    with client_for(args) as c:
        result = c.request_plan(
            args.instrument, args.channels, (args.voltage[0], args.voltage[1]),
            args.current_max, max_step=args.max_step, output_enable=args.output_enable,
            max_writes=args.max_writes, timeout_minutes=args.timeout,
            rationale=args.rationale, run_id=args.run)
    tk, plan = result["takeover"], result["plan"]
    echo(f"{plan['id']}: {plan['status']}, request {tk['id']} {tk['status']}")
    for line in plan["words"]:
        echo(f"  - {line}")
    if tk["approvalsMissing"]:
        echo(f"  needs         {', '.join(tk['approvalsMissing'])} "
             f"(bench-gate approve {tk['id']} ...)")
    return 0


def plans(args: argparse.Namespace) -> int:
    with client_for(args) as c:
        plans = c.plans(args.run)
    rows = []
    for p in plans:
        sc = p["scope"]
        step = f", step {sc['maxStep']:g}" if sc.get("maxStep") is not None else ""
        expires = ago(p["expiresAt"]) if p.get("expiresAt") and p["status"] == "active" \
            else "-"
        rows.append([p["id"], p["status"], p["requestId"], sc["instrument"],
                     ",".join(str(ch) for ch in sc["channels"]),
                     f"{sc['voltage'][0]:g}-{sc['voltage'][1]:g} V, <= {sc['currentMax']:g} A"
                     f"{step}{', output on' if sc['outputEnable'] else ''}",
                     f"{p['writesLeft']}/{sc['maxWrites']}", expires])
    table(["PLAN", "STATUS", "REQUEST", "INSTR", "CH", "SCOPE", "WRITES LEFT",
            "EXPIRES IN"], rows)
    return 0


def plan_revoke(args: argparse.Namespace) -> int:
    with client_for(args) as c:
        plan = c.revoke_plan(args.run, args.plan)
    echo(f"{plan['id']}: {plan['status']} by {plan.get('revokedBy') or '-'}; the run's next "
         "write is held")
    return 0


def questions(args: argparse.Namespace) -> int:
    params = {} if args.all else {"status": "open"}
    with client_for(args) as c:
        asks = c.request("GET", "/v1/questions", params=params)
    if args.json:
        echo(json.dumps(asks, indent=2))
        return 0
    if not asks:
        echo("(none)")
    for q in asks:
        echo(f"{q['id']}  {q['status'].upper()}  asked by {q['askedBy']} (run {q['runId']}), "
             f"expires in {ago(q['expiresAt'])}")
        for i, item in enumerate(q["questions"], start=1):
            echo(f"  {i}. {item['text']}")
            for o in item["options"]:
                echo(f"     - {o['label']}" + (f": {o['description']}" if o["description"]
                                               else ""))
            if item["allowFreeText"]:
                echo("     - (or a free-text answer)")
        if q.get("outcome") and q["status"] != "open":
            echo(f"  outcome {q['outcome']}")
    return 0


def answer(args: argparse.Namespace) -> int:
    with client_for(args) as c:
        q = c.request("GET", f"/v1/questions/{args.question}")
        if len(args.answers) != len(q["questions"]):
            raise CliError(f"{q['id']} has {len(q['questions'])} question(s): give one answer "
                           f"each, in order, not {len(args.answers)}")
        answers = []
        for item, given in zip(q["questions"], args.answers, strict=True):
            labels = {o["label"].casefold() for o in item["options"]}
            answers.append({"choice": given} if given.casefold() in labels else {"text": given})
        done = c.request("POST", f"/v1/questions/{args.question}/answer",
                         json={"answers": answers, "notes": args.notes or ""})
    echo(f"{done['id']}: {done['status']} — {done.get('outcome') or ''}")
    return 0
