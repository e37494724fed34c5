"""Speech to text: voice messages sent to an OpenAI-compatible /audio/transcriptions endpoint."""

from __future__ import annotations

import logging

import httpx

from bridge.config_media import SttSettings
from bridge.errors import MediaError
from bridge.retry import Backoff, RetryableError, parse_retry_after, with_retries

log = logging.getLogger(__name__)

# A busy or restarting server is asked again; a refusal (4xx) is not.
BACKOFF = Backoff(attempts=3, base=1.0, cap=8.0)


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
        try:
            response = await self._client.post(
                self.url,
                data=form,
                files={"file": (name, data, mime or "application/octet-stream")},
                headers=headers,
            )
        except httpx.TimeoutException as exc:
            raise RetryableError("it timed out") from exc
        except httpx.HTTPError as exc:
            raise RetryableError(f"it could not be reached ({type(exc).__name__})") from exc
        if response.status_code == 429 or response.status_code >= 500:
            wait = parse_retry_after(response.headers)
            raise RetryableError(f"HTTP {response.status_code}", retry_after=wait)
        if response.status_code >= 400:
            raise MediaError(f"the transcription server refused it (HTTP {response.status_code})")
        try:
            text = response.json().get("text")
        except (ValueError, AttributeError):
            text = None
        if not isinstance(text, str):
            raise MediaError("the transcription server sent no text")
        return text.strip()

    async def aclose(self) -> None:
        await self._client.aclose()
