"""What a sandboxed command writes, kept up to a cap and counted past it, read in bounded chunks."""

from __future__ import annotations

import asyncio
import codecs
from collections.abc import Callable
from dataclasses import dataclass, field

# One read; asyncio's stream pauses the pipe once 2 × its limit (64 KiB) is buffered, so a flood never
# holds more than this and what is kept.
CHUNK = 64 * 1024
# A stream that writes this many times its cap is a runaway (`yes`, a loop printing): the command is
# stopped then rather than at its timeout. 100 × the default 20,000 characters is about 2 MB, which
# `find /usr` on a Debian image stays well under.
FLOOD_FACTOR = 100
# The least that counts as a flood, whatever the cap.
FLOOD_MIN_BYTES = 1 << 20


@dataclass(slots=True)
class Captured:
    """One stream: the start of it (at most `cap` characters) and how much was cut after that."""

    cap: int
    kept: list[str] = field(default_factory=list)
    kept_chars: int = 0
    cut_chars: int = 0
    total_bytes: int = 0

    def add(self, text: str) -> None:
        room = self.cap - self.kept_chars
        if room > 0:
            piece = text[:room]
            self.kept.append(piece)
            self.kept_chars += len(piece)
            text = text[room:]
        self.cut_chars += len(text)

    @property
    def text(self) -> str:
        return "".join(self.kept)


async def capture(stream: asyncio.StreamReader, captured: Captured, on_flood: Callable[[], None]) -> None:
    """Read `stream` to its end into `captured`; call `on_flood` once, when it passes the flood mark.

    Decoded as UTF-8 with replacement, incrementally, so a character split across two reads is whole.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    flood_at = max(FLOOD_MIN_BYTES, FLOOD_FACTOR * captured.cap)
    flooded = False
    while chunk := await stream.read(CHUNK):
        captured.total_bytes += len(chunk)
        captured.add(decoder.decode(chunk))
        if not flooded and captured.total_bytes > flood_at:
            flooded = True
            on_flood()
    captured.add(decoder.decode(b"", final=True))
