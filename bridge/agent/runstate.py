"""What one run carries: its state from request to request, and its result."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from bridge.agent.trace import RunTrace
from bridge.config.llm import DEFAULT_PROFILE
from bridge.llm.base import ChatMessage, Completion, Provider, TextSink
from bridge.llm.profiles import Fallback
from bridge.media.parts import ImageReader
from bridge.store.base import MessageRow, OutboxItem, OutboxRow

CUT_SHORT_NOTE = (
    "\n\n⚠️ (The answer was cut off here: the model's connection broke. Send /retry for a new one.)"
)
# How runs.error begins for a run whose streamed answer broke off: /retry may redo such an answer.
CUT_SHORT_ERROR = "the streamed answer was cut short"
RunStatus = Literal["ok", "error", "cancelled", "timeout", "stopped", "skipped"]
# The delivery rows of a run's reply (run id, text), written in the transaction that ends the run.
ReplyPlanner = Callable[[str, str], Awaitable[list[OutboxItem]]]
# Reads the attachments of the rows a run answers (fetch, store, transcribe) and returns the rows as
# they now read; given by the chat's dispatcher, which knows the platform and can tell the user.
MediaReader = Callable[[list[MessageRow]], Awaitable[list[MessageRow]]]


class LiveDisplay(Protocol):
    """Where a chat watches the answer stream in: one TextSink per model request."""

    def segment(self) -> TextSink: ...


@dataclass(slots=True)
class RunResult:
    run_id: str
    status: RunStatus
    reply: str
    iterations: int = 0
    loaded_groups: set[str] = field(default_factory=set)
    loaded_skills: set[str] = field(default_factory=set)
    # Why a run was cut short (runs.error), when its reply is the model's last answer rather than that.
    stop_reason: str | None = None
    # The reply's delivery rows, queued with the answer; for the caller to hand to the courier.
    outbox: list[OutboxRow] = field(default_factory=list)
    # The session's history no longer fits its budget: time to compact it (after the reply).
    over_budget: bool = False


@dataclass(slots=True)
class RunState:
    """What one run carries from request to request: its messages, trace, model and usage."""

    run_id: str
    messages: list[ChatMessage]
    trace: RunTrace
    memories: list[str] = field(default_factory=list)
    # The summary of the turns before `messages`, replayed in the system prompt.
    summary: str | None = None
    iterations: int = 0
    corrected: bool = False  # a malformed call was answered with a correction once already
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # The profile answering now: the session's, or its fallback once that took over.
    answering: str = DEFAULT_PROFILE
    # The answering profile's provider; None means the runner's default.
    provider: Provider | None = None
    fallback: Fallback | None = None
    # The queued writes of this run's tool records (see ToolCalls.call).
    writes: list[asyncio.Task[None]] = field(default_factory=list)
    # Where the chat watches the answer stream in; None where it cannot.
    display: LiveDisplay | None = None
    # Why a streamed answer broke off after part of it was shown.
    cut_short: str | None = None
    # Reads the images the requests carry, once per run.
    images: ImageReader | None = None

    def add_usage(self, completion: Completion) -> None:
        self.prompt_tokens += completion.usage.prompt_tokens
        self.completion_tokens += completion.usage.completion_tokens
