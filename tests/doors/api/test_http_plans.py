"""Standing plans through the doors: the HTTP routes, the CLI, and the socket door's
GATE:PLAN, against a real server on the simulated bench (two-person output enable).

The proof from the issue is ``test_socket_sweep_inside_one_plan``: a pyvisa script asks for
its plan through the socket door, two operators approve it over HTTP, and the script sweeps
CH1 from 0 to 5 V with its output on, without another click.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import pytest
import pyvisa

from bench_gate.proxy import GateOp, parse_gate
from bench_gate.scpi import ScpiError

from ..._http_bench import Bench, start_bench

T = TypeVar("T")
SCOPE: dict[str, Any] = {"instrument": "psu", "channels": [3], "voltage": [0, 2],
                         "currentMax": 0.2, "maxStep": 0.5, "outputEnable": True,
                         "maxWrites": 10, "timeoutMinutes": 30}


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("plans"), two_person_output_enable=True)


@pytest.fixture(scope="module")
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=2) as ex:
        yield ex


def run_for(bench: Bench, who: str = "bot") -> str:
    with bench.http(who) as h:
        r = h.post("/v1/runs", json={"kind": "script", "goal": "plans"})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])


def grant(bench: Bench, who: str, run: str, tk: str, *kinds: str, proposal_hash: str
          ) -> dict[str, Any]:
    with bench.http(who) as h:
        r = h.post(f"/v1/runs/{run}/takeover/{tk}/grant",
                   json={"approve": list(kinds), "proposalHash": proposal_hash})
        assert r.status_code == 200, r.text
        result: dict[str, Any] = r.json()
        return result


def pending_of(bench: Bench, run: str) -> list[dict[str, Any]]:
    with bench.http("olga") as h:
        r = h.get("/v1/takeover", params={"status": "pending"})
        return [tk for tk in r.json() if tk["runId"] == run]


def wait_for(check: Callable[[], T | None], seconds: float = 15) -> T:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("nothing showed up in time")


def cli(bench: Bench, who: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BENCH_GATE_TOKEN": bench.tokens[who]}
    return subprocess.run([sys.executable, "-m", "bench_gate.cli", "--url", bench.url, *args],
                          capture_output=True, text=True, env=env, timeout=60)


# ---------------------------------------------------------------------- GATE:PLAN parsing
def test_gate_plan_parses_with_the_lexer() -> None:
    (plan,) = parse_gate('GATE:PLAN "psu",(@1),0,5,0.5,0.25,ON,40,30')
    assert plan.op is GateOp.PLAN and plan.scope == {
        "instrument": "psu", "channels": [1], "voltage": [0, 5], "current_max": Decimal("0.5"),
        "max_step": Decimal("0.25"), "output_enable": True, "max_writes": 40,
        "timeout_minutes": 30}
    plan, query = parse_gate("gate:plan (@2:3),0V,5V,500E-3A,NONE,0,40,30;:GATE:PLAN?")
    assert plan.scope is not None and "instrument" not in plan.scope
    assert plan.scope["channels"] == [2, 3] and plan.scope["max_step"] is None
    assert plan.scope["output_enable"] is False and plan.scope["current_max"] == Decimal("0.5")
    assert query.op is GateOp.PLAN_QUERY


@pytest.mark.parametrize(("message", "code"), [
    ("GATE:PLAN (@1),0,5,0.5,0.25,ON,40", -109),
    ("GATE:PLAN (@1),0,5,0.5,0.25,ON,40,30,1", -108),
    ('GATE:PLAN (@1),"0",5,0.5,0.25,ON,40,30', -104),
    ("GATE:PLAN (@1),0,5A,0.5,0.25,ON,40,30", -131),
    ("GATE:PLAN (@1),0,5,0.5,0.25,MAYBE,40,30", -104),
    ("GATE:PLAN (@1),0,5,0.5,0.25,ON,40.5,30", -104),
    ("GATE:PLAN? 1", -108),
])
def test_gate_plan_errors(message: str, code: int) -> None:
    with pytest.raises(ScpiError) as info:
        parse_gate(message)
    assert info.value.code == code


# ---------------------------------------------------------------------- HTTP
def test_plan_routes(bench: Bench) -> None:
    run = run_for(bench)
    with bench.http("bot") as h:
        r = h.post(f"/v1/runs/{run}/plans", json={**SCOPE, "rationale": "ramp CH3"})
    assert r.status_code == 202, r.text
    body = r.json()
    tk, plan = body["takeover"], body["plan"]
    assert body["status"] == "pending" and tk["id"].startswith("tk-")
    assert tk["planId"] == plan["id"] and plan["id"].startswith("plan-")
    assert sorted(tk["required"]) == ["output_enable", "setpoint"]
    assert tk["handoff"]["plan"]["words"][0] == \
        "psu CH3: voltage setpoints from 0.0 V to 2.0 V"
    assert plan["status"] == "pending" and plan["writesLeft"] == 10
    assert plan["scope"] == {"instrument": "psu", "channels": [3], "voltage": [0.0, 2.0],
                             "currentMax": 0.2, "maxStep": 0.5, "outputEnable": True,
                             "maxWrites": 10, "timeoutMinutes": 30}

    seen = tk["proposalHash"]
    first = grant(bench, "olga", run, tk["id"], "setpoint", proposal_hash=seen)
    assert first["request"]["status"] == "pending"
    # the words `bench-gate approve` prints: a plan's actions name no channel (was "of  ")
    assert first["message"] == "setpoint approved; the output enable still needs its own approval"
    done = grant(bench, "oscar", run, tk["id"], "output_enable", proposal_hash=seen)["request"]
    assert done["status"] == "executed" and done["planId"] == plan["id"]
    with bench.http("bot") as h:
        step = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu",
                                                    "command": "VOLT 0.5,(@3)",
                                                    "stepId": "s1"})
        assert step.status_code == 200 and step.json()["status"] == "executed", step.text
        plans = h.get(f"/v1/runs/{run}/plans").json()
        assert [(p["id"], p["status"], p["writesLeft"]) for p in plans] == [
            (plan["id"], "active", 9)]
        assert plans[0]["approvedBy"] == ["olga", "oscar"] and plans[0]["expiresAt"]
        assert h.get(f"/v1/runs/{run}/plans/{plan['id']}").json()["writesUsed"] == 1
        fb = h.post(f"/v1/runs/{run}/feedback", json={"stepId": "s1", "score": 4,
                                                      "notes": "fine"})
        assert fb.status_code == 200 and fb.json()["score"] == 4 and fb.json()["by"] == "bot"
        bad = h.post(f"/v1/runs/{run}/feedback", json={"stepId": "s1", "score": 9})
        assert bad.status_code == 422 and bad.json()["errors"][0]["loc"] == ["body", "score"]
        assert h.post(f"/v1/runs/{run}/plans/{plan['id']}/revoke").status_code == 403

    other = run_for(bench)
    with bench.http("olga") as h:
        assert h.post(f"/v1/runs/{other}/plans/{plan['id']}/revoke").status_code == 404
        r = h.post(f"/v1/runs/{run}/plans/{plan['id']}/revoke")
        assert r.status_code == 200 and r.json()["status"] == "revoked"
        assert r.json()["revokedBy"] == "olga"
        again = h.post(f"/v1/runs/{run}/plans/{plan['id']}/revoke")
        assert again.status_code == 409
    with bench.http("bot") as h:
        held = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu",
                                                    "command": "VOLT 1,(@3)"})
        assert held.status_code == 202 and held.json()["takeover"]["planId"] is None


@pytest.mark.parametrize(("change", "field"), [
    ({"voltage": [3, 1]}, "voltage"),
    ({"voltage": [-1, 1]}, "voltage"),
    ({"voltage": [0, 20]}, "voltage"),          # above the bench limit (12 V on CH3)
    ({"currentMax": 0.9}, "currentMax"),        # above the bench limit (0.5 A on CH3)
    ({"currentMax": -1}, "currentMax"),
    ({"channels": [7]}, "channels"),
    ({"channels": []}, "channels"),
    ({"maxStep": 0}, "maxStep"),
    ({"maxWrites": 0}, "maxWrites"),
    ({"timeoutMinutes": 5000}, "timeoutMinutes"),
    ({"colour": "red"}, "colour"),
])
def test_bad_scope_is_a_422_naming_the_field(bench: Bench, change: dict[str, Any],
                                             field: str) -> None:
    run = run_for(bench)
    with bench.http("bot") as h:
        r = h.post(f"/v1/runs/{run}/plans", json={**SCOPE, **change})
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["errors"][0]["loc"][:2] == ["body", field], r.json()
    assert not pending_of(bench, run)


def test_plan_roles(bench: Bench) -> None:
    run = run_for(bench)
    with bench.http("bot2") as h:
        assert h.post(f"/v1/runs/{run}/plans", json=SCOPE).status_code == 403
        assert h.get(f"/v1/runs/{run}/plans").status_code == 403
        assert h.post(f"/v1/runs/{run}/feedback",
                      json={"stepId": "x", "score": 3}).status_code == 403
    with bench.http("olga") as h:  # an operator reads every run, but asks for no plan of one
        assert h.get(f"/v1/runs/{run}/plans").json() == []
        r = h.post(f"/v1/runs/{run}/plans", json=SCOPE)
        assert r.status_code == 403 and "only its requester" in r.json()["reason"]


# ---------------------------------------------------------------------- CLI
def test_cli_plan_request_plans_revoke(bench: Bench) -> None:
    run = run_for(bench)
    r = cli(bench, "bot", "plan", "request", run, "--instrument", "psu", "--channels", "2",
            "--voltage", "0", "3", "--current-max", "0.2", "--max-step", "0.5",
            "--max-writes", "5", "--timeout", "10", "--rationale", "CH2 ramp")
    assert r.returncode == 0, r.stderr
    assert "voltage setpoints from 0.0 V to 3.0 V" in r.stdout
    assert "output enable NOT included" in r.stdout and "needs         setpoint" in r.stdout
    plan = r.stdout.split(":")[0]
    tk = r.stdout.split("request ")[1].split()[0]
    assert plan.startswith("plan-") and tk.startswith("tk-")
    listed = cli(bench, "bot", "plans", run)
    assert listed.returncode == 0 and plan in listed.stdout and "pending" in listed.stdout
    assert cli(bench, "olga", "show", tk).returncode == 0
    a = cli(bench, "olga", "approve", tk, "--setpoint")
    assert a.returncode == 0 and "executed" in a.stdout, a.stdout + a.stderr
    listed = cli(bench, "bot", "plans", run)
    assert "active" in listed.stdout and "5/5" in listed.stdout
    assert "0-3 V, <= 0.2 A, step 0.5" in listed.stdout
    denied = cli(bench, "bot", "plan", "revoke", run, plan)
    assert denied.returncode == 1 and "403" in denied.stderr
    v = cli(bench, "olga", "plan", "revoke", run, plan)
    assert v.returncode == 0 and "revoked by olga" in v.stdout
    assert "revoked" in cli(bench, "bot", "plans", run).stdout
    bad = cli(bench, "bot", "plan", "request", run, "--instrument", "psu", "--channels", "2",
              "--voltage", "5", "1", "--current-max", "0.2", "--max-writes", "5")
    assert bad.returncode == 1 and "422" in bad.stderr and "voltage" in bad.stderr
    assert "Traceback" not in bad.stderr


# ---------------------------------------------------------------------- the socket door
def door(bench: Bench, timeout: int = 15_000) -> Any:
    with bench.http("bot") as h:
        inst = {i["name"]: i for i in h.get("/v1/instruments").json()}
    host, port = inst["psu"]["doorHost"], inst["psu"]["doorPort"]
    rm = pyvisa.ResourceManager("@py")  # shared per process: never rm.close() here
    return rm.open_resource(f"TCPIP0::{host}::{port}::SOCKET", read_termination="\n",
                            write_termination="\n", timeout=timeout)


def test_socket_sweep_inside_one_plan(bench: Bench, pool: ThreadPoolExecutor) -> None:
    psu = door(bench, timeout=60_000)
    try:
        psu.write(f'GATE:TOK "{bench.tokens["bot"]}"')
        psu.write('GATE:GOAL "IV curve of CH1"')
        run = psu.query("GATE:RUN?").strip('"')
        assert psu.query("GATE:PLAN?") == 'NONE,"",0,0'

        # The script asks for its plan; *OPC? waits until the plan is decided.
        psu.write('GATE:RAT "IV sweep of CH1, 0.25 V steps"')
        psu.write('GATE:PLAN "psu",(@1),0,5,0.5,0.25,ON,40,30')
        opc: Future[str] = pool.submit(psu.query, "*OPC?")
        tk = wait_for(lambda: pending_of(bench, run))[0]
        assert tk["planId"] and sorted(tk["required"]) == ["output_enable", "setpoint"]
        with bench.http("olga") as h:
            shown = h.get(f"/v1/takeover/{tk['id']}").json()
        assert shown["handoff"]["plan"]["words"][2] == "each voltage step at most 0.25 V"
        assert shown["handoff"]["rationale"] == "IV sweep of CH1, 0.25 V steps"
        grant(bench, "olga", run, tk["id"], "setpoint", proposal_hash=shown["proposalHash"])
        time.sleep(0.3)
        assert not opc.done(), "*OPC? answered before the plan was decided"
        grant(bench, "oscar", run, tk["id"], "output_enable",
              proposal_hash=shown["proposalHash"])
        assert opc.result(timeout=15) == "1"
        status, plan_id, left, seconds = psu.query("GATE:PLAN?").split(",")
        assert (status, left) == ("ACTIVE", "40") and 0 < int(seconds) <= 1800
        plan_id = plan_id.strip('"')

        # The sweep: no click after the plan.
        psu.write("CURR 0.5,(@1)")
        psu.write("VOLT 0,(@1)")
        psu.write("OUTP ON,(@1)")
        for step in range(1, 21):
            psu.write(f"VOLT {Decimal('0.25') * step},(@1)")
        assert psu.query("*OPC?") == "1"
        assert psu.query("SYST:ERR?").lstrip("+").startswith('0,"No error"')
        assert Decimal(psu.query("VOLT? (@1)")) == 5 and psu.query("OUTP? (@1)") == "1"
        assert Decimal(bench.psu("VOLT? (@1)")) == 5  # the instrument itself agrees
        assert psu.query("GATE:PLAN?").split(",")[:3] == ["ACTIVE", f'"{plan_id}"', "17"]
        with bench.http("bot") as h:
            journal = h.get(f"/v1/runs/{run}/journal", params={"limit": 1000}).json()
            requests = h.get(f"/v1/runs/{run}/takeover").json()
        asked = [e for e in journal["events"] if e["type"] == "takeover_requested"]
        assert [e["requestId"] for e in asked] == [tk["id"]], "a click was needed"
        assert len(requests) == 24 and all(r["planId"] == plan_id for r in requests)
        assert not pending_of(bench, run)

        # Outside the plan: held for a person (and denied here).
        psu.write("VOLT 5.5,(@1)")
        held = wait_for(lambda: pending_of(bench, run))[0]
        assert held["message"] == "VOLT 5.5,(@1)" and held["planId"] is None
        with bench.http("olga") as h:
            r = h.post(f"/v1/runs/{run}/takeover/{held['id']}/deny",
                       json={"notes": "not 5.5", "proposalHash": held["proposalHash"]})
            assert r.status_code == 200, r.text
        assert psu.query("SYST:ERR?").startswith('-203,"Command protected;')
        assert Decimal(bench.psu("VOLT? (@1)")) == 5

        # Revoked: the very next write is held.
        with bench.http("olga") as h:
            r = h.post(f"/v1/runs/{run}/plans/{plan_id}/revoke")
            assert r.status_code == 200 and r.json()["writesLeft"] == 17
        psu.write("VOLT 4.75,(@1)")
        stopped = wait_for(lambda: pending_of(bench, run))[0]
        assert stopped["message"] == "VOLT 4.75,(@1)"
        assert Decimal(bench.psu("VOLT? (@1)")) == 5
        assert psu.query("GATE:STAT?").startswith(f'PENDING,"{stopped["id"]}"')
        assert psu.query("GATE:PLAN?").split(",")[:3] == ["REVOKED", f'"{plan_id}"', "17"]
    finally:
        psu.close()  # cancels the held write
    with bench.http("olga") as h:
        final = h.get(f"/v1/takeover/{stopped['id']}").json()
    assert final["status"] == "cancelled"


def test_socket_plan_refused_and_denied(bench: Bench) -> None:
    psu = door(bench)
    try:
        psu.write("GATE:PLAN (@2),0,50,0.2,NONE,OFF,5,10")  # above CH2's 12 V
        err = psu.query("SYST:ERR?")
        assert err.startswith('-222,"Data out of range;') and "bench limit" in err
        psu.write('GATE:PLAN "dmm",(@1),0,5,0.2,NONE,OFF,5,10')
        assert psu.query("SYST:ERR?").startswith('-221,"Settings conflict;')
        assert psu.query("GATE:PLAN?") == 'NONE,"",0,0'
        run = psu.query("GATE:RUN?").strip('"')
        psu.write("GATE:PLAN (@2),0,3,0.2,NONE,OFF,5,10")
        tk = wait_for(lambda: pending_of(bench, run))[0]
        # nothing is owed before it, so GATE:PLAN? jumps the line behind the undecided plan
        status, plan_id, left, seconds = psu.query("GATE:PLAN?").split(",")
        assert (status, left, seconds) == ("PENDING", "5", "0") and plan_id == \
            f'"{tk["planId"]}"'
        assert psu.query("GATE:STAT?").startswith(f'PENDING,"{tk["id"]}"')
        with bench.http("olga") as h:
            assert [p["status"] for p in h.get(f"/v1/runs/{run}/plans").json()] == ["pending"]
            r = h.post(f"/v1/runs/{run}/takeover/{tk['id']}/deny",
                       json={"notes": "not today", "proposalHash": tk["proposalHash"]})
            assert r.status_code == 200, r.text
        assert psu.query("*OPC?") == "1"
        err = psu.query("SYST:ERR?")
        assert err.startswith('-203,"Command protected;') and "not today" in err
        assert psu.query("GATE:PLAN?").startswith("DENIED,")
    finally:
        psu.close()


def doc_block(doc: str, after: str) -> str:
    """The first ```python block of ``docs/<doc>`` after the line starting ``after``."""
    text = (Path(__file__).parents[3] / "docs" / doc).read_text(encoding="utf-8")
    rest = text[text.index(after):]
    start = rest.index("```python\n") + len("```python\n")
    return rest[start:rest.index("```", start)]


def test_socket_door_doc_unattended_example_runs_as_written(
        bench: Bench, pool: ThreadPoolExecutor) -> None:
    """docs/socket-door.md's "a plan first, then the script at full speed", run literally on
    the door: one approval of the plan, then every write of the loop runs without a click
    (its plan once said a 0.25 V max step, and the loop's first 1 V step was held)."""
    code = doc_block("socket-door.md", "## Running a script unattended")
    psu = door(bench, timeout=60_000)
    printed: list[str] = []
    try:
        run = psu.query("GATE:RUN?").strip('"')
        ran = pool.submit(exec, code, {"psu": psu, "print": lambda *a: printed.append(
            " ".join(map(str, a)))})
        tk = wait_for(lambda: pending_of(bench, run))[0]
        assert tk["planId"]
        with bench.http("olga") as h:
            shown = h.get(f"/v1/takeover/{tk['id']}").json()
        for who, kind in zip(("olga", "oscar"), tk["required"], strict=False):
            grant(bench, who, run, tk["id"], kind, proposal_hash=shown["proposalHash"])
        ran.result(timeout=30)
        assert len(printed) == 4
        assert Decimal(bench.psu("VOLT? (@1)")) == 5  # the instrument itself
        with bench.http("olga") as h:
            journal = h.get(f"/v1/runs/{run}/journal", params={"limit": 1000}).json()
        asked = [e["requestId"] for e in journal["events"] if e["type"] == "takeover_requested"]
        assert asked == [tk["id"]], "a write of the loop waited for a click"
    finally:
        psu.close()


def test_cli_plan_commands_print_json_when_asked(bench: Bench) -> None:
    """``--json`` on ``plan request``, ``plans`` and ``plan revoke`` printed the text table
    (``bench-gate --json plans RUN | jq`` failed); now the API's JSON, as every other
    command with ``--json``."""
    run = run_for(bench)
    r = cli(bench, "bot", "--json", "plan", "request", run, "--instrument", "psu",
            "--channels", "2", "--voltage", "0", "3", "--current-max", "0.2",
            "--max-writes", "5")
    assert r.returncode == 0, r.stderr
    asked = json.loads(r.stdout)
    plan = asked["plan"]["id"]
    assert asked["status"] == "pending" and asked["takeover"]["planId"] == plan
    listed = json.loads(cli(bench, "bot", "plans", run, "--json").stdout)
    assert [(p["id"], p["status"], p["writesLeft"]) for p in listed] == [(plan, "pending", 5)]
    revoked = json.loads(cli(bench, "olga", "--json", "plan", "revoke", run, plan).stdout)
    assert (revoked["id"], revoked["status"], revoked["revokedBy"]) == (plan, "revoked", "olga")
