"""Text no encoder takes (lone surrogates) and arguments nested too deep lose nothing and stop nothing."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI, Reply
from tests.harness import running_bridge
from tests.invariants import assert_intact, rows


def raw_text(content_json: str) -> Reply:
    """An answer whose content is written as raw JSON, so it can hold escapes json.dumps never makes."""
    body = json.dumps(fake.text("PLACEHOLDER").body).replace('"PLACEHOLDER"', content_json)
    return Reply(body=body.encode())


async def test_a_model_answer_with_a_lone_surrogate_is_stored_and_delivered_with_a_replacement(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(raw_text('"half an emoji: \\ud83d!"'), fake.text("fine"))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("hi")
        await h.say("and now?")
    assert h.sender.of("reply") == ["half an emoji: \ufffd!", "fine"]
    db = tmp_path / "bridge.db"
    assert rows(db, "SELECT status FROM runs") == [("ok",), ("ok",)]
    assert_intact(db, ["hi", "and now?"])


async def test_a_message_with_a_lone_surrogate_is_stored_with_a_replacement_and_answered(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.text("got it"))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("broken \udc80 text")
    assert h.sender.of("reply") == ["got it"]
    assert fake_llm.requests[0]["messages"][-1]["content"] == "broken \ufffd text"
    assert_intact(tmp_path / "bridge.db", ["broken \ufffd text"])


async def test_a_surrogate_pair_split_in_two_is_joined_again(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(fake.text("ok"))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("smile \ud83d\ude00")
    assert_intact(tmp_path / "bridge.db", ["smile 😀"])


async def test_tool_arguments_nested_too_deep_are_invalid_arguments_not_a_crash(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    fake_llm.push(fake.tool_call("get_current_time", deep), fake.text("sorry"))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("time?")
    assert h.sender.of("reply") == ["sorry"]
    [result] = [m for m in fake_llm.requests[1]["messages"] if m["role"] == "tool"]
    assert "invalid_arguments" in result["content"] and "nested too deeply" in result["content"]
    assert rows(tmp_path / "bridge.db", "SELECT status FROM runs") == [("ok",)]


async def test_a_deep_call_in_history_is_replayed_in_text_mode_without_a_crash(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    fake_llm.push(
        fake.tool_call("get_current_time", deep), fake.text("sorry"), fake.text("fine in text mode")
    )
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("time?")
    # The same session, now with a model that takes tools as text: the bad call is in its history.
    async with running_bridge(
        tmp_path, fake_llm, llm={"tool_mode": "text"}, agent={"history_max_chars": 1_000_000}
    ) as h:
        h._msg_ids = itertools.count(100)  # a new platform message, not a redelivery of the first
        await h.say("and now?")
    assert h.sender.of("reply") == ["fine in text mode"]
    assert rows(tmp_path / "bridge.db", "SELECT status FROM runs") == [("ok",), ("ok",)]


async def test_a_model_response_nested_too_deep_is_a_malformed_response_not_a_crash(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(Reply(body=b"[" * 100_000 + b"]" * 100_000), fake.text("recovered"))
    async with running_bridge(tmp_path, fake_llm) as h:
        await h.say("hello")
        await h.say("/retry")
    first, second = h.sender.of("reply")
    assert "malformed response" in first and "RecursionError" not in first
    assert second == "recovered"
