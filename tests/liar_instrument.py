"""A lying instrument: a raw-socket SCPI server on 127.0.0.1 (an ephemeral port) that passes
every line to a real simulated instrument and its answers back, and misbehaves on cue.

The gateway reaches it as a real ``TCPIP0::127.0.0.1::<port>::SOCKET`` resource, so its own
link, lane and timeouts are what is tested; the state it leaves is read on the simulator's
own port. One upstream connection per gateway connection, so the simulator's sessions (and
its interface lock) are the gateway's.

Cues, each for the next ``times`` queries whose text contains ``match`` (case-insensitive):

- ``answer(match, text)``: answer ``text`` instead of the simulator's answer; in a
  compound query (units joined by ';', one answer each), only the answer to the first unit
  that contains ``match``;
- ``stale_first(match)``: send the answer given last time to the same query first, then
  the real one, each its own line (an answer buffered from before, sent ahead of its time);
  ``gap`` seconds between the two (0: one packet);
- ``ahead(match, text)``: send the line ``text`` first, then the real answer;
- ``split(match, seconds)``: send the first half of the answer, then the rest ``seconds``
  later (an answer cut in two by a pause);
- ``late(match, seconds)``: hold the answer ``seconds`` before sending it;
- ``refuse(match)``: a command (no query) containing ``match`` never reaches the
  simulator, as an instrument that refuses it leaves its state;
- ``drop(match, landed)``: close the connection on the next line containing ``match``
  (a query or not), after passing it on (``landed``) or before;
- ``hang_up(line, sends)``: on the next line that is exactly ``line``, send ``sends`` (a
  command) on the instrument's side, then answer and close the connection right behind the
  answer (an instrument that restarts into another state as it answers).

Every line received is kept in ``received``.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pytest

from bench_gate.config import BenchConfig, ChannelLimits, default_config
from bench_gate.gateway import Gateway
from bench_gate.store import SqliteStore
from sim_instruments import SimBenchThread

__all__ = ["LyingInstrument", "gw", "liar", "lied_config", "lied_gateway"]


@dataclass
class _Cue:
    kind: str
    match: str
    times: int
    text: str = ""
    seconds: float = 0.0
    #: Armed only once a line containing this was received ("": at once).
    after: str = ""


def _replaced(command: str, answer: bytes, match: str, by: str) -> bytes:
    """``answer`` with the answer to the unit of ``command`` holding ``match`` replaced."""
    units = command.split(";")
    hit = next((i for i, u in enumerate(units) if match in u.upper()), 0)
    parts = answer.decode("latin-1").rstrip("\n").split(";", len(units) - 1)
    if len(parts) != len(units):
        parts = [""] * len(units)
    parts[hit] = by
    return (";".join(parts) + "\n").encode("latin-1")


def _held(conn: socket.socket, seconds: float) -> bool:
    """Wait ``seconds``; False as soon as the other end hangs up (a real instrument then
    ends the session, and with it any lock it held)."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        readable, _, _ = select.select([conn], [], [], min(left, 0.05))
        if readable:
            try:
                if conn.recv(1, socket.MSG_PEEK) == b"":
                    return False
            except OSError:
                return False
            time.sleep(min(left, 0.05))  # the next line is waiting: still held
    return True


class LyingInstrument:
    def __init__(self, upstream_port: int, host: str = "127.0.0.1") -> None:
        self.upstream = (host, upstream_port)
        self.received: list[str] = []
        self.fired: list[tuple[str, str]] = []
        self._cues: list[_Cue] = []
        self._last: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._server.getsockname()[1])
        self._conns: list[socket.socket] = []
        self._closing = False
        threading.Thread(target=self._accept, daemon=True, name="liar-accept").start()

    @property
    def resource(self) -> str:
        return f"TCPIP0::127.0.0.1::{self.port}::SOCKET"

    # ------------------------------------------------------------------ cues
    def answer(self, match: str, text: str, times: int = 1, after: str = "") -> None:
        self._cue(_Cue("answer", match.upper(), times, text=text, after=after.upper()))

    def stale_first(self, match: str, times: int = 1, gap: float = 0.0, after: str = ""
                    ) -> None:
        self._cue(_Cue("stale", match.upper(), times, seconds=gap, after=after.upper()))

    def ahead(self, match: str, text: str, times: int = 1, after: str = "") -> None:
        self._cue(_Cue("ahead", match.upper(), times, text=text, after=after.upper()))

    def split(self, match: str, seconds: float, times: int = 1, after: str = "") -> None:
        self._cue(_Cue("split", match.upper(), times, seconds=seconds, after=after.upper()))

    def late(self, match: str, seconds: float, times: int = 1, after: str = "") -> None:
        self._cue(_Cue("late", match.upper(), times, seconds=seconds, after=after.upper()))

    def drop(self, match: str, landed: bool, times: int = 1, after: str = "") -> None:
        self._cue(_Cue("drop", match.upper(), times, text="landed" if landed else "",
                       after=after.upper()))

    def refuse(self, match: str, times: int = 1) -> None:
        self._cue(_Cue("refuse", match.upper(), times))

    def hang_up(self, line: str, sends: str = "", after: str = "") -> None:
        self._cue(_Cue("hang_up", line.upper(), 1, text=sends, after=after.upper()))

    def calm(self) -> None:
        """No more lies: every cue not yet fired is dropped."""
        with self._lock:
            self._cues.clear()

    def _cue(self, cue: _Cue) -> None:
        with self._lock:
            self._cues.append(cue)

    def _take(self, line: str, query: bool = True) -> _Cue | None:
        upper = line.upper()
        with self._lock:
            hit = next((c for c in self._cues if not c.after and (
                c.match == upper if c.kind == "hang_up" else c.match in upper) and (
                query or c.kind in ("drop", "refuse"))), None)
            for cue in self._cues:
                if cue.after and cue.after in upper:
                    cue.after = ""  # armed from the next line on
            if hit is not None:
                hit.times -= 1
                if hit.times <= 0:
                    self._cues.remove(hit)
                self.fired.append((hit.kind, line))
        return hit

    # ------------------------------------------------------------------ serving
    def _accept(self) -> None:
        while not self._closing:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True,
                             name="liar-conn").start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            up = socket.create_connection(self.upstream, timeout=5)
        except OSError:
            conn.close()
            return
        self._conns.append(up)
        down = conn.makefile("rb")
        answers = up.makefile("rb")
        try:
            while line := down.readline():
                text = line.decode("latin-1").strip()
                self.received.append(text)
                cue = self._take(text, query="?" in text)
                if cue is not None and cue.kind == "drop":
                    if cue.text == "landed":
                        up.sendall(line)
                        if "?" in text:
                            answers.readline()
                    break
                if cue is not None and cue.kind == "refuse":
                    continue
                up.sendall(line)
                if "?" not in text:
                    continue
                try:
                    real = answers.readline()
                except OSError:
                    real = b""
                stale = self._last.get(text)
                self._last[text] = real
                if cue is None:
                    conn.sendall(real)
                elif cue.kind == "hang_up":
                    if cue.text:  # the state it restarts into, in place before it answers
                        up.sendall(cue.text.encode("latin-1") + b"\n*OPC?\n")
                        answers.readline()  # *OPC?: it landed
                    # Corked: the answer and the hang-up leave in one segment (the file
                    # reading it would keep the socket open past close()).
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
                    conn.sendall(real)
                    conn.shutdown(socket.SHUT_WR)
                    break  # and the connection ends right behind the answer
                elif cue.kind == "answer":
                    conn.sendall(_replaced(text, real, cue.match, cue.text))
                elif cue.kind == "ahead":
                    conn.sendall(cue.text.encode("latin-1") + b"\n" + real)
                elif cue.kind == "split":
                    conn.sendall(real[: len(real) // 2])
                    if not _held(conn, cue.seconds):
                        break
                    conn.sendall(real[len(real) // 2:])
                elif cue.kind == "late":
                    if _held(conn, cue.seconds):
                        conn.sendall(real)
                    else:
                        break  # the gateway gave up and hung up: so does the instrument
                elif cue.kind == "stale":
                    first = stale if stale is not None else real
                    if cue.seconds <= 0:
                        conn.sendall(first + real)
                    else:
                        conn.sendall(first)
                        time.sleep(cue.seconds)
                        conn.sendall(real)
        except OSError:
            pass
        finally:
            for s in (conn, up):
                try:
                    s.close()
                except OSError:
                    pass

    def cut(self) -> None:
        """Every connection open now ends, as a power cycle ends them (the server stays)."""
        conns, self._conns = self._conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self._closing = True
        self._server.close()
        for s in self._conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                s.close()
            except OSError:
                pass


# ---------------------------------------------------------------- fixtures (pytest)
@pytest.fixture
def liar(sim: SimBenchThread) -> Iterator[LyingInstrument]:
    """A lying instrument in front of the simulated PSU."""
    fake = LyingInstrument(sim.psu_port)
    yield fake
    fake.close()


@pytest.fixture
def lied_config(sim: SimBenchThread, liar: LyingInstrument) -> BenchConfig:
    """The simulated bench with its PSU reached through ``liar`` (timeout 1 s; CH1's
    envelope with an ovp limit, so its protection state is a guard)."""
    cfg = default_config(liar.port, sim.dmm_port)
    cfg.instruments[0].timeout_ms = 1000
    cfg.envelope["psu"][1] = ChannelLimits(voltage=Decimal(6), current=Decimal(1),
                                           ovp=Decimal("6.6"))
    return cfg


def lied_gateway(cfg: BenchConfig, db_path: Path, clock: Callable[[], datetime], io: str
                 ) -> Gateway:
    """A gateway on ``cfg`` whose PSU link is ``io`` (``auto``: the raw socket; ``pyvisa``)."""
    cfg.instruments[0].io = io  # type: ignore[assignment]
    return Gateway(cfg, SqliteStore(db_path), clock=clock)


@pytest.fixture
async def gw(lied_config: BenchConfig, db_path: Path, clock: Callable[[], datetime]
             ) -> AsyncIterator[Gateway]:
    g = Gateway(lied_config, SqliteStore(db_path), clock=clock)
    await g.start()
    yield g
    await g.close()
    g.store.close()
