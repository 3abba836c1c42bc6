"""The two crash points of tests/core/test_crash_stop_journal.py for real: ``bench-gate
serve`` (a subprocess, started through a launcher that SIGKILLs it right after one store
write) and the simulator in its own process; the restart is a plain ``bench-gate serve`` on
the same store, and the outputs are read on the simulator's own port."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx

from bench.crash import Bench

#: Runs ``bench-gate serve``, SIGKILLed just after the first store write whose method is
#: DIE_METHOD and whose arguments mention DIE_MARK (nothing of the kill is in the code).
LAUNCHER = """
import os, signal, sys
from bench_gate.store import SqliteStore
method, mark = os.environ["DIE_METHOD"], os.environ["DIE_MARK"]
orig = getattr(SqliteStore, method)
def dying(self, *args, **kw):
    out = orig(self, *args, **kw)
    if mark in repr(args):
        os.kill(os.getpid(), signal.SIGKILL)
    return out
setattr(SqliteStore, method, dying)
from bench_gate.cli import main
sys.exit(main(sys.argv[1:]))
"""


class _Dying(Bench):
    def start_dying(self, method: str, mark: str) -> subprocess.Popen[bytes]:
        import os
        gateway = subprocess.Popen(
            [sys.executable, "-c", LAUNCHER, "serve", "--config", str(self.config),
             "--db", str(self.db)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, "DIE_METHOD": method, "DIE_MARK": mark})
        deadline = time.monotonic() + 60
        with self.client("olga") as c:
            while time.monotonic() < deadline and gateway.poll() is None:
                try:
                    if c.get("/v1/takeover", params={"limit": 1}).status_code == 200:
                        return gateway
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
        raise TimeoutError("the launcher's bench-gate serve did not start")

    def panel(self, query: str) -> str:
        import socket
        with socket.create_connection(("127.0.0.1", self.psu_port), timeout=5) as s:
            s.sendall(b"SIM:PANEL\n" + query.encode() + b"\n")
            return s.recv(4096).decode().strip()

    def events(self, kind: str) -> list[dict[str, object]]:
        return [d for _, _, t, d in self.journal() if t == kind]

    def verified(self) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "bench_gate.cli", "journal", "verify", "--db",
             str(self.db)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout


def _killed_in(bench: _Dying, method: str, mark: str, path: str, who: str) -> None:
    gateway = bench.start_dying(method, mark)
    try:
        with bench.client(who) as c:
            try:
                c.post(path, json={"instrument": "psu"})
            except httpx.HTTPError:
                pass  # the gateway died under it
        assert gateway.wait(30) == -9, "SIGKILLed at the crash point"
    finally:
        if gateway.poll() is None:
            gateway.kill()
            gateway.wait()


def test_sigkill_after_each_journal_event_of_a_stop_and_its_clear(tmp_path: Path) -> None:
    """Killed right after the stop's ``emergency_stop`` event (its unfinished record not yet
    deleted): the restart ran the stop again, a second ``emergency_stop``. Killed right
    after the clear deleted the stop: no ``stop_cleared`` at all, the stop gone."""
    bench = _Dying(tmp_path, seed=6, write_delay=0.0, hangup_drop=0.0)
    try:
        bench.start()
        with bench.client("script-7") as me:
            run = me.post("/v1/runs", json={"kind": "script"}).json()["id"]
            pending = me.post(f"/v1/runs/{run}/scpi", json={
                "instrument": "psu", "command": "VOLT 2,(@2)"}).json()["takeover"]["id"]
        bench.kill()
        bench.front_panel("VOLT 3,(@1)")
        bench.front_panel("OUTP ON,(@1)")
        assert bench.panel("OUTP? (@1)") == "1"

        _killed_in(bench, "append", "emergency_stop", "/v1/bench/stop", "olga")
        bench.start()
        with bench.client("olga") as olga:
            assert "psu" in olga.get("/v1/bench/stop").json()["stopped"]
            assert olga.get(f"/v1/takeover/{pending}").json()["status"] == "cancelled"
        assert bench.panel("OUTP? (@1)") == "0", "the stop's safe action ran"
        assert len(bench.events("emergency_stop")) == 1, bench.events("emergency_stop")
        bench.kill()

        _killed_in(bench, "kv_delete", "'stops', ", "/v1/bench/stop/clear", "olga")
        bench.start()
        with bench.client("olga") as olga:
            stopped = olga.get("/v1/bench/stop").json()["stopped"]
        clears = bench.events("stop_cleared")
        assert "psu" not in stopped and len(clears) == 1, (stopped, clears)
        assert len(bench.events("emergency_stop")) == 1
        bench.kill()
        assert "intact" in bench.verified().lower()
    finally:
        bench.close()
