"""Live events for the admin server's stream: messages in and out, runs started and finished, tools."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

# Events one slow viewer may fall behind by before the oldest are dropped for it.
QUEUE_SIZE = 512
# Text in an event is cut here: the stream shows what happens, the API has the whole message.
TEXT_LIMIT = 500


@dataclass(frozen=True, slots=True)
class LiveEvent:
    kind: str  # message_in, message_out, run_started, run_finished, tool
    data: dict[str, Any]
    at: float = field(default_factory=time.time)


class LiveEvents:
    """Publish and subscribe in one process. Publishing never waits and costs nothing while nobody
    watches; a viewer that falls behind loses its oldest events, never holds up the bot."""

    def __init__(self) -> None:
        self._queues: set[asyncio.Queue[LiveEvent]] = set()

    @property
    def watched(self) -> bool:
        return bool(self._queues)

    def publish(self, kind: str, /, **data: Any) -> None:
        if not self._queues:
            return
        if isinstance(data.get("text"), str):
            data["text"] = data["text"][:TEXT_LIMIT]
        event = LiveEvent(kind, data)
        for queue in self._queues:
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(event)

    @contextlib.contextmanager
    def subscribe(self) -> Iterator[asyncio.Queue[LiveEvent]]:
        queue: asyncio.Queue[LiveEvent] = asyncio.Queue(QUEUE_SIZE)
        self._queues.add(queue)
        try:
            yield queue
        finally:
            self._queues.discard(queue)
