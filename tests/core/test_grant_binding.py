"""Every approval names the proposal it approves, through every door (DESIGN rule 7).

The finding: a request was ``VOLT 1,(@1);:OUTP ON,(@1)``; operator A read it at 1.0 V.
Operator B granted ``output_enable`` with the edit ``CH1.voltage=5.5`` (a new proposal, a
new hash). A then granted ``setpoint`` over HTTP, and the gateway executed ``VOLT 5.5``: the
HTTP grant body had no field for the proposal that was seen.

Here, over a real server (uvicorn on 127.0.0.1, the simulated bench), the CLI entry point
and the Python client: a grant or denial that names a proposal which is no longer current
is a 409 carrying the current one, and nothing is recorded or written (the simulator's own
port says so); one that names none is a 428; ``If-Match`` with the ``ETag`` of
``GET /v1/takeover/{id}`` names it too.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench_gate.client import ApiError, Client, ProposalChangedError
from bench_gate.errors import ProposalChanged
from bench_gate.gateway import Gateway
from bench_gate.models import EventType, Principal, Status

from .._http_bench import Bench, shown_hash, start_bench

BIN = str(Path(sys.executable).with_name("bench-gate"))
CSRF = re.compile(r'name="csrf" value="([^"]+)"')
HASH = re.compile(r'name="shown_hash" value="([^"]+)"')


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("binding"), two_person_output_enable=True)


def hold(bench: Bench, command: str) -> tuple[str, dict[str, Any]]:
    """A script's held write: its run and the takeover as the submit answered it."""
    with bench.http("bot") as h:
        run = h.post("/v1/runs", json={"kind": "script", "goal": "binding"}).json()["id"]
        r = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu", "command": command})
        assert r.status_code == 202, r.text
        return str(run), r.json()["takeover"]


def get(bench: Bench, tk: str, who: str = "olga") -> dict[str, Any]:
    with bench.http(who) as h:
        r = h.get(f"/v1/takeover/{tk}")
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body


def journal(bench: Bench, run: str, tk: str) -> list[dict[str, Any]]:
    with bench.http("olga") as h:
        events = h.get(f"/v1/runs/{run}/journal", params={"limit": 1000}).json()["events"]
    return [e for e in events if e["requestId"] == tk]


def edit_behind(bench: Bench, run: str, tk: str, volts: str) -> str:
    """Operator B (oscar) approves the output enable with an edit of CH1's voltage, naming
    the proposal he was shown. Returns the new proposal hash."""
    with bench.http("oscar") as h:
        r = h.post(f"/v1/runs/{run}/takeover/{tk}/grant",
                   json={"approve": ["output_enable"], "edits": {"CH1.voltage": volts},
                         "proposalHash": shown_hash(h, tk)})
    assert r.status_code == 200, r.text
    assert r.json()["request"]["status"] == "pending"
    return str(r.json()["request"]["proposalHash"])


def channel(bench: Bench, ch: int) -> tuple[Decimal, str]:
    """CH``ch``'s voltage setpoint and output state, asked of the simulator itself."""
    return Decimal(bench.psu(f"VOLT? (@{ch})")), bench.psu(f"OUTP? (@{ch})")


# --------------------------------------------------------------------------- HTTP
def test_the_finding_a_grant_of_what_was_seen_after_an_edit_is_a_409(bench: Bench) -> None:
    before = channel(bench, 1)
    run, submitted = hold(bench, "VOLT 1,(@1);:OUTP ON,(@1)")
    tk = submitted["id"]
    # A reads it at 1.0 V.
    seen_by_a = get(bench, tk, "olga")
    assert any("1.000 V" in a["words"] for a in seen_by_a["handoff"]["actions"])
    seen = seen_by_a["proposalHash"]
    # B approves the output enable with CH1 at 5.5 V: a new proposal.
    current = edit_behind(bench, run, tk, "5.5")
    assert current != seen
    # A approves the setpoint of what A saw: refused, with the current proposal to show.
    with bench.http("olga") as h:
        r = h.post(f"/v1/runs/{run}/takeover/{tk}/grant",
                   json={"approve": ["setpoint"], "proposalHash": seen})
    assert r.status_code == 409, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    assert body["type"].endswith("/proposal-changed")
    assert body["seenProposalHash"] == seen and body["currentProposalHash"] == current
    assert body["reason"] == (f"cannot grant {tk}: you were shown proposal {seen[:12]}, but "
                              f"the current one is {current[:12]}; review it again")
    # (was "cannot grant tk-…: it is pending (you were shown …)", as if pending stood in
    # the way)
    assert body["current"]["id"] == tk and body["current"]["proposalHash"] == current
    assert "VOLT 5.5,(@1)" in body["current"]["commands"]
    assert any("5.500 V" in a["words"] for a in body["current"]["handoff"]["actions"])
    assert body["current"]["handoff"]["proposed"]
    # Nothing was recorded for A, nothing ran.
    after = get(bench, tk)
    assert after["status"] == "pending"
    assert [(a["kind"], a["by"]) for a in after["approvalsGiven"]] == [
        ("output_enable", "oscar")]
    events = [e["type"] for e in journal(bench, run, tk)]
    assert not {"step_started", "step_completed", "step_failed"} & set(events), events
    assert not any(e["type"] == "approval_granted" and e["data"]["by"] == "olga"
                   for e in journal(bench, run, tk))
    # The instrument itself: CH1 unchanged, output still off.
    assert channel(bench, 1) == before
    assert before[1] == "0"
    # A denial of what A saw is refused the same way; of what is there now, it goes through.
    with bench.http("olga") as h:
        stale = h.post(f"/v1/runs/{run}/takeover/{tk}/deny",
                       json={"notes": "1 V was fine, 5.5 V is not", "proposalHash": seen})
        assert stale.status_code == 409 and stale.json()["currentProposalHash"] == current
        assert get(bench, tk)["status"] == "pending"
        denied = h.post(f"/v1/runs/{run}/takeover/{tk}/deny",
                        json={"notes": "not 5.5 V", "proposalHash": current})
    assert denied.status_code == 200, denied.text
    assert denied.json()["status"] == "denied"
    assert channel(bench, 1) == before


def test_a_decision_that_names_no_proposal_is_a_428(bench: Bench) -> None:
    before = channel(bench, 2)
    run, submitted = hold(bench, "VOLT 0.7,(@2)")
    tk = submitted["id"]
    with bench.http("olga") as h:
        for path, body in ((f"/v1/runs/{run}/takeover/{tk}/grant", {"approve": ["setpoint"]}),
                           (f"/v1/runs/{run}/takeover/{tk}/deny", {"notes": "no"})):
            r = h.post(path, json=body)
            assert r.status_code == 428, r.text
            assert r.headers["content-type"].startswith("application/problem+json")
            assert "proposalHash" in r.json()["reason"]
            assert f"GET /v1/takeover/{tk}" in r.json()["reason"]
            star = h.post(path, json=body, headers={"If-Match": "*"})
            assert star.status_code == 428, star.text
    after = get(bench, tk)
    assert after["status"] == "pending" and after["approvalsGiven"] == []
    assert channel(bench, 2) == before


def test_etag_and_if_match(bench: Bench) -> None:
    run, submitted = hold(bench, "VOLT 0.9,(@2)")
    tk = submitted["id"]
    with bench.http("olga") as h:
        r = h.get(f"/v1/takeover/{tk}")
        etag = r.headers["etag"]
        assert etag == f'"{r.json()["proposalHash"]}"' == f'"{submitted["proposalHash"]}"'
        grant = f"/v1/runs/{run}/takeover/{tk}/grant"
        # A header and a body that name different proposals: which did the person see?
        both = h.post(grant, json={"approve": ["setpoint"], "proposalHash": "0" * 64},
                      headers={"If-Match": etag})
        assert both.status_code == 400 and "different proposals" in both.json()["reason"]
        weak = h.post(grant, json={"approve": ["setpoint"]}, headers={"If-Match": "W/" + etag})
        assert weak.status_code == 400
        listed = h.post(grant, json={"approve": ["setpoint"]},
                        headers={"If-Match": f'{etag}, "{"0" * 64}"'})
        assert listed.status_code == 400
        wrong = h.post(grant, json={"approve": ["setpoint"]},
                       headers={"If-Match": f'"{"0" * 64}"'})
        assert wrong.status_code == 409 and wrong.json()["currentProposalHash"] == etag[1:-1]
        assert get(bench, tk)["approvalsGiven"] == []
        ok = h.post(grant, json={"approve": ["setpoint"]}, headers={"If-Match": etag})
    assert ok.status_code == 200, ok.text
    assert ok.json()["request"]["status"] == "executed"
    assert Decimal(bench.psu("VOLT? (@2)")) == Decimal("0.9")
    # Unquoted, and the same hash in the body and the header, are accepted too.
    run, submitted = hold(bench, "VOLT 0.8,(@2)")
    tk = submitted["id"]
    with bench.http("olga") as h:
        r = h.post(f"/v1/runs/{run}/takeover/{tk}/deny",
                   json={"notes": "no", "proposalHash": submitted["proposalHash"]},
                   headers={"If-Match": submitted["proposalHash"]})
    assert r.status_code == 200 and r.json()["status"] == "denied"


def test_the_etag_follows_an_edit(bench: Bench) -> None:
    run, submitted = hold(bench, "VOLT 1.1,(@1);:OUTP ON,(@1)")
    tk = submitted["id"]
    with bench.http("olga") as h:
        first = h.get(f"/v1/takeover/{tk}").headers["etag"]
    new = edit_behind(bench, run, tk, "1.2")
    with bench.http("olga") as h:
        r = h.get(f"/v1/takeover/{tk}")
        assert first != r.headers["etag"] == f'"{new}"'
        assert h.post(f"/v1/runs/{run}/takeover/{tk}/deny", json={"notes": "no"},
                      headers={"If-Match": r.headers["etag"]}).status_code == 200


def test_openapi_documents_the_hash(bench: Bench) -> None:
    spec = httpx.get(bench.url + "/openapi.json").json()
    for name in ("GrantBody", "DenyBody"):
        assert "proposalHash" in spec["components"]["schemas"][name]["properties"]
    for verb in ("grant", "deny"):
        op = spec["paths"][f"/v1/runs/{{run_id}}/takeover/{{tk_id}}/{verb}"]["post"]
        assert {"400", "409", "428"} <= set(op["responses"])
        assert "if-match" in {p["name"].lower() for p in op["parameters"]}
    one = spec["paths"]["/v1/takeover/{tk_id}"]["get"]["responses"]["200"]
    assert "ETag" in one["headers"]


# --------------------------------------------------------------------------- CLI
def cli(bench: Bench, who: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The installed ``bench-gate`` entry point against the server."""
    env = {**os.environ, "BENCH_GATE_TOKEN": bench.tokens[who]}
    return subprocess.run([BIN, "--url", bench.url, *args], capture_output=True, text=True,
                          env=env, timeout=60)


def test_cli_approve_prints_what_it_approves_and_binds_its_hash(bench: Bench) -> None:
    run, submitted = hold(bench, "VOLT 2.25,(@3)")
    tk, seen = submitted["id"], submitted["proposalHash"]
    shown = cli(bench, "olga", "show", tk).stdout
    a = cli(bench, "olga", "approve", tk, "--setpoint")
    assert a.returncode == 0, a.stderr
    # The same summary `show` prints, then the outcome.
    assert a.stdout.startswith("approving setpoint:\n")
    summary = a.stdout.split("\n", 1)[1]
    for line in shown.splitlines():
        if not line.lstrip().startswith(("expires", tk)):  # times and status move on
            assert line in summary, line
    assert "CH3 voltage setpoint" in a.stdout and seen in a.stdout
    assert f"{tk}: executed" in a.stdout
    approvals = [e["data"] for e in journal(bench, run, tk) if e["type"] == "approval_granted"]
    assert [{k: a[k] for k in ("kind", "by", "notes", "proposal_hash")} for a in approvals] \
        == [{"kind": "setpoint", "by": "olga", "notes": "", "proposal_hash": seen}]
    assert approvals[0]["meaning"].startswith("I approve the setpoint: CH3 voltage setpoint")
    assert Decimal(bench.psu("VOLT? (@3)")) == Decimal("2.25")


def test_cli_approve_of_a_changed_proposal_exits_9_and_shows_the_new_one(bench: Bench) -> None:
    before = channel(bench, 1)
    run, submitted = hold(bench, "VOLT 1.5,(@1);:OUTP ON,(@1)")
    tk, seen = submitted["id"], submitted["proposalHash"]
    new = edit_behind(bench, run, tk, "4.5")
    a = cli(bench, "olga", "approve", tk, "--setpoint", "--hash", seen)
    assert a.returncode == 9, (a.stdout, a.stderr)
    assert "Traceback" not in a.stderr and a.stderr.startswith("bench-gate: ")
    assert "changed since it was shown" in a.stderr and "nothing was approved" in a.stderr
    assert "4.500 V" in a.stdout and new in a.stdout  # the current proposal, to read again
    assert "approving" not in a.stdout  # it never claimed to approve the pinned one
    assert [g["kind"] for g in get(bench, tk)["approvalsGiven"]] == ["output_enable"]
    assert channel(bench, 1) == before
    # `deny` prints what it denies and names that hash.
    d = cli(bench, "olga", "deny", tk, "--notes", "not 4.5 V")
    assert d.returncode == 0, d.stderr
    assert d.stdout.startswith("denying:\n") and new in d.stdout and "4.500 V" in d.stdout
    assert f"{tk}: denied" in d.stdout
    old = cli(bench, "olga", "deny", tk, "--notes", "again", "--hash", seen)
    assert old.returncode != 0  # decided already: nothing to deny
    assert channel(bench, 1) == before


def test_cli_main_in_process(bench: Bench, capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    from bench_gate.cli import main

    monkeypatch.setenv("BENCH_GATE_TOKEN", bench.tokens["olga"])
    _run, submitted = hold(bench, "VOLT 2.5,(@3)")
    tk = submitted["id"]
    current = get(bench, tk)["proposalHash"]
    assert main(["--url", bench.url, "deny", tk, "--notes", "no", "--hash",
                 "0" * 64]) == 9
    out = capsys.readouterr()
    assert "nothing was denied" in out.err and current in out.out
    assert get(bench, tk)["status"] == "pending"
    assert main(["--url", bench.url, "deny", tk, "--notes", "no", "--hash",
                 current]) == 0
    assert get(bench, tk)["status"] == "denied"


# --------------------------------------------------------------------------- client
def test_client_raises_on_409_with_the_current_proposal(bench: Bench) -> None:
    before = channel(bench, 1)
    run, submitted = hold(bench, "VOLT 0.5,(@1);:OUTP ON,(@1)")
    tk = submitted["id"]
    with Client(bench.url, bench.tokens["olga"]) as olga:
        seen = olga.get(tk)["proposalHash"]
        new = edit_behind(bench, run, tk, "3.3")
        with pytest.raises(ProposalChangedError) as exc:
            olga.grant(tk, ["setpoint"], proposal_hash=seen)
        assert isinstance(exc.value, ApiError) and exc.value.status == 409
        assert exc.value.seen_hash == seen and exc.value.current_hash == new
        assert exc.value.current["proposalHash"] == new
        assert "VOLT 3.3,(@1)" in exc.value.current["commands"]
        with pytest.raises(ProposalChangedError):
            olga.deny(tk, "no", proposal_hash=seen)
        assert [g["kind"] for g in olga.get(tk)["approvalsGiven"]] == ["output_enable"]
        assert channel(bench, 1) == before
        # Without a hash the client approves nothing (review 8: it named what it fetched,
        # a proposal nobody had read); with the one read now it returns the approvals.
        with pytest.raises(TypeError):
            olga.grant(tk, ["setpoint"], notes="3.3 V is right")  # type: ignore[call-arg]
        with pytest.raises(TypeError):
            olga.deny(tk, "no")  # type: ignore[call-arg]
        assert [g["kind"] for g in olga.get(tk)["approvalsGiven"]] == ["output_enable"]
        assert channel(bench, 1) == before
        result = olga.grant(tk, ["setpoint"], notes="3.3 V is right",
                            proposal_hash=olga.get(tk)["proposalHash"])
    assert result["request"]["status"] == "executed", result
    assert {(a["kind"], a["by"]) for a in result["request"]["approvalsGiven"]} == {
        ("setpoint", "olga"), ("output_enable", "oscar")}
    granted = [e["data"] for e in journal(bench, run, tk) if e["type"] == "approval_granted"]
    assert {g["proposal_hash"] for g in granted} == {new}
    assert channel(bench, 1) == (Decimal("3.3"), "1")
    off, _ = hold(bench, "OUTP OFF,(@1)")  # leave CH1 off for the other tests
    with Client(bench.url, bench.tokens["oscar"]) as oscar:
        tk_off = next(t for t in oscar.pending() if t["runId"] == off)
        done = oscar.grant(tk_off["id"], list(tk_off["approvalsMissing"]),
                           proposal_hash=tk_off["proposalHash"])
    assert done["request"]["status"] == "executed", done
    assert bench.psu("OUTP? (@1)") == "0"


# --------------------------------------------------------------------------- console
def test_console_deny_of_a_changed_page_is_refused(bench: Bench) -> None:
    run, submitted = hold(bench, "VOLT 1.3,(@1);:OUTP ON,(@1)")
    tk = submitted["id"]
    with httpx.Client(base_url=bench.url, timeout=30) as c:
        token = CSRF.search(c.get("/login").text)
        assert token
        assert c.post("/login", data={"csrf": token.group(1), "token": bench.tokens["olga"],
                                      "next": "/"}).status_code == 303
        page = c.get(f"/requests/{tk}").text
        csrf, shown = CSRF.search(page), HASH.findall(page)
        assert csrf and len(shown) == 2 and set(shown) == {submitted["proposalHash"]}
        edit_behind(bench, run, tk, "2")
        r = c.post(f"/requests/{tk}/deny", data={"csrf": csrf.group(1), "notes": "no",
                                                  "shown_hash": shown[1]})
        assert r.status_code == 409 and "Nothing was denied" in r.text
        assert get(bench, tk)["status"] == "pending"
        fresh = HASH.findall(c.get(f"/requests/{tk}").text)[1]
        r = c.post(f"/requests/{tk}/deny", data={"csrf": csrf.group(1), "notes": "no",
                                                  "shown_hash": fresh})
        assert r.status_code == 303
    assert get(bench, tk)["status"] == "denied"


# --------------------------------------------------------------------------- the core
async def test_core_records_nothing_for_a_proposal_that_is_not_current(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        front_panel: Any) -> None:
    run = gateway.create_run(script, "script")
    req = (await gateway.submit(run.id, "psu", "VOLT 1,(@1);:OUTP ON,(@1)")).request
    assert req is not None
    edited = await gateway.grant(req.id, pete, ["output_enable"], edits={"CH1.voltage": "5.5"},
                                 proposal_hash=req.proposal_hash)
    assert edited.request.proposal_hash != req.proposal_hash
    before = gateway.store.journal(run.id, limit=1000)
    with pytest.raises(ProposalChanged) as exc:
        await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    assert (exc.value.seen, exc.value.current) == (req.proposal_hash,
                                                   edited.request.proposal_hash)
    with pytest.raises(ProposalChanged):
        await gateway.deny(req.id, olga, "no", proposal_hash=req.proposal_hash)
    assert gateway.store.journal(run.id, limit=1000) == before
    now = gateway.get_request(req.id)
    assert now.status is Status.PENDING
    assert [a.by for a in now.valid_approvals()] == ["pete"]
    assert Decimal(front_panel.query("VOLT? (@1)")) == 0
    assert front_panel.query("OUTP? (@1)").strip() == "0"
    assert EventType.STEP_STARTED not in {e.type for e in before}


def test_a_token_named_as_the_proposal_is_never_echoed(bench: Bench) -> None:
    """An approver who pastes a token where the proposal hash goes (the body's proposalHash
    or an If-Match header: the bearer token is on the clipboard) gets a 409 or 400 that
    shows none of its characters. The 409 echoed it whole (seenProposalHash) and clipped to
    12 characters in its reason ('bg_' and 9 secret ones: too short for the redaction), and
    the 400 of a body and header that disagree clipped both to 12; nothing is approved."""
    secret = bench.tokens["oscar"]
    before = channel(bench, 2)
    run, submitted = hold(bench, "VOLT 0.8,(@2)")
    tk = submitted["id"]
    grant = f"/v1/runs/{run}/takeover/{tk}/grant"
    deny = f"/v1/runs/{run}/takeover/{tk}/deny"
    with bench.http("olga") as h:
        etag = h.get(f"/v1/takeover/{tk}").headers["etag"]
        answers = [
            h.post(grant, json={"approve": ["setpoint"], "proposalHash": secret}),
            h.post(deny, json={"notes": "no", "proposalHash": secret}),
            h.post(grant, json={"approve": ["setpoint"]}, headers={"If-Match": secret}),
            h.post(grant, json={"approve": ["setpoint"]}, headers={"If-Match": f'"{secret}"'}),
            h.post(grant, json={"approve": ["setpoint"], "proposalHash": secret},
                   headers={"If-Match": etag}),
            h.post(grant, json={"approve": ["setpoint"], "proposalHash": etag[1:-1]},
                   headers={"If-Match": secret}),
        ]
    for r in answers:
        assert r.status_code in (400, 409), r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        text = r.text
        assert not any(secret[i:i + 4] in text for i in range(3, len(secret) - 3)), text
    after = get(bench, tk)
    assert after["status"] == "pending" and after["approvalsGiven"] == []
    assert channel(bench, 2) == before
