"""Tool, ToolResult, ToolGroup and the context a tool runs in."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from bridge.config import Settings
    from bridge.store.base import SessionRow, Store
    from bridge.tools.registry import ToolRegistry


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool hands back: data for the model, never an exception into the loop."""

    ok: bool
    content: str
    code: str | None = None

    @classmethod
    def success(cls, content: str | dict[str, Any] | list[Any]) -> ToolResult:
        if not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False, default=str)
        return cls(ok=True, content=content)

    @classmethod
    def error(cls, code: str, message: str) -> ToolResult:
        return cls(ok=False, content=f"Error [{code}]: {message}", code=code)

    @property
    def status(self) -> str:
        return "success" if self.ok else "error"


class SessionMessenger(Protocol):
    """Runs a message from one session's agent in another session (sessions_send)."""

    async def send(
        self, requester: SessionRow, target: SessionRow, message: str, timeout_s: float
    ) -> dict[str, Any]: ...


# The channel of a run that another session's agent started; such a run may not start another.
AGENT_CHANNEL = "agent"


@dataclass(slots=True)
class ToolContext:
    """Everything a tool may touch during one run; the run's loaded groups live here."""

    settings: Settings
    store: Store
    registry: ToolRegistry
    session: SessionRow
    run_id: str
    loaded_groups: set[str] = field(default_factory=set)
    # Where the run's input came from: a surface name, or AGENT_CHANNEL.
    channel: str | None = None
    messenger: SessionMessenger | None = None


ToolHandler = Callable[[dict[str, Any], ToolContext], Awaitable[ToolResult]]


@dataclass(frozen=True, slots=True)
class Tool:
    """A callable the model may use: name, description, JSON-schema parameters and an async run."""

    name: str
    description: str
    parameters: dict[str, Any]
    run: ToolHandler
    # None falls back to [tools] default_timeout_s.
    timeout_s: float | None = None

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-tool form sent to the model."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


@dataclass(frozen=True, slots=True)
class ToolGroup:
    """Tools sent to the model only after `load_tool_group` loaded them."""

    name: str
    description: str
    tools: tuple[Tool, ...]
    display_name: str = ""

    @property
    def title(self) -> str:
        return self.display_name or self.name.replace("_", " ").title()


def params(properties: dict[str, Any] | None = None, required: list[str] | None = None) -> dict[str, Any]:
    """A JSON-schema object for a tool's parameters."""
    schema: dict[str, Any] = {"type": "object", "properties": properties or {}}
    if required:
        schema["required"] = required
    return schema


def clamp_int(value: Any, *, default: int, high: int, low: int = 1) -> int:
    """A model-supplied count, forced into [low, high]; anything not a number gives the default."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    return max(low, min(high, int(value)))
