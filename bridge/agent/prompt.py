"""The system prompt: the operator's instructions, the chat, memories, the tool group listing and skills."""

from __future__ import annotations

from collections.abc import Set
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from bridge.agent.chat_agents import RunAgent
from bridge.config import Settings
from bridge.skills import SkillCatalog
from bridge.store.base import SessionRow
from bridge.tools.builtin.skills import LOAD_SKILL
from bridge.tools.registry import ToolRegistry


def build_system_prompt(
    settings: Settings,
    registry: ToolRegistry,
    session: SessionRow,
    loaded_groups: set[str],
    memories: list[str],
    summary: str | None = None,
    loaded_skills: Set[str] = frozenset(),
    *,
    agent: RunAgent | None = None,
) -> str:
    """The system prompt of one model request. `agent` is the chat's agent ([agents.NAME]): its prompt
    and language come first in place of [agent] system_prompt, and only its skills are listed (its
    groups: `registry` is the registry as it sees it). None: the default agent."""
    # Date only, not the time: the prompt then stays byte-identical all day, which keeps provider-side
    # prompt caches warm. get_current_time gives the exact time.
    today = datetime.now(UTC).astimezone(ZoneInfo(settings.agent.timezone))
    parts = [
        agent.instructions() if agent is not None else settings.agent.system_prompt.strip(),
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
    # No skills configured, or load_skill disabled: nothing to list.
    if registry.get(LOAD_SKILL) is not None:
        catalog = agent.skills if agent is not None else settings.skills.catalog
        parts.extend(skill_sections(catalog, loaded_skills))
    return "\n\n".join(parts)


def skill_sections(catalog: SkillCatalog, loaded: Set[str]) -> list[str]:
    """The "Available Skills" listing (name and description), then each loaded skill's instructions.

    The instructions live here rather than only in load_skill's result, so a skill loaded long ago
    still applies after that result has left the history window.
    """
    if not catalog:
        return []
    loaded = catalog.known(loaded)
    lines = ["## Available Skills", "Before a task a skill fits, call load_skill with its name."]
    lines += [f"- {s.name}{' (loaded)' if s.name in loaded else ''}: {s.description}" for s in catalog]
    bodies = [f"## Skill: {s.name}\n{s.body}" for s in catalog if s.name in loaded and s.body]
    return ["\n".join(lines), *bodies]


def _place(session: SessionRow) -> str:
    # Worded as a sentence: "(telegram dm)" in parentheses read to a small model like a group name.
    kind = _KINDS.get(session.chat_type or "", session.chat_type)
    where = " on ".join(part for part in (kind, session.surface) if part)
    name = f" named '{session.display_name}'" if session.display_name else ""
    return f"session key {session.key}" + (f", a {where}{name}" if where else name)


_KINDS = {"dm": "direct message", "group": "group chat", "channel": "channel"}
