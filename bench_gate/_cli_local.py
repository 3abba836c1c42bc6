"""``bench-gate`` commands that work on this machine: serve the bench (and MCP on stdio),
manage tokens and keep the journal (verify, export, archive), on the store itself."""

from __future__ import annotations

import argparse
import json
import shlex
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ._cli_common import BROKEN, CliError, client_for, echo, print_json, table
from .client import ApiError

__all__ = ["journal_archive", "journal_export", "journal_verify", "mcp", "serve",
           "token_create", "token_list", "token_revoke"]


# ------------------------------------------------------------------------- local: serve
def serve(args: argparse.Namespace) -> int:
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
    if isinstance(db, Path):  # only serve makes a store: a token command names one
        db.parent.mkdir(parents=True, exist_ok=True)
    store = open_store(db)
    tokens = Tokens(store)
    option, hidden = db_option(db)

    def ready(r: server.Running) -> None:
        # Only now, serving: a start that failed (a port in use) never uses the token up.
        first = None if tokens.any() else tokens.create("admin", "admin")[1]
        echo(f"bench-gate: serving bench {config.bench!r}")
        echo(f"  HTTP API      {r.url}   (OpenAPI {r.url}/openapi.json, docs {r.url}/docs)")
        echo(f"  store         {shown}")
        if bench is not None:
            echo(f"  simulated     PSU {bench.psu_resource_name}, DMM {bench.dmm_resource_name}")
        echo("  instruments")
        known = {ic.name: r.gateway.instrument_identity(ic.name) for ic in config.instruments}
        rows = []
        for ic in config.instruments:
            door = r.doors.get(ic.name)
            k = known[ic.name]
            rows.append([ic.name, k["profile"], ic.resource,
                         f"socket door {door[0]}:{door[1]}" if door else "no socket door"])
        widths = [max(len(row[n]) for row in rows) for n in range(3)]
        for row in rows:
            echo("    " + "  ".join(x.ljust(w) for x, w in zip(row, widths, strict=False))
                 + "  " + row[3])
            k = known[row[0]]
            if k["words"]:
                echo(f"      WARNING another instrument answers: {k['words']}")
            elif k["failing"]:
                echo(f"      WARNING unreachable: {k['failing']}")
        if r.doors_note:
            echo(f"  note          {r.doors_note}")
        if first:
            echo("  admin token   (shown once; keep it)")
            echo(f"    export BENCH_GATE_TOKEN={first}")
        else:
            echo("  tokens        already issued; list them with "
                 f"`bench-gate token list --db {option}`")
            echo("  lost admin?   bench-gate token create --name YOUR-NAME --role admin "
                 f"--db {option}")
        echo("  more tokens   bench-gate token create --name alice --role operator "
             f"--db {option}")
        if hidden:
            echo("                (the store's password is not shown: set PGPASSWORD, or "
                 "keep it in ~/.pgpass)")
        echo("  Ctrl-C stops.")

    try:
        server.run_loop(server.run(config, store, host=args.host, port=args.port,
                                   on_ready=ready, probe=True,
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
    return db, str(db)


def db_option(db: str | Path) -> tuple[str, bool]:
    """The store as ``--db`` takes it, to print in a command a person can paste: a path
    quoted for the shell, a PostgreSQL URL without its password (libpq takes it from
    PGPASSWORD or ~/.pgpass); and whether a password was left out. ``describe``'s
    ``host:port/db`` is no URL: pasted, it named a SQLite file that does not exist."""
    if isinstance(db, Path):
        return shlex.quote(str(db)), False
    parts = urlsplit(db)
    query = parse_qsl(parts.query, keep_blank_values=True)
    kept = [(k, v) for k, v in query if k.lower() != "password"]
    hidden = parts.password is not None or len(kept) != len(query)
    netloc = parts.hostname or ""
    if ":" in netloc:  # an IPv6 address
        netloc = f"[{netloc}]"
    if parts.port is not None:
        netloc += f":{parts.port}"
    if parts.username is not None:
        netloc = f"{parts.username}@{netloc}"
    url = urlunsplit((parts.scheme, netloc, parts.path, urlencode(kept), parts.fragment))
    return shlex.quote(url), hidden


def _token(r: dict[str, Any]) -> dict[str, Any]:
    """A token's record as JSON (camelCase, as the API): never its secret or digest."""
    return {"id": r["id"], "name": r["name"], "role": r["role"],
            "createdAt": r["created_at"], "revokedAt": r.get("revoked_at"),
            "createdBy": r.get("created_by")}


def token_create(args: argparse.Namespace) -> int:
    record, secret = _tokens(args).create(args.name, args.role)
    if args.json:
        return print_json({**_token(record), "token": secret})
    echo(f"created {record['id']} for {record['name']} ({record['role']}); shown once:")
    echo(secret)
    return 0


def token_list(args: argparse.Namespace) -> int:
    found = _tokens(args).all()
    if args.json:
        return print_json([_token(r) for r in found])
    rows = [[r["id"], r["name"], r["role"], r["created_at"][:19],
             "revoked " + r["revoked_at"][:19] if r.get("revoked_at") else "active",
             r.get("created_by") or "-"]
            for r in found]
    table(["ID", "NAME", "ROLE", "CREATED", "STATE", "MADE BY"], rows)
    return 0


def token_revoke(args: argparse.Namespace) -> int:
    tokens = _tokens(args)
    count = tokens.revoke(args.id_or_name)
    made = tokens.made_by(args.id_or_name)
    if args.json:
        return print_json({"revoked": count, "madeWithIt": [_token(r) for r in made]})
    echo(f"revoked {count} token{'s' if count != 1 else ''}")
    if made:  # if it leaked, so may have what it made: the admin judges, nothing is guessed
        echo("still active, made with it (revoke them too if it leaked: "
             "bench-gate token revoke ID):")
        for r in made:
            echo(f"  {r['id']} {r['name']} ({r['role']}) made {r['created_at'][:19]}")
    return 0


# ------------------------------------------------------------------------- agents
def mcp(args: argparse.Namespace) -> int:
    """The MCP server on stdio, acting for the token's requester against --url."""
    import anyio

    from .errors import InvalidInput
    from .mcp import AgentSession, HttpBench, build_server, serve_stdio
    from .terms import BEATS_PER_TERM, check_term

    term = args.heartbeat_seconds
    try:
        check_term(term)
    except InvalidInput as exc:
        raise CliError(f"--heartbeat-seconds: {exc.message}") from exc
    client = client_for(args)
    try:
        client.request("GET", "/v1/instruments")  # fail here, not in the agent's first call
    except ApiError:
        client.close()
        raise
    session = AgentSession(HttpBench(client, heartbeat_seconds=term))

    async def session_for(ctx: Any) -> AgentSession:
        return session

    async def serve() -> None:
        # Ends with its client, even a killed one with a tool call in flight (mcp/_stdio.py).
        await serve_stdio(build_server(session_for).run_stdio_async, session,
                          beat_every=term / BEATS_PER_TERM)

    try:
        anyio.run(serve)
    finally:
        client.close()
    return 0


# ------------------------------------------------------------------------- local: journal
def _open_db(arg: str | None) -> Any:
    from .store import open_store

    db, shown = _db(arg)
    if isinstance(db, Path) and not db.exists():
        raise CliError(f"no store at {shown}: pass --db")
    return open_store(db)


def journal_verify(args: argparse.Namespace) -> int:
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
        echo(json.dumps({**report.as_json(), "notes": report.notes}, indent=2))
    else:
        echo(report.summary())
        for note in report.notes:
            echo(f"  {note}")
    return 0 if report.intact else BROKEN


def journal_export(args: argparse.Namespace) -> int:
    from .store import export_run

    out = Path(args.output or f"journal-{args.run}.jsonl")
    store = _open_db(args.db)
    try:
        count = export_run(store, args.run, out,
                           Path(args.archive_dir) if args.archive_dir else None)
    finally:
        store.close()
    if args.json:
        return print_json({"run": args.run, "events": count, "file": str(out)})
    echo(f"wrote {count} events of run {args.run} with their hashes to {out}; check it "
         f"anywhere with `bench-gate journal verify --file {out}`")
    return 0


def _when(text: str) -> datetime:
    try:
        at = datetime.fromisoformat(text)
    except ValueError as exc:
        raise CliError(f"--before {text!r}: write a date or a time, 2024-05-01 or "
                       "2024-05-01T12:00:00+00:00") from exc
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def journal_archive(args: argparse.Namespace) -> int:
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
    if args.json:
        return print_json({"before": before.isoformat(), "segments": [
            {"firstSeq": g.first_seq, "lastSeq": g.last_seq, "events": g.events,
             "file": str(g.path)} for g in done]})
    if not done:
        echo(f"nothing to archive: no event older than {before.isoformat()} is left in the "
             "store")
    for segment in done:
        echo(f"archived seqs {segment.first_seq} to {segment.last_seq} ({segment.events} "
             f"events) to {segment.path}")
    return 0
