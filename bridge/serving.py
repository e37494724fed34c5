"""Serving an aiohttp app with connection limits, for every HTTP server Bridge runs: the admin server
(which serves hooks too) and the Telegram webhook's.

Two limits, both on the connection below aiohttp, where it can't see them:

- A **cap on open connections**. A new connection past the cap closes the oldest one that has not
  yet sent a whole request header (a client that connects and sends nothing, or half a header); when
  every open connection is in the middle of a request, the new one is answered 503 with Retry-After
  and closed at once. Before this, 1,034 half-open connections ran the process out of file
  descriptors: `/healthz` went unanswered for 14 s and asyncio logged 45,473 "Too many open files".
- A **header-read timeout**. A connection that has not sent a whole request header within
  `header_timeout_s` of opening is closed; so is one idle that long between requests (aiohttp's
  keep-alive timeout, set to the same).

While connections are closed or refused at the cap, one line is logged a minute, never one per
connection. Base layer: imports only aiohttp and the standard library, so adapters may use it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

log = logging.getLogger(__name__)

# The most lines the cap logs: one, then at most one a minute while it keeps refusing.
REPORT_EVERY_S = 60.0
# What a connection refused at the cap is told before it is closed; a client that retries (Telegram
# does) comes back a second later.
REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\n"
    b"Content-Type: text/plain\r\nContent-Length: 33\r\n\r\ntoo many open connections, retry\n"
)
# aiohttp's own default; a queue of connections the kernel accepted for us but we have not taken.
BACKLOG = 128


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The cap on open connections, and how long a connection may take to send a request header."""

    max_connections: int = 256
    header_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if self.max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, not {self.max_connections}")
        if not self.header_timeout_s > 0:
            raise ValueError(f"header_timeout_s must be more than 0, not {self.header_timeout_s}")


class _Report:
    """Counts what the cap did and says so at most once every REPORT_EVERY_S."""

    def __init__(self, name: str, limits: ConnectionLimits, remedy: str) -> None:
        self.name = name
        self.limits = limits
        self.remedy = remedy
        self.evicted = 0
        self.refused = 0
        self.lines = 0
        self._timer: asyncio.TimerHandle | None = None

    def note(self, *, evicted: int = 0, refused: int = 0) -> None:
        self.evicted += evicted
        self.refused += refused
        if self._timer is None:  # quiet for a minute or more: say it now
            self._say()

    def _say(self) -> None:
        self._timer = None
        if not (self.evicted or self.refused):
            return  # it stopped: nothing to report, and the next one is told at once
        self.lines += 1
        log.warning(
            "%s: at its cap of %d open connections: closed %d that had sent no whole request header, to "
            "make room, and refused %d with 503 (this line comes at most once a minute). If these are "
            "real clients, raise %s; otherwise something is holding connections open on purpose.",
            self.name,
            self.limits.max_connections,
            self.evicted,
            self.refused,
            self.remedy,
        )
        self.evicted = self.refused = 0
        self._timer = asyncio.get_running_loop().call_later(REPORT_EVERY_S, self._say)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class _Gate:
    """The open connections of one server, oldest first among those still waiting for a header."""

    def __init__(
        self, limits: ConnectionLimits, report: _Report, make: Callable[[], asyncio.Protocol]
    ) -> None:
        self.limits = limits
        self.report = report
        self.make = make
        self.open: set[_Guarded] = set()
        # Insertion order is the order they connected in: the first is the one to close at the cap.
        self.waiting: dict[_Guarded, None] = {}

    def protocol(self) -> _Guarded:
        return _Guarded(self)

    def admit(self, conn: _Guarded) -> bool:
        if len(self.open) >= self.limits.max_connections:
            if not self.waiting:
                self.report.note(refused=1)
                return False
            oldest = next(iter(self.waiting))
            oldest.close()
            self.report.note(evicted=1)
        self.open.add(conn)
        self.waiting[conn] = None
        return True

    def header_done(self, conn: _Guarded) -> None:
        self.waiting.pop(conn, None)

    def release(self, conn: _Guarded) -> None:
        self.open.discard(conn)
        self.waiting.pop(conn, None)


class _Guarded(asyncio.Protocol):
    """One connection: admitted or refused by its gate, closed if its first header is late; everything
    else goes to aiohttp's own protocol, made only once the connection is admitted."""

    def __init__(self, gate: _Gate) -> None:
        self.gate = gate
        self.inner: asyncio.Protocol | None = None
        self.transport: asyncio.Transport | None = None
        self.deadline: asyncio.TimerHandle | None = None
        # The last bytes seen while looking for the blank line that ends the header.
        self.tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if not self.gate.admit(self):
            transport.write(REFUSAL)
            transport.close()
            return
        self.deadline = asyncio.get_running_loop().call_later(self.gate.limits.header_timeout_s, self.close)
        self.inner = self.gate.make()
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.inner is None:
            return
        if self.deadline is not None:
            seen = self.tail + data
            if b"\n\n" in seen or b"\n\r\n" in seen:
                self._header_done()
            else:
                self.tail = seen[-2:]
        self.inner.data_received(data)

    def _header_done(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None
        self.gate.header_done(self)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.inner is not None else None

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._header_done()
        self.gate.release(self)
        if self.inner is not None:
            self.inner.connection_lost(exc)

    def close(self) -> None:
        """Close a connection that is late with its header or is the oldest waiting at the cap."""
        self.gate.release(self)  # now, so the cap counts the new connection that replaces it
        if self.transport is not None:
            self.transport.abort()


class LimitedServer:
    """An aiohttp app listening on one address under ConnectionLimits. `name` and `remedy` go into the
    cap's log line, e.g. "admin server" and "[admin] max_connections"."""

    def __init__(
        self,
        app: web.Application,
        *,
        listen: str,
        port: int,
        limits: ConnectionLimits,
        name: str,
        remedy: str,
        shutdown_timeout: float,
        reuse_port: bool = False,
    ) -> None:
        self.app = app
        self.listen = listen
        self.port = port
        self.limits = limits
        self.reuse_port = reuse_port
        self.shutdown_timeout = shutdown_timeout
        self.report = _Report(name, limits, remedy)
        self._runner: web.AppRunner | None = None
        self._server: asyncio.Server | None = None
        self._gate: _Gate | None = None

    @property
    def open_connections(self) -> int:
        return len(self._gate.open) if self._gate is not None else 0

    async def start(self) -> None:
        """Listen; an OSError (a busy port) leaves nothing behind."""
        # No access log: a line per scrape or health check would drown the log. Keep-alive as long as
        # the header timeout: an idle connection holds a place under the cap no longer than a new one.
        runner = web.AppRunner(
            self.app,
            access_log=None,
            shutdown_timeout=self.shutdown_timeout,
            keepalive_timeout=self.limits.header_timeout_s,
        )
        await runner.setup()
        handlers = runner.server  # aiohttp's protocol factory, made by setup()
        assert handlers is not None
        gate = _Gate(self.limits, self.report, handlers)
        try:
            self._server = await asyncio.get_running_loop().create_server(
                gate.protocol,
                self.listen,
                self.port,
                backlog=BACKLOG,
                reuse_address=True,
                reuse_port=self.reuse_port or None,
            )
        except BaseException:
            await runner.cleanup()
            raise
        self._runner, self._gate = runner, gate

    async def stop(self) -> None:
        """Stop listening, let requests in progress end within shutdown_timeout, close the rest."""
        server, self._server = self._server, None
        runner, self._runner = self._runner, None
        gate, self._gate = self._gate, None
        self.report.close()
        if server is not None:
            server.close()
        if runner is not None:
            await runner.cleanup()  # closes every connection aiohttp was handed
        for conn in list(gate.open if gate is not None else ()):
            conn.close()


__all__ = ["ConnectionLimits", "LimitedServer"]
