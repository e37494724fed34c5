"""Settings (layer 10): a TOML file overridden by BRIDGE_<SECTION>__<KEY> environment variables.

`settings.py` is the root, `Settings`; each section has a module of its own (`llm`, `mcp`, `media`,
`skills`, `tasks`, ...), on `base.py` (`Section`, URL checks); `io.py` reads TOML and the environment
into Settings and renders them back, secrets redacted. Import a name from its module; `Settings`
and the names below stay importable from `bridge.config` itself.

May import pydantic and the base modules (`bridge.errors`, `bridge.text`, ...), nothing above.
Not yet: `tasks.py` checks a hook's session keys and prompt with `bridge.sessions.keys` and
`bridge.tasks.template`, and `skills.py` reads the skills with `bridge.skills`, when the config loads.
"""

from bridge.config.settings import (
    ADAPTER_GROUP,
    DEFAULT_PROFILE,
    DEFAULT_SYSTEM_PROMPT,
    REDACTED,
    AccessSettings,
    AdminSettings,
    AgentSettings,
    AgentToAgentSettings,
    DeliverySettings,
    DiscordSettings,
    HookSettings,
    LLMProfile,
    LLMSettings,
    LoopSettings,
    McpSettings,
    MediaSettings,
    RuleMatch,
    RunsSettings,
    SendPolicySettings,
    SendRule,
    SessionSettings,
    Settings,
    SkillsSettings,
    StorageSettings,
    SttSettings,
    TasksSettings,
    TelegramSettings,
    ToolsSettings,
    is_loopback,
    known_surfaces,
    mask_url,
    url_userinfo,
)

__all__ = [
    "ADAPTER_GROUP",
    "DEFAULT_PROFILE",
    "DEFAULT_SYSTEM_PROMPT",
    "REDACTED",
    "AccessSettings",
    "AdminSettings",
    "AgentSettings",
    "AgentToAgentSettings",
    "DeliverySettings",
    "DiscordSettings",
    "HookSettings",
    "LLMProfile",
    "LLMSettings",
    "LoopSettings",
    "McpSettings",
    "MediaSettings",
    "RuleMatch",
    "RunsSettings",
    "SendPolicySettings",
    "SendRule",
    "SessionSettings",
    "Settings",
    "SkillsSettings",
    "StorageSettings",
    "SttSettings",
    "TasksSettings",
    "TelegramSettings",
    "ToolsSettings",
    "is_loopback",
    "known_surfaces",
    "mask_url",
    "url_userinfo",
]
