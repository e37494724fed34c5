"""Who may talk: owners, per-platform allowlists and paired people, mention gating, polite refusals."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from bridge.config import Settings
from bridge.config.platforms import AccessSettings
from bridge.events import Inbound
from bridge.gateway.pairing import Pairing

log = logging.getLogger(__name__)
K = TypeVar("K")

REFUSAL_INTERVAL_S = 3600.0
# The most senders or chats remembered for "once an hour": a flood of strangers can't grow it further.
REMEMBERED_MAX = 10_000
DEFAULT_CODE_TTL_S = 3600.0
WILDCARD = "*"


class Verdict(Enum):
    ALLOW = "allow"
    REFUSE = "refuse"  # answer with a short refusal
    IGNORE = "ignore"  # stay silent
    PAIR = "pair"  # a stranger's DM where dm_policy = "pairing": the pairing service answers (a code)


@dataclass(frozen=True, slots=True)
class SurfaceAccess:
    allowed_users: frozenset[str]
    # Telegram groups, Discord and Slack channels, Matrix rooms (a thread counts as its parent).
    allowed_chats: frozenset[str]
    require_mention: bool
    # Discord guilds: every channel in them.
    allowed_guilds: frozenset[str] = frozenset()
    # What strangers' DMs get: "allowlist" (a refusal an hour) or "pairing" (a code; see pairing.py).
    dm_policy: str = "allowlist"
    pairing_code_ttl_s: float = DEFAULT_CODE_TTL_S
    # The config key of `allowed_chats` in the surface's section, named in the log line of an ignored
    # group (Discord's is allowed_channels).
    chats_key: str = "allowed_chats"

    @classmethod
    def of(
        cls,
        settings: AccessSettings,
        chats: Iterable[str],
        guilds: Iterable[str] = (),
        *,
        chats_key: str = "allowed_chats",
    ) -> SurfaceAccess:
        return cls(
            frozenset(settings.allowed_users),
            frozenset(chats),
            settings.require_mention,
            frozenset(guilds),
            settings.dm_policy,
            float(settings.pairing_code_ttl_s),
            chats_key,
        )

    def user_allowed(self, user_id: str) -> bool:
        return WILDCARD in self.allowed_users or user_id in self.allowed_users

    def place_allowed(self, inbound: Inbound) -> bool:
        chats = {inbound.chat_id, inbound.parent_id} - {None}
        return (
            WILDCARD in self.allowed_chats
            or bool(chats & self.allowed_chats)
            or WILDCARD in self.allowed_guilds
            or (inbound.guild_id is not None and inbound.guild_id in self.allowed_guilds)
        )


def _nobody(surface: str, user_id: str) -> bool:
    return False


class AccessPolicy:
    """Decides per inbound message; surfaces without access settings (the console) are open.

    `paired(surface, user_id)` says whether an owner approved someone by DM pairing; they may DM the
    bot as if listed in allowed_users, whatever the dm_policy (bridge.gateway.pairing keeps it exact).
    """

    def __init__(
        self,
        owners: Iterable[str],
        surfaces: dict[str, SurfaceAccess],
        *,
        clock: Callable[[], float] = time.monotonic,
        paired: Callable[[str, str], bool] = _nobody,
    ) -> None:
        self.owners = frozenset(owners)
        self.surfaces = surfaces
        self._clock = clock
        self._paired = paired
        self._refused_at: dict[str, float] = {}
        # (surface, chat id) of ignored groups, when each was last logged: one INFO line an hour.
        self._noted_at: dict[tuple[str, str], float] = {}

    @classmethod
    def from_settings(
        cls, settings: Settings, owners: Iterable[str], *, paired: Callable[[str, str], bool] = _nobody
    ) -> AccessPolicy:
        return cls(owners, surfaces_from(settings), paired=paired)

    def update(self, settings: Settings) -> None:
        """New allowlists from a reloaded config; owners stay as started (they decide session keys)."""
        self.surfaces = surfaces_from(settings)

    def check(self, inbound: Inbound) -> Verdict:
        rules = self.surfaces.get(inbound.surface)
        in_group = inbound.chat_type != "dm"
        # Mention gating applies to everyone, owners included: a group is not the bot's DM.
        if in_group and (rules is None or rules.require_mention) and not inbound.mentioned:
            return Verdict.IGNORE
        if rules is None or inbound.sender in self.owners:
            return Verdict.ALLOW
        if in_group:
            # Strangers' groups get silence, not refusals: the bot may have been added by anyone.
            if rules.place_allowed(inbound):
                return Verdict.ALLOW
            self._note_ignored_group(inbound, rules)
            return Verdict.IGNORE
        if rules.user_allowed(inbound.sender_id) or self._paired(inbound.surface, inbound.sender_id):
            return Verdict.ALLOW
        if rules.dm_policy == "pairing":
            return Verdict.PAIR
        return self._refuse_once_an_hour(inbound)

    def pairing_decides(self, inbound: Inbound) -> bool:
        """Whether the verdict on this message hangs on DM pairing: a DM, on a platform with access
        rules, from someone neither an owner nor in allowed_users."""
        rules = self.surfaces.get(inbound.surface)
        return (
            rules is not None
            and inbound.chat_type == "dm"
            and inbound.sender not in self.owners
            and not rules.user_allowed(inbound.sender_id)
        )

    def code_ttl_s(self, surface: str) -> float:
        """How long a pairing code given on this platform lives."""
        rules = self.surfaces.get(surface)
        return rules.pairing_code_ttl_s if rules is not None else DEFAULT_CODE_TTL_S

    def _refuse_once_an_hour(self, inbound: Inbound) -> Verdict:
        if not _once_an_hour(self._refused_at, inbound.sender, self._clock()):
            return Verdict.IGNORE
        # The operator's way to let them in, once an hour like the refusal itself.
        log.info(
            "%s: refused a direct message from user %s (not in [%s] allowed_users; add it there to "
            "let the bot answer)",
            inbound.surface,
            inbound.sender_id,
            inbound.surface,
        )
        return Verdict.REFUSE

    def _note_ignored_group(self, inbound: Inbound, rules: SurfaceAccess) -> None:
        """One INFO line an hour per group the bot ignores: the id to add and where to add it."""
        # A thread counts as its parent channel, so that is the id to allow.
        chat = inbound.parent_id or inbound.chat_id
        if _once_an_hour(self._noted_at, (inbound.surface, chat), self._clock()):
            log.info(
                "%s: ignored a message from %s %s (not in [%s] %s; add it there to let the bot answer)",
                inbound.surface,
                inbound.chat_type,
                chat,
                inbound.surface,
                rules.chats_key,
            )


class Admission:
    """Who may talk, in one step: the access lists, DM pairing and mention gating give one verdict
    (`decide`); the answer a verdict calls for, a refusal or a stranger's pairing code, comes from here
    too, once the send policy has let the chat be read."""

    def __init__(self, access: AccessPolicy, pairing: Pairing) -> None:
        self.access = access
        self.pairing = pairing

    async def decide(self, inbound: Inbound) -> Verdict:
        if self.access.pairing_decides(inbound):
            # `bridge pair` or another worker may have approved or revoked this person since: one
            # primary-key read, for DMs whose verdict hangs on it only (see pairing.py).
            await self.pairing.sync(inbound.surface, inbound.sender_id)
        return self.access.check(inbound)

    async def answer(self, inbound: Inbound, verdict: Verdict) -> str | None:
        """What a REFUSE or PAIR verdict says to the sender: the refusal, or their pairing code (None:
        silence, for a code said too recently or past the limit)."""
        if verdict is Verdict.REFUSE:
            return refusal_text(inbound)
        if verdict is Verdict.PAIR:
            # Their code, or silence: the message itself is neither stored nor shown to the model.
            return await self.pairing.admit(inbound, ttl_s=self.access.code_ttl_s(inbound.surface))
        return None


def _once_an_hour(remembered: dict[K, float], key: K, now: float) -> bool:
    """Whether `key` is due (not seen in the last hour), remembering it if so; at most REMEMBERED_MAX
    keys are kept, so a flood of strangers costs bounded memory."""
    last = remembered.get(key)
    if last is not None and now - last < REFUSAL_INTERVAL_S:
        return False
    if len(remembered) >= REMEMBERED_MAX:
        for expired in [k for k, t in remembered.items() if now - t >= REFUSAL_INTERVAL_S]:
            del remembered[expired]
        if len(remembered) >= REMEMBERED_MAX:
            # All of them recent (a flood): start over; the worst is a repeated line or refusal.
            remembered.clear()
    remembered[key] = now
    return True


def surfaces_from(settings: Settings) -> dict[str, SurfaceAccess]:
    telegram, discord, slack, matrix = settings.telegram, settings.discord, settings.slack, settings.matrix
    return {
        "telegram": SurfaceAccess.of(telegram, telegram.allowed_chats),
        "discord": SurfaceAccess.of(
            discord, discord.allowed_channels, discord.allowed_guilds, chats_key="allowed_channels"
        ),
        # A Slack thread's messages carry their channel as chat_id, so a channel allows its threads.
        "slack": SurfaceAccess.of(slack, slack.allowed_channels, chats_key="allowed_channels"),
        # A Matrix thread's messages carry their room as chat_id, so a room allows its threads.
        "matrix": SurfaceAccess.of(matrix, matrix.allowed_rooms, chats_key="allowed_rooms"),
    }


def refusal_text(inbound: Inbound) -> str:
    return (
        "Sorry, this bot only talks to people its owner has allowed. "
        f"If you know the owner, give them your user id: {inbound.sender_id}."
    )
