"""The web surface's Sender: what the core delivers to a web chat goes to whoever watches it here.

A web chat has no platform to keep its messages: the conversation is the store's history, and what the
bot says as it happens (the answer streaming in, tool activity edited in place, notices, the reply) is
published to the watchers of that chat in this process, the chat page's event stream and a streamed
POST /v1/chat/completions. Publishing never waits: a watcher that falls behind loses its oldest events.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import secrets
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from bridge.events import Outbound, Route
from bridge.http.webchat.names import SURFACE
from bridge.platform import Sender

# Events one watcher may fall behind by before its oldest are dropped: a long answer streams a few
# hundred deltas, so a watcher that reads at all never loses one.
QUEUE_SIZE = 4096

EventType = Literal["delta", "item", "edit", "typing", "in"]


@dataclass(frozen=True, slots=True)
class ChatEvent:
    """One thing that happened in a web chat.

    delta: a piece of the answer as the model writes it; item: a message sent (`kind` activity, notice,
    reply), known by `id`; edit: that message's new text (tool activity as it goes); typing: a run is
    working; in: a message someone wrote in the chat (`id`: the id its writer gave it).
    """

    type: EventType
    text: str = ""
    kind: str | None = None
    id: str | None = None

    def sse(self) -> bytes:
        """The event as one server-sent event."""
        data = json.dumps({"text": self.text, "kind": self.kind, "id": self.id}, ensure_ascii=False)
        return f"event: {self.type}\ndata: {data}\n\n".encode()


class WebSender(Sender):
    """Delivers to the watchers of each web chat, by chat id; a chat nobody watches keeps its history."""

    surface = SURFACE
    # Tool activity is one message, edited as each tool finishes.
    supports_edit = True
    # The answer is shown as it comes, like the terminal's (Delivery.live_reply).
    supports_stream = True
    # In-process: edits cost nothing, but a page repaints each one.
    min_edit_interval_s = 0.1

    def __init__(self) -> None:
        self._watchers: defaultdict[str, set[asyncio.Queue[ChatEvent]]] = defaultdict(set)
        # Message ids unique across restarts (outbox rows keep them), short to read.
        self._prefix = secrets.token_hex(3)
        self._ids = itertools.count(1)

    # ------------------------------------------------------------------ watching

    @contextlib.contextmanager
    def watch(self, chat_id: str) -> Iterator[asyncio.Queue[ChatEvent]]:
        """Events of one chat for as long as the block runs, from the moment it starts."""
        queue: asyncio.Queue[ChatEvent] = asyncio.Queue(QUEUE_SIZE)
        self._watchers[chat_id].add(queue)
        try:
            yield queue
        finally:
            watchers = self._watchers.get(chat_id)
            if watchers is not None:
                watchers.discard(queue)
                if not watchers:
                    del self._watchers[chat_id]

    def watched(self, chat_id: str) -> int:
        """How many watch the chat now."""
        return len(self._watchers.get(chat_id, ()))

    def publish(self, chat_id: str, event: ChatEvent) -> None:
        for queue in self._watchers.get(chat_id, ()):
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(event)

    # ------------------------------------------------------------------ Sender

    async def send(self, item: Outbound) -> str | None:
        message_id = f"{self._prefix}-{next(self._ids)}"
        self.publish(item.route.chat_id, ChatEvent("item", item.text, item.kind, message_id))
        return message_id

    async def edit(self, route: Route, message_id: str, text: str) -> None:
        self.publish(route.chat_id, ChatEvent("edit", text, id=message_id))

    async def stream(self, route: Route, delta: str) -> None:
        self.publish(route.chat_id, ChatEvent("delta", delta))

    async def typing(self, route: Route) -> None:
        self.publish(route.chat_id, ChatEvent("typing"))
