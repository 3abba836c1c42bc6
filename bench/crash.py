"""Crash and restart, for real: ``python bench/crash.py --rounds 50``.

A separately running ``python -m sim_instruments serve`` holds the instruments' state (each
write is held ~0.8 s before the instrument acts on it, so a write is in flight for a while;
a held write whose client hung up is dropped half the time, as if its bytes never arrived).
Each round starts ``bench-gate serve --config bench.toml --db bench.db`` as a subprocess,
checks what the previous kill left, puts four requests in flight and SIGKILLs the gateway at
a random moment:

    A  VOLT a,(@1)              pending (a 1-minute expiry: later rounds see it expire)
    B  VOLT b,(@2);:OUTP ON     partly approved (setpoint granted, output enable not)
    C  VOLT c,(@3)              granted: its write is in flight (executing) or done
    D  CURR d,(@1)              granted just after C: approved, waiting behind C's write
                                (half the rounds turn CH1's current knob while it is down)

After each restart: every journal event acknowledged before the kill is there; pending
requests are pending with their approvals and expiry (or expired, once it passed); an
approved one is rechecked (stale if the knob moved) before it runs; an interrupted write is
reconciled from a read-back, never re-sent; no request starts twice, and no command reaches
the instrument twice (the simulator's own log of what it acted on says so).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

TERMINAL = {"executed", "failed", "ambiguous", "denied", "expired", "cancelled", "stale"}
WRITE_DELAY = 0.8


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Tally:
    """What the rounds saw: statuses at the kill, outcomes after the restart, violations."""

    at_kill: Counter[str] = field(default_factory=Counter)
    after: Counter[str] = field(default_factory=Counter)
    checks: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    final: Counter[str] = field(default_factory=Counter)
    rounds: int = 0
    kills_with_write_in_flight: int = 0

    def check(self, ok: bool, what: str) -> None:
        self.checks[what] += 1
        if not ok:
            self.violations.append(what)

    def report(self) -> str:
        lines = [f"rounds {self.rounds}, kills with a write in flight "
                 f"{self.kills_with_write_in_flight}",
                 "status at the kill:     " + _fmt(self.at_kill),
                 "outcome after restart:  " + _fmt(self.after),
                 "whole store at the end: " + _fmt(self.final),
                 f"invariant checks: {sum(self.checks.values())}, "
                 f"violations: {len(self.violations)}"]
        lines += [f"  VIOLATION {v}" for v in self.violations[:20]]
        return "\n".join(lines)


def _fmt(counter: Counter[str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items()))


class Bench:
    """The simulator process, the config, the store and the tokens, across rounds."""

    def __init__(self, workdir: Path, seed: int, *, write_delay: float = WRITE_DELAY,
                 hangup_drop: float = 0.5) -> None:
        self.dir = workdir
        self.rng = random.Random(seed)
        self.db = workdir / "bench.db"
        self.sim_log = workdir / "sim.log"
        psu, dmm = free_port(), free_port()
        env = {**os.environ, "SIM_WRITE_DELAY": str(write_delay),
               "SIM_HANGUP_DROP": str(hangup_drop),
               "SIM_LOG": str(self.sim_log), "PYTHONHASHSEED": str(seed)}
        self.sim = subprocess.Popen(
            [sys.executable, "-m", "sim_instruments", "serve", "--psu-port", str(psu),
             "--dmm-port", str(dmm)], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True)
        assert self.sim.stdout is not None
        self.sim.stdout.readline()  # serving
        self.psu_port = psu
        self.port = free_port()
        self.config = workdir / "bench.toml"
        self.config.write_text(f'''bench = "crash"
[[instruments]]
name = "psu"
resource = "TCPIP0::127.0.0.1::{psu}::SOCKET"
profile = "e36312a"
timeout_ms = 4000
[[instruments]]
name = "dmm"
resource = "TCPIP0::127.0.0.1::{dmm}::SOCKET"
profile = "34465a"
[envelope.psu.1]
voltage = 6.0
current = 1.0
[envelope.psu.2]
voltage = 12.0
current = 0.5
[envelope.psu.3]
voltage = 12.0
current = 0.5
[server]
port = {self.port}
''')
        from bench_gate.auth import Tokens
        from bench_gate.store import SqliteStore
        store = SqliteStore(self.db)
        tokens = Tokens(store)
        self.tokens = {name: tokens.create(name, role)[1] for name, role in
                       (("script-7", "requester"), ("olga", "operator"), ("pete", "operator"))}
        store.close()
        self.gateway: subprocess.Popen[str] | None = None
        self.url = f"http://127.0.0.1:{self.port}"

    def client(self, who: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30,
                            headers={"Authorization": f"Bearer {self.tokens[who]}"})

    def start(self) -> None:
        self.gateway = subprocess.Popen(
            [sys.executable, "-m", "bench_gate.cli", "serve", "--config", str(self.config),
             "--db", str(self.db)], stdout=subprocess.DEVNULL,
            stderr=self.db.with_suffix(".err").open("a"))  # kept for a failed round
        deadline = time.monotonic() + 60  # a restart first waits for the instrument to settle
        with self.client("olga") as c:
            while time.monotonic() < deadline:
                try:
                    if c.get("/v1/takeover", params={"limit": 1}).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
        raise TimeoutError("bench-gate serve did not start")

    def kill(self) -> None:
        assert self.gateway is not None
        self.gateway.send_signal(signal.SIGKILL)
        self.gateway.wait()
        self.gateway = None

    def close(self) -> None:
        if self.gateway is not None:
            self.kill()
        self.sim.send_signal(signal.SIGTERM)
        try:
            self.sim.wait(10)
        except subprocess.TimeoutExpired:
            self.sim.kill()

    def front_panel(self, command: str) -> None:
        with socket.create_connection(("127.0.0.1", self.psu_port), timeout=5) as s:
            s.sendall(b"SIM:PANEL\n" + command.encode() + b"\n")  # the lock does not cover it
            if "?" in command:
                s.recv(4096)
            else:  # wait until the instrument acted on it (writes are held WRITE_DELAY)
                s.sendall(b"CURR? (@1)\n")
                s.recv(4096)

    # ------------------------------------------------------------------ the store, read-only
    def rows(self) -> dict[str, dict[str, Any]]:
        db = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)
        try:
            return {r[0]: json.loads(r[1]) for r in db.execute("SELECT id, data FROM requests")}
        finally:
            db.close()

    def journal(self) -> list[tuple[int, str | None, str, dict[str, Any]]]:
        db = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)
        try:
            return [(r[0], r[1], r[2], json.loads(r[3])) for r in db.execute(
                "SELECT seq, request_id, type, data FROM journal ORDER BY seq")]
        finally:
            db.close()

    def acted(self) -> Counter[str]:
        """How many times the instrument acted on each message (the simulator's log)."""
        if not self.sim_log.exists():
            return Counter()
        return Counter(line.rstrip("\n").split("\t", 1)[1]
                       for line in self.sim_log.read_text().splitlines() if "\t" in line)


@dataclass
class Round:
    number: int
    run_id: str = ""
    ids: dict[str, str] = field(default_factory=dict)
    commands: dict[str, list[str]] = field(default_factory=dict)
    acked: list[tuple[int, str]] = field(default_factory=list)
    at_kill: dict[str, dict[str, Any]] = field(default_factory=dict)
    knob_turned: bool = False


def play(bench: Bench, number: int, tally: Tally) -> Round:
    """Put requests in every status, then SIGKILL the gateway at a random moment."""
    rnd = Round(number)
    a = f"{1 + number / 1000:.3f}"
    # CH2's current limit goes inside its 0.5 A envelope with the energize, or it is refused.
    values = {"A": f"VOLT {a},(@1)",
              "B": f"VOLT {2 + number / 1000:.3f},(@2);:CURR 0.4,(@2);:OUTP ON,(@2)",
              "C": f"VOLT {3 + number / 1000:.3f},(@3)",
              "D": f"CURR {0.2 + number / 10000:.4f},(@1)"}
    with bench.client("script-7") as me, bench.client("olga") as olga, \
            bench.client("pete") as pete:
        rnd.run_id = me.post("/v1/runs", json={"kind": "script"}).json()["id"]
        shown: dict[str, str] = {}  # the proposal hash each approver is shown
        for name, command in values.items():
            body = {"instrument": "psu", "command": command,
                    "timeoutMinutes": 1 if name == "A" else 30}
            r = me.post(f"/v1/runs/{rnd.run_id}/scpi", json=body)
            tk = r.json()["takeover"]
            rnd.ids[name] = tk["id"]
            shown[name] = tk["proposalHash"]
            rnd.commands[name] = [a["canonical"] for a in tk["handoff"]["actions"]]
        grant = f"/v1/runs/{rnd.run_id}/takeover/{{}}/grant"
        olga.post(grant.format(rnd.ids["B"]),
                  json={"approve": ["setpoint"], "proposalHash": shown["B"]})
        # Acknowledged so far: everything in the run's journal.
        page = me.get(f"/v1/runs/{rnd.run_id}/journal", params={"limit": 1000}).json()
        rnd.acked = [(e["seq"], e["type"]) for e in page["events"]]

        def decide(client: httpx.Client, name: str, kinds: list[str]) -> None:
            try:
                client.post(grant.format(rnd.ids[name]),
                            json={"approve": kinds, "proposalHash": shown[name]})
            except httpx.HTTPError:
                pass  # the gateway died under it

        threads = [threading.Thread(target=decide, args=(olga, "C", ["setpoint"])),
                   threading.Thread(target=decide, args=(pete, "D", ["setpoint"]))]
        threads[0].start()
        time.sleep(0.1)
        threads[1].start()
        time.sleep(bench.rng.uniform(0, WRITE_DELAY * 2.5))
        bench.kill()
        for t in threads:
            t.join()
    rows = bench.rows()
    for name, rid in rnd.ids.items():
        rnd.at_kill[name] = rows[rid]
        tally.at_kill[rows[rid]["status"]] += 1
    tally.kills_with_write_in_flight += any(
        rnd.at_kill[n]["status"] == "executing" for n in "CD")
    if bench.rng.random() < 0.5:  # someone turns CH1's current knob while the gateway is down
        bench.front_panel(f"CURR {0.1 + number / 10000:.4f},(@1)")
        rnd.knob_turned = True
    return rnd


def settle(bench: Bench, timeout: float = 20) -> dict[str, dict[str, Any]]:
    """Wait until the restarted gateway has nothing approved or executing."""
    deadline = time.monotonic() + timeout
    while True:
        rows = bench.rows()
        if not any(r["status"] in ("approved", "executing") for r in rows.values()) or \
                time.monotonic() > deadline:
            return rows
        time.sleep(0.1)


def verify(bench: Bench, rnd: Round, tally: Tally) -> None:
    """After the restart: what the kill left is reconciled, and nothing ran twice."""
    rows = settle(bench)
    journal = bench.journal()
    seqs = {(seq, kind) for seq, _, kind, _ in journal}
    tally.check(all(e in seqs for e in rnd.acked), f"round {rnd.number}: acked event lost")
    acted = bench.acted()
    now = time.time()
    for name, rid in rnd.ids.items():
        before, after = rnd.at_kill[name], rows[rid]
        status = after["status"]
        tally.after[f"{before['status']}→{status}"] += 1
        where = f"round {rnd.number} {name} {before['status']}→{status}"
        tally.check(after["expires_at"] == before["expires_at"], f"{where}: expiry changed")
        if before["status"] in TERMINAL:
            tally.check(status == before["status"], f"{where}: a decided request moved")
        if before["status"] == "pending":
            expired = _ts(before["expires_at"]) <= now
            tally.check(status in (("expired",) if expired else ("pending", "expired")),
                        f"{where}: pending not kept (or its expiry not honoured)")
            tally.check(len(after["approvals"]) >= len(before["approvals"]),
                        f"{where}: approvals lost")
        if before["status"] == "approved":
            tally.check(status in ("executed", "stale", "failed", "ambiguous"),
                        f"{where}: approved not run after the restart")
            if rnd.knob_turned and name == "D":
                tally.check(status == "stale", f"{where}: ran over a changed knob")
        if before["status"] == "executing":
            tally.check(status in ("executed", "failed", "ambiguous"),
                        f"{where}: interrupted write not reconciled")
            tally.check((after.get("receipt") or {}).get("reconciled") is True
                        or status != "executed", f"{where}: executed without a read-back")
        writes = [c for c in rnd.commands[name] if "?" not in c]
        for command in writes:
            tally.check(acted[command] <= 1, f"{where}: {command} reached the instrument "
                                             f"{acted[command]} times")
        if status == "executed":
            tally.check(all(acted[c] == 1 for c in writes), f"{where}: executed, not sent")
        if status in ("pending", "denied", "expired", "cancelled", "stale"):
            tally.check(all(acted[c] == 0 for c in writes), f"{where}: written, undecided")
    _check_journal(rows, journal, tally)
    # Requests of earlier rounds left pending: their 1-minute expiries are honoured.
    for rid, row in rows.items():
        if row["status"] == "pending" and _ts(row["expires_at"]) < now - 2:
            tally.check(False, f"{rid}: pending past its expiry after a restart")


def _check_journal(rows: dict[str, dict[str, Any]],
                   journal: list[tuple[int, str | None, str, dict[str, Any]]],
                   tally: Tally) -> None:
    terminal_events: Counter[str] = Counter()
    started: Counter[str] = Counter()
    for _, rid, kind, data in journal:
        if rid and data.get("status") in TERMINAL:
            terminal_events[rid] += 1
        if rid and kind == "step_started":
            started[rid] += 1
    for rid, row in rows.items():
        want = 1 if row["status"] in TERMINAL else 0
        tally.check(terminal_events[rid] == want,
                    f"{rid} {row['status']}: {terminal_events[rid]} terminal events")
        tally.check(started[rid] <= 1, f"{rid}: started {started[rid]} times")


def _ts(text: str) -> float:
    from datetime import datetime
    return datetime.fromisoformat(text).timestamp()


def run_rounds(rounds: int, seed: int = 1, workdir: Path | None = None) -> Tally:
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="crash-") as tmp:
        bench = Bench(workdir or Path(tmp), seed)
        try:
            previous: Round | None = None
            for number in range(1, rounds + 1):
                bench.start()
                if previous is not None:
                    verify(bench, previous, tally)
                previous = play(bench, number, tally)
                tally.rounds += 1
            bench.start()
            if previous is not None:
                verify(bench, previous, tally)
            tally.final = Counter(r["status"] for r in bench.rows().values())
        finally:
            bench.close()
    return tally


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    started = time.monotonic()
    tally = run_rounds(args.rounds, args.seed)
    print(tally.report())
    print(f"({time.monotonic() - started:.0f} s)")
    return 1 if tally.violations else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
