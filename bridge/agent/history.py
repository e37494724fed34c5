"""Turns stored history rows into structured chat messages, tool calls replayed natively."""

from __future__ import annotations

from bridge.llm.base import ChatMessage, ToolCall
from bridge.store.base import MessageRow

_TOOL_KINDS = ("tool_call", "tool_result")


def truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… [truncated {len(text) - limit} characters]"


def build_messages(rows: list[MessageRow], max_tool_result_chars: int) -> list[ChatMessage]:
    """The history window as the model sees it.

    The window may cut a run in half, so it starts at the first user message, and a tool call is
    replayed only together with its result (the store writes them together, the window must not split
    them). Calls made in one model response (same run and step) become one assistant message.
    """
    rows = sorted(rows, key=_position)
    start = next((i for i, row in enumerate(rows) if row.kind == "user"), len(rows))
    rows = rows[start:]
    messages: list[ChatMessage] = []
    i = 0
    while i < len(rows):
        row = rows[i]
        if row.kind not in _TOOL_KINDS:
            messages.append(ChatMessage(role=row.kind, content=row.content))
            i += 1
            continue
        j = i
        while (
            j < len(rows)
            and rows[j].kind in _TOOL_KINDS
            and (rows[j].run_id, rows[j].step)
            == (
                row.run_id,
                row.step,
            )
        ):
            j += 1
        messages.extend(_replay_step(rows[i:j], max_tool_result_chars))
        i = j
    return messages


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
