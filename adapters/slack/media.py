"""Slack files: a message's files fetched with the bot token when a run needs them; files sent with
files_upload_v2 (files.getUploadURLExternal, the upload, files.completeUploadExternal)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import aiohttp

from bridge.errors import MediaError
from bridge.events import Attachment, OutFile, megabytes
from bridge.media.bounded import CHUNK_BYTES, download_retried, read_at_most
from bridge.retry import RetryableError, Sleep, parse_retry_after

log = logging.getLogger(__name__)


async def download(
    session: aiohttp.ClientSession,
    token: str,
    attachment: Attachment,
    max_bytes: int,
    *,
    sleep: Sleep = asyncio.sleep,
) -> bytes:
    """The file's bytes from its url_private, sent the bot token as Slack asks; retried on a passing
    failure, and MediaError saying why not. Streamed, and reading stops past max_bytes whatever the
    event or the Content-Length said (bridge.media.bounded)."""
    if attachment.size is not None and attachment.size > max_bytes:
        raise MediaError(f"too large: {megabytes(attachment.size)}")
    return await download_retried(
        lambda: _stream(session, token, attachment.ref, max_bytes),
        what="Slack: download",
        log=log,
        sleep=sleep,
    )


async def _stream(session: aiohttp.ClientSession, token: str, url: str, max_bytes: int) -> bytes:
    # Asked unencoded, so the limit counts the file's own bytes.
    headers = {"Authorization": f"Bearer {token}", "Accept-Encoding": "identity"}
    async with session.get(url, headers=headers) as response:
        if response.status == 429:
            raise RetryableError("HTTP 429", retry_after=parse_retry_after(response.headers))
        if response.status >= 500:
            raise RetryableError(f"HTTP {response.status}")
        if response.status == 404:
            raise MediaError("Slack no longer has it (deleted?)")
        if response.status >= 400:
            raise MediaError(f"Slack refused it (HTTP {response.status}; does the app have files:read?)")
        if response.content_type == "text/html":
            # Without a token Slack's file URLs answer with the sign-in page, not an error.
            raise MediaError("Slack answered with its sign-in page: the app lacks the files:read scope")
        return await read_at_most(
            response.content.iter_chunked(CHUNK_BYTES), max_bytes, announced=response.content_length
        )


async def read(file: OutFile) -> bytes:
    """The bytes of a file to send, read off the event loop."""
    return await asyncio.to_thread(Path(file.path).read_bytes)
