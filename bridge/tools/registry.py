"""The tool registry: core tools, groups, the active set of a run and the group listing."""

from __future__ import annotations

from collections.abc import Iterable

from bridge.errors import RegistryError
from bridge.tools.base import Tool, ToolGroup

LISTING_DESCRIPTION_MAX = 200


def normalize_group_name(name: str) -> str:
    return name.strip().lower()


class ToolRegistry:
    """Knows every tool; decides which schemas a run sends (core + loaded groups)."""

    def __init__(self) -> None:
        self._core: dict[str, Tool] = {}
        self._groups: dict[str, ToolGroup] = {}
        self._group_of: dict[str, str] = {}

    def add_core(self, *tools: Tool) -> None:
        for tool in tools:
            self._claim(tool.name, "core")
            self._core[tool.name] = tool

    def add_group(self, group: ToolGroup) -> None:
        name = normalize_group_name(group.name)
        if name != group.name:
            raise RegistryError(f"group name {group.name!r} must be lowercase without surrounding spaces")
        if name in self._groups:
            raise RegistryError(f"tool group {name!r} is registered twice")
        seen: set[str] = set()
        for tool in group.tools:
            self._claim(tool.name, f"group {name!r}")
            if tool.name in seen:
                raise RegistryError(f"tool {tool.name!r} appears twice in group {name!r}")
            seen.add(tool.name)
        self._groups[name] = group
        for tool in group.tools:
            self._group_of[tool.name] = name

    def _claim(self, tool_name: str, owner: str) -> None:
        if tool_name in self._core or tool_name in self._group_of:
            holder = "core" if tool_name in self._core else f"group {self._group_of[tool_name]!r}"
            raise RegistryError(f"tool {tool_name!r} of {owner} is already registered by {holder}")

    # ------------------------------------------------------------------ lookups

    def core_tools(self) -> list[Tool]:
        return list(self._core.values())

    def groups(self) -> list[ToolGroup]:
        return list(self._groups.values())

    def group(self, name: str) -> ToolGroup | None:
        return self._groups.get(normalize_group_name(name))

    def knows(self, name: str) -> bool:
        """A tool of this name exists, loaded or not: a written call of it is a call."""
        return self.get(name) is not None

    def is_group(self, name: str) -> bool:
        """A group of this name exists. Small models call a group like a tool; the runner's answer to
        that call says how to load it, where plain text would reach the user as a code block."""
        return self.group(name) is not None

    def group_of(self, tool_name: str) -> str | None:
        return self._group_of.get(tool_name)

    def get(self, tool_name: str) -> Tool | None:
        if tool_name in self._core:
            return self._core[tool_name]
        group = self._group_of.get(tool_name)
        if group is None:
            return None
        return next(t for t in self._groups[group].tools if t.name == tool_name)

    def known_groups(self, names: Iterable[str]) -> set[str]:
        """The names that are registered groups; groups that left the registry are dropped."""
        return {normalize_group_name(n) for n in names if normalize_group_name(n) in self._groups}

    def active_tools(self, loaded: Iterable[str]) -> list[Tool]:
        """Core tools, then the tools of each loaded group in registry order, each once."""
        wanted = self.known_groups(loaded)
        tools = list(self._core.values())
        for name, group in self._groups.items():
            if name in wanted:
                tools.extend(group.tools)
        return tools

    def group_listing(self, loaded: Iterable[str] = ()) -> str:
        """The "Available Tool Groups" section of the system prompt."""
        listed = [g for g in self._groups.values() if g.tools]
        if not listed:
            return ""
        loaded_set = self.known_groups(loaded)
        lines = [
            "## Available Tool Groups",
            "Use `load_tool_group` to load tools from a group before using them. A loaded group stays "
            "loaded for the rest of this conversation: call its tools directly, without loading it again.",
        ]
        for group in listed:
            description = " ".join(group.description.split())
            if len(description) > LISTING_DESCRIPTION_MAX:
                description = description[: LISTING_DESCRIPTION_MAX - 1].rstrip() + "…"
            mark = " (loaded)" if group.name in loaded_set else ""
            lines.append(f"- {group.name}{mark}: {description}")
        return "\n".join(lines)
