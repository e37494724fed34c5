"""Config of [media] (attachments that come in), [stt] (the speech-to-text server voice goes to) and
[tts] (the text-to-speech server spoken replies come from)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr, field_validator, model_validator

from bridge.config.base import KeyFromEnv, Section, url_setting

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


class TtsSettings(KeyFromEnv):
    """[tts]: an OpenAI-compatible /audio/speech server. With a base_url, an answer to a voice note is
    also sent as a voice message (OGG/Opus); /voice on|off|auto changes that per chat."""

    # Unset: on once base_url is set. false: off, the rest of the table kept. true: on, and a
    # base_url is then required (an error names it).
    enabled: bool | None = None
    base_url: str | None = None
    model: str = "tts-1"
    voice: str = "alloy"
    # The environment variable holding the server's key (never the key itself, so it stays out of
    # config files and check-config); unset: no key (a local server).
    api_key_env: str | None = None
    # A spoken reply waits for this at most; the next answer in that chat waits behind it.
    timeout_s: float = Field(60.0, gt=0)
    # The longest answer spoken whole. A longer one is spoken up to its last sentence within this,
    # the text reply being whole anyway; OpenAI's endpoint takes at most 4,096 characters.
    max_chars: int = Field(4000, ge=100, le=100_000)

    WHOSE_KEY = "the speech server's key"
    WITHOUT_KEY = "the speech server gets no API key"

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return url_setting(value, "http://127.0.0.1:8880/v1")

    @model_validator(mode="after")
    def _needs_a_server(self) -> TtsSettings:
        # Said on: a server is then required (without `enabled`, no base_url is simply off).
        if self.enabled and self.base_url is None:
            raise ValueError(
                "base_url: [tts] is enabled but names no speech server; set base_url (e.g. "
                "http://127.0.0.1:8880/v1), or enabled = false"
            )
        return self

    @property
    def speaks(self) -> bool:
        """Whether spoken replies are set up: a server, and not turned off."""
        return self.enabled is not False and self.base_url is not None

    def missing_keys(self) -> list[str]:
        """A line when the key variable named is unset or empty, for check-config (as [llm] profiles)."""
        return [self.missing_key("tts")] if self.speaks and self.key_missing else []
