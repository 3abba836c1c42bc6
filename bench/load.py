"""Load: many concurrent clients (socket doors and HTTP mixed) on three simulated instruments.

    python bench/load.py --seconds 60 --clients 50

The bench: the simulated PSU and DMM, plus a second PSU (``psu2``, a second SimBenchThread),
each behind its own socket door, and the HTTP API; all on 127.0.0.1, in this process.
Clients (asyncio, one task each): a third on the socket doors (one persistent connection,
one query at a time), the rest on HTTP (one run each); one in ten HTTP clients writes
(``VOLT x,(@2)``, held, then granted by one of two operator tasks). Every answer is checked:
``VOLT? (@1)`` must give the value set on *that* PSU before the run, ``*IDN?`` the right model.

After the run:
- from the simulators: every message each instrument received is whole and canonical (it
  classifies to one unit whose canonical text is the message itself), and every approved
  write is followed, with nothing foreign in between, by its own read-back;
- from the journal: each read's command_received is followed by its read_executed in its run,
  each write's step_started by its step_completed, and per instrument no two writes' steps
  overlap;
- latency p50/p99 for reads (socket and HTTP) and for writes (submit to executed, including
  the operator's reaction), threads and RSS before and after.
Exit status 1 on any error or broken check.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sqlite3
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pyvisa

from bench_gate.auth import Tokens
from bench_gate.config import BenchConfig, ChannelLimits, InstrumentConfig
from bench_gate.scpi import ScpiError, classify, get_profile
from bench_gate.server import ServerThread
from bench_gate.store import open_store
from sim_instruments import SimBenchThread

#: CH1's voltage on each PSU, set directly before the run; reads must see exactly this.
CH1 = {"psu": Decimal("1.111"), "psu2": Decimal("2.222")}
PROFILES = {"psu": "e36312a", "psu2": "e36312a", "dmm": "34465a"}
#: Reads on the PSUs name channel 1 only, so a foreign read inside a write's job (which reads
#: back channel 2 and the *IDN?) would show in the simulator's log.
READS = {"psu": ["VOLT? (@1)", "OUTP? (@1)"], "psu2": ["VOLT? (@1)", "MEAS:VOLT? (@1)"],
         "dmm": ["*IDN?", "MEAS:VOLT?"]}


@dataclass
class Results:
    socket_ms: list[float] = field(default_factory=list)
    http_ms: list[float] = field(default_factory=list)
    write_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    writes: list[tuple[str, str]] = field(default_factory=list)  # (instrument, canonical)
    checks: list[str] = field(default_factory=list)


class SimLog:
    """What one simulated instrument received, in order (wraps its handle_message)."""

    def __init__(self, instrument: Any) -> None:
        self.messages: list[str] = []
        self._lock = threading.Lock()
        inner = instrument.handle_message

        def handle(message: str, *session: Any) -> str | None:  # session: who is asking
            with self._lock:
                self.messages.append(message)
            result: str | None = inner(message, *session)
            return result

        instrument.handle_message = handle


def check_answer(instrument: str, message: str, answer: str) -> str | None:
    """Why an answer is wrong for this instrument, or None."""
    answer = answer.strip()
    if message == "*IDN?":
        model = "34465A" if instrument == "dmm" else "E36312A"
        return None if model in answer else f"{instrument} *IDN? gave {answer!r}"
    if message == "VOLT? (@1)":
        try:
            ok = Decimal(answer) == CH1[instrument]
        except ArithmeticError:
            ok = False
        return None if ok else f"{instrument} VOLT? (@1) gave {answer!r}, not {CH1[instrument]}"
    if message == "OUTP? (@1)":
        return None if answer == "0" else f"{instrument} OUTP? (@1) gave {answer!r}"
    try:
        Decimal(answer)
    except ArithmeticError:
        return f"{instrument} {message} gave {answer!r}"
    return None


async def socket_client(addr: tuple[str, int], instrument: str, stop: float,
                        res: Results) -> None:
    reader, writer = await asyncio.open_connection(*addr)
    try:
        while time.monotonic() < stop:
            message = random.choice(READS[instrument])
            t0 = time.perf_counter()
            writer.write(message.encode() + b"\n")
            try:
                line = await asyncio.wait_for(reader.readline(), 30)
            except TimeoutError:
                res.errors.append(f"socket {instrument} {message}: no answer in 30 s")
                return
            res.socket_ms.append((time.perf_counter() - t0) * 1000)
            wrong = check_answer(instrument, message, line.decode())
            if wrong:
                res.errors.append("socket " + wrong)
    finally:
        writer.close()


async def http_client(url: str, token: str, stop: float, res: Results, writer: bool,
                      seq: list[int]) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=60,
                                 headers={"Authorization": f"Bearer {token}"}) as h:
        r = await h.post("/v1/runs", json={"kind": "script", "goal": "load"})
        if r.status_code != 201:
            res.errors.append(f"http create run: {r.status_code} {r.text[:200]}")
            return
        run = r.json()["id"]
        while time.monotonic() < stop:
            if writer:
                instrument = random.choice(["psu", "psu2"])
                seq[0] += 1
                value = Decimal(seq[0] % 9000 + 1) / 1000  # unique enough, within 12 V
                command = f"VOLT {value},(@2)"
                t0 = time.perf_counter()
                r = await h.post(f"/v1/runs/{run}/scpi?wait=55",
                                 json={"instrument": instrument, "command": command})
                status = r.json().get("status") if r.status_code in (200, 202) else None
                if status != "executed":
                    res.errors.append(f"http write {instrument} {command}: {r.status_code} "
                                      f"{r.text[:300]}")
                    continue
                res.write_ms.append((time.perf_counter() - t0) * 1000)
                res.writes.append((instrument, r.json()["takeover"]["handoff"]["command"]))
                await asyncio.sleep(0.2)
                continue
            instrument = random.choice(list(READS))
            message = random.choice(READS[instrument])
            t0 = time.perf_counter()
            r = await h.post(f"/v1/runs/{run}/scpi",
                             json={"instrument": instrument, "command": message})
            took = (time.perf_counter() - t0) * 1000
            if r.status_code != 200 or r.json().get("status") != "executed":
                res.errors.append(f"http {instrument} {message}: {r.status_code} {r.text[:200]}")
                continue
            res.http_ms.append(took)
            wrong = check_answer(instrument, message, r.json()["response"] or "")
            if wrong:
                res.errors.append("http " + wrong)


async def approver(url: str, token: str, stop: float, res: Results,
                   clients_done: asyncio.Event) -> None:
    """Grants what is pending until every client has finished: a write filed just before
    ``stop`` (its POST still in flight) is granted too, not left to wait out its ``wait``."""
    async with httpx.AsyncClient(base_url=url, timeout=60,
                                 headers={"Authorization": f"Bearer {token}"}) as h:
        while time.monotonic() < stop + 60:
            r = await h.get("/v1/takeover", params={"status": "pending", "limit": 100})
            pending = r.json() if r.status_code == 200 else []
            if not pending and clients_done.is_set():
                return
            for tk in pending:
                g = await h.post(f"/v1/runs/{tk['runId']}/takeover/{tk['id']}/grant",
                                 json={"approve": tk["approvalsMissing"],
                                       "proposalHash": tk["proposalHash"]})
                if g.status_code not in (200, 409):  # 409: the other operator was first
                    res.errors.append(f"grant {tk['id']}: {g.status_code} {g.text[:200]}")
            await asyncio.sleep(0.05)


# --- checks after the run ---------------------------------------------------------------------


def compound_snapshot(profile: str, message: str, units: tuple[Any, ...]) -> bool:
    """A snapshot's fields and ``*IDN?`` in one message, as the gateway renders them on a
    profile with ``compound_queries`` (bench_gate/scpi/compound.py): each unit a query
    from the root, canonical, ``*IDN?`` last."""
    parts = message.split(";")
    return (get_profile(profile).model.compound_queries and len(parts) == len(units) > 1
            and parts[-1] == "*IDN?" == units[-1].canonical and all(u.query for u in units)
            and all(p == ":" + u.canonical for p, u in zip(parts[:-1], units[:-1],
                                                              strict=True)))


def check_sims(logs: dict[str, SimLog], res: Results) -> None:
    total = 0
    for name, log in logs.items():
        msgs = log.messages
        total += len(msgs)
        for m in msgs:
            try:
                units = classify(m, PROFILES[name]).units
            except ScpiError as exc:
                res.errors.append(f"{name} received {m!r}, not SCPI: {exc}")
                continue
            if (len(units) != 1 or units[0].canonical != m) and not compound_snapshot(
                    PROFILES[name], m, units):
                res.errors.append(f"{name} received {m!r}, not one canonical unit")
        for i, m in enumerate(msgs):
            if m.endswith("?"):
                continue
            if not m.startswith("VOLT "):
                continue
            # the write's own job: *IDN? and the read-back (channel 2's fields, and every
            # channel's enveloped fields), each asked once, then SYST:ERR?; nothing foreign
            # between. A client's read is a measurement or repeats a read-back query.
            # A field with no channel in its query (a coupling's, OUTP:TRAC?) is read back too.
            whole = {f.query for f in get_profile(PROFILES[name]).fields.values()
                     if f.query and "{ch}" not in f.query}
            j = i + 1
            asked: set[str] = set()
            while j < len(msgs) and msgs[j] != "SYST:ERR?":
                if msgs[j] in asked or msgs[j].startswith("MEAS:") or not (
                        msgs[j].endswith(")") or msgs[j].endswith("*IDN?")
                        or msgs[j] in whole):
                    res.errors.append(f"{name}: {msgs[j]!r} came between write {m!r} and its "
                                      f"read-back: {msgs[max(0, i - 8):j + 3]}")
                    break
                asked.add(msgs[j])
                j += 1
    res.checks.append(f"simulators received {total} messages, each whole and canonical; each "
                      "write followed by its own read-back, nothing interleaved")


def check_journal(db: Path, res: Results) -> None:
    con = sqlite3.connect(db)
    rows = con.execute("SELECT seq, run_id, request_id, type, data FROM journal ORDER BY seq")
    instrument_of = dict(con.execute("SELECT id, instrument FROM requests"))
    pending_read: dict[str, str] = {}
    open_step: dict[str, str] = {}  # instrument -> request whose step is open
    reads = steps = 0
    for _seq, run_id, request_id, kind, data_text in rows:
        data = json.loads(data_text)
        if kind == "command_received":
            if run_id in pending_read:
                pass  # the previous message of this run was held, refused or failed
            pending_read[run_id] = data.get("message", "")
        elif kind == "read_executed":
            if pending_read.pop(run_id, None) != data.get("message"):
                res.errors.append(f"journal: read_executed without its command in {run_id}")
            reads += 1
        elif kind == "step_started":
            inst = instrument_of[request_id]
            if inst in open_step:
                res.errors.append(f"journal: {request_id} started on {inst} while "
                                  f"{open_step[inst]} was still executing")
            open_step[inst] = request_id
        elif kind in ("step_completed", "step_failed") and request_id in instrument_of:
            inst = instrument_of[request_id]
            if open_step.get(inst) == request_id:
                del open_step[inst]
                steps += 1
                if kind == "step_failed":
                    res.errors.append(f"journal: {request_id} failed: {data.get('reason')}")
    con.close()
    if open_step:
        res.errors.append(f"journal: steps never completed: {open_step}")
    res.checks.append(f"journal: {reads} reads each received then executed in order; "
                      f"{steps} writes, each step_started then step_completed, none overlapping "
                      "on an instrument")


def rss_mib() -> float:
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


# --- the run ---------------------------------------------------------------------------------


def run_load(seconds: float, clients: int, tmp: Path) -> tuple[Results, dict[str, Any]]:
    res = Results()
    with SimBenchThread() as sim_a, SimBenchThread() as sim_b:
        logs = {"psu": SimLog(sim_a.psu), "dmm": SimLog(sim_a.dmm), "psu2": SimLog(sim_b.psu)}
        rm = pyvisa.ResourceManager("@py")
        for name, sim in (("psu", sim_a), ("psu2", sim_b)):
            front = rm.open_resource(sim.psu_resource_name, read_termination="\n",
                                     write_termination="\n")
            front.write(f"VOLT {CH1[name]},(@1)")
            front.close()
        limits = {1: ChannelLimits(voltage=Decimal(6), current=Decimal(1)),
                  2: ChannelLimits(voltage=Decimal(12), current=Decimal("0.5")),
                  3: ChannelLimits(voltage=Decimal(12), current=Decimal("0.5"))}
        config = BenchConfig(bench="load", instruments=[
            InstrumentConfig(name="psu", resource=sim_a.psu_resource_name, profile="e36312a",
                             socket_port=0),
            InstrumentConfig(name="dmm", resource=sim_a.dmm_resource_name, profile="34465a",
                             socket_port=0),
            InstrumentConfig(name="psu2", resource=sim_b.psu_resource_name, profile="e36312a",
                             socket_port=0),
        ], envelope={"psu": limits, "psu2": limits})
        db = tmp / "load.db"
        store = open_store(db)
        tokens = Tokens(store)
        requester = tokens.create("load", "requester")[1]
        operators = [tokens.create(f"op{i}", "operator")[1] for i in range(2)]
        with ServerThread(config, store) as server:
            assert server.running is not None
            doors = server.running.doors
            threads0, rss0 = threading.active_count(), rss_mib()
            for log in logs.values():
                log.messages.clear()

            async def main() -> None:
                stop = time.monotonic() + seconds
                n_socket = clients // 3
                n_writers = max(1, (clients - n_socket) // 10)
                seq = [0]
                tasks = [socket_client(doors[inst], inst, stop, res)
                         for inst in (["psu", "dmm", "psu2"] * clients)[:n_socket]]
                tasks += [http_client(server.url, requester, stop, res, i < n_writers, seq)
                          for i in range(clients - n_socket)]
                clients_done = asyncio.Event()

                async def the_clients() -> None:
                    try:
                        await asyncio.gather(*tasks)
                    finally:
                        clients_done.set()
                await asyncio.gather(the_clients(), *(
                    approver(server.url, tok, stop, res, clients_done) for tok in operators))

            t0 = time.monotonic()
            asyncio.run(main())
            took = time.monotonic() - t0
            threads1, rss1 = threading.active_count(), rss_mib()
        store.close()
        rm.close()
    check_sims(logs, res)
    check_journal(db, res)
    return res, {"seconds": took, "threads": (threads0, threads1), "rss": (rss0, rss1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--clients", type=int, default=50)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        res, info = run_load(args.seconds, args.clients, Path(tmp))
    reads = len(res.socket_ms) + len(res.http_ms)
    print(f"{args.clients} clients, {info['seconds']:.0f} s, 3 instruments: {reads} reads "
          f"({reads / info['seconds']:.0f}/s), {len(res.writes)} approved writes, "
          f"{len(res.errors)} errors")
    for name, ms in (("socket reads", res.socket_ms), ("HTTP reads", res.http_ms),
                     ("writes (submit to executed)", res.write_ms)):
        print(f"  {name:28} n={len(ms):6}  p50 {pct(ms, 50):7.1f} ms  p99 {pct(ms, 99):7.1f} ms")
    print(f"  threads {info['threads'][0]} -> {info['threads'][1]}; RSS "
          f"{info['rss'][0]:.0f} -> {info['rss'][1]:.0f} MiB")
    for line in res.checks:
        print("  check: " + line)
    for e in res.errors[:20]:
        print("  ERROR " + e)
    return 1 if res.errors else 0


if __name__ == "__main__":
    sys.exit(main())
