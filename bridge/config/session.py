"""Config of [session]: the send policy (where the bot may speak) and agent-to-agent turns; and the
matcher its rules share with [[agents.bindings]] (`RuleMatch`, `Place`, `matches`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field, field_validator

from bridge.config.base import Section
from bridge.config.platforms import known_surfaces
from bridge.errors import SessionKeyError
from bridge.sessions import keys

_CHAT_TYPE_OF_SCOPE: dict[str, str | None] = {
    "main": "dm",
    "dm": "dm",
    "group": "group",
    "channel": "channel",
    "cron": None,
    "hook": None,
    "node": None,
    "agent": None,
}


class RuleMatch(Section):
    """Which sessions a send-policy rule covers; a field left out matches anything."""

    surface: str | None = None
    # "group" means any shared chat (Telegram groups, Discord channels and threads); "channel" only
    # Discord channels and threads; "dm" direct messages, the owners' `main` included.
    chat_type: Literal["dm", "group", "channel"] | None = None
    key_prefix: str | None = None

    @field_validator("surface")
    @classmethod
    def _known_surface(cls, value: str | None) -> str | None:
        # A misspelt surface would match nothing, so its rule would silently never apply.
        if value is not None and value not in (known := known_surfaces()):
            raise ValueError(f"{value!r} is not a known surface; known surfaces: {', '.join(known)}")
        return value


@dataclass(frozen=True, slots=True)
class Place:
    """What a rule matches on: the session key, its surface and its chat type."""

    key: str
    surface: str | None
    chat_type: str | None

    @classmethod
    def of(cls, key: str, surface: str | None = None) -> Place:
        """A place read from the key; `surface` is where `main` is being spoken to (it spans surfaces)."""
        try:
            parsed = keys.parse(key)
        except SessionKeyError:
            return cls(key, surface, None)
        return cls(key, parsed.surface or surface, _CHAT_TYPE_OF_SCOPE.get(parsed.scope))


def matches(match: RuleMatch, place: Place) -> bool:
    """Whether a rule's match covers the place: the one matcher of send-policy rules and agent bindings."""
    if match.surface is not None and match.surface != place.surface:
        return False
    if match.chat_type is not None:
        # "group" is any shared chat, as the session kinds count channels among groups.
        shared = place.chat_type in ("group", "channel")
        if not (place.chat_type == match.chat_type or (match.chat_type == "group" and shared)):
            return False
    return match.key_prefix is None or place.key.startswith(match.key_prefix)


def describe_match(match: RuleMatch) -> str:
    """`surface=discord, chat_type=channel`, or `everything` for a match that leaves every field out."""
    return ", ".join(f"{name}={value}" for name, value in match if value is not None) or "everything"


class SendRule(Section):
    action: Literal["allow", "deny", "ignore"]
    match: RuleMatch = Field(default_factory=RuleMatch)


class SendPolicySettings(Section):
    """Where the bot may speak: reloaded live when the config file changes or on SIGHUP."""

    default: Literal["allow", "deny"] = "allow"
    rules: list[SendRule] = Field(default_factory=list)


class AgentToAgentSettings(Section):
    max_ping_pong_turns: int = Field(5, ge=0, le=5)


class SessionSettings(Section):
    send_policy: SendPolicySettings = Field(default_factory=SendPolicySettings)
    agent_to_agent: AgentToAgentSettings = Field(default_factory=AgentToAgentSettings)
