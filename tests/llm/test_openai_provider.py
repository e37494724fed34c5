"""OpenAIProvider against the fake OpenAI server: wire format, parsing, retries and error messages."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime

import httpx
import pytest

from bridge.config.llm import LLMSettings
from bridge.errors import ProviderError
from bridge.llm.base import ChatMessage, ToolCall
from bridge.llm.openai import OpenAIProvider
from bridge.retry import parse_retry_after
from devkit.fakes.loopback import closed_port
from devkit.fakes.openai_server import (
    FakeOpenAI,
    Reply,
    delay,
    http_error,
    malformed,
    text,
    tool_call,
    tool_calls,
)
from tests.llm.conftest import RecordingSleep

API_KEY = "sk-test-very-secret-123"
HELLO = [ChatMessage(role="user", content="hello")]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


MakeProvider = Callable[..., OpenAIProvider]


@pytest.fixture
async def make_provider(fake_llm: FakeOpenAI, sleep: RecordingSleep) -> AsyncIterator[MakeProvider]:
    """Builds providers aimed at the fake server (override any LLMSettings field) and closes them."""
    providers: list[OpenAIProvider] = []

    def make(*, backoff_base: float = 0.5, **overrides: object) -> OpenAIProvider:
        fields: dict[str, object] = {
            "base_url": fake_llm.base_url,
            "api_key": API_KEY,
            "model": "test-model",
            "timeout_s": 5.0,
            "max_retries": 3,
            **overrides,
        }
        provider = OpenAIProvider(LLMSettings(**fields), backoff_base=backoff_base, sleep=sleep)
        providers.append(provider)
        return provider

    yield make
    for provider in providers:
        await provider.aclose()


async def failure(provider: OpenAIProvider, tools: list[dict[str, object]] | None = None) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await provider.complete(HELLO, tools or [])
    return caught.value


# -- replies are parsed ----------------------------------------------------------------------


async def test_text_reply_becomes_completion_content_with_usage_and_raw(
    fake_llm: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_llm.push(text("Hi there!", prompt_tokens=12, completion_tokens=3))

    completion = await make_provider().complete(HELLO, [])

    assert completion.content == "Hi there!"
    assert completion.tool_calls == ()
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (12, 3)
    assert completion.raw is not None
    assert completion.raw["choices"][0]["message"]["content"] == "Hi there!"


async def test_tool_call_is_parsed_with_id_name_and_verbatim_arguments(
    fake_llm: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_llm.push(tool_call("get_weather", {"city": "Oslo"}, call_id="call_abc"))

    completion = await make_provider().complete(HELLO, [WEATHER_TOOL])

    assert completion.content == ""  # null content from the server
    assert completion.tool_calls == (
        ToolCall(id="call_abc", name="get_weather", arguments='{"city": "Oslo"}'),
    )


async def test_malformed_tool_arguments_are_passed_through_for_the_agent_to_handle(
    fake_llm: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_llm.push(tool_call("get_weather", '{"city": "Os', call_id="call_1"))

    completion = await make_provider().complete(HELLO, [WEATHER_TOOL])

    assert completion.tool_calls[0].arguments == '{"city": "Os'


async def test_several_tool_calls_in_one_reply_keep_their_order(
    fake_llm: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_llm.push(
        tool_calls(
            tool_call("get_weather", {"city": "Oslo"}, call_id="call_1"),
            tool_call("get_time", {}, call_id="call_2"),
            content="Checking both.",
        )
    )

    completion = await make_provider().complete(HELLO, [WEATHER_TOOL])

    assert completion.content == "Checking both."
    assert [(c.id, c.name, json.loads(c.arguments)) for c in completion.tool_calls] == [
        ("call_1", "get_weather", {"city": "Oslo"}),
        ("call_2", "get_time", {}),
    ]


async def test_tool_call_without_id_gets_a_generated_unique_id(
    fake_llm: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_llm.push(tool_calls(tool_call("a", {}, call_id=""), tool_call("b", {}, call_id="")))

    completion = await make_provider().complete(HELLO, [])

    ids = [call.id for call in completion.tool_calls]
    assert all(id_.startswith("call_") and len(id_) == len("call_") + 12 for id_ in ids)
    assert ids[0] != ids[1]


# -- requests are built in the standard wire format ----------------------------------------


async def test_request_goes_to_chat_completions_with_model_and_messages(
    fake_llm: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_llm.push(text("ok"))

    await make_provider().complete(
        [ChatMessage(role="system", content="Be brief."), ChatMessage(role="user", content="hi")], []
    )

    assert fake_llm.paths == ["/v1/chat/completions"]
    assert fake_llm.last_request["model"] == "test-model"
    assert fake_llm.last_request["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]


async def test_text_goes_out_as_utf_8_and_a_lone_surrogate_still_makes_a_valid_request(
    fake_llm: FakeOpenAI, make_provider: MakeProvider
) -> None:
    # A model's "\ud800" (or a tool's) parses to a lone surrogate, which is no UTF-8 at all; the
    # request is written with it escaped rather than failing the turn.
    fake_llm.push(text("ok"), text("ok"))
    provider = make_provider()

    await provider.complete([ChatMessage(role="user", content="smørbrød 🥪")], [])
    assert fake_llm.last_request["messages"][0]["content"] == "smørbrød 🥪"
    await provider.complete([ChatMessage(role="user", content="broken \ud800 text")], [])
    assert fake_llm.last_request["messages"][0]["content"] == "broken \ud800 text"


async def test_tools_are_omitted_when_none_are_offered(
    fake_llm: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_llm.push(text("ok"))

    await make_provider().complete(HELLO, [])

    assert "tools" not in fake_llm.last_request
    assert fake_llm.tool_names(0) == []


async def test_tools_are_sent_unchanged_in_function_format(
    fake_llm: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_llm.push(text("ok"))

    await make_provider().complete(HELLO, [WEATHER_TOOL])

    assert fake_llm.last_request["tools"] == [WEATHER_TOOL]
    assert fake_llm.tool_names(0) == ["get_weather"]


async def test_temperature_and_max_tokens_are_sent_only_when_set(
    fake_llm: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_llm.push(text("ok"), text("ok"))

    await make_provider().complete(HELLO, [])
    await make_provider(temperature=0.2, max_tokens=256).complete(HELLO, [])

    assert "temperature" not in fake_llm.requests[0]
    assert "max_tokens" not in fake_llm.requests[0]
    assert (fake_llm.requests[1]["temperature"], fake_llm.requests[1]["max_tokens"]) == (0.2, 256)


async def test_assistant_tool_calls_and_tool_results_serialise_to_openai_wire_format(
    fake_llm: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_llm.push(text("It is sunny in Oslo."))
    conversation = [
        ChatMessage(role="user", content="Weather in Oslo?"),
        ChatMessage(
            role="assistant",
            tool_calls=(ToolCall(id="call_1", name="get_weather", arguments='{"city": "Oslo"}'),),
        ),
        ChatMessage(role="tool", content='{"sky": "sunny"}', tool_call_id="call_1", name="get_weather"),
        ChatMessage(
            role="assistant", content="Let me also check.", tool_calls=(ToolCall("call_2", "t", "{}"),)
        ),
    ]

    await make_provider().complete(conversation, [WEATHER_TOOL])

    assert fake_llm.last_request["messages"][1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"sky": "sunny"}'},
        {
            "role": "assistant",
            "content": "Let me also check.",
            "tool_calls": [
                {"id": "call_2", "type": "function", "function": {"name": "t", "arguments": "{}"}}
            ],
        },
    ]


async def test_authorization_header_carries_the_api_key(
    fake_llm: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_llm.push(text("ok"))

    await make_provider().complete(HELLO, [])

    assert fake_llm.request_headers[0]["Authorization"] == f"Bearer {API_KEY}"


async def test_no_authorization_header_without_an_api_key(
    fake_llm: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_llm.push(text("ok"))

    await make_provider(api_key="").complete(HELLO, [])

    assert "Authorization" not in fake_llm.request_headers[0]


async def test_injected_transport_is_used_instead_of_the_network() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url == "http://model.invalid/v1/chat/completions"
        return httpx.Response(200, json=text("via transport").body)

    provider = OpenAIProvider(
        LLMSettings(base_url="http://model.invalid/v1"), transport=httpx.MockTransport(handler)
    )
    try:
        assert (await provider.complete(HELLO, [])).content == "via transport"
    finally:
        await provider.aclose()


# -- retries ---------------------------------------------------------------------------------


async def test_429_waits_exactly_the_retry_after_seconds_then_succeeds(
    fake_llm: FakeOpenAI, make_provider: MakeProvider, sleep: RecordingSleep
) -> None:
    fake_llm.push(http_error(429, "Rate limit reached", headers={"Retry-After": "7"}), text("finally"))

    completion = await make_provider().complete(HELLO, [])

    assert completion.content == "finally"
    assert sleep.waits == [7.0]
    assert len(fake_llm.requests) == 2


async def test_retry_after_longer_than_a_minute_is_capped(
    fake_llm: FakeOpenAI, make_provider: MakeProvider, sleep: RecordingSleep
) -> None:
    fake_llm.push(http_error(503, headers={"Retry-After": "3600"}), text("ok"))

    await make_provider().complete(HELLO, [])

    assert sleep.waits == [60.0]


def test_retry_after_accepts_seconds_http_dates_and_milliseconds() -> None:
    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)

    assert parse_retry_after(httpx.Headers({"Retry-After": "3"})) == 3.0
    assert parse_retry_after(httpx.Headers({"Retry-After": "Wed, 01 Jan 2025 12:00:30 GMT"}), now=now) == 30.0
    assert parse_retry_after(httpx.Headers({"Retry-After": "Wed, 01 Jan 2025 11:00:00 GMT"}), now=now) == 0.0
    assert parse_retry_after(httpx.Headers({"retry-after-ms": "1500", "Retry-After": "2"})) == 1.5
    assert parse_retry_after(httpx.Headers({"Retry-After": "soon"})) is None
    assert parse_retry_after(httpx.Headers({})) is None


async def test_500_twice_then_success_retries_with_growing_jittered_backoff(
    fake_llm: FakeOpenAI, make_provider: MakeProvider, sleep: RecordingSleep
) -> None:
    fake_llm.push(http_error(500), http_error(500), text("recovered"))

    completion = await make_provider(backoff_base=0.5).complete(HELLO, [])

    assert completion.content == "recovered"
    assert len(fake_llm.requests) == 3
    first, second = sleep.waits
    # base, then twice base, each scaled by a jitter factor in [0.75, 1].
    assert 0.375 <= first <= 0.5
    assert 0.75 <= second <= 1.0


async def test_server_errors_that_persist_fail_after_max_retries_with_attempt_count(
    fake_llm: FakeOpenAI, make_provider: MakeProvider, sleep: RecordingSleep
) -> None:
    fake_llm.push(*[http_error(503, "overloaded")] * 3)

    error = await failure(make_provider(max_retries=2))

    assert len(fake_llm.requests) == 3
    assert len(sleep.waits) == 2
    assert error.retryable is True
    assert error.status == 503
    assert error.message == "The model server kept failing (HTTP 503) after 3 attempts: overloaded"


async def test_max_retries_zero_makes_a_single_attempt(
    fake_llm: FakeOpenAI, make_provider: MakeProvider, sleep: RecordingSleep
) -> None:
    fake_llm.push(http_error(500))

    error = await failure(make_provider(max_retries=0))

    assert len(fake_llm.requests) == 1
    assert sleep.waits == []
    assert "after 1 attempt" in error.message


async def test_400_fails_at_once_with_the_servers_explanation(
    fake_llm: FakeOpenAI, make_provider: MakeProvider, sleep: RecordingSleep
) -> None:
    fake_llm.push(http_error(400, "  'messages' must   not be empty  "), text("never sent"))

    error = await failure(make_provider())

    assert len(fake_llm.requests) == 1
    assert sleep.waits == []
    assert error.retryable is False
    assert error.status == 400
    assert error.message == "The model server refused the request (HTTP 400): 'messages' must not be empty"


async def test_401_fails_at_once_and_points_at_the_api_key_setting(
    fake_llm: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_llm.push(http_error(401, "Invalid API key"), text("never sent"))

    error = await failure(make_provider())

    assert len(fake_llm.requests) == 1
    assert error.retryable is False
    assert error.message == "The model server rejected the API key (HTTP 401). Check [llm] api_key."


async def test_404_fails_at_once_naming_base_url_and_model(
    fake_llm: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_llm.push(http_error(404, "The model `test-model` does not exist"))

    error = await failure(make_provider())

    assert len(fake_llm.requests) == 1
    assert fake_llm.base_url in error.message
    assert "test-model" in error.message


async def test_connection_refused_fails_clearly_after_retries(
    make_provider: MakeProvider, sleep: RecordingSleep
) -> None:
    base_url = f"http://127.0.0.1:{closed_port()}/v1"

    error = await failure(make_provider(base_url=base_url, max_retries=2))

    assert len(sleep.waits) == 2
    assert error.retryable is True
    assert error.message.startswith(f"Can't reach the model server at {base_url}: connection refused")


async def test_slow_server_times_out_after_retries(
    fake_llm: FakeOpenAI, make_provider: MakeProvider, sleep: RecordingSleep
) -> None:
    fake_llm.push(delay(30, text("too late")), delay(30, text("too late")))

    error = await failure(make_provider(timeout_s=0.2, max_retries=1))

    assert len(fake_llm.requests) == 2
    assert error.retryable is True
    assert error.message.startswith(f"The model server at {fake_llm.base_url} did not answer within 0.2 s")


async def test_malformed_json_is_retried_and_then_succeeds(
    fake_llm: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_llm.push(malformed(), text("clean"))

    assert (await make_provider().complete(HELLO, [])).content == "clean"
    assert len(fake_llm.requests) == 2


async def test_malformed_json_every_time_fails_after_retries(
    fake_llm: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_llm.push(*[malformed()] * 4)

    error = await failure(make_provider(max_retries=3))

    assert len(fake_llm.requests) == 4
    assert error.retryable is True
    assert error.message.startswith("The model server sent a malformed response")
    assert "4 attempts" in error.message


async def test_running_out_of_scripted_replies_fails_loudly(
    fake_llm: FakeOpenAI, make_provider: MakeProvider
) -> None:
    error = await failure(make_provider(max_retries=0))

    assert "script ran out" in error.message


# -- the api key never leaks -----------------------------------------------------------------


@pytest.mark.parametrize("status", [400, 401, 403, 422, 500])
async def test_api_key_echoed_by_the_server_never_appears_in_errors_or_logs(
    fake_llm: FakeOpenAI,
    make_provider: MakeProvider,
    caplog: pytest.LogCaptureFixture,
    status: int,
) -> None:
    echo = f"Incorrect API key provided: {API_KEY}"
    fake_llm.push(*[http_error(status, echo)] * 2)

    with caplog.at_level(logging.DEBUG):
        error = await failure(make_provider(max_retries=1))

    assert API_KEY not in error.message
    assert API_KEY not in str(error)
    assert API_KEY not in caplog.text


async def test_api_key_is_not_in_connection_error_messages(
    make_provider: MakeProvider, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        error = await failure(make_provider(base_url=f"http://127.0.0.1:{closed_port()}/v1"))

    assert API_KEY not in error.message
    assert API_KEY not in caplog.text


async def test_cancelling_a_slow_request_propagates_instead_of_retrying(sleep: RecordingSleep) -> None:
    async def slow(body: dict[str, object]) -> Reply:
        # An async script: exercises FakeOpenAI's script path as well as the provider.
        return delay(30, text(f"echo {body['model']}"))

    async with FakeOpenAI(slow) as fake:
        provider = OpenAIProvider(LLMSettings(base_url=fake.base_url), sleep=sleep)
        try:
            task = asyncio.create_task(provider.complete(HELLO, []))
            await fake.wait_for_requests(1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            await provider.aclose()

    assert len(fake.requests) == 1
    assert sleep.waits == []
