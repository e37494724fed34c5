"""Config of [session]: the send policy (where the bot may speak) and agent-to-agent turns."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from bridge.config.base import Section
from bridge.config.platforms import known_surfaces


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
