"""Settings: a TOML file overridden by BRIDGE_<SECTION>__<KEY> environment variables."""

from __future__ import annotations

import ipaddress
import re
from importlib.metadata import entry_points
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from bridge.config.base import Section as _Section
from bridge.config.base import url_setting

# [llm] lives in bridge.config.llm; its names stay importable from here, as every caller has them.
from bridge.config.llm import DEFAULT_PROFILE as DEFAULT_PROFILE
from bridge.config.llm import LLMProfile as LLMProfile
from bridge.config.llm import LLMSettings as LLMSettings
from bridge.config.mcp import McpSettings
from bridge.config.media import MediaSettings, SttSettings
from bridge.config.skills import SkillsSettings
from bridge.config.tasks import HookSettings, TasksSettings, check_hooks

_OWNER_RE = re.compile(r"^[a-z][a-z0-9_-]*:[^\s:]+$")
# [llm.profiles.NAME]: names owners type after /model; "default" is [llm] itself.
# Where platform adapters register; its names are the surfaces (bridge.app loads them from here).
ADAPTER_GROUP = "bridge.adapters"
REDACTED = "<redacted>"
# scheme://userinfo@: the userinfo ends at the last "@" before the path, query or fragment.
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#\s]*)@")

DEFAULT_SYSTEM_PROMPT = (
    "You are Bridge, a helpful assistant reachable from chat apps. Answer concisely. "
    "Use tools when they help; after a tool result, answer the user instead of calling the same tool again."
)


def mask_url(text: str) -> str:
    """The text with the user and password of every URL in it replaced by <redacted>."""
    return _URL_USERINFO.sub(rf"\g<scheme>{REDACTED}@", text)


def url_userinfo(text: str) -> list[str]:
    """The "user:password" part of each URL in the text, as written."""
    return [match.group("userinfo") for match in _URL_USERINFO.finditer(text) if match.group("userinfo")]


def known_surfaces() -> list[str]:
    """The installed adapters' names: console, telegram, discord and any third-party platform."""
    return sorted({ep.name for ep in entry_points(group=ADAPTER_GROUP)})


class StorageSettings(_Section):
    # The embedded default: one SQLite file. Ignored when `url` is set.
    path: Path = Path("data/bridge.db")
    # A PostgreSQL server shared by every worker: "postgresql://user@host:port/db".
    url: str | None = None
    # Connections each worker keeps to the PostgreSQL server.
    pool_size: int = Field(10, ge=1, le=200)

    @field_validator("url")
    @classmethod
    def _postgres_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        if not value.startswith(("postgresql://", "postgres://")):
            raise ValueError(
                "must be a PostgreSQL URL, postgresql://user@host:port/database "
                "(leave it out to use the SQLite file at [storage] path)"
            )
        return value

    @property
    def postgres(self) -> bool:
        return self.url is not None

    def describe(self) -> str:
        """Where the data is, for messages: the file, or the URL without its credentials."""
        return mask_url(self.url) if self.url else str(self.path)


class ToolsSettings(_Section):
    workspace: Path = Path("data/workspace")
    allow_private_network: bool = False
    default_timeout_s: float = Field(30.0, gt=0)
    # Per-tool overrides of default_timeout_s, e.g. { webfetch = 20 }.
    timeouts: dict[str, Annotated[float, Field(gt=0)]] = Field(default_factory=dict)
    # JSON manifests (files or folders of *.json) that define extra tool groups.
    manifests: list[Path] = Field(default_factory=list)
    web_max_bytes: int = Field(2_000_000, gt=0)
    web_max_chars: int = Field(20_000, gt=0)
    file_max_bytes: int = Field(1_000_000, gt=0)
    # Tool or group names the model never sees, e.g. ["web", "write_file"].
    disabled: list[str] = Field(default_factory=list)


class RunsSettings(_Section):
    """How turns are scheduled: concurrency, what happens to messages sent while busy, shutdown."""

    max_concurrent_runs: int = Field(8, ge=1, le=1000)
    # "collect": messages sent during a run are answered together in one follow-up turn;
    # "followup": each gets a turn of its own, in order.
    queue_mode: Literal["followup", "collect"] = "collect"
    # Messages one chat may have waiting; past it, a message is refused with a notice (not stored).
    max_queued: int = Field(20, ge=1, le=1000)
    shutdown_grace_s: float = Field(8.0, ge=0, le=600)
    # Runs whose traces (model requests, tool calls, timings) are kept; older ones are pruned and
    # their run rows stay. 0 records no traces.
    keep_traces: int = Field(1000, ge=0, le=1_000_000)


class DeliverySettings(_Section):
    """What happens to a message that was being sent when Bridge was killed."""

    # Telegram has no idempotency key: a send in flight at a crash may or may not have arrived.
    # true: send it again at the next start (at least once); false: record it as 'uncertain' and
    # send nothing (at most once). Discord needs neither: its nonces make a resend safe.
    resend_uncertain: bool = True


def is_loopback(host: str) -> bool:
    """Whether a listen address is reachable from this machine only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


class AdminSettings(_Section):
    """The admin HTTP server inside `bridge run`: health, metrics, the API and the dashboard."""

    enabled: bool = False
    listen: str = "127.0.0.1"
    port: int = Field(8765, ge=1, le=65535)
    # Bearer token (or the login form's) for every route. Unset on a loopback address, each start
    # makes one and writes it to admin.token beside the database (`bridge admin` prints the URL).
    token: SecretStr = SecretStr("")
    # Open connections past this close the oldest still sending no request header, or are refused
    # (503); a connection with no whole header this long after opening is closed (bridge/serving.py).
    max_connections: int = Field(256, ge=1, le=100_000)
    header_timeout_s: float = Field(10.0, gt=0, le=300)

    @model_validator(mode="after")
    def _safe(self) -> AdminSettings:
        token = self.token.get_secret_value()
        if token and len(token) < 16:
            raise ValueError("token must be at least 16 characters (e.g. `openssl rand -hex 24`)")
        if self.enabled and not token and not is_loopback(self.listen):
            raise ValueError(
                f"token is required when listen ({self.listen}) is not a loopback address: anyone who can "
                "reach the port could read every chat (or BRIDGE_ADMIN__TOKEN)"
            )
        return self


class LoopSettings(_Section):
    """When a run is cut short for going in circles (one last request, without tools, gets the answer)."""

    # A call identical (name and normalised arguments) to one that already succeeded in the run is not
    # run again, and the run stops: it can only return what the model already has.
    stop_on_repeat: bool = True
    # Failing calls in a row, whatever the tools or arguments, that stop a run; 0 never stops.
    max_failures_in_a_row: int = Field(3, ge=0, le=100)
    # Calls of unknown tools, or of tools whose group is not loaded, that stop a run; 0 never stops.
    max_unavailable_calls: int = Field(2, ge=0, le=100)


class AgentSettings(_Section):
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    max_iterations: int = Field(12, ge=1, le=200)
    loops: LoopSettings = Field(default_factory=LoopSettings)
    history_limit: int = Field(60, ge=2, le=10_000)
    # A character budget for the replayed history, so a long session never outgrows the model's
    # context (about 4 characters a token); the oldest turns are left out first.
    history_max_chars: int = Field(48_000, ge=1_000)
    # Past history_max_chars or history_limit, the oldest whole turns are summarised by the model
    # (after the reply is sent) and the summary replayed in their place; false only leaves them out.
    compaction: bool = True
    max_tool_result_chars: int = Field(8_000, ge=200)
    run_timeout_s: float = Field(300.0, gt=0)
    memory_limit: int = Field(20, ge=0, le=500)
    timezone: str = "UTC"

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: Any) -> Any:
        if isinstance(data, dict) and "max_concurrent_runs" in data:
            raise ValueError("max_concurrent_runs has moved to [runs] max_concurrent_runs")
        return data

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        # A folder of the zone database such as 'Europe' raises IsADirectoryError, an OSError.
        except (ZoneInfoNotFoundError, ValueError, OSError):
            raise ValueError(f"{value!r} is not an IANA time zone such as 'Europe/Berlin'") from None
        return value


def _id_list(value: Any) -> Any:
    """Ids may be written as numbers or strings; they are compared as strings."""
    if isinstance(value, list):
        return [str(item) if isinstance(item, int) and not isinstance(item, bool) else item for item in value]
    return value


class AccessSettings(_Section):
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
    # worker of the bot: adapters/telegram.py webhook_secret_of).
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


class RuleMatch(_Section):
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


class SendRule(_Section):
    action: Literal["allow", "deny", "ignore"]
    match: RuleMatch = Field(default_factory=RuleMatch)


class SendPolicySettings(_Section):
    """Where the bot may speak: reloaded live when the config file changes or on SIGHUP."""

    default: Literal["allow", "deny"] = "allow"
    rules: list[SendRule] = Field(default_factory=list)


class AgentToAgentSettings(_Section):
    max_ping_pong_turns: int = Field(5, ge=0, le=5)


class SessionSettings(_Section):
    send_policy: SendPolicySettings = Field(default_factory=SendPolicySettings)
    agent_to_agent: AgentToAgentSettings = Field(default_factory=AgentToAgentSettings)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="BRIDGE_", env_nested_delimiter="__", extra="forbid", case_sensitive=False
    )

    owners: list[str] = Field(default_factory=list)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["text", "json"] = "text"
    log_level_libraries: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "WARNING"
    llm: LLMSettings = Field(default_factory=LLMSettings)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    tools: ToolsSettings = Field(default_factory=ToolsSettings)
    agent: AgentSettings = Field(default_factory=AgentSettings)
    runs: RunsSettings = Field(default_factory=RunsSettings)
    delivery: DeliverySettings = Field(default_factory=DeliverySettings)
    telegram: TelegramSettings = Field(default_factory=TelegramSettings)
    discord: DiscordSettings = Field(default_factory=DiscordSettings)
    session: SessionSettings = Field(default_factory=SessionSettings)
    admin: AdminSettings = Field(default_factory=AdminSettings)
    tasks: TasksSettings = Field(default_factory=TasksSettings)
    # [[hooks]]: webhooks, POST /hooks/<name> (see bridge.config.tasks.HookSettings).
    hooks: list[HookSettings] = Field(default_factory=list)
    # [skills] paths: folders of SKILL.md instructions (see bridge.config.skills, bridge.skills).
    skills: SkillsSettings = Field(default_factory=SkillsSettings)
    # [mcp] and [[mcp.servers]]: MCP servers as tool groups (see bridge.config.mcp).
    mcp: McpSettings = Field(default_factory=McpSettings)
    # [media]: attachments users send (see bridge.config.media); [stt]: where voice is transcribed.
    media: MediaSettings = Field(default_factory=MediaSettings)
    stt: SttSettings = Field(default_factory=SttSettings)

    @field_validator("log_level", "log_level_libraries", mode="before")
    @classmethod
    def _upper_level(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("log_format", mode="before")
    @classmethod
    def _lower_format(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @field_validator("owners")
    @classmethod
    def _owner_ids(cls, value: list[str]) -> list[str]:
        for owner in value:
            if not _OWNER_RE.match(owner):
                raise ValueError(f"{owner!r} is not of the form surface:user_id, e.g. 'telegram:42'")
        return value

    @field_validator("hooks")
    @classmethod
    def _hooks_served(cls, hooks: list[HookSettings], info: ValidationInfo) -> list[HookSettings]:
        # A field validator, so an error names `hooks`; [admin] and [telegram] come before it and are
        # in info.data unless they failed themselves (then their own error says enough).
        admin, telegram = info.data.get("admin"), info.data.get("telegram")
        served = None
        if isinstance(admin, AdminSettings) and isinstance(telegram, TelegramSettings):
            served = admin.enabled or (telegram.enabled and telegram.mode == "webhook")
        check_hooks(hooks, served=served)
        return hooks

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The file's values arrive as init kwargs; the environment overrides them.
        return (env_settings, init_settings)
