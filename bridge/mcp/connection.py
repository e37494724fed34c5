"""One MCP server's connection: opened on first use, reopened with back-off, closed when left idle."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import httpx2
import mcp.types as mt
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.session import IncomingMessage, MessageHandlerFnT
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from bridge.config.mcp import McpServerSettings
from bridge.errors import ToolSourceError
from bridge.mcp import cache
from bridge.mcp.state import ServerState, server_redactor

log = logging.getLogger(__name__)
# What stdio servers write to their stderr: diagnostics, on a logger of its own (`bridge chat` mutes it).
stderr_log = logging.getLogger("bridge.mcp.stderr")

# Seconds before another attempt after 1, 2, 3... failed opens in a row: the first retry is at once
# (a crash is often a one-off), later ones wait longer so a dead server is not respawned per call.
BACKOFF_S = (0.0, 2.0, 5.0, 15.0, 30.0, 60.0)
CLIENT_INFO = mt.Implementation(name="bridge", version="0.1.0")
Transport = AbstractAsyncContextManager[tuple[Any, Any]]


def backoff(failures: int) -> float:
    return BACKOFF_S[min(failures, len(BACKOFF_S)) - 1] if failures else 0.0


class _StderrLog:
    """A stdio server's stderr, read into Bridge's log line by line (where its secrets are redacted)."""

    LINE_MAX = 500

    def __init__(self, name: str) -> None:
        self.name = name
        read, write = os.pipe()
        self._read = read
        # Handed to the child; closed here once it is started, so the pipe ends when the child does.
        self.writer: TextIO = os.fdopen(write, "w")
        self._buffer = b""

    def started(self) -> None:
        self.writer.close()
        os.set_blocking(self._read, False)
        asyncio.get_running_loop().add_reader(self._read, self._drain)

    def _drain(self) -> None:
        try:
            data = os.read(self._read, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.close()
            return
        *lines, self._buffer = (self._buffer + data).split(b"\n")
        for line in lines:
            text = line.decode("utf-8", "replace").rstrip()
            if text:
                stderr_log.info("MCP server %s: %s", self.name, text[: self.LINE_MAX])
        if len(self._buffer) > self.LINE_MAX * 8:
            self._buffer = b""

    def close(self) -> None:
        if not self.writer.closed:
            self.writer.close()
        if self._read >= 0:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._read)
            os.close(self._read)
            self._read = -1


class McpConnection:
    """The client side of one [[mcp.servers]] entry.

    The SDK's session lives in a task of its own (its task groups must be entered and left in one
    task); calls from runs go through it. A call that finds the connection broken (the process died,
    the HTTP server went away) closes it, and the next call opens a new one.
    """

    def __init__(self, settings: McpServerSettings, idle_close_s: float, cache: Path | None = None) -> None:
        self.settings = settings
        self.name = settings.name
        self.idle_close_s = idle_close_s
        # Where the listing is kept for the next process (bridge.mcp.cache); None keeps none.
        self._cache = cache
        self._clock = time.monotonic
        # The open connection's session and the event that ends it; None while closed.
        self._link: _Link | None = None
        # The task holding the newest connection, and the event that ends it (set also while it is
        # still connecting, so a shutdown then does not wait for it).
        self._owner: asyncio.Task[None] | None = None
        self._owner_stop = asyncio.Event()
        self._lock = asyncio.Lock()
        self._failures = 0
        self._retry_at = 0.0
        self.last_error: str | None = None
        # What the dashboard shows; replaced here, at each step of the lifecycle, and nowhere else.
        self.state = ServerState()
        # Errors are told to the model and shown on the dashboard: the server's secrets never are.
        self._redact = server_redactor(settings)
        self._last_used = 0.0
        self._in_flight = 0
        self._refreshing: set[asyncio.Task[None]] = set()
        self._closed = False
        # Opened connections (a new process, for stdio) in this process's life: for tests and status.
        self.opens = 0
        # The server's tools as last listed: kept when the connection closes, so a later turn can
        # offer them without reconnecting; None until first listed.
        self.tools: list[mt.Tool] | None = None

    # ------------------------------------------------------------------ use

    async def list_tools(self) -> list[mt.Tool]:
        """The server's tools: the cached list, or listed now (opening the connection) if none yet."""
        if self.tools is not None:
            return self.tools
        async with self._using() as link:
            self.tools = await self._list(link.session)
        return self.tools

    async def connect(self) -> list[mt.Tool]:
        """Open the connection now and list the tools again (the dashboard's Connect now): the wait
        after failed starts is skipped, since an operator asked for this one."""
        if self._link is None:
            self._retry_at = 0.0
        async with self._using() as link:
            self.tools = await self._list(link.session)
        return self.tools

    async def restore(self) -> bool:
        """Take the tools an earlier process listed, without connecting; False if there are none."""
        if self.tools is None and self._cache is not None:
            self.tools = await asyncio.to_thread(cache.read, self._cache, self.settings)
        return self.tools is not None

    async def call(self, name: str, arguments: dict[str, Any]) -> mt.CallToolResult:
        """Call one tool by the server's own name. Cancelling the call (a tool timeout) cancels it on
        the server as well; the connection stays open."""
        async with self._using() as link:
            try:
                result = await link.session.call_tool(name, arguments)
            except MCPError as exc:
                if _is_disconnect(exc):
                    self._broken(link, f"the connection closed during the call to {name}")
                    raise ToolSourceError(
                        f"MCP server '{self.name}' closed the connection during the call (it may have "
                        "crashed). The next call starts it again."
                    ) from None
                raise ToolSourceError(f"MCP server '{self.name}' refused the call: {exc}") from None
        if not isinstance(result, mt.CallToolResult):
            raise ToolSourceError(f"MCP server '{self.name}' answered {name} with a result Bridge cannot use")
        return result

    @contextlib.asynccontextmanager
    async def _using(self) -> AsyncIterator[_Link]:
        # Counted before opening: the owner task must not find the new connection idle meanwhile.
        self._in_flight += 1
        try:
            yield await self._open()
        finally:
            self._in_flight -= 1
            self._last_used = self._clock()

    # ------------------------------------------------------------------ lifecycle

    async def _open(self) -> _Link:
        if self._closed:
            raise ToolSourceError(f"MCP server '{self.name}' is closed: Bridge is shutting down")
        async with self._lock:
            if self._link is not None:
                return self._link
            wait = self._retry_at - self._clock()
            if wait > 0:
                raise ToolSourceError(
                    f"MCP server '{self.name}' is unavailable ({self.last_error}); "
                    f"it will be tried again in {wait:.0f} s."
                )
            ready: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()
            self.state = self.state.starting()
            stop = self._owner_stop = asyncio.Event()
            self._owner = asyncio.create_task(self._own(ready, stop), name=f"mcp-{self.name}")
            try:
                session = await ready
            except asyncio.CancelledError:
                # The call that opened it was stopped (its time ran out): the half-open connection
                # is not left running unused. The SDK ends the process even when cancelled.
                stop.set()
                self._owner.cancel()
                self.state = ServerState.stopped("its start was cancelled: the call that needed it timed out")
                raise
            except Exception as exc:
                self._failures += 1
                wait = backoff(self._failures)
                self._retry_at = self._clock() + wait
                self.last_error = self._redact(_reason(exc))
                self.state = ServerState.failing(self.last_error, self._failures, wait)
                log.warning("MCP server %s could not be opened: %s", self.name, self.last_error)
                raise ToolSourceError(
                    f"MCP server '{self.name}' could not be started: {self.last_error}"
                ) from None
            self._failures = 0
            self.last_error = None
            self.opens += 1
            self._link = _Link(session, stop)
            # The tools it listed last time, until this connection lists them (list_tools, _refresh).
            self.state = ServerState.connected(len(self.tools) if self.tools is not None else None)
            return self._link

    async def _own(self, ready: asyncio.Future[ClientSession], stop: asyncio.Event) -> None:
        """Hold the connection open until it is closed, broken, or idle for idle_close_s."""
        timeout = self.settings.timeout_s
        self._last_used = self._clock()
        # Why it stopped, for the state; None where whoever stopped it said (_broken, aclose).
        why: str | None = "its connection ended"
        try:
            async with AsyncExitStack() as stack:
                async with asyncio.timeout(timeout):
                    read, write = await stack.enter_async_context(self._transport(stack))
                    session = await stack.enter_async_context(
                        ClientSession(read, write, message_handler=self._handler(), client_info=CLIENT_INFO)
                    )
                    await session.initialize()
                ready.set_result(session)
                why = await self._wait_idle(stop)
                # In the step that found it idle: no call can take this session any more.
                self._forget(stop, why)
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else ToolSourceError("cancelled"))
            elif not isinstance(exc, asyncio.CancelledError):
                why = f"its connection ended: {self._redact(_reason(exc))}"
                log.info("MCP server %s: connection ended: %s", self.name, _reason(exc))
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._forget(stop, why)

    def _transport(self, stack: AsyncExitStack) -> Transport:
        settings = self.settings
        if settings.command is not None:
            errors = _StderrLog(self.name)
            stack.callback(errors.close)
            params = StdioServerParameters(
                command=settings.command,
                args=settings.args,
                # The SDK adds only PATH, HOME, USER, LOGNAME, SHELL and TERM to these: nothing else of
                # Bridge's environment (its tokens) reaches the server.
                env={k: v.get_secret_value() for k, v in settings.env.items()},
                cwd=settings.cwd,
            )
            return _started(stdio_client(params, errlog=errors.writer), errors)
        assert settings.url is not None
        return _http_transport(settings)

    async def _wait_idle(self, stop: asyncio.Event) -> str | None:
        """Wait until the connection is idle (then say so) or stopped (by whoever set `stop`)."""
        while not stop.is_set():
            idle = self._clock() - self._last_used
            if self._in_flight == 0 and idle >= self.idle_close_s:
                log.info("MCP server %s: closed after %.0f s unused", self.name, idle)
                return f"closed after {idle:.0f} s unused"
            left = self.idle_close_s - idle if self._in_flight == 0 else self.idle_close_s
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(left, 0.05))
        return None

    def _forget(self, stop: asyncio.Event, why: str | None) -> None:
        """Drop the connection that `stop` ends, if it is still the current one, and say why."""
        if self._link is not None and self._link.stop is stop:
            self._link = None
            if why is not None:
                self.state = ServerState.stopped(why)

    def _broken(self, link: _Link, why: str) -> None:
        log.warning("MCP server %s: %s", self.name, why)
        self._forget(link.stop, why)
        link.stop.set()

    def _handler(self) -> MessageHandlerFnT:
        """What a connection does with the server's notifications and its transport's errors."""

        async def handle(message: IncomingMessage) -> None:
            if isinstance(message, Exception):
                # A line that is not MCP (a server that prints to stdout): the SDK reads on, so the
                # connection stays. One that is really gone fails its next request ("connection
                # closed"), which closes it (call()).
                log.warning("MCP server %s sent what is not MCP: %s", self.name, _reason(message))
            elif isinstance(message, mt.ToolListChangedNotification):
                task = asyncio.create_task(self._refresh())
                self._refreshing.add(task)
                task.add_done_callback(self._refreshing.discard)

        return handle

    async def _refresh(self) -> None:
        """Re-list the tools after the server said they changed; the next request offers the new ones."""
        link = self._link
        if link is None:
            self.tools = None
            return
        try:
            self.tools = await self._list(link.session)
        except Exception as exc:
            # Listed again on the next open; until then the old list stands.
            log.warning("MCP server %s: listing its changed tools failed: %s", self.name, _reason(exc))
            self.tools = None
            return
        log.info("MCP server %s: its tool list changed (%d tools)", self.name, len(self.tools))

    async def _list(self, session: ClientSession) -> list[mt.Tool]:
        tools: list[mt.Tool] = []
        cursor: str | None = None
        async with asyncio.timeout(self.settings.timeout_s):
            while True:
                params = mt.PaginatedRequestParams(cursor=cursor) if cursor else None
                page = await session.list_tools(params=params)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    break
        self.state = self.state.listed(len(tools))
        if self._cache is not None:
            await asyncio.to_thread(cache.write, self._cache, self.settings, tools)
        return tools

    async def aclose(self) -> None:
        """Close the connection for good; a stdio server's process is ended (and killed if it lingers)."""
        self._closed = True
        for task in list(self._refreshing):
            task.cancel()
        owner = self._owner
        self._owner_stop.set()
        if owner is not None and self._link is None:
            # Still connecting (a stop is only seen once connected) or already closing.
            owner.cancel()
        if owner is not None and not owner.done():
            try:
                # The SDK ends a stdio child within about 4 s: stdin closed, then SIGTERM, then SIGKILL.
                await asyncio.wait_for(asyncio.shield(owner), 10)
            except TimeoutError:
                owner.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await owner
            except Exception:
                pass
        self._link = None
        if self.state.phase != "not started":
            self.state = ServerState.stopped("Bridge is shutting down")


@dataclass(frozen=True, slots=True)
class _Link:
    """An open connection: its session, and the event that ends it."""

    session: ClientSession
    stop: asyncio.Event


@contextlib.asynccontextmanager
async def _started(transport: Transport, errors: _StderrLog) -> AsyncIterator[tuple[Any, Any]]:
    async with transport as streams:
        errors.started()
        yield streams


@contextlib.asynccontextmanager
async def _http_transport(settings: McpServerSettings) -> AsyncIterator[tuple[Any, Any]]:
    assert settings.url is not None
    headers = {k: v.get_secret_value() for k, v in settings.headers.items()}
    # A long read timeout: the server may hold an SSE stream open while a tool works.
    timeout = httpx2.Timeout(settings.timeout_s, read=max(settings.timeout_s, 300.0))
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as client,
        streamable_http_client(settings.url, http_client=client) as (read, write),
    ):
        yield read, write


def _is_disconnect(exc: MCPError) -> bool:
    return "connection closed" in str(exc).lower()


def _reason(exc: BaseException) -> str:
    """One readable line for an error, the innermost of an exception group."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "it did not answer in time"
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {exc.filename or exc}"
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, MCPError) and _is_disconnect(exc):
        return "it exited or closed the connection before answering"
    return text if len(text) <= 300 else text[:299] + "…"
