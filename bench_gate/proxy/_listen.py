"""The socket doors' listening side: one asyncio server per instrument with a
``socket_port``, only peers in ``allowed_peers`` let in, each connection served by a
:class:`~bench_gate.proxy._door.Connection`; closing ends every connection."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import logging
from dataclasses import dataclass, field

from ..auth import Tokens
from ..config import BenchConfig, InstrumentConfig
from ..gateway import Gateway
from ._door import Connection
from ._stream import Reader

__all__ = ["Door", "Doors", "peer_allowed", "start_doors"]

logger = logging.getLogger("bench_gate.proxy._door")

DEFAULT_HOST = "127.0.0.1"
#: How long Doors.close() lets connections wind down before cancelling them.
CLOSE_TIMEOUT = 5.0


def peer_allowed(host: str, allowed: list[str]) -> bool:
    try:
        addr = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host in allowed
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    for entry in allowed:
        with contextlib.suppress(ValueError):
            if ipaddress.ip_address(entry) == addr:
                return True
    return False



@dataclass
class Door:
    """One instrument's listening socket."""

    gateway: Gateway
    tokens: Tokens
    config: InstrumentConfig
    allowed: list[str]
    #: ``socket_door.on_hold``: what a new connection does with a held write.
    on_hold: str = "wait"
    server: asyncio.Server | None = None
    connections: dict[asyncio.Task[None], Connection] = field(default_factory=dict)

    def __post_init__(self) -> None:
        profile = self.gateway.profile(self.config.name)
        self.profile = profile.name
        self.has_error_queue = profile.lookup(False, ("SYSTEM", "ERROR")) is not None

    def connected(self, reader: Reader, transport: asyncio.Transport) -> Connection | None:
        """A client connected (told by its :class:`Reader`): its connection, served by a
        task of its own; None for a peer not allowed, whose transport is closed."""
        peer = transport.get_extra_info("peername")
        host = str(peer[0]) if peer else "?"
        if not peer_allowed(host, self.allowed):
            logger.warning("%s door: refused connection from %s (not in allowed_peers)",
                           self.config.name, host)
            transport.close()
            return None
        conn = Connection(self, reader, transport, host)
        task = asyncio.get_running_loop().create_task(self._serve(conn))
        self.connections[task] = conn
        task.add_done_callback(self._gone)
        return conn

    async def _serve(self, conn: Connection) -> None:
        with contextlib.suppress(asyncio.CancelledError):  # the door is closing; serve()
            await conn.serve()                              # has cancelled what was pending

    def _gone(self, task: asyncio.Task[None]) -> None:
        self.connections.pop(task, None)


class Doors:
    """The socket doors of a bench: ``addresses`` maps instrument name to (host, port)."""

    def __init__(self, doors: dict[str, Door]) -> None:
        self._doors = doors
        self.addresses: dict[str, tuple[str, int]] = {}
        for name, door in doors.items():
            assert door.server is not None
            sock = door.server.sockets[0].getsockname()
            self.addresses[name] = (str(sock[0]), int(sock[1]))

    async def close(self) -> None:
        """Stop listening, end every connection (cancelling what they left pending)."""
        for door in self._doors.values():
            if door.server is not None:
                door.server.close()
        tasks = [t for door in self._doors.values() for t in door.connections]
        for door in self._doors.values():
            for conn in door.connections.values():
                conn.hang_up()
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=CLOSE_TIMEOUT)
            for task in late:
                task.cancel()
            for task in late:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        for door in self._doors.values():
            if door.server is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(door.server.wait_closed(), 5)


async def start_doors(gateway: Gateway, tokens: Tokens, config: BenchConfig,
                      host: str | None = None) -> Doors:
    """Open a socket door for every instrument with a ``socket_port`` (0 picks a free port).

    Doors bind ``host``, else ``config.server.host`` (127.0.0.1 by default); only peers in
    ``config.server.allowed_peers`` may connect.
    """
    bind = host or config.server.host or DEFAULT_HOST
    doors: dict[str, Door] = {}
    try:
        for ic in config.instruments:
            if ic.socket_port is None:
                continue
            door = Door(gateway, tokens, ic, list(config.server.allowed_peers),
                        on_hold=config.socket_door.on_hold)
            door.server = await asyncio.get_running_loop().create_server(
                functools.partial(Reader, door), bind, ic.socket_port)
            doors[ic.name] = door
    except OSError:
        for door in doors.values():
            if door.server is not None:
                door.server.close()
        raise
    return Doors(doors)
