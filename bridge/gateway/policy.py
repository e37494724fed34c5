"""Send policy: may the bot speak in a session, watch it silently (shadow mode), or not read it at all."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# The matcher lives with the rules' config, where [[agents.bindings]] shares it; named here too.
from bridge.config.session import Place, SendPolicySettings, SendRule, describe_match, matches
from bridge.store.base import SessionRow
from bridge.store.tables import DatabaseStore

Action = Literal["allow", "deny", "ignore"]
# The per-session override as stored on the session row (set by /send on|off).
Override = Literal["allow", "deny"]

__all__ = ["Decision", "Place", "PolicyGate", "SendPolicy", "describe_rule", "matches"]


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    # Which part of the policy decided, worded for /status, the outbox and `bridge policy explain`.
    reason: str

    @property
    def speaks(self) -> bool:
        return self.action == "allow"

    @property
    def processes(self) -> bool:
        return self.action != "ignore"


def describe_rule(index: int, rule: SendRule) -> str:
    """`rule 2 (deny: surface=discord, chat_type=channel)`, numbered from 1 as the operator counts."""
    return f"rule {index + 1} ({rule.action}: {describe_match(rule.match)})"


class SendPolicy:
    """The operator's policy; `update` swaps it while the bot runs (config reload)."""

    def __init__(self, settings: SendPolicySettings) -> None:
        self.settings = settings

    def update(self, settings: SendPolicySettings) -> None:
        self.settings = settings

    def decide(self, place: Place, override: str | None = None) -> Decision:
        """A per-session override wins; then the first matching deny (or ignore); then a matching
        allow; then the default."""
        if override == "allow":
            return Decision("allow", "session override (/send on)")
        if override == "deny":
            return Decision("deny", "session override (/send off)")
        rules = list(enumerate(self.settings.rules))
        for index, rule in rules:
            if rule.action != "allow" and matches(rule.match, place):
                return Decision(rule.action, describe_rule(index, rule))
        for index, rule in rules:
            if rule.action == "allow" and matches(rule.match, place):
                return Decision("allow", describe_rule(index, rule))
        return Decision(self.settings.default, f"default ({self.settings.default})")

    def explain(self, place: Place, override: str | None = None) -> list[str]:
        """Every step of the decision, for `bridge policy explain`."""
        decision = self.decide(place, override)
        lines = [
            f"session key: {place.key}",
            f"surface: {place.surface or 'any (not known for this key)'}",
            f"chat type: {place.chat_type or 'none (not a chat)'}",
            f"session override: {override or 'none (inherit)'}",
        ]
        if self.settings.rules:
            lines.append("rules, in order (deny and ignore are checked before allow):")
        for index, rule in enumerate(self.settings.rules):
            verdict = "matches" if matches(rule.match, place) else "does not match"
            lines.append(f"  {describe_rule(index, rule)}: {verdict}")
        lines.append(f"default: {self.settings.default}")
        matching = {rule.action for rule in self.settings.rules if matches(rule.match, place)}
        if override is None and "allow" in matching and matching - {"allow"}:
            lines.append("note: a matching deny or ignore wins over any allow; /send on overrides one chat")
        lines.append(f"decision: {decision.action}, decided by {decision.reason}")
        lines.append(_consequence(decision.action))
        return lines


def _consequence(action: Action) -> str:
    if action == "allow":
        return "The bot reads this chat and speaks in it."
    if action == "deny":
        return (
            "Shadow mode: the bot reads and answers in its history, but sends nothing here; "
            "what it would have sent is stored as suppressed. Owners' commands are still answered."
        )
    return "The bot does not read this chat at all; only owners' commands are answered."


class PolicyGate:
    """The policy applied to live sessions: reads each session's /send override from the store."""

    def __init__(self, policy: SendPolicy, store: DatabaseStore) -> None:
        self.policy = policy
        self.store = store

    async def decide(self, key: str, surface: str | None = None) -> Decision:
        return self.decide_for(key, surface, await self.store.active_session(key))

    def decide_for(self, key: str, surface: str | None, session: SessionRow | None) -> Decision:
        """The decision for a key whose active session (if any) the caller has already read."""
        return self.policy.decide(Place.of(key, surface), session.send_policy if session else None)
