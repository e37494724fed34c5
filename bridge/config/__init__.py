"""Settings, under everything but the grammars it checks with and the base modules: a TOML file
overridden by BRIDGE_<SECTION>__<KEY> environment variables.

`settings.py` is the root, `Settings`, and each section has a module of its own: `platforms`
([telegram], [discord], access), `llm`, `agent`, `runs` ([runs], [delivery]), `session` (send policy,
and the matcher its rules share with agent bindings), `agents` ([agents.NAME], [[agents.bindings]]),
`storage`, `tools`, `admin`, `tasks` ([tasks], [[hooks]]), `skills`, `mcp`, `media` ([media], [stt],
[tts]); all on `base.py` (`Section`, URL checks and redaction). `io.py` reads TOML and the environment
into Settings and renders them back, secrets redacted. Import a name from its module; `Settings`
and the names below stay importable from `bridge.config` itself.

May import pydantic, the base modules (`bridge.errors`, `bridge.text`, ...) and the grammars it checks
values with, which import nothing of Bridge's and sit below it in the layers: `bridge.sessions.keys`
(a hook's session keys), `bridge.tasks.template` (a hook's prompt) and `bridge.skills` (SKILL.md
files, read when the config loads).
"""

from bridge.config.admin import AdminSettings
from bridge.config.agent import DEFAULT_SYSTEM_PROMPT, AgentSettings, LoopSettings
from bridge.config.agents import DEFAULT_AGENT, AgentBinding, AgentChoice, AgentsSettings, NamedAgent
from bridge.config.base import REDACTED, is_loopback, mask_url, url_userinfo
from bridge.config.llm import DEFAULT_PROFILE, LLMProfile, LLMSettings
from bridge.config.mcp import McpSettings
from bridge.config.media import MediaSettings, SttSettings, TtsSettings
from bridge.config.platforms import (
    ADAPTER_GROUP,
    AccessSettings,
    DiscordSettings,
    TelegramSettings,
    known_surfaces,
)
from bridge.config.runs import DeliverySettings, RunsSettings
from bridge.config.session import (
    AgentToAgentSettings,
    RuleMatch,
    SendPolicySettings,
    SendRule,
    SessionSettings,
)
from bridge.config.settings import Settings
from bridge.config.skills import SkillsSettings
from bridge.config.storage import StorageSettings
from bridge.config.tasks import HookSettings, TasksSettings
from bridge.config.tools import ToolsSettings

__all__ = [
    "ADAPTER_GROUP",
    "DEFAULT_AGENT",
    "DEFAULT_PROFILE",
    "DEFAULT_SYSTEM_PROMPT",
    "REDACTED",
    "AccessSettings",
    "AdminSettings",
    "AgentBinding",
    "AgentChoice",
    "AgentSettings",
    "AgentToAgentSettings",
    "AgentsSettings",
    "DeliverySettings",
    "DiscordSettings",
    "HookSettings",
    "LLMProfile",
    "LLMSettings",
    "LoopSettings",
    "McpSettings",
    "MediaSettings",
    "NamedAgent",
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
    "TtsSettings",
    "is_loopback",
    "known_surfaces",
    "mask_url",
    "url_userinfo",
]
