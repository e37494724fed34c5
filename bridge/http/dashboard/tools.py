"""The dashboard's Tools page: each MCP server's state with its tools, every tool group with the token
cost of its schemas, what the config leaves out and why, and the skills.

GET /tools renders it, GET /api/tools is the same as JSON, and POST /api/tools/mcp/{name}/connect
starts a server now (past its wait after failed starts). Nothing here starts a server by looking: a
server's tools are shown as it last listed them, in this process or kept from an earlier one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from bridge.app.registry import left_out
from bridge.errors import ManifestError, ToolSourceError
from bridge.http.pages import DashboardPart
from bridge.mcp.group import McpToolSource
from bridge.mcp.state import target
from bridge.tools.base import Tool, ToolGroup, schemas_json
from bridge.tools.builtin.exec import exec_problem
from bridge.tools.manifest import manifest_files
from bridge.tools.tokens import CHARS_PER_TOKEN, token_counter

if TYPE_CHECKING:
    from bridge.app import Bridge

# The pill each server state wears (app.css colours ok, bad and pending).
PILLS = {"connected": "ok", "failing": "bad", "starting": "pending", "stopped": "", "not started": ""}


class ToolsPage(DashboardPart):
    """What the model may use and what it costs, and whether each MCP server is healthy."""

    def routes(self, app: web.Application) -> None:
        add = app.router
        add.add_get("/tools", self.page)
        add.add_get("/api/tools", self.api)
        add.add_post("/api/tools/mcp/{name}/connect", self.connect)

    async def page(self, request: web.Request) -> web.Response:
        view = await tools_view(self.bridge)
        # "~" before a figure that is estimated, not counted.
        approx = "" if view["tokens"]["counted"] else "~"
        return self.render("tools.html", "tools", pills=PILLS, approx=approx, **view)

    async def api(self, request: web.Request) -> web.Response:
        return web.json_response(await tools_view(self.bridge))

    async def connect(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        source = mcp_sources(self.bridge).get(name)
        if source is None:
            return _error(404, "not_found", f"no MCP server {name!r} is configured (or it is disabled)")
        try:
            tools = await source.connect()
        except ToolSourceError as exc:
            # The server's own failure, not the request's: told as the model is told, secrets redacted.
            return _error(502, "unavailable", str(exc))
        return web.json_response(
            {"ok": True, "said": f"MCP server '{name}' is connected: {len(tools)} tools offered."}
        )


def mcp_sources(bridge: Bridge) -> dict[str, McpToolSource]:
    """The configured, enabled MCP servers by name, in config order."""
    found: dict[str, McpToolSource] = {}
    for group in bridge.registry.groups():
        if isinstance(group.source, McpToolSource):
            found[group.name] = group.source
    return found


async def tools_view(bridge: Bridge) -> dict[str, Any]:
    """Everything the page shows, as JSON: the API's answer and the template's context."""
    settings, registry = bridge.settings, bridge.registry
    # The first call loads the tokenizer's tables (a few hundred ms): not on the event loop.
    count, approx = await asyncio.to_thread(token_counter)
    # Probes bwrap once (cached after): a thread too.
    problem = await asyncio.to_thread(exec_problem, settings)
    manifests = _manifest_names(settings.tools.manifests)

    def tools_json(tools: Iterable[Tool]) -> list[dict[str, Any]]:
        return [
            {"name": t.name, "description": t.description, "tokens": count(schemas_json([t]))} for t in tools
        ]

    core = registry.core_tools()
    groups: list[dict[str, Any]] = []
    servers: list[dict[str, Any]] = []
    for group in registry.groups():
        tools = registry.tools_of(group)
        entry: dict[str, Any] = {
            "name": group.name,
            "title": group.title,
            "description": group.description,
            "kind": _kind(group, manifests),
            "sent": "on demand",
            "tools": tools_json(tools),
            "tokens": count(schemas_json(tools)) if tools else 0,
            "problem": problem if group.name == "exec" else None,
        }
        if isinstance(group.source, McpToolSource):
            server = await _server(group.source, tools_json, count)
            servers.append(server)
            entry["tools_from"] = server["tools_from"]
            if server["tools_from"] == "kept":
                entry["tools"], entry["tokens"] = server["tools"], server["tokens"]
            if server["state"]["phase"] == "failing":
                entry["problem"] = server["state"]["reason"]
        groups.append(entry)
    return {
        "tokens": {
            "counted": not approx,
            "how": "o200k_base" if not approx else f"estimated at {CHARS_PER_TOKEN} characters a token",
        },
        "core": {"sent": "always", "tools": tools_json(core), "tokens": count(schemas_json(core))},
        # The "Available Tool Groups" section of every system prompt: what the groups cost unloaded.
        "listing_tokens": count(registry.group_listing()),
        "groups": groups,
        "mcp": servers,
        "left_out": [{"name": name, "why": why} for name, why in left_out(settings)],
        "skills": [
            {
                "name": skill.name,
                "description": skill.description,
                "folder": str(skill.folder),
                "files": len(skill.files) + skill.more_files,
            }
            for skill in settings.skills.catalog
        ],
        "now": time.time(),
    }


async def _server(
    source: McpToolSource,
    tools_json: Callable[[Iterable[Tool]], list[dict[str, Any]]],
    count: Callable[[str], int],
) -> dict[str, Any]:
    settings, state = source.settings, source.state
    tools = source.listed()
    tools_from: str | None = "server" if tools is not None else None
    if tools is None and (tools := await source.kept()) is not None:
        tools_from = "kept"
    shown = tools or ()
    return {
        "name": settings.name,
        "description": settings.description,
        "transport": settings.transport,
        "target": target(settings),
        "state": state.as_dict(),
        "retry_in_s": max(0.0, state.retry_at - time.time()) if state.retry_at is not None else None,
        # "server": as it listed them in this process; "kept": as an earlier process listed them
        # (bridge.mcp.cache); None: never listed yet.
        "tools_from": tools_from,
        "tools": tools_json(shown),
        "tokens": count(schemas_json(shown)) if shown else 0,
        "left_out": dict(source.left_out) if tools_from == "server" else {},
    }


def _kind(group: ToolGroup, manifests: set[str]) -> str:
    if isinstance(group.source, McpToolSource):
        return "MCP server"
    return "manifest" if group.name in manifests else "built-in"


def _manifest_names(paths: list[Path]) -> set[str]:
    # The registry was built from the same paths, so they exist; one removed since names nothing.
    with contextlib.suppress(ManifestError, OSError):
        return {path.stem.lower() for path in manifest_files(paths)}
    return set()


def _error(status: int, error: str, detail: str) -> web.Response:
    return web.json_response({"error": error, "detail": detail}, status=status)
