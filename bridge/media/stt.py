"""Speech to text: voice messages sent to an OpenAI-compatible /audio/transcriptions endpoint."""

from __future__ import annotations

import codecs
import json
import logging
import re

import httpx

from bridge.config.media import SttSettings
from bridge.errors import MediaError
from bridge.events import megabytes
from bridge.retry import Backoff, RetryableError, parse_retry_after, with_retries

log = logging.getLogger(__name__)

# A busy or restarting server is asked again; a refusal (4xx) is not.
BACKOFF = Backoff(attempts=3, base=1.0, cap=8.0)
# Room in the answer's body for what comes beside the transcript (other fields, whitespace).
BODY_SLACK = 64 * 1024


class Transcriber:
    """Posts audio as multipart (`file`, `model`, `language`) and reads back `{"text": ...}`."""

    def __init__(self, settings: SttSettings, client: httpx.AsyncClient | None = None) -> None:
        if settings.base_url is None:
            raise ValueError("[stt] base_url is not set")
        self.settings = settings
        self.url = f"{settings.base_url}/audio/transcriptions"
        self._client = client or httpx.AsyncClient(timeout=settings.timeout_s)

    async def transcribe(self, data: bytes, name: str, mime: str | None) -> str:
        """The transcript, stripped; MediaError with a short reason when the server can't give one."""
        try:
            return await with_retries(
                lambda: self._attempt(data, name, mime), what="transcription", log=log, backoff=BACKOFF
            )
        except RetryableError as exc:
            raise MediaError(f"the transcription server failed: {exc.reason}") from exc

    async def _attempt(self, data: bytes, name: str, mime: str | None) -> str:
        form = {"model": self.settings.model, "response_format": "json"}
        if self.settings.language:
            form["language"] = self.settings.language
        key = self.settings.api_key.get_secret_value()
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        # A transcript within the cap fits in the body whole, however its characters are escaped
        # (a character outside the BMP is 12 bytes as JSON), with room for the rest of the object.
        most = self.settings.max_transcript_chars * 12 + BODY_SLACK
        try:
            async with self._client.stream(
                "POST",
                self.url,
                data=form,
                files={"file": (name, data, mime or "application/octet-stream")},
                headers=headers,
            ) as response:
                if response.status_code == 429 or response.status_code >= 500:
                    wait = parse_retry_after(response.headers)
                    raise RetryableError(f"HTTP {response.status_code}", retry_after=wait)
                if response.status_code >= 400:
                    raise MediaError(f"the transcription server refused it (HTTP {response.status_code})")
                body, whole = await _read_capped(response, most)
        except httpx.TimeoutException as exc:
            raise RetryableError("it timed out") from exc
        except httpx.HTTPError as exc:
            raise RetryableError(f"it could not be reached ({type(exc).__name__})") from exc
        text = _text(body) if whole else _text_prefix(body)
        if text is None:
            if not whole:
                raise MediaError(f"the transcription server sent more than {megabytes(most)}")
            raise MediaError("the transcription server sent no text")
        return self._capped(text.strip())

    def _capped(self, text: str) -> str:
        """The transcript, cut at [stt] max_transcript_chars and marked as cut where it was longer."""
        most = self.settings.max_transcript_chars
        if len(text) <= most:
            return text
        log.info(
            "a transcript longer than %s characters was cut; raise [stt] max_transcript_chars to keep more",
            f"{most:,}",
        )
        return f"{text[:most].rstrip()}\n[transcript cut at {most:,} characters]"

    async def aclose(self) -> None:
        await self._client.aclose()


async def _read_capped(response: httpx.Response, most: int) -> tuple[bytes, bool]:
    """Up to `most` bytes of the body, and whether that was all of it; the rest is never read."""
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk[: most + 1 - len(body)]
        if len(body) > most:
            return bytes(body[:most]), False
    return bytes(body), True


def _text(body: bytes) -> str | None:
    """The `text` of a whole JSON answer; None when it has none."""
    try:
        text = json.loads(body).get("text")
    except (ValueError, AttributeError):
        return None
    return text if isinstance(text, str) else None


def _text_prefix(body: bytes) -> str | None:
    """What a JSON answer cut short holds of its `text` (a server that sent more than the cap, to be
    cut anyway); None when the cut came before it started, or after it ended."""
    decoded = codecs.getincrementaldecoder("utf-8")(errors="replace").decode(body, final=False)
    start = re.search(r'"text"\s*:\s*"', decoded)
    if start is None:
        return None
    rest = decoded[start.end() :]
    # The cut may fall inside an escape (at most 12 characters: a surrogate pair as two \\uXXXX).
    for drop in range(min(len(rest), 12) + 1):
        try:
            text = json.loads(f'"{rest[: len(rest) - drop]}"')
        except ValueError:
            continue
        return text if isinstance(text, str) else None
    return None
