"""The tool registry: core tools, groups, the active set of a run and the group listing."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Collection, Iterable

from bridge.errors import RegistryError, ToolSourceError
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
        # Groups that exist but are left out of this view (see only()).
        self._withheld: frozenset[str] = frozenset()

    def only(self, groups: Collection[str] | None) -> ToolRegistry:
        """The registry as a run whose agent may use only these groups sees it ([agents.NAME]
        tool_groups): the other groups are not listed, not loadable, not restored from history and
        their tools are unknown, whatever asks (the prompt, load_tool_group, the active set, a call).
        Core tools stay. None: every group (this registry itself). A view shares the tools and groups
        with this registry; groups are added to the registry, never to a view."""
        if groups is None:
            return self
        allowed = {normalize_group_name(name) for name in groups}
        view = ToolRegistry()
        view._core = self._core
        view._groups = {name: group for name, group in self._groups.items() if name in allowed}
        view._group_of = {tool: name for tool, name in self._group_of.items() if name in allowed}
        view._withheld = frozenset(self._groups) - allowed
        return view

    def withheld(self, name: str) -> bool:
        """A registered group this view leaves out (see only()): load_tool_group says it is not
        available here, rather than that it does not exist."""
        return normalize_group_name(name) in self._withheld

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
        if group.source is not None:
            # Its tools are known only once listed; their names then give way to these (taken()).
            self._groups[name] = group
            return
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
        found = self._group_of.get(tool_name)
        if found is None:
            found = next((g.name for g, t in self._listed() if t.name == tool_name), None)
        return found

    def get(self, tool_name: str) -> Tool | None:
        if tool_name in self._core:
            return self._core[tool_name]
        group = self._group_of.get(tool_name)
        if group is None:
            return next((t for _, t in self._listed() if t.name == tool_name), None)
        return next(t for t in self._groups[group].tools if t.name == tool_name)

    def tools_of(self, group: ToolGroup) -> tuple[Tool, ...]:
        """A group's tools: its own, or those its source listed so far (none before it was loaded)."""
        if group.source is None:
            return group.tools
        return group.source.listed() or ()

    def _listed(self) -> Iterable[tuple[ToolGroup, Tool]]:
        for group in self._groups.values():
            if group.source is not None:
                for tool in group.source.listed() or ():
                    yield group, tool

    def taken(self, tool_name: str, by: str) -> bool:
        """Whether a tool that source group `by` lists may not go by this name: a core tool, a tool
        of a built-in or manifest group, a group's name, or a tool another source already listed."""
        if tool_name in self._core or tool_name in self._group_of or tool_name in self._groups:
            return True
        return any(
            tool_name in g.source.names()
            for g in self._groups.values()
            if g.source is not None and g.name != by
        )

    def known_groups(self, names: Iterable[str]) -> set[str]:
        """The names that are registered groups; groups that left the registry are dropped."""
        return {normalize_group_name(n) for n in names if normalize_group_name(n) in self._groups}

    def active_tools(self, loaded: Iterable[str]) -> list[Tool]:
        """Core tools, then the tools of each loaded group in registry order, each once."""
        wanted = self.known_groups(loaded)
        tools = list(self._core.values())
        names = set(self._core)
        for name, group in self._groups.items():
            if name in wanted:
                # A name twice would make the request invalid; taken() keeps this from happening.
                tools.extend(t for t in self.tools_of(group) if t.name not in names)
                names.update(t.name for t in self.tools_of(group))
        return tools

    async def load(self, group: ToolGroup) -> tuple[Tool, ...]:
        """The group's tools for load_tool_group: a source is listed (connected) if need be."""
        if group.source is None:
            return group.tools
        return await group.source.load()

    async def prepare(self, loaded: Iterable[str]) -> None:
        """Restore the sources of loaded groups not listed yet in this process (restored from history
        after a restart), so the run can offer their tools: from the listing an earlier process kept,
        else by listing them now. One that fails is left out of this run's tools; its calls say why,
        and a later run tries again."""
        waiting = [
            g.source
            for name in self.known_groups(loaded)
            if (g := self._groups[name]).source is not None and g.source.listed() is None
        ]
        if waiting:
            await asyncio.gather(*(_quietly(source.restore()) for source in waiting))

    async def aclose(self) -> None:
        """Close every source (an MCP server's connection, its process ended) and whatever a group
        holds open (a browser)."""
        await asyncio.gather(
            *(g.source.aclose() for g in self._groups.values() if g.source is not None),
            *(g.closer() for g in self._groups.values() if g.closer is not None),
            return_exceptions=True,
        )

    def group_listing(self, loaded: Iterable[str] = ()) -> str:
        """The "Available Tool Groups" section of the system prompt."""
        listed = [g for g in self._groups.values() if g.tools or g.source is not None]
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


async def _quietly(listing: Awaitable[object]) -> None:
    # The connection logged why; the run goes on without the group's tools.
    with contextlib.suppress(ToolSourceError):
        await listing
