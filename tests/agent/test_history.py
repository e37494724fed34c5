"""build_messages: stored rows → the structured messages a model sees."""

from __future__ import annotations

import itertools
from typing import Any

from bridge.agent.history import build_messages
from bridge.llm.base import ChatMessage, ToolCall
from bridge.store.base import MessageRow

_ids = itertools.count(1)


def row(kind: str, content: str = "", **fields: Any) -> MessageRow:
    return MessageRow(id=next(_ids), session_id="s", kind=kind, content=content, created_at=0.0, **fields)


def call(call_id: str, name: str = "get_current_time", step: int = 1, **fields: Any) -> MessageRow:
    return row(
        "tool_call", tool_call_id=call_id, tool_name=name, tool_input="{}", run_id="r", step=step, **fields
    )


def result(call_id: str, content: str = "ok", step: int = 1, **fields: Any) -> MessageRow:
    return row(
        "tool_result",
        content,
        tool_call_id=call_id,
        tool_name="get_current_time",
        run_id="r",
        step=step,
        **fields,
    )


def test_calls_of_one_model_response_become_one_assistant_message_followed_by_their_results() -> None:
    rows = [row("user", "hi"), call("a"), result("a"), call("b"), result("b")]
    messages = build_messages(rows, 1000)
    assert [m.role for m in messages] == ["user", "assistant", "tool", "tool"]
    assert messages[1].tool_calls == (
        ToolCall("a", "get_current_time", "{}"),
        ToolCall("b", "get_current_time", "{}"),
    )
    assert [m.tool_call_id for m in messages[2:]] == ["a", "b"]


def test_separate_model_responses_stay_separate_assistant_messages() -> None:
    rows = [row("user", "hi"), call("a", step=1), result("a", step=1), call("b", step=2), result("b", step=2)]
    assert [m.role for m in build_messages(rows, 1000)] == ["user", "assistant", "tool", "assistant", "tool"]


def test_a_window_that_starts_inside_a_run_is_trimmed_to_the_first_user_message() -> None:
    rows = [result("x"), row("assistant", "old answer"), row("user", "next"), row("assistant", "reply")]
    assert build_messages(rows, 1000) == [ChatMessage("user", "next"), ChatMessage("assistant", "reply")]


def test_a_call_without_its_result_is_never_replayed() -> None:
    rows = [row("user", "hi"), call("lonely"), row("assistant", "done")]
    assert [m.role for m in build_messages(rows, 1000)] == ["user", "assistant"]
    assert build_messages(rows, 1000)[1].tool_calls == ()


def test_long_tool_results_are_truncated_with_a_note() -> None:
    rows = [row("user", "hi"), call("a"), result("a", "x" * 500)]
    tool = build_messages(rows, 200)[-1]
    assert tool.content.startswith("x" * 200) and "truncated 300 characters" in tool.content


def test_a_reply_is_replayed_after_the_message_it_answered_not_after_later_ones() -> None:
    first = row("user", "q1")
    second = row("user", "q2 (arrived while q1 was being answered)")
    answer = row("assistant", "a1", run_id="r1", anchor=first.id)
    messages = build_messages([first, second, answer], 1000)
    assert [m.content for m in messages] == ["q1", "a1", "q2 (arrived while q1 was being answered)"]


def test_over_budget_the_oldest_turns_are_left_out_whole() -> None:
    rows = [
        row("user", "old question " + "x" * 300),
        call("a"),
        result("a", "y" * 300),
        row("assistant", "old answer"),
        row("user", "new question"),
        row("assistant", "new answer"),
    ]
    assert len(build_messages(rows, 1000, max_chars=10_000)) == 6
    trimmed = build_messages(rows, 1000, max_chars=100)
    assert [m.content for m in trimmed] == ["new question", "new answer"]


def test_the_newest_turn_is_kept_even_when_it_alone_is_over_budget() -> None:
    rows = [row("user", "a"), row("assistant", "b"), row("user", "z" * 500)]
    assert [m.content for m in build_messages(rows, 1000, max_chars=10)] == ["z" * 500]
