"""A fake OpenAI-compatible text-to-speech server on 127.0.0.1: POST /v1/audio/speech (also /audio/speech).

Checks a request as OpenAI's endpoint does (JSON with `model`, `input` of at most 4,096 characters,
`voice`, a known `response_format`; 400 `invalid_request_error` otherwise), records each one in
`requests`, and answers with audio in the asked format: real OGG pages holding an Opus stream of
`seconds` for "opus", MP3-looking bytes for "mp3" (the default when none is asked). push() queues
answers sent instead (http_error(500), a Reply with other bytes), one per valid request.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from devkit.fakes.loopback import LoopbackServer
from devkit.fakes.openai_server import Reply, invalid_request

MAX_INPUT_CHARS = 4096
FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
# What a request without response_format gets (OpenAI's default), and what the check for Opus refuses.
MP3 = b"ID3\x04\x00\x00\x00\x00\x00\x00" + b"\xff\xfb\x90\x00" * 32


@dataclass(frozen=True, slots=True)
class SpeechRequest:
    body: dict[str, Any]
    authorization: str | None

    @property
    def input(self) -> str:
        return str(self.body.get("input"))


def _crc(data: bytes) -> int:
    """The CRC-32 of an OGG page (polynomial 0x04C11DB7, not reflected, no final XOR)."""
    crc = 0
    for byte in data:
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) if crc & 0x80000000 else crc << 1
            crc &= 0xFFFFFFFF
    return crc


def _page(packet: bytes, *, sequence: int, granule: int, flags: int) -> bytes:
    segments = [255] * (len(packet) // 255) + [len(packet) % 255]
    header = (
        b"OggS\x00"
        + bytes([flags])
        + granule.to_bytes(8, "little", signed=True)
        + (0x42524447).to_bytes(4, "little")  # the stream's serial number
        + sequence.to_bytes(4, "little")
        + b"\x00\x00\x00\x00"
        + bytes([len(segments), *segments])
    )
    crc = _crc(header + packet)
    return header[:22] + crc.to_bytes(4, "little") + header[26:] + packet


def ogg_opus(seconds: float, pre_skip: int = 312) -> bytes:
    """A small OGG/Opus file that plays `seconds` (its frames are silence): the OpusHead and OpusTags
    pages, then one page of 20 ms packets whose granule position ends the stream there."""
    head = b"OpusHead" + bytes([1, 1]) + pre_skip.to_bytes(2, "little") + (48_000).to_bytes(4, "little")
    head += b"\x00\x00\x00"
    tags = b"OpusTags" + (4).to_bytes(4, "little") + b"fake" + (0).to_bytes(4, "little")
    frames = max(1, round(seconds / 0.02))
    # A one-byte packet: TOC 0xF8 (CELT, 20 ms, mono, one frame) with no data, i.e. silence.
    audio = b"\xf8" * min(frames, 250)
    return (
        _page(head, sequence=0, granule=0, flags=0x02)
        + _page(tags, sequence=1, granule=0, flags=0x00)
        + _page(audio, sequence=2, granule=pre_skip + round(seconds * 48_000), flags=0x04)
    )


class FakeSpeech(LoopbackServer):
    def __init__(self, seconds: float = 2.0) -> None:
        super().__init__()
        self.requests: list[SpeechRequest] = []
        self.rejections: list[str] = []
        self.replies: deque[Reply] = deque()
        self.audio = ogg_opus(seconds)

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/audio/speech", self._speech)
        app.router.add_post("/audio/speech", self._speech)

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1" if self.origin else ""

    def push(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    def describe_state(self) -> str:
        return f"{len(self.requests)} speech request(s), rejections: {self.rejections}"

    async def _speech(self, request: web.Request) -> web.StreamResponse:
        try:
            body = json.loads(await request.read())
        except ValueError:
            body = None
        self.requests.append(
            SpeechRequest(body if isinstance(body, dict) else {}, request.headers.get("Authorization"))
        )
        self._notify()
        problem = _check(body)
        if problem is not None:
            assert isinstance(problem.body, dict)
            self.rejections.append(problem.body["error"]["message"])
            return _send(problem)
        if self.replies:
            return _send(self.replies.popleft())
        assert isinstance(body, dict)
        fmt = body.get("response_format") or "mp3"
        audio, mime = (self.audio, "audio/ogg") if fmt == "opus" else (MP3, f"audio/{fmt}")
        return web.Response(body=audio, content_type=mime)


def _check(body: Any) -> Reply | None:
    """The 400 OpenAI answers a malformed speech request with; None when it is valid."""
    if not isinstance(body, dict):
        return invalid_request("We could not parse the JSON body of your request.")
    for name in ("model", "input", "voice"):
        if not isinstance(body.get(name), str) or not body[name]:
            return invalid_request(
                f"Missing required parameter: '{name}'.", name, "missing_required_parameter"
            )
    if len(body["input"]) > MAX_INPUT_CHARS:
        return invalid_request(
            f"Invalid 'input': string too long. Expected a string with maximum length {MAX_INPUT_CHARS}, "
            f"but got a string with length {len(body['input'])} instead.",
            "input",
            "string_above_max_length",
        )
    fmt = body.get("response_format", "mp3")
    if fmt not in FORMATS:
        return invalid_request(f"Invalid value: '{fmt}'. Supported values are: {FORMATS}.", "response_format")
    return None


def _send(reply: Reply) -> web.Response:
    if isinstance(reply.body, bytes):
        payload, kind = reply.body, "application/octet-stream"
    else:
        payload, kind = json.dumps(reply.body).encode(), "application/json"
    return web.Response(status=reply.status, body=payload, headers={"Content-Type": kind, **reply.headers})
