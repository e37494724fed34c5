"""Builds the registry from settings: core tools, built-in groups, manifest groups, minus disabled."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from bridge.config import Settings
from bridge.errors import ConfigError, ManifestError, RegistryError
from bridge.mcp.group import PREFIX_SEPARATOR, mcp_group
from bridge.tools.base import ToolGroup
from bridge.tools.builtin.browser import browser_group
from bridge.tools.builtin.core import LOAD_TOOL_GROUP, core_tools
from bridge.tools.builtin.exec import exec_group
from bridge.tools.builtin.files import files_group
from bridge.tools.builtin.sessions import sessions_group
from bridge.tools.builtin.skills import LOAD_SKILL, load_skill
from bridge.tools.builtin.tasks import tasks_group
from bridge.tools.builtin.web import web_group
from bridge.tools.manifest import load_manifest, manifest_files
from bridge.tools.registry import ToolRegistry


def mcp_cache_dir(settings: Settings) -> Path:
    """Where MCP servers' tool listings are kept between processes: beside the SQLite file."""
    return Path(settings.storage.path).parent / "mcp-tools"


def left_out(settings: Settings) -> list[tuple[str, str]]:
    """The groups and tools this config leaves out, each with why (the dashboard's Tools page): those
    that reach outside until configured, as build_registry decides below, and those named off."""
    tools = settings.tools
    off: list[tuple[str, str]] = []
    if not tools.web_search.enabled:
        off.append(("web_search", "the web group offers it once [tools.web_search] provider is set"))
    if not tools.exec.enabled:
        off.append(("exec", "off until [tools.exec] enabled = true (commands run in a bubblewrap sandbox)"))
    if not tools.browser.enabled:
        off.append(("browser", "off until [tools.browser] enabled = true (Playwright driving Chromium)"))
    if not settings.skills.catalog:
        off.append((LOAD_SKILL, "offered once [skills] paths holds a skill"))
    off += [(name, "named in [tools] disabled") for name in tools.disabled]
    off += [(s.name, "MCP server with disabled = true") for s in settings.mcp.servers if s.disabled]
    return off


def build_registry(settings: Settings, extra_groups: tuple[ToolGroup, ...] = ()) -> ToolRegistry:
    """The registry a Bridge instance runs with; a bad manifest or name raises ConfigError."""
    disabled = set(settings.tools.disabled)
    if LOAD_TOOL_GROUP in disabled:
        raise ConfigError(f"tools.disabled: {LOAD_TOOL_GROUP} cannot be disabled; groups need it")
    try:
        groups = [sessions_group(), files_group(), web_group(settings.tools), tasks_group()]
        # The tools that reach outside are registered only once configured: off, the model never
        # hears of them, and `tools.disabled` may not name them.
        if settings.tools.exec.enabled:
            groups.append(exec_group(settings.tools.exec))
        if settings.tools.browser.enabled:
            groups.append(browser_group(settings))
        groups += extra_groups
        groups += [load_manifest(path) for path in manifest_files(settings.tools.manifests)]
    except ManifestError as exc:
        raise ConfigError(f"tools.manifests: {exc}") from None
    known = (
        {t.name for t in core_tools()} | {g.name for g in groups} | {t.name for g in groups for t in g.tools}
    ) | {LOAD_SKILL}
    servers = [s for s in settings.mcp.servers if not s.disabled]
    server_names = {s.name for s in servers}
    known |= server_names

    def mcp_tool(name: str) -> bool:
        # An MCP server's tools are known only once it is connected, which a config check must not
        # do: `server__tool` passes for a configured server, a bare name wherever a server could hold it.
        if PREFIX_SEPARATOR in name:
            return name.split(PREFIX_SEPARATOR, 1)[0] in server_names
        return bool(servers)

    unknown = sorted(name for name in disabled - known if not mcp_tool(name))
    if unknown:
        raise ConfigError(f"tools.disabled: unknown tool or group name(s): {', '.join(unknown)}")

    registry = ToolRegistry()
    try:
        registry.add_core(*(t for t in core_tools() if t.name not in disabled))
        # Sent on every turn, but only where there are skills to load: otherwise it costs tokens for nothing.
        if settings.skills.catalog and LOAD_SKILL not in disabled:
            registry.add_core(load_skill)
        for group in groups:
            if group.name in disabled:
                continue
            # A group with disabled tools stays listed with the rest; emptied, it answers empty_group.
            registry.add_group(replace(group, tools=tuple(t for t in group.tools if t.name not in disabled)))
    except RegistryError as exc:
        raise ConfigError(f"tools: {exc}") from None
    for server in servers:
        if server.name in disabled:
            continue
        if registry.group(server.name) is not None:
            raise ConfigError(
                f"mcp.servers: {server.name!r} is already the name of a tool group; name the server otherwise"
            )
        group = mcp_group(
            server, settings.mcp.idle_close_s, frozenset(disabled), registry.taken, mcp_cache_dir(settings)
        )
        registry.add_group(group)
    return registry
