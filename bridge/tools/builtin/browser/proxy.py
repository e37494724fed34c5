"""The vetting proxy: every request of one browser context goes through it, and it alone resolves names.

Chromium is launched unable to resolve any name itself (`--host-resolver-rules`, see engine), and each
context is told to use its own GuardProxy for everything, loopback included. With an HTTP proxy the
browser hands over the host name, never an address: the proxy resolves it once, vets every address
(guard.Policy) and dials the vetted IP. So redirects, subresources, fetch/XHR, frames, WebSockets
(tunnelled with CONNECT) and workers' requests are all judged where they are dialled, and DNS
rebinding between a check and the connection is impossible: there is no second resolution.

Plain http:// requests are forwarded one per connection (`Connection: close` both ways), which keeps the
proxy a byte pipe after the head: no HTTP parsing of bodies, chunks or keep-alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from urllib.parse import urlsplit

from bridge.tools.builtin.browser.guard import Policy, Refusal

log = logging.getLogger(__name__)

# A request head (or a response head) larger than this is refused: Chromium's own limit is 256 KiB for
# responses, but a request's is far smaller, and 64 KiB is asyncio's default reader limit.
MAX_HEAD = 64 * 1024
# The hop-by-hop headers a proxy must not forward (RFC 9110 §7.6.1), plus Chromium's Proxy-Connection.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "proxy-authenticate",
        "te",
        "trailer",
        "upgrade",
    }
)
# Marks a response the proxy made itself (a refusal): the engine tells a blocked page from a 403 page.
REFUSED_HEADER = "x-bridge-refused"
CHUNK = 64 * 1024


class GuardProxy:
    """An HTTP/1.1 forward proxy on 127.0.0.1 for one browser context; `on_refusal` hears every
    request it refused, so the context's tools can say what was blocked."""

    def __init__(
        self, policy: Policy, on_refusal: Callable[[Refusal], None], connect_timeout_s: float
    ) -> None:
        self._policy = policy
        self._on_refusal = on_refusal
        self._connect_timeout_s = connect_timeout_s
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> str:
        """Listen on a free port of 127.0.0.1; the proxy's URL."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, limit=MAX_HEAD)
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def aclose(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for writer in list(self._writers):
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        # Every connection this one opened, closed with it whatever happens.
        ends = [writer]
        try:
            await self._handle(reader, writer, ends)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        except Exception:
            log.exception("browser proxy: a connection failed")
        finally:
            for end in ends:
                end.close()
                with contextlib.suppress(Exception):
                    await end.wait_closed()
            self._writers.discard(writer)
            self._tasks.discard(task)

    async def _handle(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, ends: list[asyncio.StreamWriter]
    ) -> None:
        """Serve one client connection; the upstream connection it opens is added to `ends`."""
        try:
            # An idle connection Chromium opened ahead of need is dropped after a while.
            async with asyncio.timeout(60):
                head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            await _answer(writer, 431, "Request Header Fields Too Large", "The request head is too large.")
            return
        request_line, *header_lines = head.decode("latin-1").split("\r\n")
        method, _, rest = request_line.partition(" ")
        target, _, version = rest.partition(" ")
        if not version.startswith("HTTP/1."):
            await _answer(writer, 400, "Bad Request", "Not an HTTP/1 request.")
            return

        if method.upper() == "CONNECT":
            parts = urlsplit("//" + target)
            try:
                host, port = parts.hostname, parts.port
            except ValueError:
                host, port = None, None
            if not host or port is None:
                await _answer(writer, 400, "Bad Request", f"Bad CONNECT target {target!r}.")
                return
            upstream = await self._dial(host, port, writer, ends)
            if upstream is None:
                return
            up_reader, up_writer = upstream
            writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            await writer.drain()
            await _splice(reader, writer, up_reader, up_writer)
            return

        parts = urlsplit(target)
        try:
            host, port = parts.hostname, parts.port or 80
        except ValueError:
            host, port = None, 80
        if parts.scheme.lower() != "http" or not host:
            # https goes through CONNECT; anything else (ftp://, a bare path) is not for this proxy.
            await _answer(writer, 400, "Bad Request", f"Cannot forward {target!r}.")
            return
        upstream = await self._dial(host, port, writer, ends)
        if upstream is None:
            return
        up_reader, up_writer = upstream
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        up_writer.write(_head(f"{method} {path} {version}", header_lines))
        await up_writer.drain()
        # The request body (if any) flows on while the response comes back; the response's head is
        # rewritten so the browser does not reuse this connection for another host.
        forward = asyncio.create_task(_pump(reader, up_writer))
        try:
            response_head = await up_reader.readuntil(b"\r\n\r\n")
            status_line, *response_lines = response_head.decode("latin-1").split("\r\n")
            writer.write(_head(status_line, response_lines))
            await writer.drain()
            await _pump(up_reader, writer)
        finally:
            forward.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await forward

    async def _dial(
        self, host: str, port: int, writer: asyncio.StreamWriter, ends: list[asyncio.StreamWriter]
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """A connection to a vetted address of host (its writer added to `ends`, closed with the client's
        connection), or None after answering the browser why not."""
        found = await self._policy.addresses(host, port)
        if isinstance(found, Refusal):
            if found.code == "blocked_address":
                self._on_refusal(found)
                await _answer(writer, 403, "Forbidden", found.message, refused=True)
            else:
                await _answer(writer, 502, "Bad Gateway", found.message)
            return None
        last: Exception | None = None
        for ip in found:
            try:
                async with asyncio.timeout(self._connect_timeout_s):
                    # The vetted IP is what is dialled: the name is never resolved again.
                    up_reader, up_writer = await asyncio.open_connection(ip, port, limit=MAX_HEAD)
            except (OSError, TimeoutError) as exc:
                last = exc
                continue
            ends.append(up_writer)
            return up_reader, up_writer
        await _answer(writer, 502, "Bad Gateway", f"Could not connect to {host}:{port}: {last}")
        return None


def _head(first_line: str, header_lines: list[str]) -> bytes:
    """A request or response head with hop-by-hop headers dropped and `Connection: close` added."""
    named_in_connection: set[str] = set()
    for line in header_lines:
        name, _, value = line.partition(":")
        if name.strip().lower() == "connection":
            named_in_connection |= {token.strip().lower() for token in value.split(",")}
    kept = [
        line
        for line in header_lines
        if line
        and (name := line.partition(":")[0].strip().lower()) not in HOP_BY_HOP
        and name not in named_in_connection
    ]
    return "\r\n".join([first_line, *kept, "Connection: close", "", ""]).encode("latin-1")


async def _answer(
    writer: asyncio.StreamWriter, status: int, reason: str, message: str, *, refused: bool = False
) -> None:
    body = f"Bridge's browser guard: {message}\n".encode()
    lines = [
        f"HTTP/1.1 {status} {reason}",
        "Content-Type: text/plain; charset=utf-8",
        f"Content-Length: {len(body)}",
        "Connection: close",
    ]
    if refused:
        lines.append(f"{REFUSED_HEADER}: 1")
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
    with contextlib.suppress(ConnectionError):
        await writer.drain()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until the reader's end closes."""
    while data := await reader.read(CHUNK):
        writer.write(data)
        await writer.drain()


async def _splice(
    a_reader: asyncio.StreamReader,
    a_writer: asyncio.StreamWriter,
    b_reader: asyncio.StreamReader,
    b_writer: asyncio.StreamWriter,
) -> None:
    """Copy both ways until either end closes (a browser never half-closes a tunnel it still reads)."""
    pumps = [asyncio.create_task(_pump(a_reader, b_writer)), asyncio.create_task(_pump(b_reader, a_writer))]
    try:
        await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pump in pumps:
            pump.cancel()
        for pump in pumps:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pump
