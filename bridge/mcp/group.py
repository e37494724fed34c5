"""An MCP server as a tool group: listed from config alone, its tools built from tools/list once loaded."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bridge.config.mcp import McpServerSettings
from bridge.errors import ManifestError, ToolSourceError
from bridge.mcp.state import NOT_STARTED, ServerState
from bridge.tools.arguments import check_parameters
from bridge.tools.base import Tool, ToolContext, ToolGroup, ToolHandler, ToolResult

if TYPE_CHECKING:
    import mcp.types as mt

    from bridge.mcp.connection import McpConnection

log = logging.getLogger(__name__)

# What OpenAI-compatible servers accept as a function name; MCP allows dots and more.
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_-]")
NAME_MAX = 64
# A server's own description can run to pages; the model needs what the tool does.
DESCRIPTION_MAX = 1_000
# Between a server's name and its tool's, where the tool's own name is taken.
PREFIX_SEPARATOR = "__"


def exposed_name(server: str, name: str, taken: Callable[[str], bool]) -> str:
    """The name the model calls a server's tool by: its own, made a valid function name, and
    prefixed with the server's name when that is taken (by a Bridge tool, or another server's)."""
    clean = _NOT_IN_NAME.sub("_", name)[:NAME_MAX] or "tool"
    if not taken(clean):
        return clean
    return f"{server}{PREFIX_SEPARATOR}{clean}"[:NAME_MAX]


def disabled_as(server: str, exposed: str, original: str, disabled: frozenset[str]) -> bool:
    """[tools] disabled names a server's tool by the name the model sees, or as server__tool."""
    return exposed in disabled or f"{server}{PREFIX_SEPARATOR}{original}" in disabled


class McpToolSource:
    """The tools of one [[mcp.servers]] entry, built from its connection's cached tools/list."""

    def __init__(
        self,
        settings: McpServerSettings,
        idle_close_s: float,
        disabled: frozenset[str],
        taken: Callable[[str, str], bool],
        cache: Path | None = None,
    ) -> None:
        self.settings = settings
        self._idle_close_s = idle_close_s
        self._cache = cache
        self._connection: McpConnection | None = None
        self._disabled = disabled
        self._taken = taken
        self._built_from: list[mt.Tool] | None = None
        self._tools: tuple[Tool, ...] = ()
        # The tools the server offers that were left out, and why (for `bridge mcp list`).
        self.left_out: dict[str, str] = {}

    @property
    def connection(self) -> McpConnection:
        if self._connection is None:
            # The SDK (half a second to import, and starlette with it) only where a server is used.
            from bridge.mcp.connection import McpConnection

            self._connection = McpConnection(self.settings, self._idle_close_s, self._cache)
        return self._connection

    @property
    def state(self) -> ServerState:
        """What the server is doing (bridge.mcp.state); `not started` before anything used it."""
        return self._connection.state if self._connection is not None else NOT_STARTED

    def listed(self) -> tuple[Tool, ...] | None:
        remote = self._connection.tools if self._connection is not None else None
        if remote is None:
            return None
        if remote is not self._built_from:
            # A new listing (first, or after notifications/tools/list_changed): built once per listing.
            self._tools, self.left_out = self._build(remote)
            self._built_from = remote
        return self._tools

    async def kept(self) -> tuple[Tool, ...] | None:
        """The tools as an earlier process listed them (bridge.mcp.cache), to show without starting
        the server; unlike restore(), the group does not offer them to the model. None if none kept."""
        if self._cache is None:
            return None
        from bridge.mcp import cache

        remote = await asyncio.to_thread(cache.read, self._cache, self.settings)
        return self._build(remote)[0] if remote is not None else None

    async def connect(self) -> tuple[Tool, ...]:
        """Start the server now, whatever its wait after failures (the dashboard's Connect now), and
        list its tools again; ToolSourceError if it cannot be started."""
        await self.connection.connect()
        return self.listed() or ()

    async def load(self) -> tuple[Tool, ...]:
        await self.connection.list_tools()
        return self.listed() or ()

    async def restore(self) -> tuple[Tool, ...]:
        # After a restart: the listing an earlier process kept; the server starts at the first call.
        if await self.connection.restore():
            return self.listed() or ()
        return await self.load()

    def names(self) -> frozenset[str]:
        return frozenset(t.name for t in self._tools)

    async def aclose(self) -> None:
        if self._connection is not None:
            await self._connection.aclose()

    def _build(self, remote: list[mt.Tool]) -> tuple[tuple[Tool, ...], dict[str, str]]:
        """The tools offered from a listing, and those left out with why."""
        server = self.settings.name
        allowed = set(self.settings.tools)
        tools: list[Tool] = []
        used: set[str] = set()
        left_out: dict[str, str] = {}
        for spec in remote:
            if allowed and spec.name not in allowed:
                left_out[spec.name] = "not in the server's `tools` list"
                continue
            name = exposed_name(server, spec.name, lambda n: n in used or self._taken(n, server))
            if name in used:
                left_out[spec.name] = f"its name {name!r} is taken twice"
                continue
            if disabled_as(server, name, spec.name, self._disabled):
                left_out[spec.name] = "named in [tools] disabled"
                continue
            parameters = _parameters(spec)
            try:
                check_parameters(parameters)
            except ManifestError as exc:
                log.warning("MCP server %s: tool %s left out: bad input schema: %s", server, spec.name, exc)
                left_out[spec.name] = f"its input schema is not valid: {exc}"
                continue
            used.add(name)
            tools.append(
                Tool(
                    name=name,
                    description=_description(spec),
                    parameters=parameters,
                    run=self._handler(spec.name),
                    timeout_s=self.settings.timeout_s,
                    origin=f"MCP server '{server}'",
                )
            )
        return tuple(tools), left_out

    def _handler(self, original: str) -> ToolHandler:
        from bridge.mcp.results import tool_result

        async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
            try:
                result = await self.connection.call(original, args)
            except ToolSourceError as exc:
                return ToolResult.error("unavailable", str(exc))
            return tool_result(self.settings.name, result)

        return run


def mcp_group(
    settings: McpServerSettings,
    idle_close_s: float,
    disabled: frozenset[str],
    taken: Callable[[str, str], bool],
    cache_dir: Path | None = None,
) -> ToolGroup:
    """The group of one server, listed from config alone: nothing is started until it is loaded."""
    cache = cache_dir / f"{settings.name}.json" if cache_dir is not None else None
    source = McpToolSource(settings, idle_close_s, disabled, taken, cache)
    return ToolGroup(settings.name, settings.description, (), source=source)


def _parameters(spec: mt.Tool) -> dict[str, Any]:
    schema = _untitled(dict(spec.input_schema or {}))
    # Function calling wants an object schema even for a tool without arguments.
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema


# Where a JSON schema holds further schemas: by name, or as a list.
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")


def _untitled(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema without `title` annotations: the SDKs generate one per level ("echoArguments",
    "Text"), which the model pays for on every request and learns nothing from."""
    out = {k: v for k, v in schema.items() if not (k == "title" and isinstance(v, str))}
    for key in _SUBSCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {n: _untitled(s) if isinstance(s, dict) else s for n, s in out[key].items()}
    for key in _SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [_untitled(s) if isinstance(s, dict) else s for s in out[key]]
    for key in ("items", "additionalProperties", "not"):
        if isinstance(out.get(key), dict):
            out[key] = _untitled(out[key])
    return out


def _description(spec: mt.Tool) -> str:
    text = " ".join((spec.description or spec.title or spec.name).split())
    return text if len(text) <= DESCRIPTION_MAX else text[: DESCRIPTION_MAX - 1] + "…"
