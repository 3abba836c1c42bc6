"""``bench-gate``: serve the bench, manage tokens, and decide requests from a terminal.

``serve``, ``token`` and ``journal verify|export|archive`` work locally (on the store);
every other command talks to a running server (``--url``, token from ``--token`` or
``BENCH_GATE_TOKEN``).

``bench-gate wait TK`` exits with the outcome: 0 executed, 3 denied, 4 expired, 5 stale,
6 failed or ambiguous, 7 cancelled, 8 still undecided at ``--timeout``; 1 is any other error
and 2 a usage error. ``approve`` and ``deny`` print the proposal they decide on and name its
hash; they exit 9 when the request changed since (nothing is decided; the current proposal
is printed). ``journal verify`` exits 0 when the chain is intact and 10 when it is not.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from .client import ApiError, Client, ProposalChangedError
from .doorway import (
    CHANGED_EXIT,
    ERROR_EXIT,
    EXIT_CODES,
    exit_code,
    follow_remote,
    problem_named,
    problem_of,
)

__all__ = ["EXIT_CODES", "main"]

ERROR = ERROR_EXIT
#: ``approve``/``deny``: the proposal changed since it was shown; nothing was decided.
CHANGED = CHANGED_EXIT
#: ``journal verify``: the chain is not intact (the first bad seq is printed).
BROKEN = 10
#: ``journal ACTION``; anything else after ``journal`` is a run (``journal RUN`` shows it).
JOURNAL_ACTIONS = ("show", "verify", "export", "archive")


class CliError(Exception):
    """A failure to report in one line, without a traceback."""


def _out(text: str = "") -> None:
    print(text, flush=True)


# ------------------------------------------------------------------------- local: serve
def _serve(args: argparse.Namespace) -> int:
    from sim_instruments import SimBenchThread

    from . import server
    from .auth import Tokens
    from .config import default_config, load_config
    from .store import open_store

    config = load_config(args.config) if args.config else None
    bench = None
    if config is None or args.sim:
        try:
            bench = SimBenchThread(psu_port=args.sim_psu_port, dmm_port=args.sim_dmm_port)
        except OSError as exc:
            raise CliError(f"cannot start the simulated bench on ports {args.sim_psu_port} "
                           f"and {args.sim_dmm_port}: {exc.strerror or exc} (choose others "
                           "with --sim-psu-port/--sim-dmm-port)") from exc
        if config is None:
            config = default_config(bench.psu_port, bench.dmm_port)
    if args.bench:
        config.bench = args.bench
    for spec in args.door or []:
        name, _, port = spec.partition("=")
        ic = config.instrument(name)
        if ic is None or not port.isdigit() or int(port) > 65535:
            raise CliError(f"--door {spec!r}: write NAME=PORT with an instrument of this bench "
                           f"({', '.join(i.name for i in config.instruments)}) and a port "
                           "(0 picks a free one)")
        ic.socket_port = int(port)
    db, shown = _db(args.db)
    store = open_store(db)
    tokens = Tokens(store)
    first = None if tokens.any() else tokens.create("admin", "admin")[1]

    def ready(r: server.Running) -> None:
        _out(f"bench-gate: serving bench {config.bench!r}")
        _out(f"  HTTP API      {r.url}   (OpenAPI {r.url}/openapi.json, docs {r.url}/docs)")
        _out(f"  store         {shown}")
        if bench is not None:
            _out(f"  simulated     PSU {bench.psu_resource_name}, DMM {bench.dmm_resource_name}")
        _out("  instruments")
        for ic in config.instruments:
            door = r.doors.get(ic.name)
            where = f"socket door {door[0]}:{door[1]}" if door else "no socket door"
            _out(f"    {ic.name:<8} {ic.profile:<8} {ic.resource}   {where}")
        if r.doors_note:
            _out(f"  note          {r.doors_note}")
        if first:
            _out("  admin token   (shown once; keep it)")
            _out(f"    export BENCH_GATE_TOKEN={first}")
        else:
            _out("  tokens        already issued; list them with "
                 f"`bench-gate token list --db {shown}`")
        _out("  more tokens   bench-gate token create --name alice --role operator "
             f"--db {shown}")
        _out("  Ctrl-C stops.")

    try:
        server.run_loop(server.run(config, store, host=args.host, port=args.port,
                                   on_ready=ready,
                                   log_level="info" if args.verbose else "warning"))
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        raise CliError(f"cannot serve: {exc.strerror or exc} (move the HTTP port with --port, "
                       "a socket door with --door NAME=PORT)") from exc
    finally:
        if bench is not None:
            bench.close()
        store.close()
    return 0


# ------------------------------------------------------------------------- local: token
def _tokens(args: argparse.Namespace) -> Any:
    from .auth import Tokens
    from .store import open_store

    db, _ = _db(args.db)
    if isinstance(db, Path) and not db.exists():
        raise CliError(f"no store at {db}: run `bench-gate serve` once, or pass --db")
    return Tokens(open_store(db))


def _db(arg: str | None) -> tuple[str | Path, str]:
    """What to open (a SQLite path, or a PostgreSQL URL kept as it is) and how to show it:
    never with its password."""
    from . import server

    if arg and arg.startswith(("postgresql://", "postgres://")):
        from .store._postgres import describe

        return arg, describe(arg)
    if arg and arg.startswith("sqlite:///"):
        arg = arg[len("sqlite:///"):]
    db = Path(arg) if arg else server.default_db()
    db.parent.mkdir(parents=True, exist_ok=True)
    return db, str(db)


def _token_create(args: argparse.Namespace) -> int:
    record, secret = _tokens(args).create(args.name, args.role)
    _out(f"created {record['id']} for {record['name']} ({record['role']}); shown once:")
    _out(secret)
    return 0


def _token_list(args: argparse.Namespace) -> int:
    rows = [[r["id"], r["name"], r["role"], r["created_at"][:19],
             "revoked " + r["revoked_at"][:19] if r.get("revoked_at") else "active"]
            for r in _tokens(args).all()]
    _table(["ID", "NAME", "ROLE", "CREATED", "STATE"], rows)
    return 0


def _token_revoke(args: argparse.Namespace) -> int:
    count = _tokens(args).revoke(args.id_or_name)
    _out(f"revoked {count} token{'s' if count != 1 else ''}")
    return 0


# ------------------------------------------------------------------------- remote
def _client(args: argparse.Namespace) -> Client:
    token = args.token or os.environ.get("BENCH_GATE_TOKEN")
    if not token:
        raise CliError("no token: pass --token or set BENCH_GATE_TOKEN")
    return Client(args.url, token)


def _table(headers: list[str], rows: list[list[str]]) -> None:
    if not rows:
        _out("(none)")
        return
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=False)]
    for row in [headers, *rows]:
        _out("  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=False)).rstrip())


def _ago(iso: str) -> str:
    seconds = int((datetime.fromisoformat(iso) - datetime.now(UTC)).total_seconds())
    sign, seconds = ("-" if seconds < 0 else ""), abs(seconds)
    return f"{sign}{seconds // 60}m{seconds % 60:02d}s"


_SORT_WORDS = {"expiry": "soonest expiry first", "newest": "newest first"}


def _pending(args: argparse.Namespace) -> int:
    with _client(args) as c:
        page, total = c.pending_page(args.instrument, sort=args.sort, limit=args.limit,
                                     offset=args.offset)
    rows = [[tk["id"], tk["runId"], tk["instrument"], tk["message"][:40],
             ",".join(tk["approvalsMissing"]) or "-",
             ",".join(a["kind"] for a in tk["approvalsGiven"]) or "-",
             _ago(tk["expiresAt"])] for tk in page]
    _table(["REQUEST", "RUN", "INSTR", "COMMAND", "NEEDS", "GIVEN", "EXPIRES IN"], rows)
    if page:
        shown = f"{args.offset + 1}-{args.offset + len(page)} of {total}"
    else:
        shown = f"none of {total} at offset {args.offset}" if total else "0"
    line = f"{shown} pending, {_SORT_WORDS[args.sort]}"
    if args.offset + len(page) < total:
        line += f"; next page: --offset {args.offset + len(page)}"
    _out(line)
    return 0


def _show(args: argparse.Namespace) -> int:
    with _client(args) as c:
        tk = c.get(args.request)
    if args.json:
        _out(json.dumps(tk, indent=2))
        return 0
    _summary(tk)
    return 0


def _summary(tk: dict[str, Any]) -> None:
    """A request as a reviewer reads it (``show``, and what ``approve``/``deny`` decide)."""
    h = tk.get("handoff") or {}
    _out(f"{tk['id']}  {tk['status'].upper()}  on {tk['instrument']}  (run {tk['runId']})")
    _out(f"  command       {tk['message']}")
    _out(f"  requester     {h.get('run', {}).get('principal')} "
         f"({h.get('run', {}).get('kind')}), goal: {h.get('goal') or '-'}")
    _out(f"  rationale     {h.get('rationale') or '-'}")
    _out("  actions")
    for a in h.get("actions", []):
        _out(f"    - {a.get('words') or a.get('canonical')}")
    _out(f"  reversibility {h.get('reversibility', '-')}")
    for signal in (h.get("risk") or {}).get("signals", []):
        _out(f"  risk          {signal}")
    for key, (old, new) in (h.get("diff") or {}).items():
        _out(f"  change        {key}: {old} → {new}")
    _out(f"  required      {', '.join(tk['required'])}")
    given = ", ".join(f"{a['kind']} by {a['by']}" for a in tk["approvalsGiven"]) or "-"
    _out(f"  given         {given}")
    _out(f"  missing       {', '.join(tk['approvalsMissing']) or '-'}")
    _out(f"  expires       {tk['expiresAt']} ({_ago(tk['expiresAt'])})")
    if tk.get("outcome"):
        _out(f"  outcome       {tk['outcome']}")
    _out(f"  proposal      {tk['proposalHash']}")


def _shown(c: Client, args: argparse.Namespace, doing: str) -> str:
    """Fetch the request and print what is being decided; the hash to name. A ``--hash``
    pinned earlier is named as it is (if it is no longer current the server says so)."""
    tk = c.get(args.request)
    if args.hash is None or args.hash == tk["proposalHash"]:
        _out(f"{doing}:")
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


def _approve(args: argparse.Namespace) -> int:
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
    with _client(args) as c:
        seen = _shown(c, args, f"approving {', '.join(kinds)}"
                               + (f" with {', '.join(args.set)}" if edits else ""))
        try:
            result = c.grant(args.request, kinds, notes=args.notes or "", edits=edits or None,
                             proposal_hash=seen)
        except ProposalChangedError as exc:
            return _changed(args.request, exc, "approved")
    req = result["request"]
    _out(f"{req['id']}: {req['status']}" + (f" — {result['message']}" if result["message"]
                                             else ""))
    return 0 if req["status"] in ("executed", "pending") else exit_code(req["status"])


def _deny(args: argparse.Namespace) -> int:
    with _client(args) as c:
        seen = _shown(c, args, "denying")
        try:
            req = c.deny(args.request, args.notes, proposal_hash=seen)
        except ProposalChangedError as exc:
            return _changed(args.request, exc, "denied")
    _out(f"{req['id']}: {req['status']} — {req.get('outcome') or ''}")
    return 0


def _stop(args: argparse.Namespace) -> int:
    """The emergency stop, or (an operator) clearing it."""
    with _client(args) as c:
        if args.clear:
            cleared = c.clear_stop(args.instrument)
            _out(f"stop cleared: {', '.join(cleared) or 'nothing was stopped'}")
            return 0
        done = c.emergency_stop(args.instrument)
    for name, result in done["instruments"].items():
        state = ", ".join(f"{k}={v}" for k, v in result.get("read_back", {}).items())
        _out(f"{name}: sent {'; '.join(result.get('sent', [])) or 'nothing'}"
             + (f"; read back {state}" if state else "")
             + (f"; ERRORS {'; '.join(result['errors'])}" if result.get("errors") else ""))
    _out(f"stopped in {done['seconds'] * 1000:.0f} ms; {len(done['cancelled'])} requests "
         f"cancelled, {len(done['suspended'])} runs suspended; writes are refused until an "
         "operator runs `bench-gate stop --clear`")
    return 0


def _release(args: argparse.Namespace) -> int:
    with _client(args) as c:
        run = c.release(args.run)
    _out(f"{run['id']}: {run['status']}")
    return 0


def _runs(args: argparse.Namespace) -> int:
    with _client(args) as c:
        rows = [[r["id"], r["kind"], r["principal"], r["status"], (r.get("goal") or "")[:40]]
                for r in c.runs()]
    _table(["RUN", "KIND", "PRINCIPAL", "STATUS", "GOAL"], rows)
    return 0


def _journal(args: argparse.Namespace) -> int:
    with _client(args) as c:
        events = c.journal(args.run)
    for e in events:
        d = e.get("data") or {}
        what = d.get("message") or d.get("command") or d.get("outcome") or d.get("reason") \
            or d.get("by") or d.get("status") or ""
        _out(f"{e['seq']:>6}  {e['at'][:19]}  {e['type']:<20} {e.get('requestId') or '':<40} "
             f"{what}".rstrip())
    return 0


def _watch(args: argparse.Namespace) -> int:
    c = _client(args)
    headers = {"Accept": "text/event-stream"}
    _out(f"watching {args.url}/v1/events (Ctrl-C stops)")
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
                    _out(f"{stamp}  request  {m['id']}  {m['status']:<10} {m['instrument']} "
                         f"(run {m['run_id']})")
                elif m["type"] == "question":
                    _out(f"{stamp}  question {m['id']}  {m['status']:<10} asked by "
                         f"{m['asked_by']} (run {m['run_id']})")
                else:
                    _out(f"{stamp}  run      {m['id']}  {m['status']}")
    except httpx.HTTPError as exc:
        raise CliError(f"lost {args.url}: {exc}") from exc
    finally:
        c.close()
    return 0


def _wait(args: argparse.Namespace) -> int:
    tty = sys.stdout.isatty()
    start = time.monotonic()

    def stale(tk: dict[str, Any]) -> None:
        _out(f"{tk['id']} went stale; following {tk['supersededBy']}")

    def waiting(tk: dict[str, Any]) -> None:
        line = (f"{tk['id']}: {tk['status']}, missing "
                f"{', '.join(tk['approvalsMissing']) or 'nothing'}, "
                f"{int(time.monotonic() - start)}s, expires in {_ago(tk['expiresAt'])}")
        if tty:
            print("\r" + line, end="", flush=True)
        else:
            _out(line)

    with _client(args) as c:
        tk = follow_remote(lambda rid, wait: c.get(rid, wait=wait), args.request,
                           args.timeout, poll=10.0, on_stale=stale, on_wait=waiting)
    if tty:
        print()
    _out(f"{tk['id']}: {tk['status']}" + (f" — {tk['outcome']}" if tk.get("outcome") else "")
         + (f" (notes: {tk['notes']})" if tk.get("notes") else ""))
    return exit_code(tk["status"])


# ------------------------------------------------------------------------- plans
def _plan_request(args: argparse.Namespace) -> int:
    with _client(args) as c:
        result = c.request_plan(
            args.instrument, args.channels, (args.voltage[0], args.voltage[1]),
            args.current_max, max_step=args.max_step, output_enable=args.output_enable,
            max_writes=args.max_writes, timeout_minutes=args.timeout,
            rationale=args.rationale, run_id=args.run)
    tk, plan = result["takeover"], result["plan"]
    _out(f"{plan['id']}: {plan['status']}, request {tk['id']} {tk['status']}")
    for line in plan["words"]:
        _out(f"  - {line}")
    if tk["approvalsMissing"]:
        _out(f"  needs         {', '.join(tk['approvalsMissing'])} "
             f"(bench-gate approve {tk['id']} ...)")
    return 0


def _plans(args: argparse.Namespace) -> int:
    with _client(args) as c:
        plans = c.plans(args.run)
    rows = []
    for p in plans:
        sc = p["scope"]
        step = f", step {sc['maxStep']:g}" if sc.get("maxStep") is not None else ""
        expires = _ago(p["expiresAt"]) if p.get("expiresAt") and p["status"] == "active" \
            else "-"
        rows.append([p["id"], p["status"], p["requestId"], sc["instrument"],
                     ",".join(str(ch) for ch in sc["channels"]),
                     f"{sc['voltage'][0]:g}-{sc['voltage'][1]:g} V, <= {sc['currentMax']:g} A"
                     f"{step}{', output on' if sc['outputEnable'] else ''}",
                     f"{p['writesLeft']}/{sc['maxWrites']}", expires])
    _table(["PLAN", "STATUS", "REQUEST", "INSTR", "CH", "SCOPE", "WRITES LEFT",
            "EXPIRES IN"], rows)
    return 0


def _plan_revoke(args: argparse.Namespace) -> int:
    with _client(args) as c:
        plan = c.revoke_plan(args.run, args.plan)
    _out(f"{plan['id']}: {plan['status']} by {plan.get('revokedBy') or '-'}; the run's next "
         "write is held")
    return 0


# ------------------------------------------------------------------------- agents
def _mcp(args: argparse.Namespace) -> int:
    """The MCP server on stdio, acting for the token's requester against --url."""
    import anyio

    from .mcp import AgentSession, HttpBench, build_server

    client = _client(args)
    try:
        client.request("GET", "/v1/instruments")  # fail here, not in the agent's first call
    except ApiError:
        client.close()
        raise
    session = AgentSession(HttpBench(client))

    async def session_for(ctx: Any) -> AgentSession:
        return session

    async def serve() -> None:
        try:
            await build_server(session_for).run_stdio_async()
        finally:
            await session.close()

    try:
        anyio.run(serve)
    finally:
        client.close()
    return 0


def _questions(args: argparse.Namespace) -> int:
    params = {} if args.all else {"status": "open"}
    with _client(args) as c:
        asks = c.request("GET", "/v1/questions", params=params)
    if args.json:
        _out(json.dumps(asks, indent=2))
        return 0
    if not asks:
        _out("(none)")
    for q in asks:
        _out(f"{q['id']}  {q['status'].upper()}  asked by {q['askedBy']} (run {q['runId']}), "
             f"expires in {_ago(q['expiresAt'])}")
        for i, item in enumerate(q["questions"], start=1):
            _out(f"  {i}. {item['text']}")
            for o in item["options"]:
                _out(f"     - {o['label']}" + (f": {o['description']}" if o["description"]
                                               else ""))
            if item["allowFreeText"]:
                _out("     - (or a free-text answer)")
        if q.get("outcome") and q["status"] != "open":
            _out(f"  outcome {q['outcome']}")
    return 0


def _answer(args: argparse.Namespace) -> int:
    with _client(args) as c:
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
    _out(f"{done['id']}: {done['status']} — {done.get('outcome') or ''}")
    return 0


# ------------------------------------------------------------------------- local: journal
def _open_db(arg: str | None) -> Any:
    from .store import open_store

    db, shown = _db(arg)
    if isinstance(db, Path) and not db.exists():
        raise CliError(f"no store at {shown}: pass --db")
    return open_store(db)


def _journal_verify(args: argparse.Namespace) -> int:
    from .store import verify_file, verify_store

    folder = Path(args.archive_dir) if args.archive_dir else None
    if args.file is None or args.db is not None:
        store = _open_db(args.db)
    else:
        store = None  # the file alone, as on another machine
    try:
        if args.file is not None:
            report = verify_file(Path(args.file), store, folder)
        else:
            report = verify_store(store, folder)
    finally:
        if store is not None:
            store.close()
    if args.json:
        _out(json.dumps({**report.as_json(), "notes": report.notes}, indent=2))
    else:
        _out(report.summary())
        for note in report.notes:
            _out(f"  {note}")
    return 0 if report.intact else BROKEN


def _journal_export(args: argparse.Namespace) -> int:
    from .store import export_run

    out = Path(args.output or f"journal-{args.run}.jsonl")
    store = _open_db(args.db)
    try:
        count = export_run(store, args.run, out,
                           Path(args.archive_dir) if args.archive_dir else None)
    finally:
        store.close()
    _out(f"wrote {count} events of run {args.run} with their hashes to {out}; check it "
         f"anywhere with `bench-gate journal verify --file {out}`")
    return 0


def _when(text: str) -> datetime:
    try:
        at = datetime.fromisoformat(text)
    except ValueError as exc:
        raise CliError(f"--before {text!r}: write a date or a time, 2024-05-01 or "
                       "2024-05-01T12:00:00+00:00") from exc
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _journal_archive(args: argparse.Namespace) -> int:
    from datetime import timedelta

    from .config import load_config
    from .store import archive, default_archive_dir

    policy = load_config(args.config).journal if args.config else None
    keep_days = args.keep_days or (policy.keep_days if policy else None)
    if args.before:
        before = _when(args.before)
    elif keep_days:
        before = datetime.now(UTC) - timedelta(days=keep_days)
    else:
        raise CliError("say which events to archive: --before DATE, --keep-days N, or a "
                       "--config whose [journal] sets keep_days")
    store = _open_db(args.db)
    try:
        folder = default_archive_dir(store, args.archive_dir
                                     or (policy.archive_dir if policy else None))
        done = archive(store, before, folder)
    finally:
        store.close()
    if not done:
        _out(f"nothing to archive: no event older than {before.isoformat()} is left in the "
             "store")
    for segment in done:
        _out(f"archived seqs {segment.first_seq} to {segment.last_seq} ({segment.events} "
             f"events) to {segment.path}")
    return 0


def _legacy_journal(argv: list[str]) -> list[str]:
    """``journal RUN`` (before verify, export and archive) still shows a run's journal."""
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        i += 1 if "=" in argv[i] or argv[i] in ("-h", "--help") else 2
    if i + 1 < len(argv) and argv[i] == "journal" and argv[i + 1] not in JOURNAL_ACTIONS \
            and not argv[i + 1].startswith("-"):
        return [*argv[:i + 1], "show", *argv[i + 1:]]
    return argv


# ------------------------------------------------------------------------- parser
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench-gate", description=(
        "An approval gateway for lab-bench instruments: queries pass, writes wait for a "
        "person."))
    p.add_argument("--url", default=os.environ.get("BENCH_GATE_URL", "http://127.0.0.1:8000"),
                   help="the server (default %(default)s, or BENCH_GATE_URL)")
    p.add_argument("--token", help="bearer token (default: BENCH_GATE_TOKEN)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def cmd(name: str, fn: Callable[[argparse.Namespace], int], help: str
            ) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help, description=help)
        sp.set_defaults(fn=fn)
        return sp

    s = cmd("serve", _serve, "serve the bench (the simulated one unless --config says "
                             "otherwise)")
    s.add_argument("--config", help="a bench.toml (instruments, envelope, policy, server)")
    s.add_argument("--db", help="the store: a SQLite file (default: in the data directory) "
                                "or a postgresql:// URL shared by several benches")
    s.add_argument("--bench", help="this gateway's bench name (default: from --config, or "
                                   "sim-bench)")
    s.add_argument("--host", help="HTTP address (default 127.0.0.1)")
    s.add_argument("--port", type=int, help="HTTP port (default 8000)")
    s.add_argument("--sim", action="store_true", help="start the simulated bench with --config")
    s.add_argument("--sim-psu-port", type=int, default=5555, help="(default %(default)s)")
    s.add_argument("--sim-dmm-port", type=int, default=5556, help="(default %(default)s)")
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
    tc.add_argument("--db", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    tc.set_defaults(fn=_token_create)
    tl = tsub.add_parser("list", help="every token (never the secrets)")
    tl.add_argument("--db", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    tl.set_defaults(fn=_token_list)
    tr = tsub.add_parser("revoke", help="revoke a token by id, or every token of a name")
    tr.add_argument("id_or_name")
    tr.add_argument("--db", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    tr.set_defaults(fn=_token_revoke)

    pe = cmd("pending", _pending, "the requests waiting for a decision, a page at a time, "
                                  "with how many wait in all")
    pe.add_argument("--sort", choices=["expiry", "newest"], default="expiry",
                    help="expiry: soonest first, what must be decided before it is lost "
                         "(the default); newest: created last, first")
    pe.add_argument("--limit", type=int, default=100, help="rows per page (1 to 1000; "
                                                           "default %(default)s)")
    pe.add_argument("--offset", type=int, default=0, help="skip this many (default 0)")
    pe.add_argument("--instrument", help="only this instrument's")
    sh = cmd("show", _show, "one request with its full handoff")
    sh.add_argument("request")
    sh.add_argument("--json", action="store_true")
    a = cmd("approve", _approve, "give approvals; the write runs when none is missing")
    a.add_argument("request")
    a.add_argument("--setpoint", action="store_true")
    a.add_argument("--output-enable", action="store_true")
    a.add_argument("--state", action="store_true")
    a.add_argument("--set", action="append", metavar="CH1.voltage=5",
                   help="approve with a changed value (repeatable)")
    a.add_argument("--notes")
    d = cmd("deny", _deny, "deny a request; the notes go back to the requester")
    d.add_argument("request")
    d.add_argument("--notes", required=True)
    for sp in (a, d):
        sp.add_argument("--hash", metavar="PROPOSAL_HASH", help=(
            "decide only on this proposal (the hash `show` printed); without it, on the "
            "proposal fetched and printed now. A proposal that changed exits 9"))
    st = cmd("stop", _stop, "EMERGENCY STOP: every output off at once, pending requests "
                            "cancelled, writes refused until an operator clears it")
    where = st.add_mutually_exclusive_group()
    where.add_argument("--all", action="store_true", help="every instrument (the default)")
    where.add_argument("--instrument", help="only this instrument")
    st.add_argument("--clear", action="store_true", help="end the stop (operators)")
    r = cmd("release", _release, "end a takeover: the run's writes go on")
    r.add_argument("run")
    cmd("runs", _runs, "the runs")
    j = sub.add_parser("journal", help="a run's journal (over HTTP); verify, export and "
                                       "archive the journal's hash chain (on the local store)")
    jsub = j.add_subparsers(dest="journal_command", required=True, metavar="ACTION")
    jw = jsub.add_parser("show", help="a run's journal, oldest first (`journal RUN` too)")
    jw.add_argument("run")
    jw.set_defaults(fn=_journal)
    jv = jsub.add_parser("verify", help="walk the hash chain of the store (and its archived "
                                        "segments), or of an exported file; exit 10 if broken")
    jv.add_argument("--file", help="an export or a segment file, checked without the store "
                                   "(with --db too: also against the store, both ways)")
    jv.add_argument("--json", action="store_true")
    jv.set_defaults(fn=_journal_verify)
    je = jsub.add_parser("export", help="a run's events with their hashes, as a self-contained "
                                        "JSON Lines file that `verify --file` checks anywhere")
    je.add_argument("--run", required=True)
    je.add_argument("-o", "--output", help="the file (default: journal-RUN.jsonl)")
    je.set_defaults(fn=_journal_export)
    ja = jsub.add_parser("archive", help="move the oldest events to segment files and delete "
                                         "them from the store ([journal] keep_days)")
    ja.add_argument("--before", metavar="DATE", help="archive events journaled before this "
                                                    "(ISO 8601; a time without zone is UTC)")
    ja.add_argument("--keep-days", type=int, metavar="N", help="archive events older than N "
                                                              "days")
    ja.add_argument("--config", help="a bench.toml: its [journal] keep_days and archive_dir")
    ja.set_defaults(fn=_journal_archive)
    for sp in (jv, je, ja):
        sp.add_argument("--db", help="the store: a SQLite file (default: in the data "
                                     "directory) or a postgresql:// URL")
        sp.add_argument("--archive-dir", metavar="DIR", help=(
            "where segment files are (written to, for archive; default: [journal] "
            "archive_dir, else journal-archive beside a SQLite store, else in the data "
            "directory)"))
    cmd("watch", _watch, "request and run changes, live")
    w = cmd("wait", _wait, "wait for a request's decision; the exit code tells the outcome")
    w.add_argument("request")
    w.add_argument("--timeout", type=float, help="give up after this many seconds (exit 8)")
    m = cmd("mcp", _mcp, "serve MCP on stdio for an agent, acting for the token's requester "
                         "(BENCH_GATE_TOKEN) against --url")
    qs = cmd("questions", _questions, "questions agents asked the operator (open ones)")
    qs.add_argument("--all", action="store_true", help="answered and expired ones too")
    qs.add_argument("--json", action="store_true")
    an = cmd("answer", _answer, "answer an agent's questions, one answer each in order (an "
                                "option's label, or free text)")
    an.add_argument("question")
    an.add_argument("answers", nargs="+", metavar="ANSWER")
    an.add_argument("--notes")
    for sp in (m, qs, an):  # `bench-gate mcp --url URL` reads as well as `--url URL mcp`
        sp.add_argument("--url", default=argparse.SUPPRESS, help="the server (as above)")
        sp.add_argument("--token", default=argparse.SUPPRESS,
                        help="bearer token (default: BENCH_GATE_TOKEN)")

    pl = sub.add_parser("plan", help="ask for or revoke a standing plan (docs/plans.md)")
    plsub = pl.add_subparsers(dest="plan_command", required=True, metavar="ACTION")
    pr = plsub.add_parser("request", help="ask for a plan for a run; decided with `approve`")
    pr.add_argument("run")
    pr.add_argument("--instrument", required=True)
    pr.add_argument("--channels", required=True, nargs="+", type=int, metavar="CH")
    pr.add_argument("--voltage", required=True, nargs=2, type=float, metavar=("MIN", "MAX"))
    pr.add_argument("--current-max", required=True, type=float, metavar="A")
    pr.add_argument("--max-step", type=float, metavar="V",
                    help="largest change from the live setpoint (default: no limit)")
    pr.add_argument("--output-enable", action="store_true",
                    help="include switching the channels on (needs its own approval)")
    pr.add_argument("--max-writes", required=True, type=int)
    pr.add_argument("--timeout", type=int, default=60, metavar="MINUTES",
                    help="how long the plan lives once approved (default %(default)s)")
    pr.add_argument("--rationale")
    pr.set_defaults(fn=_plan_request)
    pv = plsub.add_parser("revoke", help="end a plan now (operators): the next write is held")
    pv.add_argument("run")
    pv.add_argument("plan")
    pv.set_defaults(fn=_plan_revoke)
    ps = cmd("plans", _plans, "a run's plans with their status and writes left")
    ps.add_argument("run")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from .errors import GatewayError

    args = _parser().parse_args(_legacy_journal(list(sys.argv[1:] if argv is None else argv)))
    try:
        code: int = args.fn(args)
        return code
    except ApiError as exc:
        hint = ""
        if exc.status == 401:
            hint = " (check --token or BENCH_GATE_TOKEN)"
        print(f"bench-gate: {exc}{hint}", file=sys.stderr)
        row = problem_named(str(exc.problem.get("type") or "").rpartition("/")[2])
        return row.exit if row is not None else ERROR
    except GatewayError as exc:
        print(f"bench-gate: {exc}", file=sys.stderr)
        return problem_of(exc).exit
    except CliError as exc:
        print(f"bench-gate: {exc}", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    return ERROR


if __name__ == "__main__":
    sys.exit(main())
