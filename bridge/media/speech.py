"""Text to speech: an answer sent to an OpenAI-compatible /audio/speech endpoint, OGG/Opus back.

`speakable` turns the Markdown of an answer into what is worth hearing (no code, no link targets, no
table rules); `Speaker.speak` asks the server for it. Every failure is a MediaError with a short
reason: a spoken reply is extra, so its caller logs it and the text reply stands.
"""

from __future__ import annotations

import html
import logging
import re
from typing import Any

import httpx
import mistune

from bridge.config.media import TtsSettings
from bridge.errors import MediaError
from bridge.media.bounded import CHUNK_BYTES, read_at_most
from bridge.retry import Backoff, RetryableError, parse_retry_after, with_retries

log = logging.getLogger(__name__)

# One more try for a busy or restarting server, not three: the chat's next answer waits behind this.
BACKOFF = Backoff(attempts=2, base=1.0, cap=4.0)
# The most audio read back: 4,000 characters of speech are about 4 minutes, some 2 MB of Opus.
MAX_AUDIO_BYTES = 20 * 1024 * 1024
# Every OGG page starts with this: what Telegram plays as a voice message (and Discord as audio).
OGG_MAGIC = b"OggS"
# Said in place of a code block: read out, code is noise.
CODE_SAID = "(code in the text reply)"
_SENTENCE_END = re.compile(r"[.!?…](?=\s)|\n")
_markdown = mistune.create_markdown(renderer=None, plugins=["strikethrough", "table"])


def speakable(markdown: str) -> str:
    """The answer as it is worth hearing: its words, paragraphs apart; code blocks named, not read;
    links by their text; images by their description. "" when nothing but code is left."""
    blocks: list[str] = []
    tokens = _markdown(markdown)
    assert isinstance(tokens, list)  # no renderer: mistune's token tree
    for token in tokens:
        _block(token, blocks)
    said = [block for block in blocks if block]
    return "\n".join(said) if any(block != CODE_SAID for block in said) else ""


def _block(token: dict[str, Any], out: list[str]) -> None:
    kind = token["type"]
    if kind == "block_code":
        out.append(CODE_SAID)
    elif kind in ("paragraph", "heading", "block_text"):
        out.append(" ".join(_inline(token.get("children", [])).split()))
    elif kind in ("table_head", "table_row"):
        cells = [" ".join(_inline(cell.get("children", [])).split()) for cell in token.get("children", [])]
        out.append(", ".join(cell for cell in cells if cell))
    elif kind == "block_html":
        out.append(" ".join(html.unescape(re.sub(r"<[^>]*>", " ", token.get("raw", ""))).split()))
    else:  # lists, quotes, tables: their blocks one by one
        for child in token.get("children", []):
            _block(child, out)


def _inline(tokens: list[dict[str, Any]]) -> str:
    said = []
    for token in tokens:
        kind = token["type"]
        if kind in ("text", "codespan"):
            said.append(html.unescape(token.get("raw", "")))
        elif kind in ("softbreak", "linebreak"):
            said.append(" ")
        elif kind == "inline_html":
            continue
        else:  # emphasis, strong, links, images (their alt text), strikethrough
            said.append(_inline(token.get("children", [])))
    return "".join(said)


def opus_seconds(audio: bytes) -> int | None:
    """How long OGG/Opus audio plays, in whole seconds rounded up (a voice message shows it): the last
    page's granule position, in 48 kHz samples, less the stream's pre-skip. None when it can't tell."""
    last = audio.rfind(OGG_MAGIC)
    head = audio.find(b"OpusHead")
    if last < 0 or head < 0 or len(audio) < last + 14 or len(audio) < head + 12:
        return None
    granule = int.from_bytes(audio[last + 6 : last + 14], "little", signed=True)
    pre_skip = int.from_bytes(audio[head + 10 : head + 12], "little")
    if granule <= pre_skip:
        return None
    return -(-(granule - pre_skip) // 48_000)


def within(text: str, most: int) -> str:
    """The text, or where it is longer than `most` characters its start up to the last sentence (or
    line) that ends within them; cut at a space when no sentence ends in time."""
    if len(text) <= most:
        return text
    head = text[:most]
    ends = [match.end() for match in _SENTENCE_END.finditer(head)]
    cut = ends[-1] if ends and ends[-1] > most // 2 else head.rfind(" ")
    return head[: cut if cut > 0 else most].rstrip()


class Speaker:
    """Posts `{"model", "voice", "input", "response_format": "opus"}` as JSON and reads back the audio."""

    def __init__(self, settings: TtsSettings, client: httpx.AsyncClient | None = None) -> None:
        if settings.base_url is None:
            raise ValueError("[tts] base_url is not set")
        self.settings = settings
        self.url = f"{settings.base_url}/audio/speech"
        for problem in settings.missing_keys():
            # The bot starts anyway (a local server may need no key); check-config calls it an error.
            log.warning("%s; spoken replies are asked for without one", problem)
        self._client = client or httpx.AsyncClient(timeout=settings.timeout_s)

    async def speak(self, text: str) -> bytes:
        """OGG/Opus audio of the text, which must be within [tts] max_chars (see `within`)."""
        try:
            # Retries are told at INFO: the one WARNING is the caller's, when the reply goes unspoken.
            return await with_retries(
                lambda: self._attempt(text), what="speech", log=log, backoff=BACKOFF, level=logging.INFO
            )
        except RetryableError as exc:
            raise MediaError(f"the speech server failed: {exc.reason}") from exc

    async def _attempt(self, text: str) -> bytes:
        settings = self.settings
        body = {"model": settings.model, "voice": settings.voice, "input": text, "response_format": "opus"}
        key = settings.api_key.get_secret_value()
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        try:
            async with self._client.stream("POST", self.url, json=body, headers=headers) as response:
                if response.status_code == 429 or response.status_code >= 500:
                    wait = parse_retry_after(response.headers)
                    raise RetryableError(f"HTTP {response.status_code}", retry_after=wait)
                if response.status_code >= 400:
                    raise MediaError(f"the speech server refused it (HTTP {response.status_code})")
                announced = response.headers.get("content-length")
                audio = await read_at_most(
                    response.aiter_bytes(CHUNK_BYTES),
                    MAX_AUDIO_BYTES,
                    announced=int(announced) if announced and announced.isdigit() else None,
                )
        except httpx.TimeoutException as exc:
            raise RetryableError("it timed out") from exc
        except httpx.HTTPError as exc:
            raise RetryableError(f"it could not be reached ({type(exc).__name__})") from exc
        if not audio.startswith(OGG_MAGIC):
            # An MP3 or WAV (a server that ignores response_format) would not play as a voice message.
            raise MediaError("the speech server sent no OGG/Opus audio (it must honour response_format opus)")
        return audio

    async def aclose(self) -> None:
        await self._client.aclose()
