"""Two real `bench-gate serve` processes on one PostgreSQL database, each with its own
simulated PSU: approve on A what B owns, kill B mid-way, race decisions over HTTP."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
import pyvisa

from sim_instruments import SimBenchThread
from tests import pg
from tests._http_bench import shown_hash

pg_cluster = pg.pg_cluster
BIN = str(Path(sys.executable).with_name("bench-gate"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Gate:
    """One `bench-gate serve` process for one bench."""

    def __init__(self, name: str, sim: SimBenchThread, db: str, home: Path) -> None:
        self.name, self.db, self.home = name, db, home
        self.port = free_port()
        self.config = home / f"{name}.toml"
        self.config.write_text(f"""
bench = "{name}"
[[instruments]]
name = "psu"
resource = "{sim.psu_resource_name}"
profile = "e36312a"
[server]
port = {self.port}
""")
        self.proc: subprocess.Popen[str] | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {**os.environ, "BENCH_GATE_HOME": str(self.home)}
        self.proc = subprocess.Popen(
            [BIN, "serve", "--config", str(self.config), "--db", self.db],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.kill()
        raise AssertionError(f"{self.name} did not start")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None


def token(db: str, home: Path, name: str, role: str) -> str:
    env = {**os.environ, "BENCH_GATE_HOME": str(home)}
    out = subprocess.run([BIN, "token", "--db", db, "create", "--name", name, "--role", role],
                         env=env, capture_output=True, text=True, check=True, timeout=30)
    return out.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def lab(pg_cluster: pg.PgCluster, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[dict[str, Any]]:
    tmp_path = tmp_path_factory.mktemp("lab")
    db = pg_cluster.new_database()
    with SimBenchThread() as sim_a, SimBenchThread() as sim_b:
        a = Gate("bench-a", sim_a, db, tmp_path)
        b = Gate("bench-b", sim_b, db, tmp_path)
        try:
            yield {"a": a, "b": b, "db": db, "sim_a": sim_a, "sim_b": sim_b,
                   "script": token(db, tmp_path, "line-7", "requester"),
                   "olga": token(db, tmp_path, "olga", "operator"),
                   "pete": token(db, tmp_path, "pete", "operator")}
        finally:
            a.kill()
            b.kill()


def api(gate: Gate, who: str) -> httpx.Client:
    return httpx.Client(base_url=gate.url, headers={"Authorization": f"Bearer {who}"},
                        timeout=30)


def psu_volts(sim: SimBenchThread, channel: int) -> Decimal:
    rm = pyvisa.ResourceManager("@py")
    res = rm.open_resource(sim.psu_resource_name, read_termination="\n",
                           write_termination="\n", timeout=2000)
    try:
        return Decimal(res.query(f"VOLT? (@{channel})"))
    finally:
        res.close()


def held_write(gate: Gate, who: str, command: str) -> tuple[str, str]:
    with api(gate, who) as h:
        run = h.post("/v1/runs", json={"kind": "script"}).json()["id"]
        r = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu", "command": command})
        assert r.status_code == 202, r.text
        return run, r.json()["takeover"]["id"]


def test_approve_on_a_what_b_owns(lab: dict[str, Any]) -> None:
    a, b = lab["a"], lab["b"]
    run, tk = held_write(b, lab["script"], "VOLT 2.5,(@1)")
    with api(a, lab["olga"]) as h:
        queue = h.get("/v1/takeover", params={"status": "pending"}).json()
        assert tk in [item["id"] for item in queue], "A's queue shows B's request"
        seen = next(item["proposalHash"] for item in queue if item["id"] == tk)
        started = time.monotonic()
        r = h.post(f"/v1/runs/{run}/takeover/{tk}/grant",
                   json={"approve": ["setpoint"], "proposalHash": seen})
        assert r.status_code == 200, r.text
    assert psu_volts(lab["sim_b"], 1) == Decimal("2.5")
    assert time.monotonic() - started < 1.5
    assert psu_volts(lab["sim_a"], 1) == 0


def test_owner_killed_with_an_approved_request(lab: dict[str, Any]) -> None:
    a, b = lab["a"], lab["b"]
    run, tk = held_write(b, lab["script"], "VOLT 3,(@2)")
    b.kill()
    with api(a, lab["olga"]) as h:
        r = h.post(f"/v1/runs/{run}/takeover/{tk}/grant",
                   json={"approve": ["setpoint"], "proposalHash": shown_hash(h, tk)})
        assert r.status_code == 200, r.text
        assert r.json()["request"]["status"] == "approved"
        assert "bench-b" in r.json()["message"]
    assert psu_volts(lab["sim_b"], 2) == 0, "nobody else runs B's write"
    b.start()
    with api(a, lab["olga"]) as h:
        deadline = time.monotonic() + 15
        status = ""
        while time.monotonic() < deadline:
            status = h.get(f"/v1/takeover/{tk}").json()["status"]
            if status == "executed":
                break
            time.sleep(0.2)
        assert status == "executed"
        events = h.get(f"/v1/runs/{run}/journal", params={"limit": 500}).json()
    items = events["events"] if isinstance(events, dict) else events
    assert sum(1 for e in items if e["type"] == "step_completed") == 1
    assert psu_volts(lab["sim_b"], 2) == 3


def test_racing_decisions_over_http(lab: dict[str, Any]) -> None:
    import concurrent.futures

    a, b = lab["a"], lab["b"]
    for i in range(3):
        run, tk = held_write(b, lab["script"], f"VOLT {i + 1},(@3)")
        with api(a, lab["olga"]) as h:
            seen = shown_hash(h, tk)  # both operators decide on what they were shown

        def grant(run: str = run, tk: str = tk, seen: str = seen) -> int:
            with api(a, lab["olga"]) as h:
                return h.post(f"/v1/runs/{run}/takeover/{tk}/grant",
                              json={"approve": ["setpoint"], "proposalHash": seen}
                              ).status_code

        def deny(run: str = run, tk: str = tk, seen: str = seen) -> int:
            with api(b, lab["pete"]) as h:
                return h.post(f"/v1/runs/{run}/takeover/{tk}/deny",
                              json={"notes": "no", "proposalHash": seen}).status_code

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            codes = sorted(f.result() for f in [pool.submit(grant), pool.submit(deny)])
        assert codes in ([200, 409], [200, 200]), codes
        with api(a, lab["olga"]) as h:
            final = h.get(f"/v1/takeover/{tk}").json()["status"]
        assert final in ("executed", "denied")
        if codes == [200, 200]:
            # The deny came second and found nothing to deny only if the grant had not won.
            pytest.fail(f"both decisions succeeded on {tk}: {final}")


def test_the_banner_s_token_command_works_as_printed(pg_cluster: pg.PgCluster,
                                                     tmp_path: Path) -> None:
    """`bench-gate serve --db postgresql://…` printed ``more tokens  bench-gate token create
    … --db 127.0.0.1:PORT/DB``: no URL, so pasted it named a SQLite file that does not exist.
    Now the URL without its password, and the command works as printed."""
    db = pg_cluster.new_database().replace("postgresql://postgres@",
                                           "postgresql://postgres:s3cret-pw@")
    port = free_port()
    env = {**os.environ, "BENCH_GATE_HOME": str(tmp_path)}
    proc = subprocess.Popen([BIN, "serve", "--db", db, "--port", str(port), "--bench", "banner",
                             "--sim-psu-port", "0", "--sim-dmm-port", "0", "--door", "psu=0",
                             "--door", "dmm=0"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        banner = []
        for _ in range(40):  # the banner is a dozen lines
            line = proc.stdout.readline()
            banner.append(line)
            if "Ctrl-C stops." in line or not line:
                break
        text = "".join(banner)
        assert "s3cret-pw" not in text, text
        command = next(line for line in banner if "more tokens" in line).split("more tokens")[1]
        made = subprocess.run(shlex.split(command), env={**env, "PGPASSWORD": "s3cret-pw"},
                              capture_output=True, text=True, timeout=60)
        assert made.returncode == 0, (command, made.stdout, made.stderr)
        alice = made.stdout.strip().splitlines()[-1]
        r = httpx.get(f"http://127.0.0.1:{port}/v1/runs",
                      headers={"Authorization": f"Bearer {alice}"}, timeout=10)
        assert r.status_code == 200, r.text  # the token is in the server's store
        assert "PGPASSWORD" in text  # where the password left out is to come from
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
