"""Discord media: image, voice and audio attachments in (as Attachments, fetched on demand); files out."""

from __future__ import annotations

import asyncio
from pathlib import Path

import discord

from bridge.errors import MediaError
from bridge.media.model import Attachment, MediaKind, OutFile

MIB = 1024 * 1024
# What a bot may upload where the server has no boosts.
MAX_UPLOAD_BYTES = 10 * MIB


def attachments_of(message: discord.Message) -> tuple[Attachment, ...]:
    """The message's attachments: images, voice messages and audio files, and any other file by name."""
    found = []
    for item in message.attachments:
        mime = (item.content_type or "").split(";")[0].strip()
        voice = item.is_voice_message()
        kind: MediaKind = (
            "audio"
            if voice or mime.startswith("audio/")
            else "image"
            if mime.startswith("image/")
            else "file"
        )
        # The whole URL, its signed query included: the CDN refuses it without.
        found.append(Attachment(kind, item.filename, item.url, mime or None, item.size, voice=voice))
    return tuple(found)


async def download(client: discord.Client, attachment: Attachment, max_bytes: int) -> bytes:
    """The attachment's bytes from Discord's CDN; MediaError saying why not."""
    if attachment.size is not None and attachment.size > max_bytes:
        raise MediaError(f"too large: {attachment.size / MIB:.1f} MB")
    try:
        return await client.http.get_from_cdn(attachment.ref)
    except discord.NotFound as exc:
        # Attachment links expire after a day or so: a message left that long is gone.
        raise MediaError("Discord no longer has it (the link expired)") from exc
    except discord.HTTPException as exc:
        raise MediaError(f"the download failed (HTTP {exc.status})") from exc


async def read(file: OutFile) -> bytes:
    """The bytes of a file to send, read off the event loop."""
    return await asyncio.to_thread(Path(file.path).read_bytes)
