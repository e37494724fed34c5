"""Images in model requests: the format sniffed from the bytes, the newest few filled in for a vision
model, and their base64 kept out of run traces."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import pytest

from bridge.llm.anthropic import to_anthropic_messages
from bridge.llm.base import ChatMessage, Image
from bridge.llm.openai import serialize_message
from bridge.media.blobs import MediaStore
from bridge.media.parts import ImageReader, image_type, images_of, without_image_data
from tests.media.samples import GIF87, GIF89, JPEG, NOT_AN_IMAGE, PNG, VOICE, WEBP

# -- image_type -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "mime"),
    [
        (JPEG, "image/jpeg"),
        (PNG, "image/png"),
        (GIF87, "image/gif"),
        (GIF89, "image/gif"),
        (WEBP, "image/webp"),
    ],
)
def test_the_four_image_formats_models_take_are_recognised(data: bytes, mime: str) -> None:
    assert image_type(data) == mime


@pytest.mark.parametrize(
    "data",
    [
        b"",
        NOT_AN_IMAGE,
        VOICE,
        b"RIFF\x24\x00\x00\x00WAVEfmt ",  # a WAV file: RIFF, but not WebP
        b"\xff\xd8",  # too short to be a JPEG
        b"\x89PNG",  # a PNG signature cut short
        b"GIF88a",
        b"BM\x36\x00\x00\x00",  # BMP: an image, but not one both providers take
        b"II*\x00",  # TIFF
        b"<svg xmlns='http://www.w3.org/2000/svg'/>",
    ],
)
def test_anything_else_is_no_image_a_model_can_read(data: bytes) -> None:
    assert image_type(data) is None


# -- ImageReader ------------------------------------------------------------------------------


class CountingStore(MediaStore):
    """A media store that counts the reads of each hash."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.reads: dict[str, int] = {}

    async def get(self, sha256: str) -> bytes | None:
        self.reads[sha256] = self.reads.get(sha256, 0) + 1
        return await super().get(sha256)


@pytest.fixture
def blobs(tmp_path: Path) -> CountingStore:
    return CountingStore(tmp_path / "media")


async def stored(blobs: MediaStore, name: str, data: bytes) -> Image:
    return Image(name, image_type(data) or "image/jpeg", await blobs.put(data))


def picture(n: int) -> bytes:
    return PNG + f" picture {n}".encode()


def sent(messages: list[ChatMessage]) -> list[list[tuple[str, bytes | None]]]:
    return [[(image.name, image.data) for image in message.images] for message in messages]


async def test_the_newest_images_are_filled_with_their_bytes_up_to_the_limit(blobs: CountingStore) -> None:
    images = [await stored(blobs, f"p{n}.png", picture(n)) for n in range(5)]
    messages = [
        ChatMessage("user", "first", images=(images[0], images[1])),
        ChatMessage("assistant", "nice"),
        ChatMessage("user", "second", images=(images[2],)),
        ChatMessage("assistant", "and?"),
        ChatMessage("user", "third", images=(images[3], images[4])),
    ]

    out = await ImageReader(blobs, limit=3).parts(messages, vision=True)

    # Newest last: the third message's two, then the second's one; the first message's are dropped.
    assert sent(out) == [
        [],
        [],
        [("p2.png", picture(2))],
        [],
        [("p3.png", picture(3)), ("p4.png", picture(4))],
    ]
    # Only the images' data changes: text, roles and order are as they were.
    assert [(m.role, m.content) for m in out] == [(m.role, m.content) for m in messages]


async def test_within_one_message_the_last_images_are_the_newest(blobs: CountingStore) -> None:
    images = tuple([await stored(blobs, f"p{n}.png", picture(n)) for n in range(4)])

    out = await ImageReader(blobs, limit=2).parts([ChatMessage("user", "album", images=images)], vision=True)

    assert sent(out) == [[("p2.png", picture(2)), ("p3.png", picture(3))]]


async def test_a_model_without_vision_gets_no_images_and_nothing_is_read(blobs: CountingStore) -> None:
    images = tuple([await stored(blobs, f"p{n}.png", picture(n)) for n in range(2)])
    messages = [ChatMessage("user", "look", images=images)]

    out = await ImageReader(blobs, limit=4).parts(messages, vision=False)

    assert sent(out) == [[]]
    assert out[0].content == "look"
    assert blobs.reads == {}


async def test_a_limit_of_zero_sends_no_images(blobs: CountingStore) -> None:
    image = await stored(blobs, "p.png", PNG)
    out = await ImageReader(blobs, limit=0).parts([ChatMessage("user", "x", images=(image,))], vision=True)
    assert sent(out) == [[]]


async def test_an_image_gone_from_the_store_is_left_out_and_an_older_one_takes_its_place(
    blobs: CountingStore,
) -> None:
    old = await stored(blobs, "old.png", picture(1))
    gone = Image("gone.png", "image/png", "e" * 64)
    messages = [ChatMessage("user", "a", images=(old,)), ChatMessage("user", "b", images=(gone,))]

    out = await ImageReader(blobs, limit=1).parts(messages, vision=True)

    assert sent(out) == [[("old.png", picture(1))], []]


async def test_each_hash_is_read_from_disk_once_per_run(blobs: CountingStore) -> None:
    same = await stored(blobs, "same.png", PNG)
    other = await stored(blobs, "other.jpg", JPEG)
    messages = [
        ChatMessage("user", "a", images=(same,)),
        ChatMessage("user", "b", images=(other, same)),
    ]
    reader = ImageReader(blobs, limit=4)

    first = await reader.parts(messages, vision=True)
    # The next model request of the same run (after a tool call, say) reads nothing again.
    second = await reader.parts([*messages, ChatMessage("tool", "done", tool_call_id="c1")], vision=True)

    assert sent(first) == [[("same.png", PNG)], [("other.jpg", JPEG), ("same.png", PNG)]]
    assert sent(second)[:2] == sent(first)
    assert blobs.reads == {same.sha256: 1, other.sha256: 1}


async def test_a_missing_image_is_looked_up_once_too(blobs: CountingStore) -> None:
    gone = Image("gone.png", "image/png", "e" * 64)
    reader = ImageReader(blobs, limit=4)
    for _ in range(3):
        await reader.parts([ChatMessage("user", "x", images=(gone,))], vision=True)
    assert blobs.reads == {"e" * 64: 1}


async def test_the_messages_passed_in_are_not_changed(blobs: CountingStore) -> None:
    image = await stored(blobs, "p.png", PNG)
    messages = [ChatMessage("user", "x", images=(image,))]
    await ImageReader(blobs, limit=4).parts(messages, vision=True)
    assert messages[0].images == (image,) and image.data is None


async def test_a_damaged_entry_with_a_sha256_that_is_not_text_does_not_fail_the_request(
    blobs: CountingStore,
) -> None:
    media = json.dumps([{"kind": "image", "name": "p.png", "ref": "r", "sha256": 7}])

    out = await ImageReader(blobs, limit=4).parts(
        [ChatMessage("user", "x", images=images_of(media))], vision=True
    )

    assert sent(out) == [[]]


# -- without_image_data -----------------------------------------------------------------------


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def openai_body() -> dict[str, Any]:
    image = Image("p.png", "image/png", "a" * 64, data=PNG)
    return {
        "model": "m",
        "messages": [
            serialize_message(ChatMessage("system", "be brief")),
            serialize_message(ChatMessage("user", "what is this?", images=(image,))),
        ],
        "tools": [{"type": "function", "function": {"name": "t", "parameters": {"type": "object"}}}],
    }


def anthropic_body() -> dict[str, Any]:
    image = Image("p.jpg", "image/jpeg", "a" * 64, data=JPEG)
    system, turns = to_anthropic_messages(
        [ChatMessage("system", "be brief"), ChatMessage("user", "what is this?", images=(image,))]
    )
    return {"model": "m", "max_tokens": 10, "system": system, "messages": turns}


def test_openai_data_urls_are_replaced_by_their_size_and_the_rest_kept() -> None:
    body = openai_body()
    original = copy.deepcopy(body)

    traced = without_image_data(body)

    encoded = b64(PNG)
    assert encoded not in json.dumps(traced)
    parts = traced["messages"][1]["content"]
    assert parts[0] == {"type": "text", "text": "what is this?"}
    assert parts[1] == {
        "type": "image_url",
        "image_url": {"url": f"data:image/png;base64,<{len(encoded)} characters>"},
    }
    assert {k: v for k, v in traced.items() if k != "messages"} == {
        k: v for k, v in original.items() if k != "messages"
    }
    assert traced["messages"][0] == original["messages"][0]
    assert body == original  # the request itself is left as sent


def test_anthropic_base64_sources_are_replaced_by_their_size_and_the_rest_kept() -> None:
    body = anthropic_body()
    original = copy.deepcopy(body)

    traced = without_image_data(body)

    encoded = b64(JPEG)
    assert encoded not in json.dumps(traced)
    [turn] = traced["messages"]
    assert turn["content"] == [
        {
            "type": "image",
            "source": {
                "type": "base64",
                "media_type": "image/jpeg",
                "data": f"<{len(encoded)} base64 characters>",
            },
        },
        {"type": "text", "text": "what is this?"},
    ]
    assert traced["system"] == "be brief" and traced["max_tokens"] == 10
    assert body == original


def test_a_body_without_images_is_unchanged() -> None:
    body: dict[str, Any] = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "a data: URL in words, base64, not one"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": {"name": "f"}}]},
            {
                "role": "user",
                "content": [{"type": "image", "source": {"type": "url", "url": "https://x/p.png"}}],
            },
        ],
        "temperature": 0.5,
        "stream": True,
        "n": 3,
    }
    assert without_image_data(body) == body


def test_images_inside_tool_results_are_stripped_too() -> None:
    encoded = b64(PNG)
    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": encoded}}
    body = {
        "messages": [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [block]}]}
        ]
    }

    traced = without_image_data(body)

    assert encoded not in json.dumps(traced)
    assert traced["messages"][0]["content"][0]["content"][0]["source"]["media_type"] == "image/png"
