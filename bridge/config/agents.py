"""Config of [agents.NAME] and [[agents.bindings]]: different agents for different chats.

An agent is a system prompt, the tool groups and skills it may use, its workspace, its model profile
and its language. A chat's agent is, in order: `main`'s is always the default agent ([agent],
[tools] workspace, [llm]); an owner's `/agent NAME` for the chat (stored on its session row); the
first binding whose match covers the chat (the send policy's matcher); else the default agent.

    [agents.support]
    system_prompt_file = "prompts/support.md"
    tool_groups = ["web"]
    skills = []
    model_profile = "local"
    language = "German"

    [[agents.bindings]]
    agent = "support"
    match = { surface = "telegram", chat_type = "group" }

`AgentsSettings.resolve` answers which agent a chat has and why; the running bot keeps the settings
of the last good config (bridge.agent.chat_agents.ChatAgents, swapped by a reload).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails

from bridge.config.base import Section
from bridge.config.llm import LLMSettings
from bridge.config.session import Place, RuleMatch, describe_match, matches
from bridge.sessions.keys import MAIN
from bridge.skills import SkillCatalog

# The agent a chat has when nothing else picks one: [agent]'s prompt, every group and skill, [tools]
# workspace, [llm]. Also what `/agent default` goes back to (the bindings).
DEFAULT_AGENT = "default"
_AGENT_NAME = re.compile(r"^[a-z0-9_-]+$")
# Not agent names: the table's own key, and the default agent.
_RESERVED = frozenset({DEFAULT_AGENT, "bindings"})
# A prompt file is read into memory at every config load; a bigger one is a mistake, not a prompt.
MAX_PROMPT_FILE_BYTES = 200_000

Source = Literal["main", "chosen", "binding", "default"]


class NamedAgent(Section):
    """One [agents.NAME] table. A key left out means the default agent's: [agent] system_prompt, every
    tool group and skill, [tools] workspace, the model [llm] (or the chat's /model) answers with."""

    # The agent's instructions, in place of [agent] system_prompt; or a file that holds them (a path
    # relative to the config file's folder). The date, the chat, memories, the tool group listing and
    # the skills are added after it, as for the default agent.
    system_prompt: str | None = None
    system_prompt_file: Path | None = None
    # The tool groups it may load (core tools are always there); left out: every group. A group not
    # in the list is never listed, loaded or restored from history in its chats.
    tool_groups: list[str] | None = None
    # The skills it may load; left out: every configured skill.
    skills: list[str] | None = None
    # The folder its file tools (and exec, send_file, the browser's files) work in; left out: [tools]
    # workspace. Relative to the config file's folder.
    workspace: Path | None = None
    # An [llm.profiles.NAME] ("default": [llm]); a chat's own /model choice wins over it.
    model_profile: str | None = None
    # "Answer in <language>." is added to its prompt, e.g. "German".
    language: str | None = None
    # The prompt as the run uses it: system_prompt, or the file's text read when the config loaded.
    _prompt: str | None = PrivateAttr(default=None)

    @field_validator("tool_groups", "skills")
    @classmethod
    def _names(cls, value: list[str] | None) -> list[str] | None:
        # Groups and skills are named in lowercase; a stray space or capital would match nothing.
        if value is None:
            return None
        names = [name.strip().lower() for name in value]
        if any(not name for name in names):
            raise ValueError("an empty name; list names such as ['web', 'files'], or [] for none")
        return sorted(set(names), key=names.index)

    @field_validator("language")
    @classmethod
    def _language(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("empty; name a language such as 'German', or leave the key out")
        return value.strip() if value is not None else None

    @model_validator(mode="after")
    def _read_prompt(self) -> NamedAgent:
        # After Section._rebase_paths (a base class's after-validators run first): the file's path is
        # already taken from the config file's folder. Read here, so a missing file is a config error
        # (check-config, a start, a reload), never something a run finds out.
        if self.system_prompt is not None and self.system_prompt_file is not None:
            raise _invalid(self, "system_prompt_file", "system_prompt is set too: keep one of the two")
        if self.system_prompt_file is not None:
            try:
                self._prompt = _read_prompt_file(self.system_prompt_file)
            except ValueError as exc:
                raise _invalid(self, "system_prompt_file", str(exc)) from None
            where = "system_prompt_file"
        else:
            self._prompt, where = self.system_prompt, "system_prompt"
        if self._prompt is not None and not self._prompt.strip():
            raise _invalid(self, where, "the prompt is empty; leave the key out for the default prompt")
        return self

    @property
    def prompt(self) -> str | None:
        """The agent's own instructions (from system_prompt or its file); None: the default prompt."""
        return self._prompt

    def may_use_skill(self, name: str) -> bool:
        return self.skills is None or name in self.skills


def _read_prompt_file(path: Path) -> str:
    try:
        if path.stat().st_size > MAX_PROMPT_FILE_BYTES:
            raise ValueError(f"{path} is over {MAX_PROMPT_FILE_BYTES:,} bytes")
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"{path} does not exist") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not UTF-8 text; save it as UTF-8") from None
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None


def _invalid(model: Section, key: str, reason: str) -> ValidationError:
    """A ValidationError of one key of `model`, so the message names that key (agents.NAME.key)."""
    return ValidationError.from_exception_data(
        type(model).__name__, [_problem((key,), getattr(model, key), reason)]
    )


class AgentBinding(Section):
    """One [[agents.bindings]] entry: chats its match covers get this agent (the first match wins)."""

    agent: str
    # The send policy's matcher: surface, chat_type ("group" also covers channels), key_prefix.
    match: RuleMatch = Field(default_factory=RuleMatch)


@dataclass(frozen=True, slots=True)
class AgentChoice:
    """A chat's agent and why it has it, as /agent, /status and the dashboard say it."""

    # DEFAULT_AGENT or the name of an [agents.NAME] table.
    name: str
    # Worded for a chat: "bound by binding 1 (chat_type=group)", "chosen with /agent", ...
    reason: str
    source: Source
    # The agent's table; None for the default agent.
    agent: NamedAgent | None = None

    @property
    def is_default(self) -> bool:
        return self.agent is None

    def model_profile(self, chosen: str | None) -> str | None:
        """The model profile a run of this chat asks for: the chat's own /model choice wins (the more
        specific choice), then the agent's model_profile; None is [llm]. As asked: a profile that left
        the config is the default's (LLMSettings.profile_of, Profiles.resolve)."""
        if chosen is not None:
            return chosen
        return self.agent.model_profile if self.agent is not None else None


class AgentsSettings(Section):
    """[agents]: [agents.NAME] tables (any name but "default" and "bindings") and [[agents.bindings]].

    The API other parts use: `get(name)`, `names`, `resolve(key, surface, chosen)`.
    """

    # Every key but `bindings` is an agent's table, checked as a NamedAgent (its errors name the key).
    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, NamedAgent] = Field(init=False)

    bindings: list[AgentBinding] = Field(default_factory=list)

    @model_validator(mode="after")
    def _agent_names(self) -> AgentsSettings:
        problems = [_problem((name,), name, why) for name in self.agents if (why := _name_problem(name))]
        known = {DEFAULT_AGENT, *self.agents}
        problems += [
            _problem(
                ("bindings", index, "agent"),
                binding.agent,
                f"{binding.agent!r} is not an agent; agents: {_listed(known)}",
            )
            for index, binding in enumerate(self.bindings)
            if binding.agent not in known
        ]
        if problems:
            raise ValidationError.from_exception_data(type(self).__name__, problems)
        return self

    @property
    def agents(self) -> dict[str, NamedAgent]:
        """The [agents.NAME] tables by name, as written."""
        return dict(self.__pydantic_extra__ or {})

    @property
    def names(self) -> list[str]:
        """The names /agent takes: "default" first, then the agents by name."""
        return [DEFAULT_AGENT, *sorted(self.agents)]

    def get(self, name: str) -> NamedAgent | None:
        """The agent of this name; None for "default" (the default agent has no table) or no such agent."""
        return self.agents.get(name)

    def choice(self, name: str, reason: str, source: Source) -> AgentChoice:
        """An AgentChoice for a known name (DEFAULT_AGENT included)."""
        return AgentChoice(name, reason, source, self.get(name))

    def resolve(self, key: str, surface: str | None = None, chosen: str | None = None) -> AgentChoice:
        """The agent of the chat with this session key: `main` keeps the default agent; then `chosen`
        (the chat's /agent, None for none) if still configured; then the first binding that matches;
        else the default agent. `surface` is where a key that spans surfaces is spoken to."""
        if key == MAIN:
            return self.choice(DEFAULT_AGENT, "main keeps the default agent", "main")
        gone = ""
        if chosen is not None:
            if chosen in self.agents:
                return self.choice(chosen, "chosen with /agent", "chosen")
            gone = f"the agent {chosen} chosen with /agent is no longer configured; "
        place = Place.of(key, surface)
        for index, binding in enumerate(self.bindings):
            if matches(binding.match, place):
                why = f"{gone}bound by binding {index + 1} ({describe_match(binding.match)})"
                return self.choice(binding.agent, why, "binding")
        return self.choice(DEFAULT_AGENT, f"{gone}no binding matches this chat", "default")


def _name_problem(name: str) -> str | None:
    if name in _RESERVED:
        return f"{name!r} is reserved; choose another agent name"
    if not _AGENT_NAME.match(name):
        return f"{name!r} is not an agent name: use lowercase letters, digits, _ and -, e.g. 'support'"
    return None


def _listed(names: set[str]) -> str:
    return ", ".join([DEFAULT_AGENT, *sorted(names - {DEFAULT_AGENT})])


def check_agents(agents: AgentsSettings, llm: LLMSettings | None, skills: SkillCatalog | None) -> None:
    """What one table cannot check alone: each agent's model_profile is an [llm] profile, and each
    skill it names is configured. Raises a ValidationError whose errors name the agent's key; a
    section that failed on its own (None) is not checked against."""
    problems: list[InitErrorDetails] = []
    for name, agent in agents.agents.items():
        profile = agent.model_profile
        if llm is not None and profile is not None and profile not in llm.profile_names():
            known = ", ".join(llm.profile_names())
            why = f"{profile!r} is not a model profile; profiles: {known}"
            problems.append(_problem((name, "model_profile"), profile, why))
        if skills is None:
            continue
        for skill in agent.skills or ():
            if skills.get(skill) is None:
                known = ", ".join(skills.names()) or "none ([skills] paths finds none)"
                problems.append(
                    _problem((name, "skills"), skill, f"{skill!r} is not a skill; skills: {known}")
                )
    if problems:
        raise ValidationError.from_exception_data(type(agents).__name__, problems)


def _problem(loc: tuple[str | int, ...], value: object, reason: str) -> InitErrorDetails:
    return InitErrorDetails(type="value_error", loc=loc, input=value, ctx={"error": ValueError(reason)})


__all__ = [
    "DEFAULT_AGENT",
    "AgentBinding",
    "AgentChoice",
    "AgentsSettings",
    "NamedAgent",
    "check_agents",
]
