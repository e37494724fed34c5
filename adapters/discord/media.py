"""Discord media: image, voice and audio attachments in (as Attachments, fetched on demand); files out."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import aiohttp
import discord
from discord.http import HTTPClient

from bridge.errors import MediaError
from bridge.events import Attachment, MediaKind, OutFile, megabytes
from bridge.media.bounded import CHUNK_BYTES, read_at_most
from bridge.retry import GIVE_UP, RETRY, Backoff, Sleep, Verdict, with_retries

log = logging.getLogger(__name__)

MIB = 1024 * 1024
# What a bot may upload where the server has no boosts.
MAX_UPLOAD_BYTES = 10 * MIB
DOWNLOAD_BACKOFF = Backoff(attempts=3, base=0.5, cap=4.0)
# A CDN download: a connection within 10 s, then no read waiting more than 30 s for the next chunk.
DOWNLOAD_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=10.0, sock_read=30.0)


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


def _download_verdict(exc: BaseException) -> Verdict:
    """A lost connection, a 5xx or a 429 from the CDN is worth another try; a 404 or 403 is not."""
    if isinstance(exc, discord.HTTPException):
        return RETRY if exc.status >= 500 or exc.status == 429 else GIVE_UP
    return RETRY if isinstance(exc, aiohttp.ClientError | OSError) else GIVE_UP


async def download(
    client: discord.Client, attachment: Attachment, max_bytes: int, *, sleep: Sleep = asyncio.sleep
) -> bytes:
    """The attachment's bytes from Discord's CDN, retried on a passing failure; MediaError saying why not.

    Streamed, and reading stops past max_bytes whatever the attachment's size or the Content-Length
    said (bridge.media.bounded)."""
    if attachment.size is not None and attachment.size > max_bytes:
        raise MediaError(f"too large: {megabytes(attachment.size)}")
    try:
        return await with_retries(
            lambda: _stream(client.http, attachment.ref, max_bytes),
            what="Discord: download",
            log=log,
            classify=_download_verdict,
            backoff=DOWNLOAD_BACKOFF,
            level=logging.INFO,
            sleep=sleep,
        )
    except discord.NotFound as exc:
        # Attachment links expire after a day or so: a message left that long is gone.
        raise MediaError("Discord no longer has it (the link expired)") from exc
    except discord.HTTPException as exc:
        raise MediaError(f"the download failed (HTTP {exc.status})") from exc
    except (aiohttp.ClientError, OSError) as exc:
        raise MediaError(f"the download failed ({type(exc).__name__})") from exc


async def _stream(http: HTTPClient, url: str, max_bytes: int) -> bytes:
    """One GET of a CDN URL, read up to max_bytes + 1, failing as discord.py's get_from_cdn does.

    get_from_cdn reads the whole body before it returns, so the file is fetched here, through the
    proxy discord.py was given.
    """
    async with (
        aiohttp.ClientSession(timeout=DOWNLOAD_TIMEOUT) as session,
        # Asked unencoded, so the limit counts the file's own bytes.
        session.get(
            url, proxy=http.proxy, proxy_auth=http.proxy_auth, headers={"Accept-Encoding": "identity"}
        ) as response,
    ):
        if response.status == 404:
            raise discord.NotFound(response, "asset not found")
        if response.status == 403:
            raise discord.Forbidden(response, "cannot retrieve asset")
        if response.status != 200:
            raise discord.HTTPException(response, "failed to get asset")
        return await read_at_most(
            response.content.iter_chunked(CHUNK_BYTES), max_bytes, announced=response.content_length
        )


async def read(file: OutFile) -> bytes:
    """The bytes of a file to send, read off the event loop."""
    return await asyncio.to_thread(Path(file.path).read_bytes)
