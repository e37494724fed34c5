"""Reading what a server sends with a limit: an attachment stops at [media] max_bytes + 1, whatever
the server announced, so a file that claims 1 KB and streams 300 MB costs one chunk past the limit."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable, Awaitable, Callable

import aiohttp

from bridge.errors import MediaError
from bridge.events import megabytes
from bridge.retry import GIVE_UP, RETRY, Backoff, RetryableError, Sleep, Verdict, retry_after, with_retries

# The size adapters ask their HTTP client for: small enough that stopping after the limit wastes
# little, large enough that reading costs few iterations.
CHUNK_BYTES = 64 * 1024


def download_verdict(exc: BaseException) -> Verdict:
    """A download's failure, for bridge.retry: what the adapter raised as a RetryableError (a 429 with
    its wait, a 5xx) and a lost connection are worth another try; anything else is final."""
    if isinstance(exc, RetryableError):
        return retry_after(exc.retry_after)
    return RETRY if isinstance(exc, aiohttp.ClientError | TimeoutError | OSError) else GIVE_UP


# A download's tries: a few, quickly; the user waits on the run that reads it.
DOWNLOAD_BACKOFF = Backoff(attempts=3, base=0.5, cap=4.0)


async def download_retried(
    fetch: Callable[[], Awaitable[bytes]], *, what: str, log: logging.Logger, sleep: Sleep = asyncio.sleep
) -> bytes:
    """`fetch` (one bounded download) retried on a passing failure (download_verdict), and
    MediaError saying why when it still fails."""
    try:
        return await with_retries(
            fetch,
            what=what,
            log=log,
            classify=download_verdict,
            backoff=DOWNLOAD_BACKOFF,
            level=logging.INFO,
            sleep=sleep,
        )
    except RetryableError as exc:
        raise MediaError(f"the download failed ({exc})") from exc
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise MediaError(f"the download failed ({type(exc).__name__})") from exc


def too_large(max_bytes: int) -> MediaError:
    """An attachment past the limit while it was read (the user is told the limit, as at intake)."""
    return MediaError(f"too large: over the limit of {megabytes(max_bytes)}")


async def read_at_most(
    chunks: AsyncIterable[bytes], max_bytes: int, *, announced: int | None = None
) -> bytes:
    """The chunks joined, when they come to at most max_bytes; `too_large` as soon as they pass it.

    Reading stops at the chunk that passes the limit, and no more than max_bytes + 1 bytes are ever
    kept: the caller closes the connection, so the rest is never received. `announced` (a
    Content-Length) refuses at once when it is over the limit; under it, or missing, it is not
    trusted, since a server may send more than it said.
    """
    if announced is not None and announced > max_bytes:
        raise too_large(max_bytes)
    body = bytearray()
    async for chunk in chunks:
        body += chunk[: max_bytes + 1 - len(body)]
        if len(body) > max_bytes:
            raise too_large(max_bytes)
    return bytes(body)
