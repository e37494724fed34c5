"""load_tool_group: the meta-tool that makes a group's tools callable for the rest of the run."""

from __future__ import annotations

from typing import Any, cast

import pytest

from bridge.app.registry import build_registry
from bridge.config import Settings
from bridge.sessions.authority import Authorities, Authority
from bridge.tools.base import ToolContext, ToolResult
from bridge.tools.builtin.core import load_tool_group
from bridge.tools.registry import ToolRegistry


def registry_of(ctx: ToolContext) -> ToolRegistry:
    """The whole registry the context was made with (a tool sees only its lookups)."""
    return cast(ToolRegistry, ctx.registry)


def make_context(registry: ToolRegistry) -> ToolContext:
    return ToolContext(
        settings=Settings(),
        store=None,  # type: ignore[arg-type]  # load_tool_group only reads the registry
        registry=registry,
        session=None,  # type: ignore[arg-type]
        run_id="r",
        authority=Authority("owner", "main"),
        authorities=Authorities(()),
    )


@pytest.fixture
def ctx(registry: ToolRegistry) -> ToolContext:
    return make_context(registry)


async def call(ctx: ToolContext, **args: Any) -> ToolResult:
    return await load_tool_group(args, ctx)


async def test_success_lists_every_tool_with_its_description_and_loads_the_group(ctx: ToolContext) -> None:
    """TEST-040-03."""
    result = await call(ctx, group_name="files")
    assert result.ok
    assert result.status == "success"
    group = ctx.registry.group("files")
    assert group is not None
    assert f"Loaded {len(group.tools)} tools from group 'files'" in result.content
    for tool in group.tools:
        assert f"- {tool.name}: {tool.description.strip().splitlines()[0]}" in result.content
    assert ctx.loaded_groups == {"files"}
    assert {t.name for t in group.tools} <= {t.name for t in registry_of(ctx).active_tools(ctx.loaded_groups)}


async def test_unknown_group_lists_all_available_groups(ctx: ToolContext) -> None:
    """TEST-040-04."""
    result = await call(ctx, group_name="nonexistent")
    assert not result.ok
    assert result.code == "not_found"
    assert "'nonexistent'" in result.content
    for group in ctx.registry.groups():
        assert group.name in result.content
    assert "Available groups: sessions, files, web, scheduled_tasks" in result.content
    assert ctx.loaded_groups == set()


@pytest.mark.parametrize(
    "args",
    [
        {},
        {"group_name": ""},
        {"group_name": "   "},
        {"group_name": 7},
        {"group_name": None},
        {"group_name": ["web"]},
    ],
)
async def test_absent_empty_or_non_string_group_name_is_invalid_arguments(
    ctx: ToolContext, args: dict[str, Any]
) -> None:
    result = await load_tool_group(args, ctx)
    assert not result.ok
    assert result.code == "invalid_arguments"
    assert "'group_name'" in result.content
    assert ctx.loaded_groups == set()


async def test_group_with_no_tools_left_is_an_empty_group_error() -> None:
    registry = build_registry(
        Settings(tools={"disabled": ["read_file", "write_file", "list_files", "send_file"]})
    )
    ctx = make_context(registry)
    result = await call(ctx, group_name="files")
    assert not result.ok
    assert result.code == "empty_group"
    assert "'files'" in result.content
    assert ctx.loaded_groups == set()


async def test_second_load_is_success_and_idempotent(ctx: ToolContext) -> None:
    """TEST-040-07."""
    first = await call(ctx, group_name="web")
    active_once = [t.name for t in registry_of(ctx).active_tools(ctx.loaded_groups)]
    second = await call(ctx, group_name="web")
    assert first.ok
    assert second.ok
    assert "already loaded" in second.content
    assert "webfetch" in second.content
    assert ctx.loaded_groups == {"web"}
    assert [t.name for t in registry_of(ctx).active_tools(ctx.loaded_groups)] == active_once


async def test_restored_group_is_reported_as_already_loaded(registry: ToolRegistry) -> None:
    ctx = make_context(registry)
    ctx.loaded_groups = {"sessions"}
    result = await call(ctx, group_name="sessions")
    assert result.ok
    assert "already loaded" in result.content
    assert ctx.loaded_groups == {"sessions"}


async def test_loading_two_groups_keeps_both(ctx: ToolContext) -> None:
    assert (await call(ctx, group_name="web")).ok
    assert (await call(ctx, group_name="files")).ok
    assert ctx.loaded_groups == {"web", "files"}


@pytest.mark.parametrize("spelling", ["  web  ", "WEB", " Web\n"])
async def test_group_name_tolerates_surrounding_spaces_and_case(ctx: ToolContext, spelling: str) -> None:
    result = await call(ctx, group_name=spelling)
    assert result.ok
    assert "group 'web'" in result.content
    assert ctx.loaded_groups == {"web"}
