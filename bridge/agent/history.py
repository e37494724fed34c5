"""Turns stored history rows into structured chat messages, tool calls replayed natively."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from bridge.events import framed
from bridge.llm.base import ChatMessage, ToolCall
from bridge.media.parts import images_of
from bridge.store.base import MessageRow

_TOOL_KINDS = ("tool_call", "tool_result")


def truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… [truncated {len(text) - limit} characters]"


def build_messages(
    rows: list[MessageRow], max_tool_result_chars: int, max_chars: int | None = None
) -> list[ChatMessage]:
    """The history window as the model sees it.

    The window may cut a run in half, so it starts at the first user message, and a tool call is
    replayed only together with its result (the store writes them together, the window must not split
    them). Calls made in one model response (same run and step) become one assistant message.
    With `max_chars`, the oldest turns are left out until the rest fits.
    """
    rows = sorted(rows, key=_position)
    messages = _from_first_user(_replay(rows, max_tool_result_chars))
    if max_chars is not None:
        messages = within_budget(messages, max_chars)
    return messages


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn of history: a user message and what the bot did about it, as the model sees it."""

    upto: int  # the id of the user message that opens it
    messages: list[ChatMessage]
    rows: int

    @property
    def chars(self) -> int:
        return size(self.messages)


def split_turns(rows: list[MessageRow], max_tool_result_chars: int) -> list[Turn]:
    """History as whole turns, oldest first. A turn boundary is a user message, and a run's rows sort
    right after the message they answered, so no boundary ever falls between a call and its result.
    Rows before the first user message (a window that starts mid-run) belong to no turn."""
    groups: list[list[MessageRow]] = []
    for row in sorted(rows, key=_position):
        if row.kind == "user":
            groups.append([row])
        elif groups:
            groups[-1].append(row)
    return [Turn(group[0].id, _replay(group, max_tool_result_chars), len(group)) for group in groups]


def size(messages: list[ChatMessage]) -> int:
    """The characters messages cost in a request: their text and their calls."""
    return sum(_size(m) for m in messages)


def _size(message: ChatMessage) -> int:
    return len(message.content) + sum(len(c.name) + len(c.arguments) for c in message.tool_calls)


def _from_first_user(messages: list[ChatMessage]) -> list[ChatMessage]:
    start = next((i for i, m in enumerate(messages) if m.role == "user"), len(messages))
    return messages[start:]


def within_budget(messages: list[ChatMessage], max_chars: int) -> list[ChatMessage]:
    """Drop whole turns from the front until the total fits; the newest turn is always kept."""
    total = sum(_size(m) for m in messages)
    starts = [i for i, m in enumerate(messages) if m.role == "user"]
    for start, next_start in itertools.pairwise(starts):
        if total <= max_chars:
            return messages[start:]
        total -= sum(_size(m) for m in messages[start:next_start])
    return messages[starts[-1] :] if starts else messages


def _replay(rows: list[MessageRow], max_tool_result_chars: int) -> list[ChatMessage]:
    messages: list[ChatMessage] = []
    i = 0
    while i < len(rows):
        row = rows[i]
        if row.kind not in _TOOL_KINDS:
            messages.append(ChatMessage(role=row.kind, content=_framed(row), images=images_of(row.media)))
            i += 1
            continue
        step = (row.run_id, row.step)
        j = i
        while j < len(rows) and rows[j].kind in _TOOL_KINDS and (rows[j].run_id, rows[j].step) == step:
            j += 1
        messages.extend(_replay_step(rows[i:j], max_tool_result_chars))
        i = j
    return messages


def agent_note(via_session: str) -> str:
    """The line that marks a message another session's agent wrote, as the model reads it."""
    return f"[Agent-to-agent message from the agent of session '{via_session}'; not written by a human]"


def _framed(row: MessageRow) -> str:
    # An injected message is never shown to the model as if a person in this chat had written it.
    if row.kind == "user" and row.via_session:
        return f"{agent_note(row.via_session)}\n{row.content}"
    # Attachments are named in the text; a model that takes images also gets the newest as parts.
    return framed(row.content, row.media) if row.media else row.content


def _position(row: MessageRow) -> tuple[int, int, int]:
    """Where a row belongs in the conversation.

    Messages that arrived while a run was busy are stored before that run's reply, but the run never
    saw them: its rows are replayed right after the newest user message it answered, so the model
    reads "question, answer, later question" rather than an answer that seems to cover everything.
    """
    if row.kind != "user" and row.anchor is not None:
        return (row.anchor, 1, row.id)
    return (row.id, 0, row.id)


def _replay_step(rows: list[MessageRow], max_chars: int) -> list[ChatMessage]:
    calls = {r.tool_call_id: r for r in rows if r.kind == "tool_call"}
    results = {r.tool_call_id: r for r in rows if r.kind == "tool_result"}
    paired = [cid for cid in calls if cid in results]
    if not paired:
        return []
    preamble = next((calls[cid].content for cid in paired if calls[cid].content), "")
    assistant = ChatMessage(
        role="assistant",
        content=preamble,
        tool_calls=tuple(
            ToolCall(id=cid or "", name=calls[cid].tool_name or "", arguments=calls[cid].tool_input or "{}")
            for cid in paired
        ),
    )
    tool_messages = [
        ChatMessage(
            role="tool",
            content=truncate(results[cid].content, max_chars),
            tool_call_id=cid,
            name=results[cid].tool_name,
        )
        for cid in paired
    ]
    return [assistant, *tool_messages]
