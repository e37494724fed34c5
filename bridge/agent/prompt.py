"""The system prompt: the operator's instructions, the chat, memories and the tool group listing."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from bridge.config import Settings
from bridge.store.base import SessionRow
from bridge.tools.registry import ToolRegistry


def build_system_prompt(
    settings: Settings,
    registry: ToolRegistry,
    session: SessionRow,
    loaded_groups: set[str],
    memories: list[str],
    summary: str | None = None,
) -> str:
    # Date only, not the time: the prompt then stays byte-identical all day, which keeps provider-side
    # prompt caches warm. get_current_time gives the exact time.
    today = datetime.now(UTC).astimezone(ZoneInfo(settings.agent.timezone))
    parts = [
        settings.agent.system_prompt.strip(),
        f"Today is {today:%A, %Y-%m-%d} ({settings.agent.timezone}). This conversation: {_place(session)}.",
    ]
    if memories:
        parts.append(
            "## Memory\nFacts you saved earlier in this chat:\n" + "\n".join(f"- {m}" for m in memories)
        )
    if summary:
        # Older turns were compacted into this summary (see bridge.agent.compaction); kept here, not as
        # a message, so the history still starts with a user turn for strict chat templates.
        parts.append(f"## Earlier in this conversation\nA summary of older turns no longer shown:\n{summary}")
    listing = registry.group_listing(loaded_groups)
    if listing:
        parts.append(listing)
    return "\n\n".join(parts)


def _place(session: SessionRow) -> str:
    # Worded as a sentence: "(telegram dm)" in parentheses read to a small model like a group name.
    kind = _KINDS.get(session.chat_type or "", session.chat_type)
    where = " on ".join(part for part in (kind, session.surface) if part)
    name = f" named '{session.display_name}'" if session.display_name else ""
    return f"session key {session.key}" + (f", a {where}{name}" if where else name)


_KINDS = {"dm": "direct message", "group": "group chat", "channel": "channel"}
