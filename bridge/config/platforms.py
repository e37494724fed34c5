"""Config of the chat platforms: [telegram], [discord], [slack], [matrix], who may talk on each, and the
installed adapters."""

from __future__ import annotations

import re
from importlib.metadata import entry_points
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from bridge.config.base import Section, url_setting

# Where platform adapters register; its names are the surfaces (bridge.app loads them from here).
ADAPTER_GROUP = "bridge.adapters"


def known_surfaces() -> list[str]:
    """The installed adapters' names: console, telegram, discord and any third-party platform."""
    return sorted({ep.name for ep in entry_points(group=ADAPTER_GROUP)})


def _id_list(value: Any) -> Any:
    """Ids may be written as numbers or strings; they are compared as strings."""
    if isinstance(value, list):
        return [str(item) if isinstance(item, int) and not isinstance(item, bool) else item for item in value]
    return value


class AccessSettings(Section):
    """Who may talk to the bot on one platform; owners are always allowed."""

    # User ids allowed to DM the bot; "*" allows everyone. Default: owners only.
    allowed_users: list[str] = Field(default_factory=list)
    # In groups, answer only when mentioned, replied to, or given a command.
    require_mention: bool = True
    # What a stranger's DM gets. "allowlist": one short refusal an hour. "pairing": a code that
    # expires; an owner approves it (/pair CODE, `bridge pair approve`, the dashboard) and the person
    # may talk until revoked. Approved people are allowed under either policy (bridge.gateway.pairing).
    dm_policy: Literal["allowlist", "pairing"] = "allowlist"
    # How long a pairing code can be approved, from the stranger's first DM.
    pairing_code_ttl_s: int = Field(3600, ge=60, le=7 * 24 * 3600)

    _user_ids = field_validator("allowed_users", mode="before")(_id_list)

    @model_validator(mode="after")
    def _pairing_has_strangers(self) -> AccessSettings:
        if self.dm_policy == "pairing" and "*" in self.allowed_users:
            raise ValueError(
                'dm_policy = "pairing" never asks for a code while allowed_users holds "*" (everyone is '
                "let in): remove one of the two"
            )
        return self


class TelegramSettings(AccessSettings):
    # Group ids the bot works in; "*" allows every group it is added to.
    allowed_chats: list[str] = Field(default_factory=list)
    _chat_ids = field_validator("allowed_chats", mode="before")(_id_list)
    enabled: bool = False
    token: SecretStr = SecretStr("")
    api_base: str = "https://api.telegram.org"
    mode: Literal["polling", "webhook"] = "polling"
    # Long-poll timeout of getUpdates.
    poll_timeout_s: int = Field(30, ge=0, le=50)
    webhook_url: str | None = None
    listen: str = "127.0.0.1"
    port: int = Field(8443, ge=1, le=65535)
    # Checked on every webhook request; when empty, one is derived from the token (the same on every
    # worker of the bot: adapters/telegram/adapter.py webhook_secret_of).
    webhook_secret: SecretStr = SecretStr("")
    # The webhook server's limits, as [admin] max_connections and header_timeout_s for its own.
    webhook_max_connections: int = Field(256, ge=1, le=100_000)
    webhook_header_timeout_s: float = Field(10.0, gt=0, le=300)

    @field_validator("api_base")
    @classmethod
    def _api_url(cls, value: str) -> str:
        return url_setting(value, "https://api.telegram.org") or "https://api.telegram.org"

    @model_validator(mode="after")
    def _complete(self) -> TelegramSettings:
        if self.enabled and not self.token.get_secret_value():
            raise ValueError("token is required when enabled (from @BotFather; or BRIDGE_TELEGRAM__TOKEN)")
        if self.mode == "webhook" and not self.webhook_url:
            raise ValueError("webhook_url is required when mode = 'webhook'")
        if self.webhook_secret.get_secret_value() and not re.match(
            r"^[A-Za-z0-9_-]{1,256}$", self.webhook_secret.get_secret_value()
        ):
            raise ValueError("webhook_secret may hold only A-Z, a-z, 0-9, _ and - (1-256 characters)")
        return self


class DiscordSettings(AccessSettings):
    # Guild (server) ids the bot works in, and single channel ids; "*" allows all.
    allowed_guilds: list[str] = Field(default_factory=list)
    allowed_channels: list[str] = Field(default_factory=list)
    _place_ids = field_validator("allowed_guilds", "allowed_channels", mode="before")(_id_list)
    enabled: bool = False
    token: SecretStr = SecretStr("")
    # Replace Discord's REST base (https://discord.com/api/v10) and gateway, e.g. for a test server.
    api_base: str | None = None
    gateway_url: str | None = None

    @field_validator("api_base")
    @classmethod
    def _rest_url(cls, value: str | None) -> str | None:
        return url_setting(value, "https://discord.com/api/v10")

    @field_validator("gateway_url")
    @classmethod
    def _ws_url(cls, value: str | None) -> str | None:
        return url_setting(value, "wss://gateway.discord.gg", schemes="wss?")

    @model_validator(mode="after")
    def _complete(self) -> DiscordSettings:
        if self.enabled and not self.token.get_secret_value():
            raise ValueError(
                "token is required when enabled (Developer Portal → Bot; or BRIDGE_DISCORD__TOKEN)"
            )
        return self


class SlackSettings(AccessSettings):
    """[slack]: one Slack app over Socket Mode (adapters/slack), so no public URL is needed."""

    # Channel ids (C…, G… for private ones, or a group DM's) the bot works in; "*" allows every
    # channel it is a member of. A thread counts as its channel.
    allowed_channels: list[str] = Field(default_factory=list)
    _channel_ids = field_validator("allowed_channels", mode="before")(_id_list)
    enabled: bool = False
    # The bot token (xoxb-…, OAuth & Permissions) for the Web API, and the app-level token
    # (xapp-…, with connections:write) that opens the Socket Mode connection.
    bot_token: SecretStr = SecretStr("")
    app_token: SecretStr = SecretStr("")
    # Verifies the Events API's HTTP requests (Basic Information → Signing Secret). Socket Mode needs
    # none, since Slack is reached from here; kept so the HTTP mode can follow without a new key.
    signing_secret: SecretStr = SecretStr("")
    # Replace the Web API's base (https://slack.com/api/), e.g. for a test server; Socket Mode's
    # address comes from apps.connections.open there.
    api_base: str = "https://slack.com/api"

    @field_validator("api_base")
    @classmethod
    def _api_url(cls, value: str) -> str:
        return url_setting(value, "https://slack.com/api") or "https://slack.com/api"

    @model_validator(mode="after")
    def _complete(self) -> SlackSettings:
        if not self.enabled:
            return self
        bot, app = self.bot_token.get_secret_value(), self.app_token.get_secret_value()
        if not bot:
            raise ValueError(
                "bot_token is required when enabled (OAuth & Permissions → Bot User OAuth Token, xoxb-…; "
                "or BRIDGE_SLACK__BOT_TOKEN)"
            )
        if not app:
            raise ValueError(
                "app_token is required when enabled (Basic Information → App-Level Tokens, xapp-… with "
                "connections:write; or BRIDGE_SLACK__APP_TOKEN)"
            )
        if not bot.startswith("xoxb-"):
            raise ValueError("bot_token must be the bot token, which starts with xoxb-")
        if not app.startswith("xapp-"):
            raise ValueError("app_token must be an app-level token, which starts with xapp-")
        return self


# A Matrix user id: @localpart:server, the server maybe with a port.
_MATRIX_USER = re.compile(r"^@[^:\s]+:[^\s]+$")


class MatrixSettings(AccessSettings):
    """[matrix]: one bot account on a Matrix homeserver (adapters/matrix), listening with /sync."""

    # Room ids (!abc:example.org) the bot works in, and joins when invited to; "*" allows every room
    # it is invited to. A thread counts as its room. Direct chats go by allowed_users (and pairing).
    allowed_rooms: list[str] = Field(default_factory=list)
    enabled: bool = False
    # The homeserver's client API (https://matrix.example.org, as in the well-known file) and the
    # bot's account on it.
    homeserver: str = ""
    user_id: str = ""
    # How the bot logs in: an access token (its device is the token's), or the account's password
    # with a fixed device_id, so that each start is the same device and a message resent after a
    # crash is recognised by the homeserver (it drops a repeated transaction id per device).
    access_token: SecretStr = SecretStr("")
    password: SecretStr = SecretStr("")
    device_id: str = ""

    _room_ids = field_validator("allowed_rooms", mode="before")(_id_list)

    @field_validator("homeserver")
    @classmethod
    def _homeserver_url(cls, value: str) -> str:
        return url_setting(value, "https://matrix.example.org") or ""

    @field_validator("allowed_rooms")
    @classmethod
    def _rooms(cls, value: list[str]) -> list[str]:
        for room in value:
            if room != "*" and not re.match(r"^![^\s]+$", room):
                raise ValueError(
                    f"{room!r} is not a room id: write the room's id (!abc:example.org; in Element, Room "
                    "settings → Advanced), not its name or alias"
                )
        return value

    @model_validator(mode="after")
    def _complete(self) -> MatrixSettings:
        if not self.enabled:
            return self
        token, password = self.access_token.get_secret_value(), self.password.get_secret_value()
        if not self.homeserver:
            raise ValueError("homeserver is required when enabled (e.g. https://matrix.example.org)")
        if not self.user_id:
            raise ValueError("user_id is required when enabled (the bot's account, e.g. @bridge:example.org)")
        if not _MATRIX_USER.match(self.user_id):
            raise ValueError(f"user_id {self.user_id!r} is not a Matrix user id such as @bridge:example.org")
        if token and password:
            raise ValueError("give access_token or password (with device_id), not both")
        if not token and not password:
            raise ValueError(
                "access_token is required when enabled (or password with device_id; or "
                "BRIDGE_MATRIX__ACCESS_TOKEN): see docs/matrix.md for getting one"
            )
        if password and not self.device_id:
            raise ValueError(
                "device_id is required with password: the bot logs in as that device every time, so a "
                "message resent after a crash is not shown twice (any name, e.g. BRIDGE)"
            )
        return self
