"""The tool registry: core tools versus groups, the active set of a run and the group listing."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.app.registry import build_registry
from bridge.config import Settings
from bridge.errors import RegistryError
from bridge.tools.base import Tool, ToolContext, ToolGroup, ToolResult, params
from bridge.tools.builtin.core import core_tools
from bridge.tools.registry import LISTING_DESCRIPTION_MAX, ToolRegistry


async def _noop(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    return ToolResult.success("ok")


def tool(name: str, description: str = "") -> Tool:
    return Tool(name, description or f"Does {name}", params(), _noop)


def group(name: str, *tool_names: str, description: str = "") -> ToolGroup:
    return ToolGroup(name, description or f"The {name} tools", tuple(tool(n) for n in tool_names))


def names(tools: list[Tool]) -> list[str]:
    return [t.name for t in tools]


@pytest.fixture
def reg() -> ToolRegistry:
    registry = ToolRegistry()
    registry.add_core(tool("load_tool_group"), tool("get_current_time"))
    registry.add_group(group("google_gmail", "gmail_search", "gmail_read", "gmail_send"))
    registry.add_group(group("google_drive", "drive_list", "drive_upload"))
    registry.add_group(group("pdf", "pdf_info"))
    return registry


def test_core_and_group_tools_are_kept_apart(reg: ToolRegistry) -> None:
    assert names(reg.core_tools()) == ["load_tool_group", "get_current_time"]
    assert [g.name for g in reg.groups()] == ["google_gmail", "google_drive", "pdf"]
    assert reg.group_of("gmail_read") == "google_gmail"
    assert reg.group_of("get_current_time") is None
    assert reg.group_of("nothing") is None
    get_time, pdf_info, missing = reg.get("get_current_time"), reg.get("pdf_info"), reg.get("nothing")
    assert get_time is not None
    assert get_time.name == "get_current_time"
    assert pdf_info is not None
    assert pdf_info.name == "pdf_info"
    assert missing is None


def test_group_lookup_tolerates_case_and_spaces(reg: ToolRegistry) -> None:
    found = reg.group("  PDF ")
    assert found is not None
    assert found.name == "pdf"
    assert reg.group("nope") is None


def test_a_new_conversation_gets_only_core_tools(reg: ToolRegistry) -> None:
    assert names(reg.active_tools(())) == ["load_tool_group", "get_current_time"]


def test_one_loaded_group_adds_its_tools_after_the_core(reg: ToolRegistry) -> None:
    assert names(reg.active_tools({"google_gmail"})) == [
        "load_tool_group",
        "get_current_time",
        "gmail_search",
        "gmail_read",
        "gmail_send",
    ]


def test_two_loaded_groups_are_available_together(reg: ToolRegistry) -> None:
    """TEST-040-06."""
    active = names(reg.active_tools(["google_drive", "google_gmail"]))
    # Registry order, not load order, so the tool list (and the prompt cache) stays stable.
    assert active == [
        "load_tool_group",
        "get_current_time",
        "gmail_search",
        "gmail_read",
        "gmail_send",
        "drive_list",
        "drive_upload",
    ]
    assert "pdf_info" not in active


def test_each_tool_is_sent_once_however_often_its_group_is_named(reg: ToolRegistry) -> None:
    active = names(reg.active_tools(["pdf", "pdf", " PDF "]))
    assert active == ["load_tool_group", "get_current_time", "pdf_info"]


def test_unknown_group_names_in_loaded_are_ignored(reg: ToolRegistry) -> None:
    # A group restored from history that has since left the registry (removed manifest, disabled).
    assert names(reg.active_tools({"retired_group", "pdf"})) == [
        "load_tool_group",
        "get_current_time",
        "pdf_info",
    ]
    assert reg.known_groups({"retired_group", "PDF"}) == {"pdf"}


def test_duplicate_tool_name_across_groups_is_refused(reg: ToolRegistry) -> None:
    with pytest.raises(RegistryError, match="gmail_read") as info:
        reg.add_group(group("mail2", "mail2_list", "gmail_read"))
    assert "google_gmail" in str(info.value)
    # Nothing of the refused group was registered.
    assert reg.group("mail2") is None
    assert reg.group_of("mail2_list") is None


def test_duplicate_tool_name_within_one_group_is_refused() -> None:
    registry = ToolRegistry()
    with pytest.raises(RegistryError, match="twice"):
        registry.add_group(group("dupes", "same", "same"))
    assert registry.group("dupes") is None


def test_group_tool_named_like_a_core_tool_is_refused(reg: ToolRegistry) -> None:
    with pytest.raises(RegistryError, match=r"get_current_time.*core"):
        reg.add_group(group("clock", "get_current_time"))


def test_core_tool_named_like_a_group_tool_is_refused(reg: ToolRegistry) -> None:
    with pytest.raises(RegistryError, match="pdf_info"):
        reg.add_core(tool("pdf_info"))


def test_group_registered_twice_is_refused(reg: ToolRegistry) -> None:
    with pytest.raises(RegistryError, match="twice"):
        reg.add_group(group("pdf", "other_pdf_tool"))


def test_group_name_must_be_normalized(reg: ToolRegistry) -> None:
    with pytest.raises(RegistryError, match="lowercase"):
        reg.add_group(group("Mixed", "mixed_tool"))


# ------------------------------------------------------------------------------------------ listing


def test_group_listing_names_and_describes_every_group(reg: ToolRegistry) -> None:
    listing = reg.group_listing()
    lines = listing.splitlines()
    assert lines[0] == "## Available Tool Groups"
    assert "load_tool_group" in lines[1]
    assert lines[2:] == [
        "- google_gmail: The google_gmail tools",
        "- google_drive: The google_drive tools",
        "- pdf: The pdf tools",
    ]
    assert "(loaded)" not in listing


def test_group_listing_marks_loaded_groups(reg: ToolRegistry) -> None:
    listing = reg.group_listing({"pdf", "gone"})
    assert "- pdf (loaded): The pdf tools" in listing
    assert "- google_gmail: The google_gmail tools" in listing
    assert listing.count("(loaded)") == 1


def test_group_listing_truncates_a_very_long_description() -> None:
    registry = ToolRegistry()
    registry.add_group(group("big", "big_tool", description="word " * 500))
    [line] = [ln for ln in registry.group_listing().splitlines() if ln.startswith("- big")]
    description = line.removeprefix("- big: ")
    assert len(description) <= LISTING_DESCRIPTION_MAX
    assert description.endswith("…")
    assert description.startswith("word word")


def test_group_listing_collapses_whitespace_in_descriptions() -> None:
    registry = ToolRegistry()
    registry.add_group(group("pdf", "pdf_info", description="Extract text,\n\n   render pages"))
    assert "- pdf: Extract text, render pages" in registry.group_listing().splitlines()


def test_group_listing_omits_empty_groups(reg: ToolRegistry) -> None:
    reg.add_group(ToolGroup("empty", "Nothing here", ()))
    assert "empty" not in reg.group_listing()


def test_no_groups_means_no_listing() -> None:
    registry = ToolRegistry()
    registry.add_core(tool("load_tool_group"))
    assert registry.group_listing() == ""
    registry.add_group(ToolGroup("empty", "Nothing here", ()))
    assert registry.group_listing() == ""


# ------------------------------------------------------------------------------ token efficiency


def _many_groups() -> tuple[ToolGroup, ...]:
    config = group("config", *(f"config_tool_{i}" for i in range(17)))
    bulk = tuple(group(f"bulk_{g}", *(f"bulk_{g}_tool_{i}" for i in range(10))) for g in range(10))
    return (config, *bulk)


def test_with_100_plus_tools_a_new_conversation_sends_only_core_tools() -> None:
    """TEST-040-08."""
    registry = build_registry(Settings(), extra_groups=_many_groups())
    total = len(registry.core_tools()) + sum(len(g.tools) for g in registry.groups())
    assert total >= 100
    assert names(registry.active_tools(())) == [t.name for t in core_tools()]


def test_loading_a_17_tool_group_sends_core_plus_17() -> None:
    """TEST-040-09."""
    registry = build_registry(Settings(), extra_groups=_many_groups())
    core = [t.name for t in core_tools()]
    active = names(registry.active_tools({"config"}))
    assert len(active) == len(core) + 17
    assert active == core + [f"config_tool_{i}" for i in range(17)]
    assert len(set(active)) == len(active)
    schemas = [t.schema() for t in registry.active_tools({"config"})]
    assert all(s["type"] == "function" for s in schemas)
