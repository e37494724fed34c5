"""A real MCP server for tests, written with the SDK's server side: stdio, or streamable HTTP.

    python -m devkit.fakes.mcp_server [--http PORT] [--tools N [--bare]] [--log FILE]

Each start (stdio) or session (HTTP) appends a line `start <pid>` to --log, and each call a line
`call <tool>`, so tests can count processes and connections without asking the server.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ImageContent

# A 1x1 PNG: what an image tool hands back.
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
)


def _note(log: Path | None, line: str) -> None:
    if log is not None:
        with log.open("a", encoding="utf-8") as out:
            out.write(line + "\n")


def build(log: Path | None, extra_tools: int = 0, *, bare: bool = False) -> MCPServer:
    server = MCPServer("bridge-test")
    if bare:
        _add_numbered(server, extra_tools)
        return server

    def seen(tool: str) -> None:
        _note(log, f"call {tool}")

    @server.tool()
    def echo(text: str) -> str:
        """Echo the text back."""
        seen("echo")
        return f"echo: {text}"

    @server.tool()
    def add(a: int, b: int) -> dict[str, int]:
        """Add two integers."""
        seen("add")
        return {"sum": a + b}

    @server.tool()
    def picture() -> ImageContent:
        """A tiny picture."""
        seen("picture")
        return ImageContent(type="image", data=base64.b64encode(PIXEL).decode(), mime_type="image/png")

    @server.tool()
    async def slow(seconds: float) -> str:
        """Sleep, then answer."""
        seen("slow")
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    @server.tool()
    def crash() -> str:
        """End the server's process in the middle of the call."""
        seen("crash")
        sys.stdout.flush()
        os._exit(3)

    @server.tool()
    def fail(reason: str) -> str:
        """Fail with the reason."""
        seen("fail")
        raise ToolError(reason)

    @server.tool()
    def env(name: str) -> str:
        """The value of an environment variable of the server, or (unset)."""
        seen("env")
        return os.environ.get(name, "(unset)")

    @server.tool()
    def pid() -> int:
        """The server's process id."""
        seen("pid")
        return os.getpid()

    @server.tool()
    def write_file(path: str) -> str:
        """A name that collides with Bridge's own write_file."""
        seen("write_file")
        return f"mcp wrote {path}"

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Add a tool named `double`, and tell the client its tool list changed."""
        seen("grow")
        server.add_tool(_double, name="double", description="Double a number.")
        await ctx.session.send_tool_list_changed()
        return "grown"

    _add_numbered(server, extra_tools)
    return server


def _add_numbered(server: MCPServer, count: int) -> None:
    for index in range(count):
        server.add_tool(_numbered(index), name=f"tool_{index:02d}", description=_DESCRIPTIONS[index % 4])


def _double(n: int) -> int:
    return n * 2


_DESCRIPTIONS = [
    "Look up a record by its id and return its fields.",
    "Search the records for a phrase; returns ids and titles of the best matches.",
    "Create a record from the given fields and return its new id.",
    "Update one field of a record and return the record as it is now.",
]


def _numbered(index: int) -> Any:
    def tool(record_id: str, field: str = "", value: str = "", limit: int = 10) -> dict[str, Any]:
        return {"tool": index, "record_id": record_id, "field": field, "value": value, "limit": limit}

    return tool


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=0, help="serve streamable HTTP on this port")
    parser.add_argument("--tools", type=int, default=0, help="add this many numbered tools")
    parser.add_argument("--bare", action="store_true", help="only the numbered tools (for the bench)")
    parser.add_argument("--log", type=Path, default=None)
    args = parser.parse_args()
    log = args.log or (Path(os.environ["MCP_TEST_LOG"]) if os.environ.get("MCP_TEST_LOG") else None)
    _note(log, f"start {os.getpid()}")
    server = build(log, args.tools, bare=args.bare)
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
