"""Matrix media: an mxc:// attachment fetched through the authenticated media API when a run needs it
(streamed, stopping at the size limit), and the content of a file message sent after its upload."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp

from bridge.errors import MediaError
from bridge.events import Attachment, OutFile, megabytes
from bridge.media.bounded import CHUNK_BYTES, download_retried, read_at_most
from bridge.retry import RetryableError, Sleep

log = logging.getLogger(__name__)

# Since Matrix 1.11 media is fetched with the access token (MSC3916); older servers only have the
# unauthenticated path, tried where the new one is unknown.
_AUTHENTICATED = "/_matrix/client/v1/media/download"
_LEGACY = "/_matrix/media/v3/download"


def media_path(mxc: str) -> str:
    """`server/media_id` of an mxc:// URL, quoted for a path; MediaError for anything else."""
    parts = urlsplit(mxc)
    media_id = parts.path.lstrip("/")
    if parts.scheme != "mxc" or not parts.netloc or not media_id or "/" in media_id:
        raise MediaError("not a Matrix media address")
    return f"{quote(parts.netloc, safe='')}/{quote(media_id, safe='')}"


async def download(
    session: aiohttp.ClientSession,
    homeserver: str,
    token: str,
    attachment: Attachment,
    max_bytes: int,
    *,
    sleep: Sleep = asyncio.sleep,
) -> bytes:
    """The attachment's bytes from the homeserver; retried on a passing failure, MediaError saying why
    not. Reading stops past max_bytes whatever the event or the Content-Length said."""
    if attachment.size is not None and attachment.size > max_bytes:
        raise MediaError(f"too large: {megabytes(attachment.size)}")
    path = media_path(attachment.ref)
    return await download_retried(
        lambda: _fetch(session, homeserver, token, path, max_bytes),
        what="Matrix: media download",
        log=log,
        sleep=sleep,
    )


async def _fetch(
    session: aiohttp.ClientSession, homeserver: str, token: str, path: str, max_bytes: int
) -> bytes:
    headers = {"Authorization": f"Bearer {token}", "Accept-Encoding": "identity"}
    for prefix in (_AUTHENTICATED, _LEGACY):
        async with session.get(f"{homeserver}{prefix}/{path}", headers=headers) as response:
            if response.status == 404 and prefix == _AUTHENTICATED and await _unrecognized(response):
                continue  # a homeserver older than authenticated media
            if response.status == 429:
                after = await _retry_after_s(response)
                raise RetryableError("HTTP 429", retry_after=after)
            if response.status >= 500:
                raise RetryableError(f"HTTP {response.status}")
            if response.status == 404:
                raise MediaError("the homeserver no longer has it (deleted?)")
            if response.status >= 400:
                raise MediaError(f"the homeserver refused it (HTTP {response.status})")
            return await read_at_most(
                response.content.iter_chunked(CHUNK_BYTES), max_bytes, announced=response.content_length
            )
    raise MediaError("the homeserver has no media download")


async def _json(response: aiohttp.ClientResponse) -> dict[str, Any]:
    try:
        data = await response.json(content_type=None)
    except (ValueError, aiohttp.ClientError):
        return {}
    return data if isinstance(data, dict) else {}


async def _unrecognized(response: aiohttp.ClientResponse) -> bool:
    return (await _json(response)).get("errcode") == "M_UNRECOGNIZED"


async def _retry_after_s(response: aiohttp.ClientResponse) -> float | None:
    wait = (await _json(response)).get("retry_after_ms")
    return wait / 1000 if isinstance(wait, int | float) and not isinstance(wait, bool) else None


async def read(file: OutFile) -> bytes:
    """The bytes of a file to send, read off the event loop."""
    return await asyncio.to_thread(Path(file.path).read_bytes)


def file_content(file: OutFile, url: str, caption: str | None) -> dict[str, Any]:
    """The content of a file message: an image shown inline, a voice message or audio, or a file;
    its caption as the body with the filename beside it (Matrix 1.10), and mentioning nobody."""
    mime = file.mime or "application/octet-stream"
    if file.photo or (mime.startswith("image/") and not file.voice):
        msgtype = "m.image"
    elif file.voice or mime.startswith("audio/"):
        msgtype = "m.audio"
    else:
        msgtype = "m.file"
    content: dict[str, Any] = {
        "msgtype": msgtype,
        "body": caption or file.name,
        "filename": file.name,
        "url": url,
        "info": {"mimetype": mime, "size": file.size},
        "m.mentions": {},
    }
    if file.voice:
        content["org.matrix.msc3245.voice"] = {}
    return content
