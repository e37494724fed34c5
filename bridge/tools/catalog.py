"""Builds the registry from settings: core tools, built-in groups, manifest groups, minus disabled."""

from __future__ import annotations

from dataclasses import replace

from bridge.config import Settings
from bridge.errors import ConfigError, ManifestError, RegistryError
from bridge.tools.base import ToolGroup
from bridge.tools.builtin.core import LOAD_TOOL_GROUP, core_tools
from bridge.tools.builtin.files import files_group
from bridge.tools.builtin.sessions import sessions_group
from bridge.tools.builtin.tasks import tasks_group
from bridge.tools.builtin.web import web_group
from bridge.tools.manifest import load_manifest, manifest_files
from bridge.tools.registry import ToolRegistry


def build_registry(settings: Settings, extra_groups: tuple[ToolGroup, ...] = ()) -> ToolRegistry:
    """The registry a Bridge instance runs with; a bad manifest or name raises ConfigError."""
    disabled = set(settings.tools.disabled)
    if LOAD_TOOL_GROUP in disabled:
        raise ConfigError(f"tools.disabled: {LOAD_TOOL_GROUP} cannot be disabled; groups need it")
    try:
        groups = [sessions_group(), files_group(), web_group(), tasks_group(), *extra_groups]
        groups += [load_manifest(path) for path in manifest_files(settings.tools.manifests)]
    except ManifestError as exc:
        raise ConfigError(f"tools.manifests: {exc}") from None
    known = (
        {t.name for t in core_tools()} | {g.name for g in groups} | {t.name for g in groups for t in g.tools}
    )
    unknown = sorted(disabled - known)
    if unknown:
        raise ConfigError(f"tools.disabled: unknown tool or group name(s): {', '.join(unknown)}")

    registry = ToolRegistry()
    try:
        registry.add_core(*(t for t in core_tools() if t.name not in disabled))
        for group in groups:
            if group.name in disabled:
                continue
            # A group with disabled tools stays listed with the rest; emptied, it answers empty_group.
            registry.add_group(replace(group, tools=tuple(t for t in group.tools if t.name not in disabled)))
    except RegistryError as exc:
        raise ConfigError(f"tools: {exc}") from None
    return registry
