"""The asyncio link to raw-socket instruments: answers, timeouts, drops and cancellation
never leave a late answer to be read as the next query's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from bench_gate.config import InstrumentConfig
from bench_gate.errors import InstrumentError
from bench_gate.instruments import AsyncLink, Lane, PyvisaLink, SocketLink, open_link
from sim_instruments import SimBenchThread


class FakeInstrument:
    """A raw-socket instrument whose answer to each query a test chooses. ``answer(msg, n)``
    returns the bytes to send (None: stay silent; b"" close the connection)."""

    def __init__(self) -> None:
        self.connections = 0
        self.received: list[str] = []
        self.delay: dict[str, float] = {}
        self.reply: dict[str, bytes | None] = {}
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                      ) -> None:
        self.connections += 1
        try:
            while line := await reader.readline():
                msg = line.decode().strip()
                self.received.append(msg)
                if not msg.endswith("?"):
                    continue
                await asyncio.sleep(self.delay.get(msg, 0))
                reply = self.reply.get(msg, f"answer to {msg}\n".encode())
                if reply is None:
                    continue
                if reply == b"":
                    break
                writer.write(reply)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


# Every async test here on both loops: the server runs on uvloop where it is installed,
# and uvloop's transports are its own classes (tests/conftest.py names the loops).
both_loops = pytest.mark.asyncio(loop_factories=["asyncio", "uvloop"])


def config(port: int, timeout_ms: int = 300, **extra: str) -> InstrumentConfig:
    return InstrumentConfig(name="psu", resource=f"TCPIP0::127.0.0.1::{port}::SOCKET",
                            profile="e36312a", timeout_ms=timeout_ms, **extra)  # type: ignore[arg-type]


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeInstrument, SocketLink]]:
    inst = FakeInstrument()
    port = await inst.start()
    link = SocketLink(config(port))
    yield inst, link
    await link.close()
    await inst.stop()


def test_open_link_picks_asyncio_for_raw_sockets_and_pyvisa_for_the_rest() -> None:
    assert isinstance(open_link(config(5025)), SocketLink)
    assert isinstance(open_link(config(5025, io="pyvisa")), PyvisaLink)
    vxi = InstrumentConfig(name="psu", resource="TCPIP0::10.0.0.7::inst0::INSTR",
                           profile="e36312a")
    assert isinstance(open_link(vxi), PyvisaLink)
    sim = InstrumentConfig(name="psu", resource="TCPIP0::127.0.0.1::5025::SOCKET",
                           profile="e36312a", backend="bench.yaml@sim")
    assert isinstance(open_link(sim), PyvisaLink)


@both_loops
async def test_queries_and_writes_reach_the_simulated_psu() -> None:
    with SimBenchThread() as bench:
        link = SocketLink(config(bench.psu_port, timeout_ms=2000))
        try:
            assert (await link.query("*IDN?")).startswith("Keysight")
            await link.write("VOLT 2.5,(@2)")
            assert float(await link.query("VOLT? (@2)")) == 2.5
            assert float(bench.psu.handle_message("VOLT? (@2)") or "nan") == 2.5
        finally:
            await link.close()


@both_loops
async def test_a_timeout_drops_the_connection_so_the_late_answer_is_never_read(
        fake: tuple[FakeInstrument, SocketLink]) -> None:
    inst, link = fake
    inst.delay["SLOW?"] = 0.6
    with pytest.raises(InstrumentError, match=r"query 'SLOW\?' timed out"):
        await link.query("SLOW?")
    assert await link.query("FAST?") == "answer to FAST?"
    assert inst.connections == 2


@both_loops
async def test_silence_times_out_and_the_next_call_reconnects(
        fake: tuple[FakeInstrument, SocketLink]) -> None:
    inst, link = fake
    inst.reply["MUTE?"] = None
    with pytest.raises(InstrumentError, match="no answer within the timeout"):
        await link.query("MUTE?")
    await link.write("OUTP ON")
    assert await link.query("*IDN?") == "answer to *IDN?"
    assert inst.received[-2:] == ["OUTP ON", "*IDN?"]


@both_loops
async def test_a_connection_closed_mid_answer_is_a_failure(
        fake: tuple[FakeInstrument, SocketLink]) -> None:
    inst, link = fake
    inst.reply["HALF?"] = b""
    with pytest.raises(InstrumentError, match="closed before the answer ended"):
        await link.query("HALF?")
    assert await link.query("OK?") == "answer to OK?"


@both_loops
async def test_a_non_ascii_answer_is_a_failure_never_a_value(
        fake: tuple[FakeInstrument, SocketLink]) -> None:
    inst, link = fake
    inst.reply["BIN?"] = b"\xff\xfe\x00\n"
    with pytest.raises(InstrumentError, match=r"query 'BIN\?' failed"):
        await link.query("BIN?")
    assert await link.query("OK?") == "answer to OK?"


@both_loops
async def test_an_absent_instrument_cannot_be_opened() -> None:
    inst = FakeInstrument()
    port = await inst.start()
    await inst.stop()  # nothing listens on the port any more
    link = SocketLink(config(port))
    with pytest.raises(InstrumentError, match=r"cannot open TCPIP0::127\.0\.0\.1::"):
        await link.query("*IDN?")


@both_loops
async def test_a_job_whose_caller_is_cancelled_still_ends_before_the_next_starts(
        fake: tuple[FakeInstrument, SocketLink]) -> None:
    inst, link = fake
    inst.delay["A?"] = 0.1
    lane = Lane("psu", link)

    async def two(link: AsyncLink) -> tuple[str, str]:
        return await link.query("A?"), await link.query("B?")

    caller = asyncio.ensure_future(lane.run(two))
    await asyncio.sleep(0.03)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert await lane.run(lambda link: link.query("C?")) == "answer to C?"
    assert inst.received == ["A?", "B?", "C?"], "the cancelled job ran whole, then C"
    assert inst.connections == 1
    await lane.close()


@both_loops
async def test_a_lane_counts_io_errors(fake: tuple[FakeInstrument, SocketLink]) -> None:
    inst, link = fake
    inst.reply["MUTE?"] = None
    lane = Lane("psu", link)
    with pytest.raises(InstrumentError):
        await lane.run(lambda link: link.query("MUTE?"))
    assert lane.io_errors == 1
    await lane.close()


@both_loops
async def test_a_cancelled_read_in_its_callers_task_leaves_no_answer_behind(
        fake: tuple[FakeInstrument, SocketLink]) -> None:
    inst, link = fake
    inst.delay["SLOW?"] = 0.1
    lane = Lane("psu", link)
    caller = asyncio.ensure_future(lane.run(lambda link: link.query("SLOW?"), whole=False))
    await asyncio.sleep(0.03)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    await asyncio.sleep(0.15)  # the late answer arrives, on a connection already dropped
    assert await lane.run(lambda link: link.query("NEXT?"), whole=False) == "answer to NEXT?"
    assert inst.connections == 2
    await lane.close()


def test_the_example_bench_reaches_each_instrument_the_right_way() -> None:
    from pathlib import Path

    from bench_gate.config import load_config

    bench = load_config(Path(__file__).parent.parent.parent / "docs" / "bench.toml")
    links = {ic.name: type(open_link(ic)) for ic in bench.instruments}
    assert links == {"psu": PyvisaLink, "dmm": SocketLink}


class Chunked(FakeInstrument):
    """Answers in pieces: ``parts[msg]`` is sent one piece at a time, a pause between."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: dict[str, list[bytes]] = {}
        self.deaf = asyncio.Event()  # set: stop reading, as a wedged instrument does

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                      ) -> None:
        self.connections += 1
        try:
            while line := await reader.readline():
                msg = line.decode().strip()
                self.received.append(msg)
                if msg == "DEAF":
                    await self.deaf.wait()
                    continue
                if not msg.endswith("?"):
                    continue
                for piece in self.parts.get(msg, [f"answer to {msg}\r\n".encode()]):
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0.005)
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def chunked() -> AsyncIterator[tuple[Chunked, SocketLink]]:
    inst = Chunked()
    port = await inst.start()
    link = SocketLink(config(port, read_termination="\r\n"))
    yield inst, link
    inst.deaf.set()
    await link.close()
    await inst.stop()


@both_loops
async def test_an_answer_in_pieces_is_read_whole_even_with_its_terminator_split(
        chunked: tuple[Chunked, SocketLink]) -> None:
    inst, link = chunked
    inst.parts["V?"] = [b"+1.2", b"5E+00\r", b"\n"]
    inst.parts["W?"] = [b"a\rb", b"\r", b"\n"]  # a lone \r is data; \r\n ends it
    assert await link.query("V?") == "+1.25E+00"
    assert await link.query("W?") == "a\rb"
    assert await link.query("X?") == "answer to X?"
    assert inst.connections == 1


@both_loops
async def test_bytes_nobody_asked_for_are_never_read_as_the_next_answer(
        chunked: tuple[Chunked, SocketLink]) -> None:
    inst, link = chunked
    inst.parts["TWICE?"] = [b"first\r\nsecond\r\n"]
    assert await link.query("TWICE?") == "first"
    await asyncio.sleep(0.02)
    # The answers before them may be misaligned: the query says so (bench_gate/lockstep.py
    # turns that into "nothing is written on them"), never sent, and the link starts again.
    with pytest.raises(InstrumentError, match="bytes nobody asked for"):
        await link.query("NEXT?")
    assert "NEXT?" not in inst.received
    assert await link.query("NEXT?") == "answer to NEXT?"
    assert inst.connections == 2, "the connection that answered twice was dropped"


@both_loops
async def test_an_answer_longer_than_the_bound_fails_and_drops_the_connection(
        chunked: tuple[Chunked, SocketLink], monkeypatch: pytest.MonkeyPatch) -> None:
    from bench_gate import socket_link
    monkeypatch.setattr(socket_link, "MAX_ANSWER", 4096)
    inst, link = chunked
    inst.parts["DUMP?"] = [b"#" * 3000, b"#" * 3000, b"\r\n"]
    with pytest.raises(InstrumentError, match="the answer is longer than 4096 bytes"):
        await link.query("DUMP?")
    assert await link.query("OK?") == "answer to OK?"
    assert inst.connections == 2


@both_loops
async def test_a_write_to_an_instrument_that_stopped_reading_times_out(
        chunked: tuple[Chunked, SocketLink]) -> None:
    inst, link = chunked
    await link.write("DEAF")
    with pytest.raises(InstrumentError, match="timed out"):
        for _ in range(2000):  # far more than the kernel's and the transport's buffers
            await link.write("VOLT " + "1" * 60_000)
    inst.deaf.set()
    assert await link.query("OK?") == "answer to OK?"
    assert inst.connections == 2


@both_loops
async def test_a_stray_terminator_after_an_answer_is_no_answer(
        fake: tuple[FakeInstrument, SocketLink]) -> None:
    """An instrument that ends its answers CR LF, read with CR as the terminator, leaves a
    LF after each: whitespace nobody asked for is dropped, not a reason to fail the next
    query or start a new connection."""
    inst, _ = fake
    assert inst.server is not None
    link = SocketLink(config(int(inst.server.sockets[0].getsockname()[1]),
                             read_termination="\r"))
    inst.reply["A?"] = b"first\r\n"
    inst.reply["B?"] = b"second\r\n"
    try:
        assert await link.query("A?") == "first"
        await asyncio.sleep(0.02)
        assert await link.query("B?") == "second"
        await link.write("C")
        assert await link.query("A?") == "first"
        assert inst.connections == 1
    finally:
        await link.close()
