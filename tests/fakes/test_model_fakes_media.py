"""The model fakes' media: FakeOpenAI's transcriptions and image parts, FakeAnthropic's image blocks."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from devkit.fakes.openai_server import FakeOpenAI, delay, http_error, images_in, text
from tests.fakes import anthropic_server
from tests.fakes.anthropic_server import FakeAnthropic

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00fake png body"
JPEG = b"\xff\xd8\xff\xe0" + b"fake jpeg body"
VOICE = b"OggS\x00\x02fake opus voice note"
ANTHROPIC_HEADERS = {"anthropic-version": "2023-06-01"}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{b64(data)}"


@pytest.fixture
async def openai() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def anthropic() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as server:
        yield server


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as http:
        yield http


async def transcribe(
    client: httpx.AsyncClient,
    fake: FakeOpenAI,
    *,
    fields: dict[str, str] | None = None,  # None: just the model
    file: tuple[str, bytes, str] | None = ("voice.ogg", VOICE, "audio/ogg"),
) -> httpx.Response:
    return await client.post(
        f"{fake.base_url}/audio/transcriptions",
        data={"model": "whisper-1"} if fields is None else fields,
        files={"file": file} if file else None,
        headers={"Authorization": "Bearer sk-test"},
    )


# -- FakeOpenAI: /audio/transcriptions ------------------------------------------------------------


async def test_a_transcription_round_trip_in_json(openai: FakeOpenAI, client: httpx.AsyncClient) -> None:
    openai.push_transcript("hello there")

    response = await transcribe(client, openai, fields={"model": "whisper-1", "language": "en"})

    assert response.status_code == 200
    assert response.json() == {"text": "hello there"}
    assert openai.transcriptions == [
        {
            "model": "whisper-1",
            "filename": "voice.ogg",
            "content_type": "audio/ogg",
            "data": VOICE,
            "language": "en",
            "prompt": None,
            "response_format": None,
            "authorization": "Bearer sk-test",
        }
    ]
    assert openai.last_transcription["data"] == VOICE
    assert openai.transcripts == type(openai.transcripts)()
    assert openai.requests == [] and openai.rejections == []


async def test_text_and_verbose_json_formats(openai: FakeOpenAI, client: httpx.AsyncClient) -> None:
    openai.push_transcript("plain words", "verbose words")

    plain = await transcribe(client, openai, fields={"model": "whisper-1", "response_format": "text"})
    verbose = await transcribe(
        client, openai, fields={"model": "whisper-1", "response_format": "verbose_json", "language": "de"}
    )

    assert plain.status_code == 200
    assert plain.headers["content-type"].startswith("text/plain")
    assert plain.text == "plain words"
    assert verbose.json()["text"] == "verbose words"
    assert verbose.json()["language"] == "de"
    assert verbose.json()["segments"] == []
    assert [t["response_format"] for t in openai.transcriptions] == ["text", "verbose_json"]


async def test_the_default_transcript_when_none_is_queued(
    openai: FakeOpenAI, client: httpx.AsyncClient
) -> None:
    first = await transcribe(client, openai)
    openai.default_transcript = "changed"
    second = await transcribe(client, openai)

    assert first.json() == {"text": "(transcript)"}
    assert second.json() == {"text": "changed"}


@pytest.mark.parametrize(
    ("fields", "file", "param"),
    [
        ({"language": "en"}, ("voice.ogg", VOICE, "audio/ogg"), "model"),
        ({"model": "whisper-1"}, None, "file"),
        ({"model": "whisper-1"}, ("voice", VOICE, "audio/ogg"), "file"),
        ({"model": "whisper-1"}, ("voice.ogg", b"", "audio/ogg"), "file"),
        (
            {"model": "whisper-1", "response_format": "srt-ish"},
            ("voice.ogg", VOICE, "audio/ogg"),
            "response_format",
        ),
    ],
    ids=["no-model", "no-file", "no-extension", "empty-file", "bad-format"],
)
async def test_malformed_transcription_requests_get_a_400(
    openai: FakeOpenAI,
    client: httpx.AsyncClient,
    fields: dict[str, str],
    file: tuple[str, bytes, str] | None,
    param: str,
) -> None:
    openai.push_transcript("kept for the next valid request")

    response = await transcribe(client, openai, fields=fields, file=file)

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert openai.rejections == [error["message"]]
    assert len(openai.transcriptions) == 1  # recorded all the same
    assert list(openai.transcripts) == ["kept for the next valid request"]


async def test_a_file_sent_as_a_plain_field_is_not_a_file(
    openai: FakeOpenAI, client: httpx.AsyncClient
) -> None:
    response = await client.post(
        f"{openai.base_url}/audio/transcriptions", data={"model": "whisper-1", "file": "not an upload"}
    )

    assert response.status_code == 400
    assert response.json()["error"]["param"] == "file"


async def test_a_json_body_is_not_a_multipart_form(openai: FakeOpenAI, client: httpx.AsyncClient) -> None:
    response = await client.post(f"{openai.base_url}/audio/transcriptions", json={"model": "whisper-1"})

    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert openai.transcriptions[0]["model"] is None


async def test_scripted_transcription_failures(openai: FakeOpenAI, client: httpx.AsyncClient) -> None:
    openai.push_transcript(http_error(500, "whisper fell over"), delay(0.05, http_error(429)), "recovered")

    failed = await transcribe(client, openai)
    limited = await transcribe(client, openai)
    recovered = await transcribe(client, openai)

    assert failed.status_code == 500
    assert failed.json()["error"]["message"] == "whisper fell over"
    assert limited.status_code == 429
    assert recovered.json() == {"text": "recovered"}
    assert len(openai.transcriptions) == 3
    assert openai.rejections == []


async def test_transcriptions_leave_the_chat_route_alone(
    openai: FakeOpenAI, client: httpx.AsyncClient
) -> None:
    openai.push(text("chat answer"))
    openai.push_transcript("spoken words")

    spoken = await transcribe(client, openai)
    chat = await client.post(
        f"{openai.base_url}/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    )

    assert spoken.json() == {"text": "spoken words"}
    assert chat.json()["choices"][0]["message"]["content"] == "chat answer"
    assert len(openai.requests) == 1 and len(openai.transcriptions) == 1
    await openai.wait_for(lambda: len(openai.transcriptions) == 1)


# -- FakeOpenAI: image parts in chat requests -----------------------------------------------------


def image_request(*parts: dict[str, Any], role: str = "user") -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": role, "content": list(parts)}]}


async def test_a_chat_request_with_image_parts(openai: FakeOpenAI, client: httpx.AsyncClient) -> None:
    openai.push(text("a cat and a dog"))
    body = image_request(
        {"type": "text", "text": "what is in these?"},
        {"type": "image_url", "image_url": {"url": data_url("image/png", PNG), "detail": "low"}},
        {"type": "image_url", "image_url": {"url": "https://example.invalid/dog.jpg"}},
        {"type": "image_url", "image_url": {"url": data_url("image/jpeg", JPEG)}},
    )

    response = await client.post(f"{openai.base_url}/chat/completions", json=body)

    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "a cat and a dog"
    assert openai.rejections == []
    # The https image is not inline, so images_in leaves it out.
    assert images_in(openai.last_request) == [("image/png", PNG), ("image/jpeg", JPEG)]
    assert images_in({"messages": [{"role": "user", "content": "no parts"}]}) == []


@pytest.mark.parametrize(
    ("part", "role"),
    [
        ({"text": "no type"}, "user"),
        ({"type": "image_url", "image_url": {}}, "user"),
        ({"type": "image_url", "image_url": {"url": "data:image/png;base64,not base64!"}}, "user"),
        ({"type": "image_url", "image_url": {"url": data_url("text/plain", b"hi")}}, "user"),
        ({"type": "image_url", "image_url": {"url": data_url("image/png", PNG), "detail": "huge"}}, "user"),
        ({"type": "image_url", "image_url": {"url": data_url("image/png", PNG)}}, "assistant"),
        ({"type": "video", "video": {}}, "user"),
    ],
    ids=["no-type", "no-url", "not-base64", "not-an-image", "bad-detail", "assistant-image", "unknown-type"],
)
async def test_malformed_parts_are_refused(
    openai: FakeOpenAI, client: httpx.AsyncClient, part: dict[str, Any], role: str
) -> None:
    openai.push(text("never sent"))
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}] if role == "assistant" else []
    body = {"model": "m", "messages": [*messages, {"role": role, "content": [part]}]}

    response = await client.post(f"{openai.base_url}/chat/completions", json=body)

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert openai.rejections == [error["message"]]
    assert len(openai.requests) == 1  # recorded, but answered by the validator
    assert openai.remaining == 1


# -- FakeAnthropic: image blocks --------------------------------------------------------------------


def image_block(media_type: str = "image/png", data: str | None = None) -> dict[str, Any]:
    source = {"type": "base64", "media_type": media_type, "data": b64(PNG) if data is None else data}
    return {"type": "image", "source": source}


async def post_messages(
    client: httpx.AsyncClient, fake: FakeAnthropic, messages: list[dict[str, Any]]
) -> httpx.Response:
    body = {"model": "claude-fake", "max_tokens": 100, "messages": messages}
    return await client.post(f"{fake.base_url}/v1/messages", json=body, headers=ANTHROPIC_HEADERS)


async def test_an_anthropic_image_block_is_accepted(
    anthropic: FakeAnthropic, client: httpx.AsyncClient
) -> None:
    anthropic.push(anthropic_server.text("a small image"))
    content = [
        image_block(),
        {"type": "image", "source": {"type": "url", "url": "https://example.invalid/a.png"}},
        image_block("image/jpeg", b64(JPEG)),
        {"type": "text", "text": "what is this?"},
    ]

    response = await post_messages(client, anthropic, [{"role": "user", "content": content}])

    assert response.status_code == 200, response.text
    assert anthropic.rejections == []
    assert anthropic_server.images_in(anthropic.last_request) == [("image/png", PNG), ("image/jpeg", JPEG)]


async def test_an_image_in_a_tool_result(anthropic: FakeAnthropic, client: httpx.AsyncClient) -> None:
    anthropic.push(anthropic_server.text("seen"))
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "take a screenshot"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "shot", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [image_block()]},
                image_block("image/jpeg", b64(JPEG)),
            ],
        },
    ]

    response = await post_messages(client, anthropic, messages)

    assert response.status_code == 200, response.text
    assert anthropic_server.images_in(anthropic.last_request) == [("image/png", PNG), ("image/jpeg", JPEG)]


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ([{"role": "user", "content": [image_block("image/bmp")]}], "media_type"),
        ([{"role": "user", "content": [image_block(data="")]}], "data: Field required"),
        ([{"role": "user", "content": [image_block(data="@@ not base64 @@")]}], "Invalid base64"),
        (
            [{"role": "user", "content": [image_block("image/jpeg")]}],
            "does not match the provided media type",
        ),
        ([{"role": "user", "content": [{"type": "image"}]}], "source: Field required"),
        (
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": [image_block()]}],
            "only allowed in user messages",
        ),
    ],
    ids=["bad-media-type", "no-data", "not-base64", "png-labelled-jpeg", "no-source", "assistant-image"],
)
async def test_bad_anthropic_image_blocks_are_refused(
    anthropic: FakeAnthropic, client: httpx.AsyncClient, messages: list[dict[str, Any]], expected: str
) -> None:
    anthropic.push(anthropic_server.text("never sent"))

    response = await post_messages(client, anthropic, messages)

    assert response.status_code == 400
    assert response.json()["type"] == "error"
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert len(anthropic.rejections) == 1 and expected in anthropic.rejections[0]
    assert anthropic.remaining == 1


async def test_bodies_past_a_mebibyte_are_read(openai: FakeOpenAI, client: httpx.AsyncClient) -> None:
    """aiohttp stops at 1 MiB by default; a photo or a voice note is often larger."""
    big = b"\x00" * (3 * 1024**2)
    openai.push(text("big picture"))

    spoken = await transcribe(client, openai, file=("long.mp3", big, "audio/mpeg"))
    seen = await client.post(
        f"{openai.base_url}/chat/completions",
        json=image_request({"type": "image_url", "image_url": {"url": data_url("image/png", big)}}),
    )

    assert spoken.status_code == 200 and openai.last_transcription["data"] == big
    assert seen.status_code == 200 and images_in(openai.last_request) == [("image/png", big)]
