"""Server-sent events as model servers stream them: `event:` and `data:` lines, a blank line ending each."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol


async def events(lines: AsyncIterator[str]) -> AsyncIterator[tuple[str, str]]:
    """(event name, data) for each event; the name is "" where the server sends none (OpenAI)."""
    name, data = "", list[str]()
    async for raw in lines:
        line = raw.rstrip("\r")
        if not line:
            if data:
                yield name, "\n".join(data)
            name, data = "", list[str]()
        elif line.startswith(":"):
            continue  # a comment, sent as a keep-alive
        else:
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
    if data:
        # The last event of a server that closed without the blank line.
        yield name, "\n".join(data)


class StreamAssembler(Protocol):
    """Builds, from a provider's stream, the body its non-streamed answer would have had."""

    done: bool

    def feed(self, event: str, data: str) -> str:
        """Take one event; return the text it adds to the answer ("" if none). Raises ValueError on
        an event that cannot be read."""
        ...

    def result(self, *, partial: bool = False) -> dict[str, Any]:
        """The assembled body; `partial`: the stream broke, keep the text and drop unfinished calls."""
        ...
