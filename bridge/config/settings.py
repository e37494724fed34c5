"""Settings, the root: a TOML file overridden by BRIDGE_<SECTION>__<KEY> environment variables."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from bridge.config.admin import AdminSettings
from bridge.config.agent import AgentSettings
from bridge.config.agents import AgentsSettings, check_agents
from bridge.config.llm import LLMSettings
from bridge.config.mcp import McpSettings
from bridge.config.media import MediaSettings, SttSettings, TtsSettings
from bridge.config.platforms import DiscordSettings, MatrixSettings, SlackSettings, TelegramSettings
from bridge.config.runs import DeliverySettings, RunsSettings
from bridge.config.session import SessionSettings
from bridge.config.skills import SkillsSettings
from bridge.config.storage import StorageSettings
from bridge.config.tasks import HookSettings, TasksSettings, check_hooks
from bridge.config.tools import ToolsSettings
from bridge.sessions.keys import MATRIX_ID_RE

# surface:user_id, where a Matrix user id keeps its own ':' (matrix:@ann:example.org).
_OWNER_RE = re.compile(rf"^[a-z][a-z0-9_-]*:(?:[^\s:]+|{MATRIX_ID_RE.pattern})$")


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
    slack: SlackSettings = Field(default_factory=SlackSettings)
    matrix: MatrixSettings = Field(default_factory=MatrixSettings)
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
    # [tts]: where answers to voice notes are spoken (see bridge.config.media, bridge.media.speech).
    tts: TtsSettings = Field(default_factory=TtsSettings)
    # [agents.NAME] and [[agents.bindings]]: different agents for different chats (see
    # bridge.config.agents). After [llm] and [skills], which its check reads.
    agents: AgentsSettings = Field(default_factory=AgentsSettings)

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

    @field_validator("agents")
    @classmethod
    def _agents_known(cls, agents: AgentsSettings, info: ValidationInfo) -> AgentsSettings:
        # A field validator, so each error names agents.NAME.key; [llm] and [skills] come before it
        # and are in info.data unless they failed themselves (then their own error says enough).
        llm, skills = info.data.get("llm"), info.data.get("skills")
        check_agents(
            agents,
            llm if isinstance(llm, LLMSettings) else None,
            skills.catalog if isinstance(skills, SkillsSettings) else None,
        )
        return agents

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
