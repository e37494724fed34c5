"""The Provider seam: structured chat messages in, a completion with tool calls out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call as the model asked for it; `arguments` is the raw JSON text."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Image:
    """An image a user message carries: its hash in the media store, and its bytes once read for a
    request (only for the newest few, and only for a model that takes images)."""

    name: str
    mime: str
    sha256: str
    data: bytes | None = None

    def __repr__(self) -> str:
        # Never the bytes: a message is logged and traced by its fields.
        return f"Image({self.name!r}, {self.mime}, {len(self.data or b'')} bytes)"


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One structured message of the conversation sent to the model."""

    role: str  # system | user | assistant | tool
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    # A user message's images; a provider sends those with `data` as image parts.
    images: tuple[Image, ...] = ()


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Completion:
    """The model's answer: text, tool calls, or both."""

    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    raw: dict[str, Any] | None = None
    # The request body that produced this answer, as sent (for run traces).
    request: dict[str, Any] | None = None
    # Set when the text looks like a tool call in the wrong format: what to tell the model so it can
    # write it again properly. Nothing in such a reply runs.
    correction: str | None = None
    # Set when a streamed answer broke off after some of it was shown: why. `content` is what was
    # received, which is what the chat saw; it is not retried (that would show it twice).
    cut_short: str | None = None


class TextSink(Protocol):
    """Where a streamed answer's text goes as it arrives: the chat's live display of one model call."""

    @property
    def shown(self) -> bool:
        """Whether any text has reached the chat: a failure after that is not retried."""
        ...

    async def begin(self) -> None:
        """A new attempt starts: anything received but not shown yet is dropped."""
        ...

    async def text(self, delta: str) -> None: ...


class Provider(Protocol):
    """A chat model. `tools` are OpenAI function-tool schemas; empty means no tools offered."""

    async def complete(
        self, messages: list[ChatMessage], tools: list[dict[str, Any]], sink: TextSink | None = None
    ) -> Completion:
        """The answer; with a `sink`, streamed where the provider can, its text passed on as it comes."""
        ...

    async def aclose(self) -> None: ...
