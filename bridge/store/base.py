"""The Store protocol and the rows it returns."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol


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
    # A user message's attachments, as JSON (bridge.media.model.loads reads it).
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
    # A file to send with the chunk (its text is the caption), as JSON (bridge.media.model.OutFile).
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


class Store(Protocol):
    """Durable sessions, structured history, runs and memories."""

    async def open(self) -> None: ...
    async def close(self) -> None: ...

    # sessions
    async def active_session(self, key: str) -> SessionRow | None: ...
    async def ensure_active_session(self, key: str, meta: SessionMeta | None = None) -> SessionRow: ...
    async def start_new_session(self, key: str, meta: SessionMeta | None = None) -> SessionRow: ...
    async def get_session(self, session_id: str) -> SessionRow | None: ...
    async def list_sessions(
        self, *, limit: int, active_since: float | None = None, active_only: bool = True
    ) -> list[SessionSummary]: ...

    # messages
    async def set_send_policy(self, session_id: str, value: str | None) -> None: ...
    async def set_model_profile(self, session_id: str, name: str | None) -> None:
        """The session's model profile (/model NAME); None returns it to [llm]."""
        ...

    async def add_user_message(
        self,
        session_id: str,
        content: str,
        *,
        sender: str | None = None,
        platform_msg_id: str | None = None,
        via_session: str | None = None,
        queued: bool = True,
        media: str | None = None,
    ) -> int | None: ...
    async def set_user_message(
        self, session_id: str, message_id: int, content: str, media: str | None
    ) -> None:
        """A user message's text and attachments once its run has read them (fetched, transcribed)."""
        ...

    async def add_assistant_message(self, session_id: str, run_id: str | None, content: str) -> int: ...
    async def add_tool_exchange(self, session_id: str, run_id: str, exchange: ToolExchange) -> None: ...
    async def history(self, session_id: str, limit: int, *, chat_only: bool = False) -> list[MessageRow]:
        """The last `limit` messages in order; chat_only leaves out tool calls and results."""
        ...

    async def count_messages(self, session_id: str) -> int: ...
    async def search_messages(self, session_id: str, query: str, limit: int) -> list[MessageRow]: ...
    async def loaded(self, session_id: str) -> Loaded:
        """Groups and skills loaded anywhere in the session's history, in one query."""
        ...

    async def loaded_groups(self, session_id: str) -> set[str]: ...
    async def loaded_skills(self, session_id: str) -> set[str]: ...
    async def run_context(
        self, session_id: str, memory_scope: str, history_limit: int, memory_limit: int
    ) -> RunContext: ...

    # runs
    async def begin_run(
        self,
        run_id: str,
        session_id: str,
        channel: str | None,
        *,
        memory_scope: str,
        history_limit: int,
        memory_limit: int,
        upto: int | None = None,
        force: bool = False,
    ) -> StartedRun:
        """Unless the newest message (or `upto`) was taken up already and not `force`, write the run
        row that takes it up (the check and the row are one transaction, so no two runs take up the
        same message), then read the run's context up to that message."""
        ...

    async def start_run(
        self,
        run_id: str,
        session_id: str,
        channel: str | None,
        input_hash: str,
        input_upto: int | None = None,
    ) -> None: ...
    async def finish_run(
        self,
        run_id: str,
        status: str,
        *,
        iterations: int = 0,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        error: str | None = None,
        trace: str | None = None,
        reply: tuple[str, str] | None = None,
        outbox: Collection[OutboxItem] = (),
    ) -> list[int]:
        """Close a run; `reply` (session id, text) is stored as its answer and `outbox` is queued, all in
        one transaction: a crash leaves the answer with its delivery rows, or neither. The rows' ids."""
        ...

    async def get_run(self, run_id: str) -> RunRow | None: ...
    async def get_trace(self, run_id: str) -> str | None: ...
    async def prune_traces(self, keep: int) -> int: ...
    async def list_runs(self, *, session_key: str | None, limit: int) -> list[tuple[RunRow, str]]: ...
    async def abort_interrupted_runs(
        self, notices: InterruptedNotices | None = None, *, workers: Collection[str | None] | None = None
    ) -> list[RunRow]: ...

    async def unanswered(self, upto: int | None = None) -> list[Unanswered]:
        """Active sessions with a message from a person that no run took up (queued at a stop or crash);
        `upto`: only messages up to that id."""
        ...

    async def last_message_id(self) -> int:
        """The newest message's id, 0 when there is none."""
        ...

    async def count_waiting(self, session_id: str) -> int:
        """How many of the session's messages wait in the intake queue (no run took them up yet)."""
        ...

    async def skip_unanswered(self, session_id: str, reason: str) -> bool:
        """Mark the session's unanswered messages as taken up by a cancelled run (e.g. /stop dropped them)."""
        ...

    async def backup(self, target: Path) -> None: ...

    # compaction
    async def compaction_input(self, session_id: str, max_rows: int) -> CompactionInput: ...
    async def record_compaction(
        self,
        run_id: str,
        session_id: str,
        *,
        started_at: float,
        status: str,
        error: str | None,
        trace: str | None,
        prompt_tokens: int,
        completion_tokens: int,
        summary: NewSummary | None,
    ) -> SummaryRow | None:
        """Write a compaction's run row (kind 'compaction') and its summary in one transaction. None
        when there is no summary, or a newer one covers as much already (a concurrent compaction)."""
        ...

    async def summaries(self, session_id: str) -> list[SummaryRow]: ...

    # outbox
    async def add_outbox(self, *items: OutboxItem) -> list[int]:
        """Write items down in one transaction, with their ids; [] when a dedupe_key was written before
        (never send twice)."""
        ...

    async def mark_outbox(
        self,
        item_id: int,
        state: OutboxState,
        *,
        platform_msg_id: str | None = None,
        reason: str | None = None,
    ) -> None: ...

    async def count_outbox(self, session: SessionRow, state: OutboxState) -> int: ...
    async def reopen_failed(self, row_id: int, reason: str) -> OutboxRow | None:
        """A failed reply or notice made pending again, once however many ask; None otherwise."""
        ...

    async def ping(self) -> None:
        """Raise unless the database answers a trivial read."""
        ...

    async def last_outbox_id(self) -> int:
        """The newest outbox row's id, 0 when there is none."""
        ...

    async def outbox_counts(self) -> dict[str, int]:
        """How many rows the outbox holds in each state."""
        ...

    async def outbox(
        self,
        *,
        session_id: str | None = None,
        state: OutboxState | Collection[OutboxState] | None = None,
        newest: int | None = None,
        upto: int | None = None,
    ) -> list[OutboxRow]:
        """Rows in id order (per chat, the order they go out); `newest`: only the last so many;
        `upto`: only those with ids up to it."""
        ...

    # memories
    async def add_memory(self, scope: str, content: str) -> int: ...
    async def memories(self, scope: str, limit: int) -> list[str]: ...
