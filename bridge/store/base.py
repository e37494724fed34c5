"""The rows the store returns and takes. The store itself is bridge.store.tables.DatabaseStore, one
class for both engines, each method written once in its table's module."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal


class QueueFull(Exception):
    """A chat message not stored: as many of the chat's messages wait for a run as it may hold."""


@dataclass(frozen=True, slots=True)
class SessionRow:
    id: str
    key: str
    created_at: float
    updated_at: float
    ended_at: float | None = None
    surface: str | None = None
    chat_type: str | None = None
    display_name: str | None = None
    send_policy: str | None = None
    last_route: str | None = None
    parent_id: str | None = None
    # The model profile chosen with /model; None is [llm] itself. Kept across /clear, like send_policy.
    model_profile: str | None = None
    # /voice: "on" (every answer also spoken), "off" (never), None (answers to voice notes). Kept
    # across /clear, like send_policy.
    voice_replies: str | None = None
    # /agent: the [agents.NAME] an owner chose for this chat; None follows [[agents.bindings]]. Kept
    # across /clear, like send_policy.
    agent: str | None = None

    @property
    def active(self) -> bool:
        return self.ended_at is None


@dataclass(frozen=True, slots=True)
class SessionMeta:
    """What an inbound message tells us about the place a session lives in."""

    surface: str | None = None
    chat_type: str | None = None
    display_name: str | None = None
    last_route: str | None = None
    parent_id: str | None = None


@dataclass(frozen=True, slots=True)
class MessageRow:
    id: int
    session_id: str
    kind: str  # user | assistant | tool_call | tool_result
    content: str
    created_at: float
    run_id: str | None = None
    step: int | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None
    tool_input: str | None = None
    tool_status: str | None = None
    sender: str | None = None
    # Set on a 'user' row another session's agent injected (sessions_send): that session's key.
    via_session: str | None = None
    # A user message's attachments, as JSON (bridge.events.loads reads it).
    media: str | None = None
    # For rows written by a run: the newest user message that run answered (see build_messages).
    anchor: int | None = None

    @property
    def role(self) -> str:
        """The role tools show: user, assistant, tool_call, tool, or agent for an injected message."""
        if self.via_session:
            # Written by another session's agent (sessions_send): never presented as a person.
            return "agent"
        return "tool" if self.kind == "tool_result" else self.kind


@dataclass(frozen=True, slots=True)
class ToolExchange:
    """A tool call and its result, written together so history never holds an orphan."""

    call_id: str
    tool_name: str
    tool_input: str
    result: str
    status: str  # success | error
    step: int
    # The model's text that came with the call, kept so replay shows what it said.
    preamble: str = ""


@dataclass(frozen=True, slots=True)
class RunRow:
    id: str
    session_id: str
    status: str  # running | ok | error | aborted | cancelled
    started_at: float
    channel: str | None = None
    input_hash: str | None = None
    ended_at: float | None = None
    iterations: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None
    # The newest user message the run answered.
    input_upto: int | None = None
    # "turn" answers messages; "compaction" summarised old turns (its trace holds the request).
    kind: str = "turn"
    # The run that started this one as a sub-agent (spawn_agent); None for any other run.
    parent_run_id: str | None = None


# pending: never handed to a platform. sending: handed over, no answer yet; a crash there leaves it
# uncertain (the platform may have it). sent, suppressed (by the send policy) and failed are final.
OutboxState = Literal["pending", "sending", "sent", "suppressed", "failed", "uncertain"]
OPEN_STATES: tuple[OutboxState, ...] = ("pending", "sending")


@dataclass(frozen=True, slots=True)
class OutboxItem:
    """Something the bot means to send, written down before it is sent."""

    kind: str
    surface: str
    chat_id: str
    text: str
    state: OutboxState
    thread_id: str | None = None
    reply_to: str | None = None
    session_key: str | None = None
    session_id: str | None = None
    run_id: str | None = None
    reason: str | None = None
    dedupe_key: str | None = None
    # Chunk `part` of an item sent as `parts` platform messages; each chunk is a row of its own.
    part: int = 0
    parts: int = 1
    # Sent with the chunk where the platform dedupes by it (Discord's enforce_nonce); kept across
    # restarts so a resend after a crash is dropped by the platform itself.
    nonce: str | None = None
    # The worker that sends it, where several share the database: a dead worker's rows are taken
    # over by another (bridge.gateway.sharing). None: whoever recovers the outbox.
    worker_id: str | None = None
    # The platform message this chunk replaces by editing it (a streamed draft); an edit is safe to
    # repeat after a crash, where a send is not.
    edit_of: str | None = None
    # A file to send with the chunk (its text is the caption), as JSON (bridge.events.OutFile).
    file: str | None = None


@dataclass(frozen=True, slots=True)
class OutboxRow:
    id: int
    item: OutboxItem
    platform_msg_id: str | None
    created_at: float


@dataclass(frozen=True, slots=True)
class SummaryRow:
    """A summary the model wrote of a session's oldest turns; runs replay it in place of them."""

    id: int
    session_id: str
    run_id: str | None
    # The newest user message whose turn it covers: rows of later turns are replayed as they are.
    upto: int
    content: str
    turns: int
    # The characters of the turns it replaced (an earlier summary it folded in is not counted again).
    replaced_chars: int
    created_at: float


@dataclass(frozen=True, slots=True)
class NewSummary:
    """What a compaction writes: the summary of the turns up to user message `upto`."""

    upto: int
    content: str
    turns: int
    replaced_chars: int


@dataclass(frozen=True, slots=True)
class Loaded:
    """What a session's history loaded for the rest of it: tool groups and skills, by the names the
    calls gave (the registry and the skill catalog drop those no longer configured)."""

    groups: frozenset[str] = frozenset()
    skills: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class RunContext:
    """What a run starts from, read in one snapshot: the history window, loaded groups and skills,
    memories."""

    rows: list[MessageRow]
    loaded_groups: set[str]
    memories: list[str]
    # The newest user message any run of the session has taken up (0: none); a newer one is unanswered.
    answered_upto: int = 0
    # The newest summary of older turns; `rows` then hold only the turns after it.
    summary: SummaryRow | None = None
    loaded_skills: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class CompactionInput:
    """What a compaction reads in one snapshot: the newest summary and every row after it."""

    summary: SummaryRow | None
    rows: list[MessageRow]
    # The newest user message a finished run answered: turns after it may still be in progress.
    finished_upto: int


@dataclass(frozen=True, slots=True)
class StartedRun:
    """What begin_run read and decided: the run's context, the rows it answers, and the message it
    took up (None: an earlier run already took it up, so no run row was written)."""

    context: RunContext
    rows: list[MessageRow]
    answers: MessageRow | None
    input_hash: str | None = None


# Builds the notices for runs a crash left 'running' (the run, its session, the text it answered); they
# are written in the transaction that marks the runs aborted, so a second crash cannot lose them.
InterruptedNotices = Callable[[RunRow, SessionRow | None, str | None], list[OutboxItem]]


@dataclass(frozen=True, slots=True)
class Unanswered:
    """An active session whose newest message from a person no run has taken up yet."""

    session: SessionRow
    message_id: int
    platform_msg_id: str | None


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """A session for listings: its row plus counts that cost one query."""

    session: SessionRow
    message_count: int
