"""The model server failing mid-conversation (429, 500, timeout, malformed JSON): retried, then told."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI, Reply
from tests.harness import running_bridge
from tests.invariants import assert_intact

# One retry, and a short request timeout, so exhausting the retries takes about a second.
LLM = {"max_retries": 1, "timeout_s": 0.5}

FAULTS: dict[str, tuple[Reply, str]] = {
    "429": (
        fake.http_error(429, "slow down", {"Retry-After": "0"}),
        "kept failing (HTTP 429) after 2 attempts",
    ),
    # The chat hears what failed in a sentence; the server's own words ("overloaded") go to the trace.
    "500": (fake.http_error(500, "overloaded"), "kept failing (HTTP 500) after 2 attempts. Your message"),
    "timeout": (fake.delay(3, fake.text("too late")), "did not answer within 0.5 s (2 attempts)"),
    "malformed": (fake.malformed(), "sent a malformed response after 2 attempts. Your message"),
}


def assert_well_formed(body: dict[str, Any]) -> None:
    """Every tool call the request replays is answered by a tool message right after it."""
    messages = body["messages"]
    for i, message in enumerate(messages):
        for call in message.get("tool_calls") or ():
            answers = [
                m for m in messages[i + 1 :] if m["role"] == "tool" and m["tool_call_id"] == call["id"]
            ]
            assert len(answers) == 1, f"call {call['id']} has {len(answers)} results"
        if message["role"] == "tool":
            assert any(
                c["id"] == message["tool_call_id"] for m in messages[:i] for c in m.get("tool_calls") or ()
            ), f"result {message['tool_call_id']} without its call"


@pytest.mark.parametrize("where", ["first-request", "after-a-tool-ran"])
@pytest.mark.parametrize("fault", list(FAULTS))
async def test_a_provider_fault_past_its_retries_is_told_and_the_next_message_works(
    tmp_path: Path, fake_llm: FakeOpenAI, fault: str, where: str
) -> None:
    failure, expected = FAULTS[fault]
    if where == "after-a-tool-ran":
        fake_llm.push(fake.tool_call("get_current_time", {}))
    fake_llm.push(failure, failure, fake.text("back to normal"))
    async with running_bridge(tmp_path, fake_llm, llm=LLM) as h:
        await h.say("first")
        await h.say("second")
    error, answer = h.sender.of("reply")
    assert error.startswith("⚠️") and expected in error and "/retry" in error
    assert answer == "back to normal"
    last = fake_llm.requests[-1]
    assert [m["content"] for m in last["messages"] if m["role"] == "user"] == ["first", "second"]
    assert_well_formed(last)
    assert_intact(tmp_path / "bridge.db", ["first", "second"])


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_a_fault_that_clears_on_retry_is_invisible_to_the_user(
    tmp_path: Path, fake_llm: FakeOpenAI, fault: str
) -> None:
    failure, _ = FAULTS[fault]
    fake_llm.push(fake.tool_call("get_current_time", {}), failure, fake.text("it is noon"))
    async with running_bridge(tmp_path, fake_llm, llm=LLM) as h:
        await h.say("time?")
    assert h.sender.of("reply") == ["it is noon"]
    assert len(fake_llm.requests) == 3
    # The retry sent the same conversation again, not a duplicated tool exchange.
    assert fake_llm.requests[1]["messages"] == fake_llm.requests[2]["messages"]
    assert_well_formed(fake_llm.requests[2])
    assert_intact(tmp_path / "bridge.db", ["time?"])
