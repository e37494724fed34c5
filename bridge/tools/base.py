"""Tool, ToolResult, ToolGroup and the context a tool runs in."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel

from bridge.tools.checking import checked_arguments

# ToolResult lives in a leaf module (the argument checking builds on it too); it is part of this
# module's vocabulary, and imported from here.
from bridge.tools.result import ToolResult as ToolResult

if TYPE_CHECKING:
    from bridge.config import Settings
    from bridge.sessions.authority import Authorities, Authority
    from bridge.skills import SkillCatalog
    from bridge.store.base import SessionRow
    from bridge.store.tables import DatabaseStore
    from bridge.tasks.catalog import TaskCatalog


class ToolLookup(Protocol):
    """What a tool may ask of the registry it runs with (bridge.tools.registry.ToolRegistry, as the
    run's agent sees it): its groups, loading one, a tool by name, and whether a group is withheld."""

    def group(self, name: str) -> ToolGroup | None: ...

    def groups(self) -> list[ToolGroup]: ...

    async def load(self, group: ToolGroup) -> tuple[Tool, ...]: ...

    def get(self, tool_name: str) -> Tool | None: ...

    def withheld(self, name: str) -> bool: ...


class SessionMessenger(Protocol):
    """Runs a message from one session's agent in another session (sessions_send); the run there acts
    with the requester's authority narrowed to that session's chat."""

    async def send(
        self,
        requester: SessionRow,
        target: SessionRow,
        message: str,
        timeout_s: float,
        authority: Authority,
    ) -> dict[str, Any]: ...


class SubAgentSpawner(Protocol):
    """Starts a sub-agent (spawn_agent): a run of its own in a new session `agent:<parent session
    id>:<n>`, with the parent run's authority narrowed to that session (bridge.gateway.subagents)."""

    async def spawn(
        self,
        parent: SessionRow,
        parent_run_id: str,
        authority: Authority,
        task: str,
        *,
        agent: str | None,
        wait: bool,
    ) -> ToolResult: ...


class FileSender(Protocol):
    """Sends a workspace file to a session's chat (send_file), through the outbox and its send policy."""

    async def send_file(self, session: SessionRow, path: Path, caption: str) -> ToolResult: ...


# The channel of a run that another session's agent started; such a run may not start another.
AGENT_CHANNEL = "agent"
# The channel of a sub-agent's run (spawn_agent); it may not start another sub-agent.
SUBAGENT_CHANNEL = "subagent"


@dataclass(slots=True)
class ToolContext:
    """Everything a tool may touch during one run; the run's loaded groups and skills live here."""

    settings: Settings
    store: DatabaseStore
    registry: ToolLookup
    session: SessionRow
    run_id: str
    # Whom the run acts for: every tool that could reach another chat or an owner's data asks it.
    authority: Authority
    # Who the owners are: an owner's DM key names main (Authorities.canonical).
    authorities: Authorities
    loaded_groups: set[str] = field(default_factory=set)
    # Where the run's input came from: a surface name, or AGENT_CHANNEL.
    channel: str | None = None
    messenger: SessionMessenger | None = None
    # Scheduled tasks (the scheduled_tasks group); None where the bot runs no scheduler.
    tasks: TaskCatalog | None = None
    # Skills loaded in earlier turns (restored from history) and by load_skill in this run: their
    # instructions are in the system prompt of every later request.
    loaded_skills: set[str] = field(default_factory=set)
    # Where send_file hands its file; None where the bot has no chat to send to.
    files: FileSender | None = None
    # The skills the run's agent may load ([agents.NAME] skills); None: every configured skill.
    skills: SkillCatalog | None = None
    # The folder the file tools (and exec, send_file, the browser) work in: the run's agent's
    # workspace; None: [tools] workspace.
    workspace: Path | None = None
    # Where spawn_agent starts sub-agents; None where the bot runs none.
    spawner: SubAgentSpawner | None = None

    @property
    def skill_catalog(self) -> SkillCatalog:
        """The skills this run may list and load: its agent's, or every configured one."""
        return self.skills if self.skills is not None else self.settings.skills.catalog


# Called with what bridge.tools.arguments.validate_arguments made of the call's JSON arguments: an
# instance of the tool's `arguments` model, or the checked dict for a tool without one.
ToolHandler = Callable[[Any, ToolContext], Awaitable[ToolResult]]


@dataclass(frozen=True, slots=True)
class Tool:
    """A callable the model may use: name, description, JSON-schema parameters and an async run.

    A built-in tool declares its arguments as a pydantic model (`arguments`) and its `parameters`
    are made from it (bridge.tools.arguments.typed_tool); a manifest tool has only the JSON schema.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    run: ToolHandler
    # None falls back to [tools] default_timeout_s.
    timeout_s: float | None = None
    arguments: type[BaseModel] | None = None
    # Where the tool runs, when not in Bridge (e.g. "MCP server 'fs'"): named in its timeout errors.
    origin: str = ""
    # A successful result said in plain words ("It's 23:32 on Friday in Tokyo (Asia/Tokyo)."), for a
    # run whose model gives no answer of its own; None falls back to a generic rendering.
    plain: Callable[[str], str | None] | None = None
    # Whether the tool is offered to a run at all (spawn_agent is not, in a sub-agent's run); None:
    # always. A call the model makes anyway reaches the tool, which refuses it in words.
    offered: Callable[[ToolContext], bool] | None = None

    def offered_to(self, ctx: ToolContext) -> bool:
        return self.offered is None or self.offered(ctx)

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Call the tool as the model does: its JSON arguments validated, then `run` with the result.

        The runner does the same in two steps, so it can time the run alone.
        """
        checked = self.check(args)
        if isinstance(checked, ToolResult):
            return checked
        return await self.run(checked, ctx)

    def check(self, args: dict[str, Any]) -> BaseModel | dict[str, Any] | ToolResult:
        """What `run` receives for these JSON arguments, or the one invalid_arguments result instead."""
        return checked_arguments(self.name, self.arguments, self.parameters, args)

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-tool form sent to the model."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


class ToolSource(Protocol):
    """Where a lazily loaded group's tools come from (an MCP server): asked only once it is loaded."""

    def listed(self) -> tuple[Tool, ...] | None:
        """The tools as last listed in this process, without connecting; None if never listed."""
        ...

    async def load(self) -> tuple[Tool, ...]:
        """The tools, listed now if need be; ToolSourceError if the source cannot be reached."""
        ...

    async def restore(self) -> tuple[Tool, ...]:
        """For a group restored from history: the tools as an earlier process listed them if they
        were kept, else load()."""
        ...

    def names(self) -> frozenset[str]:
        """The names of the tools listed so far (for other sources' collision checks)."""
        ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ToolGroup:
    """Tools sent to the model only after `load_tool_group` loaded them.

    A group with a `source` (an MCP server) has no tools of its own: they are listed from the source
    when the group is first loaded, and `tools` stays empty.
    """

    name: str
    description: str
    tools: tuple[Tool, ...]
    display_name: str = ""
    source: ToolSource | None = None
    # What the group holds open between calls (a browser), closed when the registry closes.
    closer: Callable[[], Awaitable[None]] | None = None

    @property
    def title(self) -> str:
        return self.display_name or self.name.replace("_", " ").title()


def schemas_json(tools: Iterable[Tool]) -> str:
    """Tools exactly as a request carries them: the JSON list of their function schemas (what their
    token cost is counted on)."""
    return json.dumps([tool.schema() for tool in tools])


def params(properties: dict[str, Any] | None = None, required: list[str] | None = None) -> dict[str, Any]:
    """A JSON-schema object for a tool's parameters, for tools without an arguments model."""
    schema: dict[str, Any] = {"type": "object", "properties": properties or {}}
    if required:
        schema["required"] = required
    return schema
