"""Images in model requests, through both providers to their validating fakes: an OpenAI data URL
part, an Anthropic base64 image block before the text, and plain text for an image without bytes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from bridge.config.llm import LLMSettings
from bridge.llm.anthropic import AnthropicProvider
from bridge.llm.base import ChatMessage, Image, Provider, ToolCall
from bridge.llm.factory import build_provider
from bridge.llm.openai import OpenAIProvider
from devkit.fakes.openai_server import FakeOpenAI, images_in, text
from tests.fakes import anthropic_server
from tests.fakes.anthropic_server import FakeAnthropic

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR fake png body"
JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + b"fake jpeg body"
SHA = "ab" * 32

MakeProvider = Callable[..., Provider]


@pytest.fixture
async def fake_anthropic() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic(api_key="sk-ant-test") as server:
        yield server


@pytest.fixture
async def make_provider() -> AsyncIterator[MakeProvider]:
    made: list[Provider] = []

    def make(base_url: str, **fields: Any) -> Provider:
        provider = build_provider(
            LLMSettings(**{"base_url": base_url, "model": "vision-model", "max_retries": 0, **fields})
        )
        made.append(provider)
        return provider

    yield make
    for provider in made:
        await provider.aclose()


def photo(data: bytes | None, mime: str = "image/png", name: str = "p.png") -> Image:
    return Image(name, mime, SHA, data)


# -- OpenAI-compatible ------------------------------------------------------------------------


async def test_openai_sends_an_image_as_a_data_url_part_after_the_text(
    fake_llm: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_llm.push(text("a cat"))
    provider = make_provider(fake_llm.base_url)
    assert isinstance(provider, OpenAIProvider)

    completion = await provider.complete(
        [ChatMessage("system", "be brief"), ChatMessage("user", "what is this?", images=(photo(PNG),))], []
    )

    assert completion.content == "a cat"
    assert fake_llm.rejections == []
    [system, user] = fake_llm.last_request["messages"]
    assert system == {"role": "system", "content": "be brief"}
    assert user["role"] == "user"
    assert [part["type"] for part in user["content"]] == ["text", "image_url"]
    assert user["content"][0]["text"] == "what is this?"
    assert user["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")
    assert images_in(fake_llm.last_request) == [("image/png", PNG)]


async def test_openai_sends_several_images_in_their_order_and_an_image_without_text(
    fake_llm: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_llm.push(text("two"))
    messages = [
        ChatMessage("user", "first", images=(photo(PNG), photo(JPEG, "image/jpeg", "q.jpg"))),
        ChatMessage("assistant", "ok"),
        ChatMessage("user", "", images=(photo(PNG),)),
    ]

    await make_provider(fake_llm.base_url).complete(messages, [])

    assert fake_llm.rejections == []
    assert images_in(fake_llm.last_request) == [("image/png", PNG), ("image/jpeg", JPEG), ("image/png", PNG)]
    last = fake_llm.last_request["messages"][2]
    assert [part["type"] for part in last["content"]] == ["image_url"]  # no empty text part


async def test_openai_sends_an_image_without_bytes_as_plain_text(
    fake_llm: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_llm.push(text("ok"))

    await make_provider(fake_llm.base_url).complete(
        [ChatMessage("user", "[image: p.png]\nwhat is this?", images=(photo(None),))], []
    )

    assert fake_llm.last_request["messages"] == [{"role": "user", "content": "[image: p.png]\nwhat is this?"}]
    assert images_in(fake_llm.last_request) == []


async def test_openai_sends_only_the_images_that_have_bytes(
    fake_llm: FakeOpenAI, make_provider: MakeProvider
) -> None:
    fake_llm.push(text("ok"))

    await make_provider(fake_llm.base_url).complete(
        [ChatMessage("user", "two photos", images=(photo(None), photo(JPEG, "image/jpeg")))], []
    )

    assert fake_llm.rejections == []
    assert images_in(fake_llm.last_request) == [("image/jpeg", JPEG)]


# -- Anthropic --------------------------------------------------------------------------------


async def test_anthropic_sends_an_image_block_before_the_text(
    fake_anthropic: FakeAnthropic, make_provider: MakeProvider
) -> None:
    fake_anthropic.push(anthropic_server.text("a cat"))
    provider = make_provider(fake_anthropic.base_url, provider="anthropic", api_key="sk-ant-test")
    assert isinstance(provider, AnthropicProvider)

    completion = await provider.complete(
        [
            ChatMessage("system", "be brief"),
            ChatMessage("user", "what is this?", images=(photo(JPEG, "image/jpeg"),)),
        ],
        [],
    )

    assert completion.content == "a cat"
    assert fake_anthropic.rejections == []
    request = fake_anthropic.last_request
    assert request["system"] == "be brief"
    [turn] = request["messages"]
    assert [block["type"] for block in turn["content"]] == ["image", "text"]
    assert turn["content"][0]["source"]["type"] == "base64"
    assert turn["content"][0]["source"]["media_type"] == "image/jpeg"
    assert turn["content"][1] == {"type": "text", "text": "what is this?"}
    assert anthropic_server.images_in(request) == [("image/jpeg", JPEG)]


async def test_anthropic_sends_an_image_without_text_and_merges_turns_with_their_images(
    fake_anthropic: FakeAnthropic, make_provider: MakeProvider
) -> None:
    fake_anthropic.push(anthropic_server.text("ok"))
    messages = [
        ChatMessage("user", "", images=(photo(PNG),)),
        ChatMessage("user", "and this one", images=(photo(JPEG, "image/jpeg"),)),
    ]

    await make_provider(fake_anthropic.base_url, provider="anthropic", api_key="sk-ant-test").complete(
        messages, []
    )

    assert fake_anthropic.rejections == []
    [turn] = fake_anthropic.last_request["messages"]
    assert [block["type"] for block in turn["content"]] == ["image", "image", "text"]
    assert anthropic_server.images_in(fake_anthropic.last_request) == [
        ("image/png", PNG),
        ("image/jpeg", JPEG),
    ]


async def test_anthropic_sends_an_image_without_bytes_as_plain_text(
    fake_anthropic: FakeAnthropic, make_provider: MakeProvider
) -> None:
    fake_anthropic.push(anthropic_server.text("ok"))

    await make_provider(fake_anthropic.base_url, provider="anthropic", api_key="sk-ant-test").complete(
        [ChatMessage("user", "[image: p.png]\nwhat is this?", images=(photo(None),))], []
    )

    assert fake_anthropic.rejections == []
    assert fake_anthropic.last_request["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "[image: p.png]\nwhat is this?"}]}
    ]
    assert anthropic_server.images_in(fake_anthropic.last_request) == []


async def test_anthropic_puts_a_tool_result_before_an_image_that_follows_it(
    fake_anthropic: FakeAnthropic, make_provider: MakeProvider
) -> None:
    fake_anthropic.push(anthropic_server.text("ok"))
    messages = [
        ChatMessage("user", "look something up"),
        ChatMessage("assistant", "", tool_calls=(ToolCall("call_1", "search", "{}"),)),
        ChatMessage("tool", "found it", tool_call_id="call_1"),
        ChatMessage("user", "and this?", images=(photo(PNG),)),
    ]

    await make_provider(fake_anthropic.base_url, provider="anthropic", api_key="sk-ant-test").complete(
        messages, []
    )

    assert fake_anthropic.rejections == []
    last = fake_anthropic.last_request["messages"][-1]
    assert [block["type"] for block in last["content"]] == ["tool_result", "image", "text"]
    assert anthropic_server.images_in(fake_anthropic.last_request) == [("image/png", PNG)]


async def test_anthropic_leaves_an_image_past_its_5_mb_limit_to_its_name(
    fake_anthropic: FakeAnthropic, make_provider: MakeProvider
) -> None:
    fake_anthropic.push(anthropic_server.text("ok"))
    big = PNG + b"\x00" * (4 * 1024 * 1024)  # over 5 MB once base64-encoded

    await make_provider(fake_anthropic.base_url, provider="anthropic", api_key="sk-ant-test").complete(
        [ChatMessage("user", "[image: big.png]\nand this?", images=(photo(big), photo(PNG)))], []
    )

    assert fake_anthropic.rejections == []
    assert anthropic_server.images_in(fake_anthropic.last_request) == [("image/png", PNG)]
