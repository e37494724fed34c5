"""Core tools, sent on every turn: load_tool_group, get_current_time, search_history, save_memory."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from bridge.tools.base import Tool, ToolContext, ToolResult, clamp_int, params

LOAD_TOOL_GROUP = "load_tool_group"
MEMORY_MAX_CHARS = 2_000
SEARCH_SNIPPET_CHARS = 300


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


async def load_tool_group(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    name = args.get("group_name")
    if not isinstance(name, str) or not name.strip():
        return ToolResult.error("missing_parameter", "Required parameter 'group_name' is missing.")
    group = ctx.registry.group(name)
    if group is None:
        available = ", ".join(g.name for g in ctx.registry.groups()) or "(none)"
        return ToolResult.error(
            "not_found", f"Tool group '{name.strip()}' not found. Available groups: {available}"
        )
    if not group.tools:
        return ToolResult.error("empty_group", f"Tool group '{group.name}' has no available tools.")
    already = group.name in ctx.loaded_groups
    # The run's active set reads this set, so the tools are usable in the very next model call.
    ctx.loaded_groups.add(group.name)
    count = len(group.tools)
    head = (
        f"Tool group '{group.name}' is already loaded; its {count} tools are available:"
        if already
        else f"Loaded {count} tools from group '{group.name}':"
    )
    lines = [f"- {t.name}: {_first_line(t.description)}" for t in group.tools]
    tail = "Call these tools directly; they stay loaded for the rest of this conversation."
    return ToolResult.success("\n".join([head, *lines, tail]))


async def get_current_time(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    zone_name = args.get("timezone") or ctx.settings.agent.timezone
    try:
        zone = ZoneInfo(str(zone_name))
    # A folder of the zone database such as 'Europe' raises IsADirectoryError, an OSError.
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return ToolResult.error(
            "invalid_timezone", f"'{zone_name}' is not an IANA time zone such as 'Europe/Berlin' or 'UTC'."
        )
    now = datetime.now(UTC).astimezone(zone)
    return ToolResult.success(
        {"iso": now.isoformat(timespec="seconds"), "timezone": str(zone), "weekday": now.strftime("%A")}
    )


async def search_history(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    query = args.get("query")
    if not isinstance(query, str) or not query.strip():
        return ToolResult.error("missing_parameter", "Required parameter 'query' is missing.")
    limit = clamp_int(args.get("limit"), default=10, high=50)
    rows = await ctx.store.search_messages(ctx.session.id, query.strip(), limit)
    matches = [
        {
            "id": row.id,
            "role": row.role,
            "at": datetime.fromtimestamp(row.created_at, UTC).isoformat(timespec="seconds"),
            "text": row.content[:SEARCH_SNIPPET_CHARS],
        }
        for row in rows
    ]
    return ToolResult.success({"query": query.strip(), "matches": matches})


async def save_memory(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    content = args.get("content")
    if not isinstance(content, str) or not content.strip():
        return ToolResult.error("missing_parameter", "Required parameter 'content' is missing.")
    if len(content) > MEMORY_MAX_CHARS:
        return ToolResult.error(
            "too_long", f"A memory holds at most {MEMORY_MAX_CHARS} characters; save a shorter summary."
        )
    # Memories belong to the conversation place (the key), so they outlive /clear but never leak
    # into another user's chat.
    await ctx.store.add_memory(ctx.session.key, content.strip())
    return ToolResult.success("Saved. It will be in your memory in later turns of this chat.")


def core_tools() -> list[Tool]:
    return [
        Tool(
            LOAD_TOOL_GROUP,
            "Load a tool group listed under 'Available Tool Groups' so its tools become callable. "
            "Returns the group's tools with their descriptions.",
            params(
                {"group_name": {"type": "string", "description": "Name of the group to load"}}, ["group_name"]
            ),
            load_tool_group,
        ),
        Tool(
            "get_current_time",
            "Get the current date and time.",
            params({"timezone": {"type": "string", "description": "IANA time zone, e.g. 'Europe/Berlin'"}}),
            get_current_time,
        ),
        Tool(
            "search_history",
            "Search the messages of this conversation for a word or phrase.",
            params(
                {
                    "query": {"type": "string", "description": "Text to look for"},
                    "limit": {"type": "integer", "description": "Maximum matches (default 10, max 50)"},
                },
                ["query"],
            ),
            search_history,
        ),
        Tool(
            "save_memory",
            "Remember a fact for later conversations in this chat (it survives /clear).",
            params({"content": {"type": "string", "description": "The fact to remember"}}, ["content"]),
            save_memory,
        ),
    ]
