"""Real MCP servers for tests (devkit/fakes/mcp_server.py over stdio and streamable HTTP), and what
the tests read from them: how many processes started, which are still alive."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from bridge.app.registry import build_registry
from bridge.config import Settings
from bridge.sessions.authority import Authorities, Authority
from bridge.tools.base import ToolContext
from bridge.tools.registry import ToolRegistry
from tests.pg import free_port
from tests.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def stdio_server(log: Path, name: str = "fake", **extra: Any) -> dict[str, Any]:
    """An [[mcp.servers]] entry that runs the test server over stdio, logging to `log`."""
    entry: dict[str, Any] = {
        "name": name,
        "description": "A test server: echo, add, picture, slow, crash and more.",
        "command": sys.executable,
        "args": ["-m", "devkit.fakes.mcp_server"],
        "cwd": str(ROOT),
        "env": {"MCP_TEST_LOG": str(log)},
    }
    entry.update(extra)
    return entry


def starts(log: Path) -> list[int]:
    """The pids of the test server's processes started so far (one line each in its log)."""
    if not log.exists():
        return []
    return [int(line.split()[1]) for line in log.read_text().splitlines() if line.startswith("start ")]


def calls(log: Path) -> list[str]:
    if not log.exists():
        return []
    return [line.split()[1] for line in log.read_text().splitlines() if line.startswith("call ")]


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie, exited but not yet reaped, counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


@pytest.fixture
def mcp_log(tmp_path: Path) -> Path:
    return tmp_path / "mcp.log"


def mcp_settings(tmp_path: Path, *servers: dict[str, Any], **sections: Any) -> Settings:
    data: dict[str, Any] = {
        "storage": {"path": str(tmp_path / "bridge.db")},
        "tools": {"workspace": str(tmp_path / "workspace")},
        "mcp": {"servers": list(servers)},
    }
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    return Settings(**data)


@dataclass
class McpBench:
    """A registry with MCP servers configured, and one run's context to call its tools in (a group
    loaded by one call stays loaded for the next, as in a run)."""

    settings: Settings
    registry: ToolRegistry
    context: ToolContext = field(init=False)

    def __post_init__(self) -> None:
        self.context = ToolContext(
            settings=self.settings,
            store=None,  # type: ignore[arg-type]
            registry=self.registry,
            session=None,  # type: ignore[arg-type]
            run_id="r",
            authority=Authority("owner", "main"),
            authorities=Authorities(()),
        )


@contextlib.asynccontextmanager
async def mcp_registry(tmp_path: Path, *servers: dict[str, Any], **sections: Any) -> AsyncIterator[McpBench]:
    """A registry built as Bridge builds it; every server it opened is closed at the end."""
    settings = mcp_settings(tmp_path, *servers, **sections)
    registry = build_registry(settings)
    try:
        yield McpBench(settings, registry)
    finally:
        await registry.aclose()


@dataclass
class HttpServer:
    url: str
    port: int
    log: Path
    process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "devkit.fakes.mcp_server",
            "--http",
            str(self.port),
            "--log",
            str(self.log),
            cwd=ROOT,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            env={**os.environ, "NO_PROXY": "127.0.0.1,localhost"},
        )
        await eventually(self._listening, "the MCP HTTP server to listen")

    def _listening(self) -> bool:
        with contextlib.closing(socket.socket()) as sock:
            return sock.connect_ex(("127.0.0.1", self.port)) == 0

    async def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
            await self.process.wait()


@pytest.fixture
async def http_server(tmp_path: Path) -> AsyncIterator[HttpServer]:
    """The test server over streamable HTTP on a free loopback port."""
    port = free_port()
    server = HttpServer(f"http://127.0.0.1:{port}/mcp", port, tmp_path / "mcp-http.log")
    await server.start()
    try:
        yield server
    finally:
        await server.kill()


def http_entry(server: HttpServer, name: str = "remote", **extra: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": name,
        "description": "A test server over HTTP.",
        "url": server.url,
    }
    entry.update(extra)
    return entry
