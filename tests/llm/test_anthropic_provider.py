"""AnthropicProvider against the validating fake Messages API: wire format, history, retries and errors."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge.app import Bridge
from bridge.config.llm import LLMSettings
from bridge.errors import ProviderError
from bridge.events import Inbound
from bridge.llm.anthropic import AnthropicProvider
from bridge.llm.base import ChatMessage, ToolCall
from bridge.llm.factory import build_provider
from bridge.llm.openai import OpenAIProvider
from devkit.fakes.loopback import closed_port
from tests.fakes import anthropic_server as fake
from tests.fakes.anthropic_server import FakeAnthropic
from tests.harness import CORE_TOOLS, OWNER, RecordingSender, make_settings, pdf_group
from tests.llm.conftest import RecordingSleep

API_KEY = "sk-ant-test-very-secret-123"
HELLO = [ChatMessage(role="user", content="hello")]
WEATHER_PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": WEATHER_PARAMETERS,
    },
}


MakeProvider = Callable[..., AnthropicProvider]


@pytest.fixture
async def fake_anthropic() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic(api_key=API_KEY) as server:
        yield server


@pytest.fixture
async def make_provider(fake_anthropic: FakeAnthropic, sleep: RecordingSleep) -> AsyncIterator[MakeProvider]:
    """Builds providers aimed at the fake server (override any LLMSettings field) and closes them."""
    providers: list[AnthropicProvider] = []

    def make(**overrides: object) -> AnthropicProvider:
        fields: dict[str, object] = {
            "provider": "anthropic",
            "base_url": fake_anthropic.base_url,
            "api_key": API_KEY,
            "model": "claude-test",
            "timeout_s": 5.0,
            "max_retries": 3,
            **overrides,
        }
        provider = AnthropicProvider(LLMSettings(**fields), sleep=sleep)
        providers.append(provider)
        return provider

    yield make
    for provider in providers:
        await provider.aclose()


async def failure(provider: AnthropicProvider, messages: list[ChatMessage] | None = None) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await provider.complete(messages or HELLO, [])
    return caught.value


def weather_call(call_id: str, city: str) -> ToolCall:
    return ToolCall(id=call_id, name="get_weather", arguments=json.dumps({"city": city}))


# -- requests ----------------------------------------------------------------------------------


async def test_request_goes_to_v1_messages_with_key_version_and_json_headers(
    fake_anthropic: FakeAnthropic, make_provider: MakeProvider
) -> None:
    fake_anthropic.push(fake.text("hi"))

    await make_provider().complete(HELLO, [])

    assert fake_anthropic.paths == ["/v1/messages"]
    headers = fake_anthropic.request_headers[0]
    assert headers["x-api-key"] == API_KEY
    assert headers["anthropic-version"] == "2023-06-01"
    assert headers["content-type"] == "application/json"
    assert "authorization" not in headers


async def test_base_url_that_already_ends_in_v1_is_not_doubled(
    fake_anthropic: FakeAnthropic, make_provider: MakeProvider
) -> None:
    fake_anthropic.push(fake.text("hi"))

    await make_provider(base_url=f"{fake_anthropic.base_url}/v1/").complete(HELLO, [])

    assert fake_anthropic.paths == ["/v1/messages"]


async def test_without_a_base_url_requests_go_to_the_anthropic_api() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, json=fake.text("via transport").body)

    provider = AnthropicProvider(LLMSettings(provider="anthropic"), transport=httpx.MockTransport(handler))
    try:
        assert (await provider.complete(HELLO, [])).content == "via transport"
    finally:
        await provider.aclose()
    assert seen == ["https://api.anthropic.com/v1/messages"]


async def test_system_messages_go_top_level_and_max_tokens_defaults_to_4096(
    fake_anthropic: FakeAnthropic, make_provider: MakeProvider
) -> None:
    fake_anthropic.push(fake.text("ok"))

    completion = await make_provider().complete(
        [
            ChatMessage(role="system", content="Be brief."),
            ChatMessage(role="system", content="Use metric units."),
            ChatMessage(role="user", content="hi"),
        ],
        [],
    )

    assert fake_anthropic.last_request == {
        "model": "claude-test",
        "max_tokens": 4096,
        "system": "Be brief.\n\nUse metric units.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    }
    assert completion.request == fake_anthropic.last_request


async def test_temperature_and_max_tokens_come_from_the_settings_when_set(
    fake_anthropic: FakeAnthropic, make_provider: MakeProvider
) -> None:
    fake_anthropic.push(fake.text("ok"))

    await make_provider(temperature=0.2, max_tokens=256).complete(HELLO, [])

    assert (fake_anthropic.last_request["temperature"], fake_anthropic.last_request["max_tokens"]) == (
        0.2,
        256,
    )


async def test_openai_tool_schemas_are_converted_to_anthropic_tools(
    fake_anthropic: FakeAnthropic, make_provider: MakeProvider
) -> None:
    fake_anthropic.push(fake.text("ok"), fake.text("ok"))
    provider = make_provider()

    await provider.complete(HELLO, [WEATHER_TOOL])
    await provider.complete(HELLO, [])

    assert fake_anthropic.requests[0]["tools"] == [
        {
            "name": "get_weather",
            "description": "Weather for a city",
            "input_schema": WEATHER_PARAMETERS,
        }
    ]
    assert "tools" not in fake_anthropic.requests[1]


# -- replies -----------------------------------------------------------------------------------


async def test_text_reply_becomes_content_with_usage_and_raw(
    fake_anthropic: FakeAnthropic, make_provider: MakeProvider
) -> None:
    fake_anthropic.push(fake.text("Hi there!", input_tokens=12, output_tokens=3))

    completion = await make_provider().complete(HELLO, [])

    assert completion.content == "Hi there!"
    assert completion.tool_calls == ()
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (12, 3)
    assert completion.raw is not None and completion.raw["type"] == "message"


async def test_tool_use_blocks_become_tool_calls_with_json_arguments_and_text_is_kept(
    fake_anthropic: FakeAnthropic, make_provider: MakeProvider
) -> None:
    fake_anthropic.push(
        fake.tool_uses(
            fake.tool_use("get_weather", {"city": "Oslo"}, "toolu_1"),
            fake.tool_use("get_weather", {"city": "Bergen"}, "toolu_2"),
            content="Checking both.",
        )
    )

    completion = await make_provider().complete(HELLO, [WEATHER_TOOL])

    assert completion.content == "Checking both."
    assert [(c.id, c.name, json.loads(c.arguments)) for c in completion.tool_calls] == [
        ("toolu_1", "get_weather", {"city": "Oslo"}),
        ("toolu_2", "get_weather", {"city": "Bergen"}),
    ]


# -- history replay --------------------------------------------------------------------------


async def test_a_tool_call_round_trips_as_tool_use_then_a_matching_tool_result(
    fake_anthropic: FakeAnthropic, make_provider: MakeProvider
) -> None:
    fake_anthropic.push(fake.tool_use("get_weather", {"city": "Oslo"}, "toolu_abc"), fake.text("Sunny."))
    provider = make_provider()
    question = ChatMessage(role="user", content="Weather in Oslo?")

    first = await provider.complete([question], [WEATHER_TOOL])
    (call,) = first.tool_calls
    result = ChatMessage(role="tool", content='{"sky": "sunny"}', tool_call_id=call.id, name=call.name)
    second = await provider.complete(
        [question, ChatMessage(role="assistant", content=first.content, tool_calls=first.tool_calls), result],
        [WEATHER_TOOL],
    )

    assert second.content == "Sunny."
    assert fake_anthropic.rejections == []
    assert fake_anthropic.last_request["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_abc", "name": "get_weather", "input": {"city": "Oslo"}}
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_abc", "content": '{"sky": "sunny"}'}],
        },
    ]


async def test_parallel_tool_results_and_a_later_user_message_share_one_user_turn(
    fake_anthropic: FakeAnthropic, make_provider: MakeProvider
) -> None:
    fake_anthropic.push(fake.text("Oslo sunny, Bergen rain."))

    await make_provider().complete(
        [
            ChatMessage(role="user", content="Oslo and Bergen?"),
            ChatMessage(
                role="assistant",
                content="Checking both.",
                tool_calls=(weather_call("call_1", "Oslo"), weather_call("call_2", "Bergen")),
            ),
            ChatMessage(role="tool", content="sunny", tool_call_id="call_1", name="get_weather"),
            ChatMessage(role="tool", content="rain", tool_call_id="call_2", name="get_weather"),
            ChatMessage(role="user", content="And tomorrow?"),
        ],
        [WEATHER_TOOL],
    )

    assert fake_anthropic.rejections == []
    messages = fake_anthropic.last_request["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert [block["type"] for block in messages[1]["content"]] == ["text", "tool_use", "tool_use"]
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"},
        {"type": "tool_result", "tool_use_id": "call_2", "content": "rain"},
        {"type": "text", "text": "And tomorrow?"},
    ]


async def test_unanswered_user_messages_in_a_row_are_merged_into_one_turn(
    fake_anthropic: FakeAnthropic, make_provider: MakeProvider
) -> None:
    fake_anthropic.push(fake.text("ok"))

    await make_provider().complete(
        [ChatMessage(role="user", content="first"), ChatMessage(role="user", content="second")], []
    )

    assert fake_anthropic.rejections == []
    assert fake_anthropic.last_request["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]}
    ]


async def test_empty_text_is_never_sent_as_an_empty_text_block(
    fake_anthropic: FakeAnthropic, make_provider: MakeProvider
) -> None:
    fake_anthropic.push(fake.text("ok"))

    await make_provider().complete(
        [
            ChatMessage(role="system", content=""),
            ChatMessage(role="user", content="Weather?"),
            ChatMessage(role="assistant", content="  ", tool_calls=(weather_call("call_1", "Oslo"),)),
            ChatMessage(role="tool", content="", tool_call_id="call_1", name="get_weather"),
            ChatMessage(role="user", content=""),
        ],
        [],
    )

    assert fake_anthropic.rejections == []
    body = fake_anthropic.last_request
    assert "system" not in body
    assert body["messages"][1]["content"] == [
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Oslo"}}
    ]
    assert body["messages"][2]["content"] == [{"type": "tool_result", "tool_use_id": "call_1"}]


async def test_malformed_tool_arguments_are_replayed_as_an_empty_input_object(
    fake_anthropic: FakeAnthropic, make_provider: MakeProvider
) -> None:
    fake_anthropic.push(fake.text("ok"))

    await make_provider().complete(
        [
            ChatMessage(role="user", content="Weather?"),
            ChatMessage(role="assistant", tool_calls=(ToolCall("call_1", "get_weather", '{"city": "Os'),)),
            ChatMessage(role="tool", content="error: bad JSON", tool_call_id="call_1", name="get_weather"),
        ],
        [],
    )

    assert fake_anthropic.rejections == []
    assert fake_anthropic.last_request["messages"][1]["content"][0]["input"] == {}


async def test_a_tool_result_without_its_call_is_sent_as_text(
    fake_anthropic: FakeAnthropic, make_provider: MakeProvider
) -> None:
    # Text-mode history: the call is a fenced block in assistant text, the result still has an id.
    fake_anthropic.push(fake.text("ok"))

    await make_provider().complete(
        [
            ChatMessage(role="user", content="Time?"),
            ChatMessage(role="assistant", content='```tool\n{"name": "get_current_time"}\n```'),
            ChatMessage(role="tool", content="[tool result] 12:00", tool_call_id="call_9"),
        ],
        [],
    )

    assert fake_anthropic.rejections == []
    assert fake_anthropic.last_request["messages"][2]["content"] == [
        {"type": "text", "text": "[tool result] 12:00"}
    ]


# -- the fake rejects what the real API rejects -------------------------------------------------

USER = {"role": "user", "content": "hi"}
CALL = {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "t", "input": {}}]}


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        ({"model": "m", "messages": [USER]}, "max_tokens"),
        ({"max_tokens": 9, "model": "m", "messages": [USER, USER]}, "alternate"),
        ({"max_tokens": 9, "model": "m", "messages": [CALL]}, "first message"),
        ({"max_tokens": 9, "model": "m", "messages": [{"role": "system", "content": "x"}, USER]}, "system"),
        (
            {
                "max_tokens": 9,
                "model": "m",
                "messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}],
            },
            "non-empty",
        ),
        (
            {
                "max_tokens": 9,
                "model": "m",
                "messages": [
                    USER,
                    CALL,
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2"}]},
                ],
            },
            "unexpected `tool_use_id`",
        ),
        ({"max_tokens": 9, "model": "m", "messages": [USER, CALL, USER]}, "without `tool_result`"),
    ],
    ids=[
        "no-max-tokens",
        "not-alternating",
        "starts-with-assistant",
        "system-role",
        "empty-text",
        "id-mismatch",
        "unanswered-call",
    ],
)
async def test_the_fake_rejects_requests_the_real_api_rejects(
    fake_anthropic: FakeAnthropic, body: dict[str, Any], complaint: str
) -> None:
    fake_anthropic.push(fake.text("must not be used"))
    async with httpx.AsyncClient() as client:
        response = await client.post(
            f"{fake_anthropic.base_url}/v1/messages",
            json=body,
            headers={"x-api-key": API_KEY, "anthropic-version": "2023-06-01"},
        )

    assert response.status_code == 400
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert complaint in error["error"]["message"]
    assert fake_anthropic.remaining == 1


# -- retries and errors ------------------------------------------------------------------------


async def test_429_waits_the_retry_after_seconds_then_succeeds(
    fake_anthropic: FakeAnthropic, make_provider: MakeProvider, sleep: RecordingSleep
) -> None:
    fake_anthropic.push(
        fake.http_error(429, "Rate limited", {"retry-after": "7"}, error_type="rate_limit_error"),
        fake.text("finally"),
    )

    completion = await make_provider().complete(HELLO, [])

    assert completion.content == "finally"
    assert sleep.waits == [7.0]
    assert len(fake_anthropic.requests) == 2


@pytest.mark.parametrize("reply", [fake.overloaded(), fake.http_error(500, "Internal server error")])
async def test_overloaded_or_failing_server_gives_up_after_the_retries_naming_the_attempts(
    fake_anthropic: FakeAnthropic, make_provider: MakeProvider, sleep: RecordingSleep, reply: fake.Reply
) -> None:
    fake_anthropic.push(reply, reply, reply)

    error = await failure(make_provider(max_retries=2))

    assert len(fake_anthropic.requests) == 3
    assert len(sleep.waits) == 2
    assert error.retryable is True
    assert error.status == reply.status
    assert f"kept failing (HTTP {reply.status}) after 3 attempts" in error.message


async def test_a_rejected_key_fails_at_once_naming_the_setting_and_never_showing_the_key(
    fake_anthropic: FakeAnthropic, make_provider: MakeProvider, caplog: pytest.LogCaptureFixture
) -> None:
    wrong_key = "sk-ant-wrong-key-456"

    with caplog.at_level(logging.DEBUG):
        error = await failure(make_provider(api_key=wrong_key))

    assert len(fake_anthropic.requests) == 1
    assert error.retryable is False
    assert error.status == 401
    assert error.message == "The model server rejected the API key (HTTP 401). Check [llm] api_key."
    assert wrong_key not in caplog.text


@pytest.mark.parametrize("status", [400, 401, 403, 500, 529])
async def test_api_key_echoed_by_the_server_never_appears_in_errors_or_logs(
    fake_anthropic: FakeAnthropic,
    make_provider: MakeProvider,
    caplog: pytest.LogCaptureFixture,
    status: int,
) -> None:
    fake_anthropic.push(*[fake.http_error(status, f"bad key: {API_KEY}")] * 2)

    with caplog.at_level(logging.DEBUG):
        error = await failure(make_provider(max_retries=1))

    assert API_KEY not in str(error)
    assert API_KEY not in caplog.text


async def test_400_fails_at_once_with_the_servers_error_message(
    fake_anthropic: FakeAnthropic, make_provider: MakeProvider, sleep: RecordingSleep
) -> None:
    # Anthropic caps temperature at 1, below what [llm] temperature allows; the fake says so.
    error = await failure(make_provider(temperature=1.5))

    assert len(fake_anthropic.requests) == 1
    assert sleep.waits == []
    assert error.retryable is False
    assert error.status == 400
    assert error.message == (
        "The model server refused the request (HTTP 400): "
        "temperature: Input should be less than or equal to 1"
    )


async def test_404_names_base_url_and_model(
    fake_anthropic: FakeAnthropic, make_provider: MakeProvider
) -> None:
    fake_anthropic.push(fake.http_error(404, "model: claude-test", error_type="not_found_error"))

    error = await failure(make_provider())

    assert error.retryable is False
    assert fake_anthropic.base_url in error.message
    assert "claude-test" in error.message


async def test_malformed_json_is_retried_then_succeeds(
    fake_anthropic: FakeAnthropic, make_provider: MakeProvider
) -> None:
    fake_anthropic.push(fake.malformed(), fake.text("clean"))

    assert (await make_provider().complete(HELLO, [])).content == "clean"
    assert len(fake_anthropic.requests) == 2


async def test_malformed_json_every_time_fails_clearly_after_the_retries(
    fake_anthropic: FakeAnthropic, make_provider: MakeProvider
) -> None:
    fake_anthropic.push(*[fake.malformed()] * 3)

    error = await failure(make_provider(max_retries=2))

    assert error.retryable is True
    assert error.message == "The model server sent a malformed response (not valid JSON) after 3 attempts."


async def test_slow_server_times_out_after_the_retries(
    fake_anthropic: FakeAnthropic, make_provider: MakeProvider
) -> None:
    fake_anthropic.push(*[fake.delay(30, fake.text("too late"))] * 2)

    error = await failure(make_provider(timeout_s=0.2, max_retries=1))

    assert len(fake_anthropic.requests) == 2
    assert error.retryable is True
    assert error.message == (
        f"The model server at {fake_anthropic.base_url} did not answer within 0.2 s (2 attempts)."
    )


async def test_connection_refused_fails_clearly_after_the_retries(
    make_provider: MakeProvider, sleep: RecordingSleep
) -> None:
    base_url = f"http://127.0.0.1:{closed_port()}"

    error = await failure(make_provider(base_url=base_url, max_retries=1))

    assert len(sleep.waits) == 1
    assert error.message.startswith(f"Can't reach the model server at {base_url}: connection refused")


# -- the whole Bridge ------------------------------------------------------------------------


async def test_provider_setting_picks_the_provider_class() -> None:
    anthropic = build_provider(LLMSettings(provider="anthropic"))
    openai = build_provider(LLMSettings())
    try:
        assert isinstance(anthropic, AnthropicProvider)
        assert isinstance(openai, OpenAIProvider)
    finally:
        await anthropic.aclose()
        await openai.aclose()


@asynccontextmanager
async def anthropic_bridge(
    tmp_path: Path, model: FakeAnthropic
) -> AsyncIterator[tuple[Bridge, RecordingSender]]:
    llm = {"provider": "anthropic", "api_key": API_KEY, "model": "claude-test"}
    bridge = Bridge(make_settings(tmp_path, model.base_url, llm=llm), extra_groups=(pdf_group(),))
    sender = RecordingSender()
    bridge.add_sender(sender)
    async with bridge:
        yield bridge, sender


async def say(bridge: Bridge, text: str, message_id: str) -> None:
    done = await bridge.handle(
        Inbound(
            surface="test", chat_type="dm", chat_id=OWNER, sender_id=OWNER, text=text, message_id=message_id
        )
    )
    if done is not None:
        await asyncio.wait_for(done, timeout=10)


async def test_a_bridge_on_anthropic_loads_a_group_calls_its_tool_and_replays_it_next_turn(
    tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.push(
        fake.tool_use("load_tool_group", {"group_name": "pdf"}),
        fake.tool_use("pdf_info", {"path": "a.pdf"}, content="Let me look."),
        fake.text("a.pdf has 3 pages."),
        fake.text("You're welcome."),
    )
    async with anthropic_bridge(tmp_path, fake_anthropic) as (bridge, sender):
        await say(bridge, "how many pages has a.pdf?", "1")
        await say(bridge, "thanks", "2")

    assert fake_anthropic.rejections == []
    assert [item.text for item in sender.sent if item.kind == "reply"] == [
        "a.pdf has 3 pages.",
        "You're welcome.",
    ]
    assert fake_anthropic.tool_names(0) == CORE_TOOLS
    assert fake_anthropic.tool_names(2) == [*CORE_TOOLS, "pdf_info", "pdf_extract_text"]
    replay = fake_anthropic.requests[3]["messages"]
    assert [m["role"] for m in replay] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    tool_uses = [b["name"] for m in replay for b in m["content"] if b["type"] == "tool_use"]
    assert tool_uses == ["load_tool_group", "pdf_info"]
    assert replay[4]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": replay[3]["content"][1]["id"],
            "content": '{"path": "a.pdf", "pages": 3}',
        }
    ]
    assert replay[-1]["content"] == [{"type": "text", "text": "thanks"}]
    assert "system" in fake_anthropic.requests[3]


async def test_a_bridge_on_anthropic_recovers_after_a_failed_turn_with_both_messages_in_one_turn(
    tmp_path: Path, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.push(fake.overloaded(), fake.text("back"))
    async with anthropic_bridge(tmp_path, fake_anthropic) as (bridge, sender):
        await say(bridge, "first", "1")
        await say(bridge, "second", "2")

    error, answer = [item.text for item in sender.sent if item.kind == "reply"]
    assert "HTTP 529" in error
    assert answer == "back"
    assert fake_anthropic.rejections == []
    assert fake_anthropic.last_request["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]}
    ]
