"""What one MCP server is doing, as the dashboard shows it: a read-only snapshot that the connection
(bridge.mcp.connection) replaces at each step of its life, and how the server is named without its
secrets.

No SDK import here: a server nobody used has no connection yet, and asking its state must not load
the SDK (half a second).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from bridge.config.mcp import McpServerSettings
from bridge.logs import MIN_SECRET_LEN, redacting, secret_values

Phase = Literal["not started", "starting", "connected", "failing", "stopped"]


@dataclass(frozen=True, slots=True)
class ServerState:
    """One server's state. `not started`: nothing used it in this process; `starting`: its process or
    HTTP session is being opened; `connected`; `failing`: the last start failed, and the next call may
    try again from `retry_at`; `stopped`: it was open and was closed (idle, a crash, shutdown), and the
    next call starts it again. Its texts never hold the server's secrets (connection redacts them)."""

    phase: Phase = "not started"
    # When it entered this phase (Unix time); None while not started.
    since: float | None = None
    # connected: how many tools the server listed; None until it has listed them.
    tools: int | None = None
    # failing: the last error in plain words; stopped: why it was closed.
    reason: str | None = None
    # failing: failed starts in a row, and from when (Unix time) a call may try again.
    attempts: int = 0
    retry_at: float | None = None

    def starting(self) -> ServerState:
        # The failures so far stay counted until a start succeeds.
        return ServerState("starting", time.time(), attempts=self.attempts)

    @staticmethod
    def connected(tools: int | None) -> ServerState:
        return ServerState("connected", time.time(), tools=tools)

    def listed(self, tools: int) -> ServerState:
        """The same state with the count of a new listing (only a connected server lists)."""
        return replace(self, tools=tools) if self.phase == "connected" else self

    @staticmethod
    def failing(reason: str, attempts: int, wait_s: float) -> ServerState:
        now = time.time()
        return ServerState("failing", now, reason=reason, attempts=attempts, retry_at=now + wait_s)

    @staticmethod
    def stopped(reason: str) -> ServerState:
        return ServerState("stopped", time.time(), reason=reason)

    def as_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "since": self.since,
            "tools": self.tools,
            "reason": self.reason,
            "attempts": self.attempts,
            "retry_at": self.retry_at,
        }


NOT_STARTED = ServerState()


def server_redactor(settings: McpServerSettings) -> Callable[[str], str]:
    """Blanks the server's secrets in a text: its env and headers values, a URL's password, and the
    values of the URL's query (an API key is often passed as ?key=...)."""
    secrets = list(secret_values(settings))
    if settings.url is not None:
        secrets += [v for _, v in parse_qsl(urlsplit(settings.url).query) if len(v) >= MIN_SECRET_LEN]
    return redacting(secrets)


def target(settings: McpServerSettings) -> str:
    """Where the server runs, to show: its command line, or its URL without credentials or query."""
    if settings.command is not None:
        shown = " ".join([settings.command, *settings.args])
        return server_redactor(settings)(shown)
    assert settings.url is not None
    parts = urlsplit(settings.url)
    host = parts.netloc.rpartition("@")[2]
    query = "?…" if parts.query else ""
    return urlunsplit((parts.scheme, host, parts.path, "", "")) + query
