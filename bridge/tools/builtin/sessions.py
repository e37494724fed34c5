"""Group `sessions`: list sessions, read their history and message them, without leaking chats."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, get_args

from pydantic import Field

from bridge.errors import SessionKeyError
from bridge.events import framed
from bridge.sessions.keys import RESERVED_KEYS, kind
from bridge.store.base import MessageRow, SessionRow, SessionSummary
from bridge.tools.arguments import Arguments, Count, Seconds, Text, typed_tool
from bridge.tools.base import AGENT_CHANNEL, ToolContext, ToolGroup, ToolResult
from bridge.tools.builtin.spawn import spawn_agent

Kind = Literal["main", "group", "cron", "hook", "node", "agent", "other"]
KINDS: tuple[Kind, ...] = get_args(Kind)
LIST_MAX = 200
LIST_MESSAGES_MAX = 20
HISTORY_MAX = 200
SEND_TIMEOUT_DEFAULT = 30.0
SEND_TIMEOUT_MAX = 300.0


def session_kind(key: str) -> str:
    try:
        return kind(key)
    except SessionKeyError:
        return "other"


def _message_dict(row: MessageRow) -> dict[str, Any]:
    item: dict[str, Any] = {
        "id": row.id,
        "role": row.role,
        # Attachments by name, e.g. "[image: photo.jpg]" before the caption.
        "content": framed(row.content, row.media),
        "at": datetime.fromtimestamp(row.created_at, UTC).isoformat(timespec="seconds"),
    }
    if row.tool_name:
        item.update(tool_name=row.tool_name, tool_call_id=row.tool_call_id, status=row.tool_status)
    if row.kind == "tool_call":
        item["input"] = row.tool_input
    if row.via_session:
        item["from_session"] = row.via_session
    return item


def _visible(ctx: ToolContext, session: SessionRow) -> bool:
    # The run's authority decides (bridge.sessions.authority): an owner in main sees every session,
    # anyone else their own chat (and the session the run is in: a task's or a hook's).
    return ctx.authority.may_see(session.key, own=ctx.session.key)


class SessionsListArgs(Arguments):
    kinds: list[Kind] | None = Field(None, description="Only sessions of these kinds")
    limit: Annotated[int, Count(high=LIST_MAX)] = Field(
        50, description=f"Maximum rows (default 50, max {LIST_MAX})"
    )
    # 0, a negative or an unreadable value means no time filter, as leaving it out does.
    active_minutes: Annotated[int, Count(low=0)] = Field(
        0, description="Only sessions active within this many minutes"
    )
    message_limit: Annotated[int, Count(low=0, high=LIST_MESSAGES_MAX)] = Field(
        0, description=f"Include each one's last N chat messages (0-{LIST_MESSAGES_MAX})"
    )


class SessionsHistoryArgs(Arguments):
    session_key: Text = Field(description="Session key (e.g. 'main') or id")
    limit: Annotated[int, Count(high=HISTORY_MAX)] = Field(
        50, description=f"Maximum messages (default 50, max {HISTORY_MAX})"
    )
    include_tools: bool = Field(False, description="Include tool calls and results")


class SessionsSendArgs(Arguments):
    session_key: Text = Field(description="Session key or id to send to")
    message: Text = Field(description="The message for that session's agent")
    timeout_seconds: Seconds = Field(
        SEND_TIMEOUT_DEFAULT,
        description="Seconds to wait for the reply "
        f"(default {SEND_TIMEOUT_DEFAULT:g}, max {SEND_TIMEOUT_MAX:g}); 0 does not wait",
    )


async def _sessions_list(args: SessionsListArgs, ctx: ToolContext) -> ToolResult:
    kinds = args.kinds
    since = time.time() - args.active_minutes * 60 if args.active_minutes else None
    if ctx.authority.sees_all:
        summaries = await ctx.store.list_sessions(limit=LIST_MAX, active_since=since)
    else:
        # Everyone else sees the sessions they may (their chat, the run's own), however long ago
        # other chats were active.
        summaries = []
        for key in dict.fromkeys((ctx.authority.chat, ctx.session.key)):
            own = await ctx.store.active_session(key)
            if own is not None and _visible(ctx, own) and (since is None or own.updated_at >= since):
                summaries.append(SessionSummary(own, await ctx.store.count_messages(own.id)))
    rows: list[dict[str, Any]] = []
    for summary in summaries:
        session = summary.session
        session_kind_ = session_kind(session.key)
        if session.key in RESERVED_KEYS:
            continue
        if kinds is not None and session_kind_ not in kinds:
            continue
        row: dict[str, Any] = {
            "key": session.key,
            "kind": session_kind_,
            "provider": session.surface
            or ("internal" if session_kind_ in ("cron", "hook", "node", "agent") else "unknown"),
            "display_name": session.display_name,
            "updated_at": int(session.updated_at * 1000),
            "session_id": session.id,
            "message_count": summary.message_count,
            "send_policy": session.send_policy,
        }
        if args.message_limit:
            chat = await ctx.store.history(session.id, args.message_limit, chat_only=True)
            row["messages"] = [_message_dict(m) for m in chat]
        rows.append(row)
        if len(rows) >= args.limit:
            break
    return ToolResult.success({"sessions": rows, "count": len(rows)})


async def resolve_session(ref: str, ctx: ToolContext) -> SessionRow | ToolResult:
    """The session named by 'session_key' (a key, or a session id), if this run may see it. An owner's
    DM key names main."""
    ref = ctx.authorities.canonical(ref)
    session = None if ref in RESERVED_KEYS else await ctx.store.active_session(ref)
    if session is None:
        session = await ctx.store.get_session(ref)
    # An invisible session answers exactly like a missing one: its existence is not leaked either.
    if session is None or session.key in RESERVED_KEYS or not _visible(ctx, session):
        return ToolResult.error(
            "not_found", f"No session with key or id '{ref}'. Use sessions_list to see the sessions."
        )
    return session


async def _sessions_history(args: SessionsHistoryArgs, ctx: ToolContext) -> ToolResult:
    session = await resolve_session(args.session_key, ctx)
    if isinstance(session, ToolResult):
        return session
    history = await ctx.store.history(session.id, args.limit, chat_only=not args.include_tools)
    summaries = await ctx.store.summaries(session.id)
    return ToolResult.success(
        {
            "session_key": session.key,
            "session_id": session.id,
            "messages": [_message_dict(m) for m in history],
            # What compaction made of older turns: the model sees these in place of those turns.
            "summaries": [
                {
                    "covers_turns_up_to_message": s.upto,
                    "turns": s.turns,
                    "replaced_chars": s.replaced_chars,
                    "content": s.content,
                }
                for s in summaries
            ],
        }
    )


async def _sessions_send(args: SessionsSendArgs, ctx: ToolContext) -> ToolResult:
    if ctx.channel == AGENT_CHANNEL:
        # One level only: an agent answering another agent cannot start a third exchange (no loops).
        return ToolResult.error(
            "not_allowed", "sessions_send cannot be used while answering another session's agent."
        )
    target = await resolve_session(args.session_key, ctx)
    if isinstance(target, ToolResult):
        return target
    if target.key == ctx.session.key:
        return ToolResult.error(
            "same_session", "A session cannot send to itself; answer here directly instead."
        )
    if not ctx.authority.may_message(target.key):
        return ToolResult.error(
            "not_allowed",
            "Only an owner's own chat (main) may message other sessions' agents; answer here instead.",
        )
    if ctx.messenger is None:
        return ToolResult.error("unavailable", "Sending to other sessions is not available here.")
    timeout = min(args.timeout_seconds, SEND_TIMEOUT_MAX)
    outcome = await ctx.messenger.send(ctx.session, target, args.message, timeout, ctx.authority)
    if outcome["status"] == "error":
        # Still the documented JSON shape, but marked failed so the run's failure breaker counts it.
        return ToolResult(ok=False, content=json.dumps(outcome, ensure_ascii=False), code="run_failed")
    return ToolResult.success(outcome)


sessions_list = typed_tool(
    "sessions_list", "List chat sessions, most recently active first.", SessionsListArgs, _sessions_list
)
sessions_history = typed_tool(
    "sessions_history",
    "Read the messages of one session, by session key or session id.",
    SessionsHistoryArgs,
    _sessions_history,
)
sessions_send = typed_tool(
    "sessions_send",
    "Send a message to another session's agent and get its reply. Its chat hears about it "
    "only if that agent decides to announce it afterwards.",
    SessionsSendArgs,
    _sessions_send,
    # The tool's own wait is bounded by timeout_seconds; leave room beyond the default.
    timeout_s=SEND_TIMEOUT_MAX + 5,
)


def sessions_group() -> ToolGroup:
    return ToolGroup(
        name="sessions",
        description="List chat sessions, read their message history, message other sessions' agents, "
        "and start sub-agents",
        tools=(sessions_list, sessions_history, sessions_send, spawn_agent),
    )
