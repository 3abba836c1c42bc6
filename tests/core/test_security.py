"""Security across every door, against a real server over the simulated bench (two-person rule
on): the role matrix on every HTTP operation, the console (sign-in, roles, CSRF on every
form), the socket door (GATE:TOK, loopback binding, allowed peers), self-approval, the
two-person rule, and tokens never written to logs, the store or error messages.
See docs/reliability.md section 5.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest

from bench_gate.auth import Tokens
from bench_gate.config import default_config
from bench_gate.gateway import Gateway
from bench_gate.proxy import start_doors
from bench_gate.store import SqliteStore

from .._http_bench import Bench, shown_hash, start_bench

NONE, BAD, REVOKED, REQ, OP, ADMIN = "none", "bad", "revoked", "requester", "operator", "admin"
OWNER = "owner"  # the requester whose run it is, and nobody else
RANK = {REQ: 0, OP: 1, ADMIN: 2}
CSRF = re.compile(r'name="csrf" value="([^"]+)"')
HASH = re.compile(r'name="shown_hash" value="([^"]+)"')
LIVE = re.compile(r'name="shown_live" value="([^"]*)"')
BAD_TOKEN = "bg_" + "Zz9" * 14  # shaped like a real one, never issued


class Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture(scope="module")
def logs() -> Iterator[Captured]:
    """Every log record of the process (the server runs in a thread of it), at DEBUG."""
    handler = Captured()
    names = ["", "uvicorn", "uvicorn.error", "uvicorn.access", "bench_gate", "httpx"]
    saved = {n: logging.getLogger(n).level for n in names}
    for n in names:
        logging.getLogger(n).addHandler(handler)
        logging.getLogger(n).setLevel(logging.DEBUG)
    yield handler
    for n in names:
        logging.getLogger(n).removeHandler(handler)
        logging.getLogger(n).setLevel(saved[n])


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory, logs: Captured) -> Iterator[Bench]:
    for b in start_bench(tmp_path_factory.mktemp("security"), two_person_output_enable=True):
        with httpx.Client(base_url=b.url, timeout=30,
                          headers={"Authorization": f"Bearer {b.tokens['ada']}"}) as h:
            r = h.post("/v1/tokens", json={"name": "gone", "role": "admin"})
            assert r.status_code == 201
            b.tokens["gone"] = r.json()["token"]
            assert h.delete("/v1/tokens/gone").json() == {"revoked": 1}
        b.tokens["bad"] = BAD_TOKEN
        yield b


@pytest.fixture(scope="module")
def errors() -> list[str]:
    """Every error body and door error text the tests saw (checked for tokens at the end)."""
    return []


def client(bench: Bench, who: str) -> httpx.Client:
    token = {BAD: BAD_TOKEN, REVOKED: bench.tokens["gone"], REQ: bench.tokens["bot"],
             OP: bench.tokens["olga"], ADMIN: bench.tokens["ada"]}.get(who, bench.tokens.get(who))
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=bench.url, headers=headers, timeout=30)


def held(bench: Bench, command: str, who: str = "bot", kind: str = "script"
         ) -> tuple[str, str]:
    with client(bench, who) as h:
        run = h.post("/v1/runs", json={"kind": kind, "goal": "security"}).json()["id"]
        r = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu", "command": command})
        assert r.status_code == 202, r.text
        return str(run), str(r.json()["takeover"]["id"])


@pytest.fixture(scope="module")
def ids(bench: Bench) -> dict[str, str]:
    run, tk = held(bench, "VOLT 0.2,(@3)")
    return {"run_id": run, "tk_id": tk, "plan_id": "plan-nope", "question_id": "q-nope",
            "name": "psu", "id_or_name": "nobody"}


#: Every HTTP operation: the least role it needs and a body that changes nothing.
OPERATIONS: dict[tuple[str, str], tuple[str, Any]] = {
    ("POST", "/v1/runs"): (REQ, {"kind": "nope"}),
    ("GET", "/v1/runs"): (REQ, None),
    ("GET", "/v1/runs/{run_id}"): (REQ, None),
    ("GET", "/v1/runs/{run_id}/journal"): (REQ, None),
    ("POST", "/v1/runs/{run_id}/scpi"): (OWNER, {"instrument": "nope", "command": "*IDN?"}),
    ("POST", "/v1/runs/{run_id}/takeover/request"): (OP, {"nope": 1}),
    ("POST", "/v1/runs/{run_id}/release"): (OP, None),
    ("POST", "/v1/runs/{run_id}/close"): (REQ, {"reason": 5}),
    ("GET", "/v1/runs/{run_id}/takeover"): (REQ, None),
    ("POST", "/v1/runs/{run_id}/takeover/{tk_id}/grant"): (OP, {"approve": []}),
    ("POST", "/v1/runs/{run_id}/takeover/{tk_id}/deny"): (OP, {"notes": 5}),
    ("POST", "/v1/runs/{run_id}/takeover/{tk_id}/release"): (OP, None),
    ("POST", "/v1/runs/{run_id}/plans"): (REQ, {"instrument": ""}),
    ("GET", "/v1/runs/{run_id}/plans"): (REQ, None),
    ("GET", "/v1/runs/{run_id}/plans/{plan_id}"): (REQ, None),
    ("POST", "/v1/runs/{run_id}/plans/{plan_id}/revoke"): (OP, None),
    ("POST", "/v1/runs/{run_id}/feedback"): (REQ, {"stepId": ""}),
    ("GET", "/v1/takeover"): (REQ, None),  # a requester's: its own runs' requests
    ("GET", "/v1/takeover/{tk_id}"): (REQ, None),
    ("POST", "/v1/runs/{run_id}/questions"): (REQ, {"nope": 1}),
    ("GET", "/v1/questions"): (REQ, None),
    ("GET", "/v1/questions/{question_id}"): (REQ, None),
    ("POST", "/v1/questions/{question_id}/answer"): (OP, {"nope": 1}),
    ("POST", "/v1/bench/stop"): (REQ, {"nope": 1}),
    ("GET", "/v1/bench/stop"): (REQ, None),
    ("POST", "/v1/bench/stop/clear"): (OP, {"nope": 1}),
    ("POST", "/v1/runs/{run_id}/heartbeat"): (REQ, None),
    ("GET", "/v1/bench/leases"): (OP, None),
    ("GET", "/healthz"): ("public", None),
    ("GET", "/v1/instruments"): (REQ, None),
    ("GET", "/v1/instruments/{name}/state"): (REQ, None),
    ("GET", "/v1/events"): (REQ, None),
    ("GET", "/metrics"): (REQ, None),
    ("GET", "/v1/tokens"): (ADMIN, None),
    ("POST", "/v1/tokens"): (ADMIN, {"name": "", "role": "requester"}),
    ("DELETE", "/v1/tokens/{id_or_name}"): (ADMIN, None),
    ("GET", "/v1/config"): (ADMIN, None),
    ("GET", "/v1/journal/verify"): (ADMIN, None),
}


def test_the_matrix_covers_every_operation(bench: Bench) -> None:
    spec = httpx.get(bench.url + "/openapi.json").json()
    ops = {(m.upper(), p) for p, item in spec["paths"].items() for m in item}
    assert ops - set(OPERATIONS) == set(), "add these operations to OPERATIONS with their role"
    assert set(OPERATIONS) - ops == set()


def _call(bench: Bench, who: str, method: str, path: str, body: Any) -> httpx.Response:
    with client(bench, who) as h:
        if path == "/v1/events":
            with h.stream("GET", path) as r:
                return r
        return h.request(method, path, json=body)


@pytest.mark.parametrize("who", [NONE, BAD, REVOKED, REQ, OP, ADMIN])
def test_role_matrix_every_operation(bench: Bench, ids: dict[str, str], errors: list[str],
                                     who: str) -> None:
    for (method, path), (needs, body) in OPERATIONS.items():
        r = _call(bench, who, method, path.format(**ids), body)
        where = f"{who} {method} {path}: {r.status_code}"
        assert r.status_code < 500, where
        if needs == "public":
            assert r.status_code == 200, where
        elif who in (NONE, BAD, REVOKED):
            assert r.status_code == 401, where
            assert r.headers["content-type"].startswith("application/problem+json"), where
            assert r.headers.get("www-authenticate", "").startswith("Bearer"), where
        elif needs == OWNER:
            assert r.status_code == (403 if who != REQ else 404), where
        elif RANK[who] < RANK[needs]:
            assert r.status_code == 403, where
        else:
            assert r.status_code not in (401, 403), where
        if r.status_code >= 400 and path != "/v1/events":
            errors.append(r.text)
    assert status(bench, ids["tk_id"]) == "pending"  # nothing in the matrix decided it


def status(bench: Bench, tk: str) -> str:
    with client(bench, OP) as h:
        return str(h.get(f"/v1/takeover/{tk}").json()["status"])


def test_a_requester_sees_only_its_own(bench: Bench, ids: dict[str, str]) -> None:
    with client(bench, "bot2") as h:
        for path in ("/v1/runs/{run_id}", "/v1/runs/{run_id}/journal",
                     "/v1/runs/{run_id}/takeover", "/v1/takeover/{tk_id}"):
            assert h.get(path.format(**ids)).status_code == 403, path
        r = h.post(f"/v1/runs/{ids['run_id']}/scpi", json={"instrument": "psu",
                                                           "command": "VOLT 1,(@3)"})
        assert r.status_code == 403
        assert all(run["principal"] == "bot2" for run in h.get("/v1/runs").json())
        queue = h.get("/v1/takeover")
        assert queue.status_code == 200 and ids["tk_id"] not in {r["id"] for r in queue.json()}


def test_self_approval_is_refused_on_every_door(bench: Bench, errors: list[str]) -> None:
    before = bench.psu("VOLT? (@3)")
    # HTTP: an operator's own script run
    run, tk = held(bench, "VOLT 0.3,(@3)", who="olga")
    with client(bench, "olga") as h:
        r = h.post(f"/v1/runs/{run}/takeover/{tk}/grant",
                   json={"approve": ["setpoint"], "proposalHash": shown_hash(h, tk)})
    assert r.status_code == 403 and "cannot approve" in r.json()["reason"]
    errors.append(r.text)
    # console: the same person, signed in
    c, csrf = sign_in(bench, "olga")
    page = c.get(f"/requests/{tk}")
    r = c.post(f"/requests/{tk}/approve", data={
        "csrf": csrf, "kind": "setpoint", "shown_hash": _find(HASH, page.text, ""),
        "shown_live": _find(LIVE, page.text, "{}").replace("&#34;", '"').replace(
            "&quot;", '"')})
    assert r.status_code in (303, 403, 409), r.status_code
    assert status(bench, tk) == "pending"
    assert bench.psu("VOLT? (@3)") == before


def _find(rx: re.Pattern[str], text: str, default: str) -> str:
    m = rx.search(text)
    return m.group(1) if m else default


def test_two_person_rule_across_doors(bench: Bench) -> None:
    """One person approves the setpoint (HTTP); the same person may not give the output
    enable, on any door; a second person can."""
    run, tk = held(bench, "VOLT 0.4,(@2);:CURR 0.4,(@2);:OUTP ON,(@2)")
    with client(bench, "olga") as h:
        seen = shown_hash(h, tk)
        both = h.post(f"/v1/runs/{run}/takeover/{tk}/grant",
                      json={"approve": ["setpoint", "output_enable"], "proposalHash": seen})
        assert both.status_code == 403
        assert h.post(f"/v1/runs/{run}/takeover/{tk}/grant",
                      json={"approve": ["setpoint"], "proposalHash": seen}).status_code == 200
        again = h.post(f"/v1/runs/{run}/takeover/{tk}/grant",
                       json={"approve": ["output_enable"], "proposalHash": seen})
        assert again.status_code == 403 and "second person" in again.json()["reason"]
    assert status(bench, tk) == "pending"
    assert bench.psu("OUTP? (@2)") == "0"
    with client(bench, "oscar") as h:
        ok = h.post(f"/v1/runs/{run}/takeover/{tk}/grant",
                    json={"approve": ["output_enable"], "proposalHash": shown_hash(h, tk)})
        assert ok.status_code == 200 and ok.json()["request"]["status"] == "executed"
    assert bench.psu("OUTP? (@2)") == "1"
    assert Decimal(bench.psu("VOLT? (@2)")) == Decimal("0.4")
    with client(bench, "oscar") as h:  # leave the bench off for the other tests
        run2, tk2 = held(bench, "OUTP OFF,(@2)")
        off = h.post(f"/v1/runs/{run2}/takeover/{tk2}/grant",
                     json={"approve": ["state"], "proposalHash": shown_hash(h, tk2)})
        assert off.status_code == 200, off.text


def test_mcp_door_needs_a_live_token(bench: Bench, errors: list[str]) -> None:
    """The MCP door (/mcp): no token, a wrong one or a revoked one gets 401 before any
    session; a requester's MCP run cannot approve (MCP has no decision tools at all)."""
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    for who in (NONE, BAD, REVOKED):
        with client(bench, who) as h:
            r = h.post("/mcp", json=ping, headers={"Accept": "application/json, "
                                                   "text/event-stream"})
        assert r.status_code == 401, (who, r.status_code)
        assert r.headers["www-authenticate"].startswith("Bearer")
        errors.append(r.text)
    # No decision tools: tests/doors/mcp/test_mcp.py lists them over both transports.


# --- the console ---------------------------------------------------------------------------


def browser(bench: Bench) -> httpx.Client:
    return httpx.Client(base_url=bench.url, timeout=30, follow_redirects=False)


def sign_in(bench: Bench, who: str) -> tuple[httpx.Client, str]:
    c = browser(bench)
    token = CSRF.search(c.get("/login").text)
    assert token
    r = c.post("/login", data={"csrf": token.group(1), "token": bench.tokens[who], "next": "/"})
    assert r.status_code == 303, r.text
    found = CSRF.search(c.get("/").text)
    assert found
    return c, found.group(1)


def test_console_sign_in_refuses_bad_tokens_and_forged_forms(bench: Bench,
                                                             errors: list[str]) -> None:
    with browser(bench) as c:
        token = _find(CSRF, c.get("/login").text, "")
        for secret in (BAD_TOKEN, bench.tokens["gone"]):
            r = c.post("/login", data={"csrf": token, "token": secret, "next": "/"})
            assert r.status_code == 401 and "bg_session" not in r.headers.get("set-cookie", "")
            errors.append(r.text)
        # the double-submit cookie must match, and the origin must be ours
        r = c.post("/login", data={"csrf": "x" + token, "token": bench.tokens["olga"]})
        assert r.status_code == 403
        r = c.post("/login", data={"csrf": token, "token": bench.tokens["olga"]},
                   headers={"Origin": "http://evil.example"})
        assert r.status_code == 403
        errors.append(r.text)
    with browser(bench) as fresh:  # no cookie at all: a cross-site form post
        r = fresh.post("/login", data={"csrf": token, "token": bench.tokens["olga"]})
        assert r.status_code == 403


@pytest.mark.parametrize("action", ["approve", "deny", "change", "logout"])
def test_console_csrf_on_every_form(bench: Bench, action: str) -> None:
    _run, tk = held(bench, "VOLT 0.5,(@3)")
    c, csrf = sign_in(bench, "oscar")
    path, form = {
        "approve": (f"/requests/{tk}/approve", {"kind": "setpoint"}),
        "deny": (f"/requests/{tk}/deny", {"notes": "no"}),
        "change": ("/instruments/psu/change", {"channel": "3", "voltage": "0.6"}),
        "logout": ("/logout", {"next": "/"}),
    }[action]
    for data, headers in (
        (form, {}),                                              # no token
        ({**form, "csrf": "x" + csrf}, {}),                      # wrong token
        ({**form, "csrf": csrf}, {"Origin": "http://evil.example"}),  # cross origin
        ({**form, "csrf": csrf}, {"Origin": "null"}),            # sandboxed frame
    ):
        r = c.post(path, data=data, headers=headers)
        assert r.status_code == 403, (action, data, headers, r.status_code)
    assert status(bench, tk) == "pending"
    assert c.get("/").status_code == 200  # still signed in: logout was refused too
    with browser(bench) as anonymous:
        r = anonymous.post(path, data={**form, "csrf": csrf})
        assert r.status_code in (303, 401, 403)
        assert status(bench, tk) == "pending"


def test_console_requester_cannot_decide(bench: Bench) -> None:
    _run, tk = held(bench, "VOLT 0.7,(@3)", who="bot2")
    c, csrf = sign_in(bench, "bot")
    for path, data in ((f"/requests/{tk}/approve", {"csrf": csrf, "kind": "setpoint"}),
                       (f"/requests/{tk}/deny", {"csrf": csrf, "notes": "x"})):
        r = c.post(path, data=data)
        assert r.status_code in (403, 404), r.status_code
    assert status(bench, tk) == "pending"


# --- the socket door ---------------------------------------------------------------------


def door(bench: Bench) -> tuple[str, int]:
    assert bench.server.running is not None
    return bench.server.running.doors["psu"]


def converse(addr: tuple[str, int], *messages: str, answers: int, timeout: float = 10
             ) -> list[str]:
    with socket.create_connection(addr, timeout=timeout) as s:
        s.sendall("".join(m + "\n" for m in messages).encode())
        buf = b""
        while buf.count(b"\n") < answers:
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                raise AssertionError(f"no answer to {messages!r} (held?)") from None
            if not chunk:
                break
            buf += chunk
    return buf.decode().splitlines()


def test_door_binds_loopback_by_default(bench: Bench) -> None:
    assert default_config().server.host == "127.0.0.1"
    host, _ = door(bench)
    assert host == "127.0.0.1"


def test_door_token_roles_and_refusals(bench: Bench, errors: list[str]) -> None:
    addr = door(bench)
    assert bench.server.running is not None
    gw = bench.server.running.gateway
    # a bad or revoked token: refused, and the connection stays script@<peer>
    for secret in (BAD_TOKEN, bench.tokens["gone"]):
        out = converse(addr, f'GATE:TOK "{secret}"', "GATE:RUN?", "SYST:ERR?", answers=2)
        assert out[1].startswith("-203,"), out
        errors.extend(out)
        run = gw.get_run(out[0].strip('"'))
        assert run.principal == "script@127.0.0.1"
    # a good token names the run
    out = converse(addr, f'GATE:TOK "{bench.tokens["bot"]}"', "GATE:RUN?", answers=1)
    assert gw.get_run(out[0].strip('"')).principal == "bot"
    # a late token (after the first instrument command) is refused with -221
    out = converse(addr, "*IDN?", f'GATE:TOK "{bench.tokens["bot2"]}"', "GATE:RUN?",
                   "SYST:ERR?", answers=3)
    assert gw.get_run(out[1].strip('"')).principal == "script@127.0.0.1"
    assert out[2].startswith("-221,"), out
    errors.extend(out)


def test_door_operator_token_cannot_self_approve(bench: Bench) -> None:
    """An operator's token at the door makes a script run of the operator's own: the
    operator's write held there needs someone else."""
    addr = door(bench)
    assert bench.server.running is not None
    gw = bench.server.running.gateway
    before = bench.psu("VOLT? (@3)")
    with socket.create_connection(addr, timeout=10) as s:
        s.sendall(f'GATE:TOK "{bench.tokens["olga"]}"\nVOLT 0.8,(@3)\n'.encode())
        tk = None
        for _ in range(200):
            mine = [r for r in gw.list_requests() if r.message == "VOLT 0.8,(@3)"
                    and r.status.value == "pending"]
            if mine:
                tk = mine[0]
                break
            asyncio.run(asyncio.sleep(0.05))
        assert tk is not None
        assert gw.get_run(tk.run_id).principal == "olga"
        with client(bench, "olga") as h:
            r = h.post(f"/v1/runs/{tk.run_id}/takeover/{tk.id}/grant",
                       json={"approve": ["setpoint"], "proposalHash": tk.proposal_hash})
        assert r.status_code == 403, r.text
    assert bench.psu("VOLT? (@3)") == before


async def test_door_refuses_peers_outside_the_allowed_list(tmp_path: Any, sim: Any,
                                                           caplog: Any) -> None:
    config = default_config(sim.psu_port, sim.dmm_port)
    for ic in config.instruments:
        ic.socket_port = 0
    config.server.allowed_peers = ["192.0.2.7"]  # not us
    gw = Gateway(config, SqliteStore(tmp_path / "peers.db"))
    await gw.start()
    doors = await start_doors(gw, Tokens(gw.store), config)
    try:
        host, port = doors.addresses["psu"]
        assert host == "127.0.0.1"
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"*IDN?\nVOLT 5,(@1)\n")
        await writer.drain()
        try:  # closed at once, nothing answered (a reset if our bytes were still unread)
            assert await asyncio.wait_for(reader.read(), 5) == b""
        except ConnectionResetError:
            pass
        writer.close()
        assert "refused connection from 127.0.0.1" in caplog.text
        assert gw.list_requests() == []
    finally:
        await doors.close()
        await gw.close()
        gw.store.close()


def test_door_never_forwards_a_gate_unit_mixed_with_instrument_commands(bench: Bench) -> None:
    """Regression: ``*IDN?;:GATE:TOK "bg_..."`` went to the core as an instrument message: the
    token was journaled, shown to reviewers in a held request, and would have been sent to
    the instrument once approved. Now any GATE unit makes the message the door's own."""
    assert bench.server.running is not None
    gw = bench.server.running.gateway
    secret = bench.tokens["bot2"]
    before = len(gw.list_requests(limit=10_000))
    for message in (f'*IDN?;:GATE:TOK "{secret}"', f'VOLT 1,(@1); gate:tok "{secret}"',
                    f'*CLS;GATE:GOAL "{secret}"'):
        out = converse(door(bench), message, "SYST:ERR?", answers=1, timeout=5)
        assert out[0].startswith("-113,") and secret not in out[0], out
    assert len(gw.list_requests(limit=10_000)) == before
    assert secret.encode() not in bench.db.read_bytes()


# --- tokens never leak ------------------------------------------------------------------------


def test_tokens_never_reach_logs_store_or_errors(bench: Bench, logs: Captured,
                                                 errors: list[str]) -> None:
    """Last in this module: every secret used above, searched for everywhere."""
    # a few more places a token could be echoed: a bad header, a console session
    with httpx.Client(base_url=bench.url, timeout=30) as h:
        for header in (f"Bearer {BAD_TOKEN}x", f"Basic {BAD_TOKEN}", BAD_TOKEN):
            r = h.get("/v1/runs", headers={"Authorization": header})
            assert r.status_code == 401
            errors.append(r.text + str(r.headers))
    # a token sent in a message with other units, or after ';' (a client's slip)
    secret = bench.tokens["bot2"]
    for message in (f'*IDN?;:GATE:TOK "{secret}"', f'GATE:GOAL "x";TOK "{secret}"',
                    f'GATE:TOK {secret}', f'GATE:TOK:{secret}', f'GATE:{secret[:12]}'):
        out = converse(door(bench), message, "SYST:ERR?", answers=1, timeout=3)
        errors.extend(out)
    c, _ = sign_in(bench, "ada")
    page = c.get("/")
    errors.append(page.text + str(page.headers))
    secrets = [s for s in bench.tokens.values() if s]
    db = bench.db.read_bytes() + b"".join(
        p.read_bytes() for p in bench.db.parent.glob(bench.db.name + "-*"))
    text = "\n".join(logs.lines)
    assert logs.lines, "the log capture saw nothing"
    for secret in secrets:
        assert secret.encode() not in db, "a token is stored in the database"
        assert secret not in text, "a token was logged"
        for body in errors:
            assert secret not in body, f"a token was echoed: {body[:200]}"
