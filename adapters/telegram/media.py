"""Telegram media: photos, image files and voice in (as Attachments, fetched on demand); files out."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from telegram import Bot, Message
from telegram.error import BadRequest, NetworkError, TelegramError, TimedOut

from bridge.errors import MediaError
from bridge.events import Attachment, MediaKind, OutFile, megabytes
from bridge.media.bounded import CHUNK_BYTES, read_at_most
from bridge.media.speech import opus_seconds

# Runs a Bot API request with the adapter's retries (flood waits, network errors).
Retrying = Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]]
MIB = 1024 * 1024
# What the Bot API takes from a bot: photos up to 10 MB, other files up to 50 MB; it lets a bot
# download files up to 20 MB.
MAX_PHOTO_BYTES = 10 * MIB
MAX_UPLOAD_BYTES = 50 * MIB
MAX_DOWNLOAD_BYTES = 20 * MIB
CAPTION_LIMIT = 1024
# A file download: a connection within 10 s, then no read waiting more than 30 s for the next chunk.
DOWNLOAD_TIMEOUT = httpx.Timeout(30.0, connect=10.0)


def attachments_of(message: Message) -> tuple[Attachment, ...]:
    """The message's photo, document, voice note or audio file, as Attachments (none for other media)."""
    number = message.message_id
    if message.photo:
        # Telegram sends a photo in several sizes, smallest first; the largest is the one to read.
        best = message.photo[-1]
        return (Attachment("image", f"photo-{number}.jpg", best.file_id, "image/jpeg", best.file_size),)
    if message.document is not None:
        doc = message.document
        mime = doc.mime_type or ""
        name = doc.file_name or f"document-{number}"
        kind: MediaKind = (
            "image" if mime.startswith("image/") else "audio" if mime.startswith("audio/") else "file"
        )
        return (Attachment(kind, name, doc.file_id, mime or None, doc.file_size),)
    if message.voice is not None:
        voice = message.voice
        # The transcription server knows the format by the name's extension: Telegram's are OGG/Opus.
        mime = voice.mime_type or "audio/ogg"
        return (Attachment("audio", f"voice-{number}.ogg", voice.file_id, mime, voice.file_size, voice=True),)
    if message.audio is not None:
        audio = message.audio
        name = audio.file_name or f"audio-{number}.mp3"
        return (Attachment("audio", name, audio.file_id, audio.mime_type, audio.file_size),)
    return ()


class FileClient:
    """The HTTP client file downloads stream through (PTB's own download reads a whole file before it
    returns): made on the first download, kept for the next, closed with the adapter."""

    def __init__(self) -> None:
        self._client: httpx.AsyncClient | None = None

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=DOWNLOAD_TIMEOUT)
        return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()


async def download(
    bot: Bot, files: FileClient, attachment: Attachment, max_bytes: int, retrying: Retrying
) -> bytes:
    """The attachment's bytes through getFile, each request retried (`retrying`) on a passing network
    failure; MediaError saying why not (too large, gone). The file is streamed and reading stops past
    max_bytes, whatever getFile or the download's Content-Length said."""
    try:
        found = await retrying(lambda: bot.get_file(attachment.ref))
        if found.file_size is not None and found.file_size > max_bytes:
            raise MediaError(f"too large: {megabytes(found.file_size)}")
        url = found.file_path
        if not url:
            raise MediaError("Telegram gave no file to download")
        data: bytes = await retrying(lambda: _stream(files.client, url, max_bytes))
    except BadRequest as exc:
        if "too big" in str(exc).lower():
            most = megabytes(MAX_DOWNLOAD_BYTES)
            raise MediaError(f"too large: Telegram lets bots download files up to {most}") from exc
        raise MediaError(f"Telegram refused it ({exc.message})") from exc
    except TelegramError as exc:
        raise MediaError(f"the download failed ({type(exc).__name__})") from exc
    return data


async def _stream(client: httpx.AsyncClient, url: str, max_bytes: int) -> bytes:
    """One GET of a file URL, read up to max_bytes + 1 (bridge.media.bounded), with httpx's failures
    as PTB's errors so the adapter's retries treat them as they treat any Bot API request's. The URL
    holds the bot token, so no error below carries it.
    """
    try:
        # Asked unencoded, so the limit counts the file's own bytes.
        async with client.stream("GET", url, headers={"Accept-Encoding": "identity"}) as response:
            if response.status_code == 429 or response.status_code >= 500:
                raise NetworkError(f"HTTP {response.status_code}")
            if response.status_code >= 400:
                raise BadRequest(f"HTTP {response.status_code}")
            announced = response.headers.get("content-length")
            return await read_at_most(
                response.aiter_bytes(CHUNK_BYTES),
                max_bytes,
                announced=int(announced) if announced and announced.isdigit() else None,
            )
    except httpx.TimeoutException as exc:
        raise TimedOut(f"httpx.{type(exc).__name__}") from None
    except httpx.HTTPError as exc:
        raise NetworkError(f"httpx.{type(exc).__name__}") from None


async def send_file(bot: Bot, chat_id: int, file: OutFile, caption: str, params: dict[str, Any]) -> Message:
    """One file (a photo when it is one Telegram shows inline, a voice message when it is a spoken
    reply) with its caption, as plain text."""
    data = await asyncio.to_thread(Path(file.path).read_bytes)
    options = {key: value for key, value in params.items() if key != "link_preview_options"}
    if caption:
        options["caption"] = caption
    if file.voice:
        try:
            seconds = opus_seconds(data)
            return await bot.send_voice(chat_id, data, filename=file.name, duration=seconds, **options)
        except BadRequest as exc:
            # A user whose privacy settings refuse voice messages (VOICE_MESSAGES_FORBIDDEN) still
            # gets the audio, as a file.
            if "voice" not in str(exc).lower():
                raise
    if file.photo and file.size <= MAX_PHOTO_BYTES:
        try:
            return await bot.send_photo(chat_id, data, filename=file.name, **options)
        except BadRequest as exc:
            # Dimensions or a format Telegram won't show as a photo: it still goes, as a document.
            if "photo" not in str(exc).lower():
                raise
    return await bot.send_document(chat_id, data, filename=file.name, **options)
