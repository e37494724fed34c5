"""Images in model requests: the newest few read from the media store, and kept out of run traces."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from bridge.events import loads
from bridge.llm.base import ChatMessage, Image
from bridge.media.blobs import MediaStore

# The formats both providers take (Anthropic takes exactly these four).
_MAGIC = (
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)
_DATA_URL = re.compile(r"^data:([\w.+/-]+);base64,", re.ASCII)


def image_type(data: bytes) -> str | None:
    """The image format the bytes are in, if a model can read it: JPEG, PNG, GIF or WebP."""
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


class ImageReader:
    """Fills a request's newest images with their bytes, once per run (each model request re-reads none)."""

    def __init__(self, blobs: MediaStore, limit: int) -> None:
        self.blobs = blobs
        self.limit = limit
        self._read: dict[str, bytes | None] = {}

    async def parts(self, messages: list[ChatMessage], vision: bool) -> list[ChatMessage]:
        """The messages as sent: the newest `limit` images with their bytes for a vision model; every
        other image is left to its name in the text (an image gone from the store too)."""
        left = self.limit if vision else 0
        out = list(messages)
        for index in range(len(out) - 1, -1, -1):
            message = out[index]
            if not message.images:
                continue
            kept: list[Image] = []
            for image in reversed(message.images):
                data = await self._bytes(image.sha256) if left > 0 else None
                if data is not None:
                    kept.append(dataclasses.replace(image, data=data))
                    left -= 1
            out[index] = dataclasses.replace(message, images=tuple(reversed(kept)))
        return out

    async def _bytes(self, sha256: str) -> bytes | None:
        if sha256 not in self._read:
            self._read[sha256] = await self.blobs.get(sha256)
        return self._read[sha256]


def without_image_data(value: Any) -> Any:
    """A request body with each image's base64 replaced by its size: traces keep the shape, not megabytes."""
    if isinstance(value, dict):
        source = value.get("source")
        if value.get("type") == "image" and isinstance(source, dict) and isinstance(source.get("data"), str):
            return {**value, "source": {**source, "data": f"<{len(source['data'])} base64 characters>"}}
        return {key: without_image_data(item) for key, item in value.items()}
    if isinstance(value, list):
        return [without_image_data(item) for item in value]
    if isinstance(value, str) and (match := _DATA_URL.match(value)):
        return f"{match.group(0)}<{len(value) - match.end()} characters>"
    return value


def images_of(media: str | None) -> tuple[Image, ...]:
    """The stored images of a media column, as references a request may fill with their bytes."""
    return tuple(
        Image(a.name, a.mime or "image/jpeg", a.sha256)
        for a in loads(media)
        if a.kind == "image" and a.sha256 is not None and a.problem is None
    )
