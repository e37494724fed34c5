"""Raw TCP clients of an HTTP server that misbehave on purpose: they connect and send nothing, or half a
request header, or a header and half a body, and hold the connection open (tests of bridge/serving.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

SILENT = b""
HALF_HEADER = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
# A whole header, and 3 of the 100 bytes of body it announces: the handler waits for the rest.
HALF_BODY = (
    b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"
    b"Content-Length: 100\r\n\r\ntok"
)


@dataclass
class Held:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    async def closed_by_server(self, within: float) -> bool:
        """Whether the server closes it (EOF or reset) within `within` seconds; what it sent first,
        a 503 say, is read and dropped."""
        try:
            async with asyncio.timeout(within):
                while await self.reader.read(4096):
                    pass
        except TimeoutError:
            return False
        except (ConnectionResetError, BrokenPipeError):
            pass
        return True

    async def answer(self, within: float) -> bytes:
        """Everything the server sends until it closes the connection."""
        chunks = []
        with contextlib.suppress(ConnectionResetError):
            async with asyncio.timeout(within):
                while chunk := await self.reader.read(4096):
                    chunks.append(chunk)
        return b"".join(chunks)


@contextlib.asynccontextmanager
async def holding(port: int, payloads: Sequence[bytes], *, within: float = 10.0) -> AsyncIterator[list[Held]]:
    """One connection per payload to 127.0.0.1:port, each sending its payload and then nothing, in
    order; all closed at the end of the block."""
    held: list[Held] = []
    try:
        async with asyncio.timeout(within):
            for payload in payloads:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                held.append(Held(reader, writer))
                if payload:
                    writer.write(payload)
                    with contextlib.suppress(ConnectionResetError, BrokenPipeError):
                        await writer.drain()
        yield held
    finally:
        for one in held:
            one.writer.transport.abort()


async def count_closed(held: Sequence[Held], within: float) -> int:
    """How many of them the server closed within `within` seconds (all waited for at once)."""
    closed = await asyncio.gather(*(one.closed_by_server(within) for one in held))
    return sum(closed)
