"""The agent of each chat, as the running bot knows it: [agents.NAME], [[agents.bindings]] and /agent.

`ChatAgents` holds the [agents] of the last good config (a reload swaps them, as it swaps the send
policy) and answers, for a session: which agent it has and why (`of`), what a run of it uses (`for_run`:
the prompt, the language, the registry and skills it may use, the workspace) and which model profile
it runs on (`model_profile`). The runner, the commands and the dashboard share one instance.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from bridge.config import Settings
from bridge.config.agents import AgentChoice, AgentsSettings
from bridge.skills import SkillCatalog
from bridge.store.base import SessionRow
from bridge.tools.registry import ToolRegistry

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RunAgent:
    """What one run of a chat's agent uses, the default agent's values filled in where it sets none."""

    choice: AgentChoice
    # The operator's instructions: the agent's prompt, or [agent] system_prompt. The prompt builder
    # adds the date, the chat, memories, summaries, the tool group listing and the skills after it.
    system_prompt: str
    # "Answer in <language>." follows the prompt; None says nothing about the language.
    language: str | None
    # The registry as this agent sees it: only the groups it may use (ToolRegistry.only).
    registry: ToolRegistry
    # The skills it may list and load.
    skills: SkillCatalog
    # Where its file tools work: its own workspace, or [tools] workspace.
    workspace: Path

    @property
    def name(self) -> str:
        return self.choice.name

    def instructions(self) -> str:
        """The first part of the system prompt: the prompt, then the language sentence if any."""
        prompt = self.system_prompt.strip()
        return f"{prompt}\n\nAnswer in {self.language}." if self.language else prompt


class ChatAgents:
    """The agents in force: `update` swaps them while the bot runs (config reload)."""

    def __init__(self, settings: Settings, registry: ToolRegistry) -> None:
        # The settings the bot started with: the default agent's prompt, skills and workspace, and
        # the model profiles, which a reload does not change.
        self.settings = settings
        self.registry = registry
        self.agents = settings.agents
        self._warn_unknown_groups()

    def update(self, agents: AgentsSettings) -> None:
        """Take the [agents] of a reloaded config: bindings and agents apply from the next run on."""
        self.agents = agents
        self._warn_unknown_groups()

    def of(self, session: SessionRow) -> AgentChoice:
        """The session's agent and why: main's is the default; then /agent; then the bindings."""
        return self.agents.resolve(session.key, session.surface, session.agent)

    def for_run(self, session: SessionRow) -> RunAgent:
        """What a run of the session's agent uses."""
        choice = self.of(session)
        agent = choice.agent
        catalog = self.settings.skills.catalog
        if agent is None:
            return RunAgent(
                choice,
                self.settings.agent.system_prompt,
                None,
                self.registry,
                catalog,
                Path(self.settings.tools.workspace),
            )
        skills = (
            catalog
            if agent.skills is None
            else SkillCatalog(s for s in catalog if agent.may_use_skill(s.name))
        )
        return RunAgent(
            choice,
            agent.prompt or self.settings.agent.system_prompt,
            agent.language,
            self.registry.only(agent.tool_groups),
            skills,
            agent.workspace if agent.workspace is not None else Path(self.settings.tools.workspace),
        )

    def model_profile(self, session: SessionRow) -> str | None:
        """The model profile the session's runs ask for: its /model choice, else its agent's; None
        is [llm]. Profiles.resolve (or LLMSettings.profile_of) makes it a configured profile."""
        return self.of(session).model_profile(session.model_profile)

    def profile_of(self, session: SessionRow) -> str:
        """The configured profile the session's runs use, for /model, /status and the dashboard."""
        return self.settings.llm.profile_of(self.model_profile(session))

    def _warn_unknown_groups(self) -> None:
        # Groups are known only once the registry is built (manifests, MCP servers, [tools] disabled),
        # after the config was checked: a name that is no group is said once here, and left out.
        known = {group.name for group in self.registry.groups()}
        for name, agent in self.agents.agents.items():
            for group in sorted(set(agent.tool_groups or ()) - known):
                log.warning(
                    "agents.%s.tool_groups: %r is not a tool group here (groups: %s); the agent goes "
                    "without it",
                    name,
                    group,
                    ", ".join(sorted(known)) or "none",
                )
