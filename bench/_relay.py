"""The floor both socket-door benchmarks measure against: a bare asyncio relay."""

from __future__ import annotations

import asyncio


async def start_relay(upstream: tuple[str, int]) -> asyncio.Server:
    """The minimal relay: bytes in, bytes out, one upstream connection per client."""

    async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
        finally:
            writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*upstream)
        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer),
                             return_exceptions=True)

    return await asyncio.start_server(handle, "127.0.0.1", 0)
