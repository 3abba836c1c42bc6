"""The socket door under hostile clients: random bytes, partial messages, many messages in
one packet, one message split over many packets, very long lines. After every case the
server still answers and the simulated PSU (read directly over pyvisa-py) is unchanged,
because nobody approves anything. The long run is ``bench/fuzz_scpi.py --door-minutes N``.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from bench.fuzz_scpi import DoorFuzz, door_property, rss_mib
from bench_gate.models import Status
from bench_gate.proxy import MAX_QUEUED


@pytest.fixture(scope="module")
def fz(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DoorFuzz]:
    with DoorFuzz(tmp_path_factory.mktemp("door")) as f:
        yield f


def lines(s: socket.socket, n: int, timeout: float = 10.0) -> list[str]:
    s.settimeout(timeout)
    buf = b""
    while buf.count(b"\n") < n:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    return buf.decode("latin-1").splitlines()


def test_door_fuzz_short(fz: DoorFuzz) -> None:
    """Generated hostile clients; the PSU checked after each one."""
    fz.check()
    start = time.monotonic()
    door_property(fz, 60)()
    assert time.monotonic() - start < 60
    fz.check()
    assert fz.executed_writes() == 0


def test_many_messages_in_one_packet_answer_in_order(fz: DoorFuzz) -> None:
    with socket.create_connection(fz.door) as s:
        s.sendall(b"".join(f"GATE:GOAL \"g{i}\";:GATE:GOAL?\n".encode() for i in range(200)))
        got = lines(s, 200)
    assert got == [f'"g{i}"' for i in range(200)]
    with socket.create_connection(fz.door) as s:
        s.sendall(b"*IDN?\r\nMEAS:VOLT? (@1)\nSYST:ERR?\n" * 50)
        got = lines(s, 150)
    assert len(got) == 150 and all("E36312A" in g for g in got[::3])
    assert all(g.startswith('+0,"No error"') for g in got[2::3])


def test_more_messages_at_once_than_the_inbox_holds_answer_in_order(fz: DoorFuzz) -> None:
    """Thousands of messages in a few packets: the inbox fills (MAX_QUEUED), the door stops
    reading and keeps the rest of what it got until the processor makes room; nothing is
    lost or reordered."""
    count = 3 * MAX_QUEUED
    with socket.create_connection(fz.door) as s:
        s.sendall(b"".join(f"GATE:GOAL \"g{i}\";:GATE:GOAL?\n".encode() for i in range(count)))
        got = lines(s, count, 60)
    assert got == [f'"g{i}"' for i in range(count)]


def test_a_last_message_ended_by_the_clients_eof_is_answered_behind_a_full_inbox(
        fz: DoorFuzz) -> None:
    """The client sends more reads than the inbox holds, the last with no terminator, and
    half-closes: that last one is still a message (IEEE 488.2 7.5: END ends a message
    too), read and answered after every one before it."""
    count = 2 * MAX_QUEUED + 10
    with socket.create_connection(fz.door) as s:
        s.sendall(b"*IDN?\n" * count + b"*IDN?")
        s.shutdown(socket.SHUT_WR)
        got = lines(s, count + 1, 120)
    assert len(got) == count + 1 and all("E36312A" in g for g in got)


def test_one_message_split_over_many_packets(fz: DoorFuzz) -> None:
    with socket.create_connection(fz.door) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for byte in b"*IDN?\r\n":
            s.sendall(bytes([byte]))
            time.sleep(0.005)
        assert "E36312A" in lines(s, 1)[0]


def test_very_long_lines_are_refused_and_the_connection_works_on(fz: DoorFuzz) -> None:
    with socket.create_connection(fz.door) as s:
        for size in (8193, 70_000, 1_000_000):
            s.sendall((b"VOLT 5,(@1);" * (size // 12 + 1))[:size] + b"\n")
        s.sendall(b"\x00\xff\x80 binary\n*IDN?\n")
        assert "E36312A" in lines(s, 1, 30)[0]
        s.sendall(b"SYST:ERR?\n" * 5)
        errors = lines(s, 5)
    assert [e.split(",")[0] for e in errors] == ["-223", "-223", "-223", "-101", "+0"]
    fz.check()


def test_unterminated_write_at_hang_up_is_cancelled(fz: DoorFuzz) -> None:
    assert fz.server.running is not None
    gw = fz.server.running.gateway
    with socket.create_connection(fz.door) as s:
        s.sendall(b"VOLT 1.25,(@1)\nOUTP ON,(@1)")
    for _ in range(200):
        if not gw.list_requests(status=Status.PENDING):
            break
        time.sleep(0.05)
    assert gw.list_requests(status=Status.PENDING) == []
    fz.check()


def test_memory_is_bounded_under_hostile_clients(fz: DoorFuzz) -> None:
    door_property(fz, 20)()  # warm-up
    before = rss_mib()
    door_property(fz, 60)()
    assert rss_mib() - before < 50, (before, rss_mib())
    fz.check()

