"""Streamed answers: text passed on as it comes, the answer put back together exactly as a non-streamed
one, a stream that breaks before any text is shown retried, and one that breaks after kept as shown."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bridge.config.llm import LLMSettings
from bridge.llm.anthropic import AnthropicStream
from bridge.llm.base import ChatMessage
from bridge.llm.holdback import HoldBack, shown_part
from bridge.llm.openai import OpenAIProvider
from bridge.llm.textmode import NativeModeProvider, TextModeProvider
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from tests.llm.conftest import RecordingSleep

HELLO = [ChatMessage("user", "hello")]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


class RecordingSink:
    """A chat's live display as the tests see it: every piece of text, in order."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.begins = 0

    @property
    def shown(self) -> bool:
        return any(self.pieces)

    async def begin(self) -> None:
        self.begins += 1

    async def text(self, delta: str) -> None:
        self.pieces.append(delta)

    @property
    def whole(self) -> str:
        return "".join(self.pieces)


@pytest.fixture
async def provider(fake_llm: FakeOpenAI, sleep: RecordingSleep) -> AsyncIterator[OpenAIProvider]:
    settings = LLMSettings(base_url=fake_llm.base_url, model="m", timeout_s=5, max_retries=1)
    made = OpenAIProvider(settings, sleep=sleep)
    yield made
    await made.aclose()


async def test_a_streamed_answer_arrives_in_pieces_and_equals_the_answer_unstreamed(
    provider: OpenAIProvider, fake_llm: FakeOpenAI
) -> None:
    answer = "The weather in Berlin is sunny and 21 degrees."
    fake_llm.push(fake.text(answer, prompt_tokens=12, completion_tokens=9), fake.text(answer))
    sink = RecordingSink()
    streamed = await provider.complete(HELLO, [], sink)
    plain = await provider.complete(HELLO, [])
    assert len(sink.pieces) > 5 and sink.whole == answer
    assert streamed.content == plain.content == answer
    assert (streamed.usage.prompt_tokens, streamed.usage.completion_tokens) == (12, 9)
    assert streamed.cut_short is None
    assert fake_llm.requests[0]["stream"] is True
    assert fake_llm.requests[0]["stream_options"] == {"include_usage": True}
    assert "stream" not in fake_llm.requests[1]
    # The trace records the assembled completion in the shape of a non-streamed one.
    assert streamed.raw is not None and streamed.raw["choices"][0]["message"]["content"] == answer


async def test_streamed_tool_calls_are_put_back_together_and_none_of_them_is_shown(
    provider: OpenAIProvider, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.tool_call("get_weather", {"city": "Berlin", "unit": "C"}, call_id="call_7"))
    sink = RecordingSink()
    completion = await provider.complete(HELLO, TOOLS, sink)
    assert sink.whole == ""
    assert [(c.id, c.name, json.loads(c.arguments)) for c in completion.tool_calls] == [
        ("call_7", "get_weather", {"city": "Berlin", "unit": "C"})
    ]


async def test_a_stream_that_breaks_before_any_text_is_retried(
    provider: OpenAIProvider, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.cut(fake.text("never seen"), after=1), fake.text("second try"))
    sink = RecordingSink()
    completion = await provider.complete(HELLO, [], sink)
    assert completion.content == "second try" and completion.cut_short is None
    assert len(fake_llm.requests) == 2 and sink.begins == 2
    assert sink.whole == "second try"


async def test_a_stream_that_breaks_after_text_was_shown_keeps_what_was_shown_and_is_not_retried(
    provider: OpenAIProvider, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.cut(fake.text("The first part, then the rest that never comes."), after=4))
    sink = RecordingSink()
    completion = await provider.complete(HELLO, [], sink)
    # Three chunks of text (four characters each) arrived before the connection dropped.
    assert completion.content == sink.whole == "The first pa"
    assert completion.cut_short is not None
    assert completion.tool_calls == ()
    assert len(fake_llm.requests) == 1


async def test_a_server_that_answers_a_stream_request_with_plain_json_is_understood(
    provider: OpenAIProvider, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(fake.Reply(body=fake.text("not streamed").body))
    fake_llm.script = None
    completion = await provider.complete(HELLO, [], None)
    assert completion.content == "not streamed"


async def test_stream_false_in_the_settings_sends_no_stream_request(fake_llm: FakeOpenAI) -> None:
    settings = LLMSettings(base_url=fake_llm.base_url, model="m", stream=False, max_retries=0)
    provider = OpenAIProvider(settings)
    fake_llm.push(fake.text("whole"))
    sink = RecordingSink()
    try:
        completion = await provider.complete(HELLO, [], sink)
    finally:
        await provider.aclose()
    assert completion.content == "whole" and sink.pieces == []
    assert "stream" not in fake_llm.requests[0]


# -- what may be shown while a call may still be being written ---------------------------------


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("Plain words.", "Plain words."),
        ("Here it is:\n```tool\n{", "Here it is:\n"),
        ("Almost a fence ``", "Almost a fence "),
        ('{"name": "x"', ""),
        ("  [1, 2", ""),
        ("Calling <tool_c", "Calling "),
        ("Calling <tool_call>{", "Calling "),
        ("a < b and c", "a < b and c"),
        ('get_current_time(timezone: "Asia/Tok', ""),
        ('get_current_time(timezone: "Asia/Tokyo")get_current_time', ""),
        ("get_current_time", ""),
        ("Paris", ""),
        ("Paris is the capital.", "Paris is the capital."),
        ("f(x) is a function.", ""),
    ],
)
def test_text_is_shown_up_to_where_a_call_may_begin(text: str, shown: str) -> None:
    assert text[: shown_part(text)] == shown


async def test_text_mode_never_shows_a_tool_block_while_it_streams(
    provider: OpenAIProvider, fake_llm: FakeOpenAI
) -> None:
    reply = 'Let me look.\n```tool\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n```'
    fake_llm.push(fake.text(reply))
    sink = RecordingSink()
    completion = await TextModeProvider(provider).complete(HELLO, TOOLS, sink)
    assert [c.name for c in completion.tool_calls] == ["get_weather"]
    assert "```" not in sink.whole and "get_weather" not in sink.whole
    assert sink.whole == "Let me look.\n"


async def test_text_mode_shows_a_code_block_once_the_answer_is_complete(
    provider: OpenAIProvider, fake_llm: FakeOpenAI
) -> None:
    reply = "Use this:\n```python\nprint('hi')\n```\nThat is all."
    fake_llm.push(fake.text(reply))
    sink = RecordingSink()
    completion = await TextModeProvider(provider).complete(HELLO, TOOLS, sink)
    assert completion.content == reply
    assert sink.whole == reply
    # Held back from the fence until the answer was complete, then shown in one piece.
    assert sink.pieces[-1].startswith("```python")


async def test_native_mode_holds_back_a_call_leaked_into_the_text(
    provider: OpenAIProvider, fake_llm: FakeOpenAI
) -> None:
    leaked = '{"name": "get_weather", "arguments": {"city": "Oslo"}}'
    fake_llm.push(fake.text(leaked))
    sink = RecordingSink()
    completion = await NativeModeProvider(provider).complete(HELLO, TOOLS, sink)
    assert [c.name for c in completion.tool_calls] == ["get_weather"]
    assert sink.whole == ""


@pytest.mark.parametrize("wrapper", [NativeModeProvider, TextModeProvider])
@pytest.mark.parametrize(
    ("reply", "answer"),
    [
        # What the 0.5B model wrote for a run's last request, offered no tools (the real-model tier).
        ('```json\n{"name": "sessions_list", "arguments": {"kinds": ["main"]}}\n```', ""),
        ('{"name": "get_current_time", "arguments": {}}', ""),
        ('It is 9:00.\n```json\n{"name": "get_current_time", "arguments": {}}\n```', "It is 9:00.\n"),
    ],
)
async def test_a_last_answer_offered_no_tools_streams_exactly_what_is_stored_and_never_a_call(
    provider: OpenAIProvider,
    fake_llm: FakeOpenAI,
    wrapper: type[NativeModeProvider] | type[TextModeProvider],
    reply: str,
    answer: str,
) -> None:
    fake_llm.push(fake.text(reply))
    sink = RecordingSink()
    completion = await wrapper(provider).complete(HELLO, [], sink)
    assert completion.tool_calls == () and completion.content.strip() == answer.strip()
    assert sink.whole.strip() == answer.strip()
    assert '"name"' not in sink.whole and "```" not in sink.whole


async def test_hold_back_passes_on_shown_and_begin() -> None:
    outer = RecordingSink()
    held = HoldBack(outer)
    await held.begin()
    await held.text("one ")
    assert held.shown and outer.begins == 1


def test_anthropic_stream_events_make_the_message_a_non_streamed_request_gets() -> None:
    stream = AnthropicStream()
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"id": "msg_1", "model": "c", "usage": {"input_tokens": 7}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me "}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "check."}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "tu_1", "name": "get_weather", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"ci'},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": 'ty": "Oslo"}'},
        },
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 11}},
        {"type": "message_stop"},
    ]
    texts = [stream.feed(e["type"], json.dumps(e)) for e in events]
    assert "".join(texts) == "Let me check."
    assert stream.done
    message = stream.result()
    assert message["id"] == "msg_1" and message["stop_reason"] == "tool_use"
    assert message["usage"] == {"input_tokens": 7, "output_tokens": 11}
    assert message["content"] == [
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "tu_1", "name": "get_weather", "input": {"city": "Oslo"}},
    ]
    assert stream.result(partial=True)["content"] == [{"type": "text", "text": "Let me check."}]


async def test_the_anthropic_provider_streams_and_puts_the_message_back_together(
    tmp_path: Any, sleep: RecordingSleep
) -> None:
    from bridge.llm.anthropic import AnthropicProvider
    from tests.fakes import anthropic_server as anthropic
    from tests.fakes.anthropic_server import FakeAnthropic

    async with FakeAnthropic(api_key="k-test") as server:
        settings = LLMSettings(
            provider="anthropic", base_url=server.base_url, api_key="k-test", model="c", max_retries=1
        )
        provider = AnthropicProvider(settings, sleep=sleep)
        server.push(
            anthropic.tool_use("get_weather", {"city": "Oslo"}, content="Let me check."),
            anthropic.text("Sunny in Oslo.", input_tokens=20, output_tokens=4),
        )
        try:
            first_sink, second_sink = RecordingSink(), RecordingSink()
            first = await provider.complete(HELLO, TOOLS, first_sink)
            second = await provider.complete(HELLO, TOOLS, second_sink)
        finally:
            await provider.aclose()
    assert first_sink.whole == "Let me check." and first.content == "Let me check."
    assert [(c.name, json.loads(c.arguments)) for c in first.tool_calls] == [
        ("get_weather", {"city": "Oslo"})
    ]
    assert second_sink.whole == "Sunny in Oslo." and len(second_sink.pieces) > 2
    assert (second.usage.prompt_tokens, second.usage.completion_tokens) == (20, 4)
    assert server.requests[0]["stream"] is True


async def test_with_stream_off_a_wrapper_shows_nothing_of_the_whole_answer(fake_llm: FakeOpenAI) -> None:
    settings = LLMSettings(base_url=fake_llm.base_url, model="m", stream=False, max_retries=0)
    provider = OpenAIProvider(settings)
    fake_llm.push(fake.text("asked whole"))
    sink = RecordingSink()
    try:
        completion = await TextModeProvider(provider).complete(HELLO, TOOLS, sink)
    finally:
        await provider.aclose()
    assert completion.content == "asked whole" and sink.pieces == []
