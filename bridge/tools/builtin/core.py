"""Core tools, sent on every turn: load_tool_group, get_current_time, search_history, save_memory."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field

from bridge.errors import ToolSourceError
from bridge.store.search import SearchHit, search_terms
from bridge.tools.arguments import Arguments, Count, Text, typed_tool
from bridge.tools.base import Tool, ToolContext, ToolResult
from bridge.tools.result import as_written

LOAD_TOOL_GROUP = "load_tool_group"
MEMORY_MAX_CHARS = 2_000
# save_memory's result starts with these words; a fact passed back with them is the same fact.
SAVED = "Saved to memory"
# How many of the newest memories a new one is compared with.
MEMORY_SCAN = 500
SEARCH_SNIPPET_CHARS = 300


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


class LoadToolGroupArgs(Arguments):
    group_name: Text = Field(description="Name of the group to load")


class GetCurrentTimeArgs(Arguments):
    timezone: str = Field("", description="IANA time zone, e.g. 'Europe/Berlin'")


SearchScope = Literal["session", "chat", "all"]


class SearchHistoryArgs(Arguments):
    query: Text = Field(description="Words to look for (all must appear; end a word with * for a prefix)")
    limit: Annotated[int, Count(high=50)] = Field(10, description="Maximum matches (default 10, max 50)")
    scope: SearchScope = Field(
        "session",
        description="session: this conversation; chat: every conversation in this chat, before /clear "
        "too; all: every chat (owners' main chat only)",
    )


class SaveMemoryArgs(Arguments):
    content: Text = Field(description="The fact to remember")


async def _load_tool_group(args: LoadToolGroupArgs, ctx: ToolContext) -> ToolResult:
    name = args.group_name
    group = ctx.registry.group(name)
    if group is None:
        available = ", ".join(g.name for g in ctx.registry.groups()) or "(none)"
        if ctx.registry.withheld(name):
            # A group this chat's agent may not use ([agents.NAME] tool_groups), even if history loaded it.
            return ToolResult.error(
                "not_available",
                f"Tool group '{name}' is not available in this chat. Available groups: {available}",
            )
        return ToolResult.error("not_found", f"Tool group '{name}' not found. Available groups: {available}")
    try:
        # An MCP server's group connects here, the first time it is loaded in this process.
        tools = await ctx.registry.load(group)
    except ToolSourceError as exc:
        return ToolResult.error("unavailable", f"{exc} Tool group '{group.name}' was not loaded.")
    if not tools:
        return ToolResult.error("empty_group", f"Tool group '{group.name}' has no available tools.")
    already = group.name in ctx.loaded_groups
    # The run's active set reads this set, so the tools are usable in the very next model call.
    ctx.loaded_groups.add(group.name)
    count = len(tools)
    head = (
        f"Tool group '{group.name}' is already loaded; its {count} tools are available:"
        if already
        else f"Loaded {count} tools from group '{group.name}':"
    )
    lines = [f"- {t.name}: {_first_line(t.description)}" for t in tools]
    tail = "Call these tools directly; they stay loaded for the rest of this conversation."
    return ToolResult.success("\n".join([head, *lines, tail]))


async def _get_current_time(args: GetCurrentTimeArgs, ctx: ToolContext) -> ToolResult:
    # An empty or blank zone means "the configured one", as an absent one does.
    zone_name = args.timezone.strip() or ctx.settings.agent.timezone
    try:
        zone = ZoneInfo(str(zone_name))
    # A folder of the zone database such as 'Europe' raises IsADirectoryError, an OSError.
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return ToolResult.error(
            "invalid_timezone", f"'{zone_name}' is not an IANA time zone such as 'Europe/Berlin' or 'UTC'."
        )
    now = datetime.now(UTC).astimezone(zone)
    # "time" and "in_words" as well as "iso": a small model copies a time it is given, where it gets
    # the hour of an ISO timestamp wrong ("03:28" said as "3:28 PM", measured on Qwen2.5 1.5B).
    return ToolResult.success(
        {
            "iso": now.isoformat(timespec="seconds"),
            "timezone": str(zone),
            "weekday": now.strftime("%A"),
            "time": now.strftime("%H:%M"),
            "in_words": _say_time(now, str(zone)),
        }
    )


async def _search_history(args: SearchHistoryArgs, ctx: ToolContext) -> ToolResult:
    # The run's authority decides, never the key: scope "all" reads every chat (and its memories).
    if args.scope == "all" and not ctx.authority.may_search_everywhere:
        return ToolResult.error(
            "not_allowed",
            "scope 'all' searches every chat and is only for the owners' main chat; here use "
            "scope 'session' (this conversation) or 'chat' (every conversation in this chat).",
        )
    terms = search_terms(args.query)
    if not terms:
        return ToolResult.error(
            "invalid_query", "The query has no words to search for; give words or numbers, e.g. 'dentist'."
        )
    session = ctx.session
    hits = await ctx.store.search_history(
        args.query,
        limit=args.limit,
        session_id=session.id if args.scope == "session" else None,
        key=None if args.scope == "all" else session.key,
    )
    words = re.compile("|".join(re.escape(term.word) for term in terms), re.IGNORECASE)
    matches = [_match(hit, words) for hit in hits]
    # The words searched for, not the text sent: what a 10 KB paste or a quoted phrase came to.
    searched = " ".join(term.word + ("*" if term.prefix else "") for term in terms)
    return ToolResult.success({"query": searched, "scope": args.scope, "matches": matches})


def _match(hit: SearchHit, words: re.Pattern[str]) -> dict[str, object]:
    match: dict[str, object] = {"kind": hit.kind, "id": hit.id, "session_key": hit.key}
    if hit.role is not None:
        match["role"] = hit.role
    match["at"] = datetime.fromtimestamp(hit.created_at, UTC).isoformat(timespec="seconds")
    match["text"] = _snippet(hit.content, words)
    return match


def _snippet(text: str, words: re.Pattern[str]) -> str:
    """At most SEARCH_SNIPPET_CHARS of `text`, around the first word the query asked for."""
    if len(text) <= SEARCH_SNIPPET_CHARS:
        return text
    first = words.search(text)
    start = max(0, first.start() - SEARCH_SNIPPET_CHARS // 3) if first else 0
    end = start + SEARCH_SNIPPET_CHARS
    return ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")


def _words(text: str) -> str:
    return " ".join("".join(c if c.isalnum() else " " for c in text.casefold()).split())


def _gist(text: str) -> str:
    """A memory's words, without case, punctuation or spacing, or this tool's own result words (a
    small model passes its result back as the next fact)."""
    words = _words(text)
    return words.removeprefix(_words(SAVED) + " ")


async def _save_memory(args: SaveMemoryArgs, ctx: ToolContext) -> ToolResult:
    # Its own code, not invalid_arguments: the model is to shorten it, not to fix a type.
    if len(args.content) > MEMORY_MAX_CHARS:
        return ToolResult.error(
            "too_long", f"A memory holds at most {MEMORY_MAX_CHARS} characters; save a shorter summary."
        )
    # A fact already kept (whatever its case and punctuation) is not kept twice: a small model saves
    # one over and over in slightly other words. An error, so the failure rule stops such a loop.
    wanted = _gist(args.content)
    for kept in await ctx.store.memories(ctx.session.key, MEMORY_SCAN):
        if _gist(kept) == wanted:
            return ToolResult.error("already_saved", f"That is already in memory: {kept}. Answer the user.")
    # Memories belong to the conversation place (the key), so they outlive /clear but never leak
    # into another user's chat.
    await ctx.store.add_memory(ctx.session.key, args.content)
    # The fact and nothing more: the 0.5B model passed a longer result ("… It stays in later turns")
    # back as the next fact, a new one each time; the fact alone comes back as a duplicate.
    return ToolResult.success(f"{SAVED}: {args.content.strip().rstrip('.')}.")


load_tool_group = typed_tool(
    LOAD_TOOL_GROUP,
    "Load a tool group listed under 'Available Tool Groups' so its tools become callable. "
    "Returns the group's tools with their descriptions.",
    LoadToolGroupArgs,
    _load_tool_group,
)


def _time_in_words(content: str) -> str | None:
    """get_current_time's result as a person says it: 'It's 23:32 on Friday, 27 November 2026, in
    Tokyo (Asia/Tokyo).'"""
    try:
        data = json.loads(content)
        moment = datetime.fromisoformat(str(data["iso"]))
        zone = str(data["timezone"])
    except (ValueError, KeyError, TypeError):
        return None
    return _say_time(moment, zone)


def _say_time(moment: datetime, zone: str) -> str:
    said = f"It's {moment:%H:%M} on {moment:%A}, {moment:%-d %B %Y}"
    if "/" not in zone:
        return f"{said} ({zone})."
    return f"{said}, in {zone.rsplit('/', 1)[-1].replace('_', ' ')} ({zone})."


get_current_time = typed_tool(
    "get_current_time",
    "Get the current date and time.",
    GetCurrentTimeArgs,
    _get_current_time,
    plain=_time_in_words,
)
search_history = typed_tool(
    "search_history",
    "Search what was said (and saved memories) for words, best matches first. scope: 'session' (this "
    "conversation, default), 'chat' (this chat's earlier conversations too, before /clear), 'all' "
    "(every chat; owners' main chat only).",
    SearchHistoryArgs,
    _search_history,
)
save_memory = typed_tool(
    "save_memory",
    # "Not for files": small models reach for it when asked to save a file.
    "Remember a short fact about the user or this chat for later conversations (it survives /clear). "
    "Not for files.",
    SaveMemoryArgs,
    _save_memory,
    plain=as_written,
)


def core_tools() -> list[Tool]:
    return [load_tool_group, get_current_time, search_history, save_memory]
