"""Group `sessions`: list sessions, read their history and message them, without leaking chats."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from bridge.errors import SessionKeyError
from bridge.sessions.keys import MAIN, RESERVED_KEYS, kind
from bridge.store.base import MessageRow, SessionRow, SessionSummary
from bridge.tools.base import AGENT_CHANNEL, Tool, ToolContext, ToolGroup, ToolResult, clamp_int, params

KINDS = ("main", "group", "cron", "hook", "node", "other")
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
        "content": row.content,
        "at": datetime.fromtimestamp(row.created_at, UTC).isoformat(timespec="seconds"),
    }
    if row.tool_name:
        item.update(tool_name=row.tool_name, tool_call_id=row.tool_call_id, status=row.tool_status)
    if row.kind == "tool_call":
        item["input"] = row.tool_input
    if row.via_session:
        item["from_session"] = row.via_session
    return item


def _sees_everything(ctx: ToolContext) -> bool:
    """The owners' own thread (and the operator's cron jobs) may look into every session.

    Decided by the session, not the sender: an owner talking in a group must not make that group's
    agent read `main` into the group.
    """
    return ctx.session.key == MAIN or session_kind(ctx.session.key) == "cron"


def _visible(ctx: ToolContext, session: SessionRow) -> bool:
    return _sees_everything(ctx) or session.key == ctx.session.key


async def sessions_list(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    kinds = args.get("kinds")
    if kinds is not None and (
        not isinstance(kinds, list) or not all(isinstance(k, str) and k in KINDS for k in kinds)
    ):
        return ToolResult.error("invalid_parameter", f"'kinds' must be a list of: {', '.join(KINDS)}")
    limit = clamp_int(args.get("limit"), default=50, high=LIST_MAX)
    message_limit = clamp_int(args.get("message_limit"), default=0, low=0, high=LIST_MESSAGES_MAX)
    active_minutes = args.get("active_minutes")
    since = None
    if (
        isinstance(active_minutes, int | float)
        and not isinstance(active_minutes, bool)
        and active_minutes > 0
    ):
        since = time.time() - active_minutes * 60
    if _sees_everything(ctx):
        summaries = await ctx.store.list_sessions(limit=LIST_MAX, active_since=since)
    else:
        # Everyone else sees their own chat alone, however long ago other chats were active.
        own = await ctx.store.get_session(ctx.session.id)
        visible = own is not None and (since is None or own.updated_at >= since)
        summaries = [SessionSummary(own, await ctx.store.count_messages(own.id))] if visible and own else []
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
            or ("internal" if session_kind_ in ("cron", "hook", "node") else "unknown"),
            "display_name": session.display_name,
            "updated_at": int(session.updated_at * 1000),
            "session_id": session.id,
            "message_count": summary.message_count,
            "send_policy": session.send_policy,
        }
        if message_limit:
            chat = await ctx.store.history(session.id, message_limit, chat_only=True)
            row["messages"] = [_message_dict(m) for m in chat]
        rows.append(row)
        if len(rows) >= limit:
            break
    return ToolResult.success({"sessions": rows, "count": len(rows)})


async def _resolve(args: dict[str, Any], ctx: ToolContext) -> SessionRow | ToolResult:
    """The session named by 'session_key' (a key, or a session id), if this session may see it."""
    ref = args.get("session_key")
    if not isinstance(ref, str) or not ref.strip():
        return ToolResult.error("missing_parameter", "Required parameter 'session_key' is missing.")
    ref = ref.strip()
    session = None if ref in RESERVED_KEYS else await ctx.store.active_session(ref)
    if session is None:
        session = await ctx.store.get_session(ref)
    # An invisible session answers exactly like a missing one: its existence is not leaked either.
    if session is None or session.key in RESERVED_KEYS or not _visible(ctx, session):
        return ToolResult.error(
            "not_found", f"No session with key or id '{ref}'. Use sessions_list to see the sessions."
        )
    return session


async def sessions_history(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    session = await _resolve(args, ctx)
    if isinstance(session, ToolResult):
        return session
    limit = clamp_int(args.get("limit"), default=50, high=HISTORY_MAX)
    include_tools = args.get("include_tools") is True
    history = await ctx.store.history(session.id, limit, chat_only=not include_tools)
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


async def sessions_send(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    if ctx.channel == AGENT_CHANNEL:
        # One level only: an agent answering another agent cannot start a third exchange (no loops).
        return ToolResult.error(
            "not_allowed", "sessions_send cannot be used while answering another session's agent."
        )
    message = args.get("message")
    if not isinstance(message, str) or not message.strip():
        return ToolResult.error("missing_parameter", "Required parameter 'message' is missing.")
    target = await _resolve(args, ctx)
    if isinstance(target, ToolResult):
        return target
    if target.key == ctx.session.key:
        return ToolResult.error(
            "same_session", "A session cannot send to itself; answer here directly instead."
        )
    if ctx.messenger is None:
        return ToolResult.error("unavailable", "Sending to other sessions is not available here.")
    timeout = args.get("timeout_seconds", SEND_TIMEOUT_DEFAULT)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0:
        return ToolResult.error(
            "invalid_parameter", "'timeout_seconds' must be a number of seconds, 0 or more."
        )
    outcome = await ctx.messenger.send(
        ctx.session, target, message.strip(), min(float(timeout), SEND_TIMEOUT_MAX)
    )
    if outcome["status"] == "error":
        # Still the documented JSON shape, but marked failed so the run's failure breaker counts it.
        return ToolResult(ok=False, content=json.dumps(outcome, ensure_ascii=False), code="run_failed")
    return ToolResult.success(outcome)


def sessions_group() -> ToolGroup:
    return ToolGroup(
        name="sessions",
        description="List chat sessions, read their message history, and message other sessions' agents",
        tools=(
            Tool(
                "sessions_list",
                "List chat sessions, most recently active first.",
                params(
                    {
                        "kinds": {
                            "type": "array",
                            "items": {"type": "string", "enum": list(KINDS)},
                            "description": "Only sessions of these kinds",
                        },
                        "limit": {
                            "type": "integer",
                            "description": f"Maximum rows (default 50, max {LIST_MAX})",
                        },
                        "active_minutes": {
                            "type": "integer",
                            "description": "Only sessions active within this many minutes",
                        },
                        "message_limit": {
                            "type": "integer",
                            "description": f"Include each one's last N chat messages (0-{LIST_MESSAGES_MAX})",
                        },
                    }
                ),
                sessions_list,
            ),
            Tool(
                "sessions_history",
                "Read the messages of one session, by session key or session id.",
                params(
                    {
                        "session_key": {"type": "string", "description": "Session key (e.g. 'main') or id"},
                        "limit": {
                            "type": "integer",
                            "description": f"Maximum messages (default 50, max {HISTORY_MAX})",
                        },
                        "include_tools": {"type": "boolean", "description": "Include tool calls and results"},
                    },
                    ["session_key"],
                ),
                sessions_history,
            ),
            Tool(
                "sessions_send",
                "Send a message to another session's agent and get its reply. Its chat hears about it "
                "only if that agent decides to announce it afterwards.",
                params(
                    {
                        "session_key": {"type": "string", "description": "Session key or id to send to"},
                        "message": {"type": "string", "description": "The message for that session's agent"},
                        "timeout_seconds": {
                            "type": "number",
                            "description": "Seconds to wait for the reply "
                            f"(default {SEND_TIMEOUT_DEFAULT:g}, max {SEND_TIMEOUT_MAX:g}); 0 does not wait",
                        },
                    },
                    ["session_key", "message"],
                ),
                sessions_send,
                # The tool's own wait is bounded by timeout_seconds; leave room beyond the default.
                timeout_s=SEND_TIMEOUT_MAX + 5,
            ),
        ),
    )
