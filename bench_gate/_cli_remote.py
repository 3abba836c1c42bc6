"""``bench-gate`` commands that talk to a running server through the HTTP API: the queue,
runs, journals, plans, questions, the emergency stop, and ``wait`` (showing and deciding a
request: ``_cli_decide``)."""

from __future__ import annotations

import argparse
import json
import queue
import sys
import threading
import time
from datetime import datetime
from typing import Any

import httpx

from ._cli_common import CliError, client_for, clip, echo, print_json, say, table, until
from ._cli_show import said
from .client import ApiError, Client, segment
from .doorway import exit_code, follow_remote
from .texts import visible

__all__ = ["answer", "journal", "pending", "plan_request", "plan_revoke", "plans", "questions",
           "release", "runs", "stop", "wait", "watch"]


# ------------------------------------------------------------------------- remote
_SORT_WORDS = {"expiry": "soonest expiry first", "newest": "newest first"}


def pending(args: argparse.Namespace) -> int:
    """The queue (an operator's), or a requester's own requests waiting for a decision."""
    with client_for(args) as c:
        page, total = c.pending_page(args.instrument, sort=args.sort, limit=args.limit,
                                     offset=args.offset)
    if args.json:
        return print_json(page)
    rows = [[tk["id"], tk["runId"], tk["instrument"], clip(tk["message"], 40),
             ",".join(tk["approvalsMissing"]) or "-",
             ",".join(a["kind"] for a in tk["approvalsGiven"]) or "-",
             until(tk["expiresAt"])] for tk in page]
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


def stop(args: argparse.Namespace) -> int:
    """The emergency stop, or (an operator) clearing it."""
    with client_for(args) as c:
        if args.clear:
            cleared = c.clear_stop(args.instrument)
            if args.json:
                return print_json({"cleared": cleared})
            echo(f"stop cleared: {', '.join(cleared) or 'nothing was stopped'}")
            return 0
        done = c.emergency_stop(args.instrument)
    if args.json:
        return print_json(done)
    for name, result in done["instruments"].items():
        state = ", ".join(f"{k}={v}" for k, v in result.get("readBack", {}).items())
        where = f" ({result['resource']})" if result.get("resource") else ""
        echo(f"{name}{where}: sent {'; '.join(result.get('sent', [])) or 'nothing'}"
             + (f"; read back {state}" if state else "")
             + (f"; ERRORS {'; '.join(result['errors'])}" if result.get("errors") else "")
             + (f" ({result['retry']})" if result.get("retry") else ""))
    cancelled, suspended = len(done["cancelled"]), len(done["suspended"])
    echo(f"stopped in {done['seconds'] * 1000:.0f} ms; {cancelled} request"
         f"{'s' * (cancelled != 1)} cancelled, {suspended} run{'s' * (suspended != 1)} "
         "suspended; writes are refused until an operator runs `bench-gate stop --clear`")
    return 0


def status(args: argparse.Namespace) -> int:
    """Each instrument, and whether the gateway holds its lock: a warning is never hidden."""
    with client_for(args) as c:
        found: list[dict[str, Any]] = c.request("GET", "/v1/instruments")
    if getattr(args, "json", False):
        echo(json.dumps(found, indent=2))
        return 0
    table(["INSTRUMENT", "PROFILE", "RESOURCE", "LOCK", "ANSWERS"],
          [[i["name"], i.get("profileName") or i["profile"], i["resource"], i["lock"],
            _answers(i)] for i in found])
    for i in found:
        if i.get("wrongInstrument"):
            echo(f"WARNING {i['name']}: another instrument answers: {i['wrongInstrument']}")
        elif i.get("unreachable"):
            echo(f"WARNING {i['name']}: unreachable: {i['unreachable']}")
        if i.get("lockWarning"):
            echo(f"WARNING {i['name']}: {i['lock']}: {i['lockWarning']}")
    return 0


def _answers(i: dict[str, Any]) -> str:
    """Whether the instrument answers as its profile: ``yes``, ``ANOTHER MODEL``,
    ``UNREACHABLE``, ``not asked yet``, or ``-`` (its profile names no identity)."""
    if i.get("wrongInstrument"):
        return "ANOTHER MODEL"
    if i.get("unreachable"):
        return "UNREACHABLE"
    if i.get("idn"):
        return "yes"
    return "not asked yet" if i.get("identity") else "-"
    return 0


def release(args: argparse.Namespace) -> int:
    with client_for(args) as c:
        run = c.release(args.run)
    if args.json:
        return print_json(run)
    echo(f"{run['id']}: {run['status']}")
    return 0


def runs(args: argparse.Namespace) -> int:
    with client_for(args) as c:
        found = c.runs()
    if args.json:
        return print_json(found)
    table(["RUN", "KIND", "PRINCIPAL", "STATUS", "GOAL"],
          [[r["id"], r["kind"], r["principal"], r["status"], clip(r.get("goal") or "", 40, " ")]
           for r in found])
    return 0


def journal(args: argparse.Namespace) -> int:
    with client_for(args) as c:
        events = c.journal(args.run)
    if args.json:
        return print_json(events)
    for e in events:
        d = e.get("data") or {}
        what = d.get("message") or d.get("command") or d.get("outcome") or d.get("reason") \
            or d.get("by") or d.get("status") or ""
        say(f"{e['seq']:>6}  {e['at'][:19]}  {e['type']:<20} {e.get('requestId') or '':<40} "
            f"{what}".rstrip())
    return 0


def _watched(c: Client, m: dict[str, Any], commands: dict[str, str]) -> str:
    """One event as a line, a request's with its command (fetched once per request)."""
    stamp = datetime.now().strftime("%H:%M:%S")
    if m["type"] == "request":
        if m["id"] not in commands:
            try:
                commands[m["id"]] = str(c.get(m["id"])["message"])
            except ApiError:
                commands[m["id"]] = "?"
        return (f"{stamp}  request  {m['id']}  {m['status']:<10} {m['instrument']}  "
                f"{commands[m['id']]}  (run {m['runId']})")
    if m["type"] == "question":
        return (f"{stamp}  question {m['id']}  {m['status']:<10} asked by {m['askedBy']} "
                f"(run {m['runId']})")
    if m["type"] == "alert":  # has no id: a lost client, a breach, a stop (its words)
        return f"{stamp}  alert    {m.get('alert', '')}  {m.get('reason', '')}".rstrip()
    reason = f"  ({m['reason']})" if m.get("reason") else ""
    return f"{stamp}  {m['type']:<8} {m.get('id', '')}  {m.get('status', '')}{reason}".rstrip()


def watch(args: argparse.Namespace) -> int:
    """Print each change until Ctrl-C, or until ``--timeout`` seconds have passed."""
    c = client_for(args)
    lines: queue.Queue[str | BaseException | None] = queue.Queue()

    def read() -> None:
        commands: dict[str, str] = {}
        try:
            with c._http.stream("GET", "/v1/events", timeout=None,
                                headers={"Accept": "text/event-stream"}) as r:
                if r.status_code >= 400:
                    r.read()
                    raise ApiError(r.status_code, r.json().get("reason", r.reason_phrase))
                if args.json:  # stdout is JSON Lines, one event each; this goes aside
                    print(f"watching {args.url}/v1/events (Ctrl-C stops)", file=sys.stderr,
                          flush=True)
                else:
                    lines.put(f"watching {args.url}/v1/events (Ctrl-C stops)")
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        m = json.loads(line[6:])
                        lines.put(json.dumps(m, ensure_ascii=False) if args.json
                                  else _watched(c, m, commands))
            lines.put(None)
        except BaseException as exc:  # reported by the main thread
            lines.put(exc)

    threading.Thread(target=read, name="watch", daemon=True).start()
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    try:
        while deadline is None or time.monotonic() < deadline:
            try:
                item = lines.get(timeout=0.5)
            except queue.Empty:
                continue
            if item is None:
                raise CliError(f"lost {args.url}: the server ended the stream")
            if isinstance(item, httpx.HTTPError):
                raise CliError(f"lost {args.url}: {item}") from item
            if isinstance(item, BaseException):
                raise item
            say(item)
    finally:
        c.close()
    return 0


def wait(args: argparse.Namespace) -> int:
    """Wait for the outcome. On a terminal one status line is redrawn in place (approvals
    given and missing, time left); piped, only the outcome is printed."""
    tty = sys.stdout.isatty()

    def stale(tk: dict[str, Any]) -> None:
        if tty:
            print("\r\033[K", end="")
        say(f"{said(tk)}; following its fresh request {tk['supersededBy']}")

    def waiting(tk: dict[str, Any]) -> None:
        if not tty:
            return
        given = ", ".join(f"{a['kind']} by {a['by']}" for a in tk["approvalsGiven"]) or "none"
        line = (f"{tk['id']}: {tk['status']}; given {given}; missing "
                f"{', '.join(tk['approvalsMissing']) or 'nothing'}; "
                f"{until(tk['expiresAt'])} left")
        print("\r\033[K" + visible(line, lines=False), end="", flush=True)

    with client_for(args) as c:
        tk = follow_remote(lambda rid, wait: c.get(rid, wait=wait), args.request,
                           args.timeout, poll=1.0 if tty else 10.0, on_stale=stale,
                           on_wait=waiting)
    if tty:
        print("\r\033[K", end="")
    if args.json:
        print_json(tk)
    else:
        line = said(tk)
        if tk.get("notes") and tk["notes"] not in line:
            line += f" (notes: {tk['notes']})"
        say(line)
    return exit_code(tk["status"])


# ------------------------------------------------------------------------- plans
def plan_request(args: argparse.Namespace) -> int:
    with client_for(args) as c:
        result = c.request_plan(
            args.instrument, args.channels, (args.voltage[0], args.voltage[1]),
            args.current_max, max_step=args.max_step, output_enable=args.output_enable,
            max_writes=args.max_writes, timeout_minutes=args.timeout,
            rationale=args.rationale, run_id=args.run)
    if args.json:
        return print_json(result)
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
    if args.json:
        return print_json(plans)
    rows = []
    for p in plans:
        sc = p["scope"]
        step = f", step {sc['maxStep']:g}" if sc.get("maxStep") is not None else ""
        expires = until(p["expiresAt"]) if p.get("expiresAt") and p["status"] == "active" \
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
    if args.json:
        return print_json(plan)
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
        say(f"{q['id']}  {q['status'].upper()}  asked by {q['askedBy']} (run {q['runId']}), "
            f"expires in {until(q['expiresAt'])}")
        for i, item in enumerate(q["questions"], start=1):
            say(f"  {i}. {item['text']}")
            for o in item["options"]:
                say(f"     - {o['label']}" + (f": {o['description']}" if o["description"]
                                              else ""))
            if item["allowFreeText"]:
                echo("     - (or a free-text answer)")
        if q.get("outcome") and q["status"] != "open":
            say(f"  outcome {q['outcome']}")
    return 0


def answer(args: argparse.Namespace) -> int:
    with client_for(args) as c:
        q = c.request("GET", f"/v1/questions/{segment(args.question)}")
        if len(args.answers) != len(q["questions"]):
            raise CliError(f"{q['id']} has {len(q['questions'])} question(s): give one answer "
                           f"each, in order, not {len(args.answers)}")
        answers = []
        for item, given in zip(q["questions"], args.answers, strict=True):
            labels = {o["label"].casefold() for o in item["options"]}
            answers.append({"choice": given} if given.casefold() in labels else {"text": given})
        done = c.request("POST", f"/v1/questions/{segment(args.question)}/answer",
                         json={"answers": answers, "notes": args.notes or ""})
    if args.json:
        return print_json(done)
    say(said(done))  # "q-…: answered by olga: …", the status said once
    return 0
