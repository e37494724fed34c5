"""Config of [media] (attachments that come in) and [stt] (the speech-to-text server voice goes to)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr, field_validator

from bridge.config.base import Section, url_setting

MIB = 1024 * 1024


class MediaSettings(Section):
    """[media]: photos, image files and voice that users send."""

    # The largest attachment downloaded; a larger one is refused with a reply (Telegram's bots can't
    # download past 20 MB anyway).
    max_bytes: int = Field(20 * MIB, gt=0)
    # Images a request carries: the newest this many of the window's; older ones are named only.
    history_images: int = Field(4, ge=0, le=50)
    # Where attachments are kept, by content hash; default: a `media` folder beside the database.
    path: Path | None = None


class SttSettings(Section):
    """[stt]: an OpenAI-compatible /audio/transcriptions server; without base_url, voice is not set up."""

    base_url: str | None = None
    model: str = "whisper-1"
    api_key: SecretStr = SecretStr("")
    # Passed on when set (ISO-639-1, e.g. "en"); the server guesses otherwise.
    language: str | None = None
    timeout_s: float = Field(120.0, gt=0)
    # The longest transcript kept: a longer one is cut here and marked as cut, so a runaway server
    # can't send the model megabytes of text. 20,000 characters is about 20 minutes of speech.
    max_transcript_chars: int = Field(20_000, ge=100, le=1_000_000)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return url_setting(value, "http://127.0.0.1:8080/v1")

    @property
    def enabled(self) -> bool:
        return self.base_url is not None
