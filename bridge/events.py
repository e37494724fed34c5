"""Inbound, Route and Outbound: the vocabulary between adapters and the core (the seam itself, what an
adapter can do, is bridge.platform)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from bridge.media.model import Attachment, OutFile

ChatType = Literal["dm", "group", "channel"]
# "draft": an answer shown as it streams, edited as it grows; its reply then edits it (edit_of).
OutboundKind = Literal["activity", "reply", "notice", "draft"]


@dataclass(frozen=True, slots=True)
class Route:
    """Where an answer goes: a chat, maybe a thread, maybe as a reply to one message."""

    surface: str
    chat_id: str
    thread_id: str | None = None
    reply_to: str | None = None

    def to_json(self) -> str:
        """The chat (not the message replied to), as stored in a session's last_route."""
        return json.dumps({"surface": self.surface, "chat_id": self.chat_id, "thread_id": self.thread_id})

    @classmethod
    def from_json(cls, text: str | None) -> Route | None:
        """A stored last_route back as a Route; None when there is none or it is unreadable."""
        if not text:
            return None
        try:
            data = json.loads(text)
            return cls(str(data["surface"]), str(data["chat_id"]), data.get("thread_id"))
        except (ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True, slots=True)
class Inbound:
    """One platform message, normalized; platform SDK objects never cross into the core."""

    surface: str
    chat_type: ChatType
    chat_id: str
    sender_id: str
    text: str
    message_id: str | None = None
    thread_id: str | None = None
    mentioned: bool = False
    sender_name: str | None = None
    chat_title: str | None = None
    # Set when the message is media the bot cannot read (e.g. "sticker", "video"); text is then empty.
    unsupported: str | None = None
    # Photos, image files, voice and audio; a caption is the text. Fetched by the run that answers.
    attachments: tuple[Attachment, ...] = ()
    # Discord: the guild of a channel message, and the channel a thread belongs to.
    guild_id: str | None = None
    parent_id: str | None = None

    @property
    def sender(self) -> str:
        """The sender as written in `owners`: surface:user_id."""
        return f"{self.surface}:{self.sender_id}"

    @property
    def route(self) -> Route:
        return Route(self.surface, self.chat_id, self.thread_id, self.message_id)

    @property
    def platform_msg_id(self) -> str | None:
        """Globally unique id of the platform message, used to drop redeliveries."""
        if self.message_id is None:
            return None
        return f"{self.surface}:{self.chat_id}:{self.message_id}"


@dataclass(frozen=True, slots=True)
class Outbound:
    """Something the bot means to send."""

    route: Route
    kind: OutboundKind
    text: str
    run_id: str | None = None
    # The session whose send policy decides; None for items that belong to no session.
    session_key: str | None = None
    # The answer to an owner's command goes out whatever the policy says.
    policy_exempt: bool = False
    # An item that must never be sent twice (a run's reply, an announce) carries a unique key.
    dedupe_key: str | None = None
    # Stored with the chunk and sent with it where the platform drops a repeat of the same nonce.
    nonce: str | None = None
    # A reply that replaces the draft its answer streamed into: its first chunk edits that message
    # (the platform's message id) instead of sending a new one.
    edit_of: str | None = None
    # A file to send, with `text` as its caption (send_file).
    file: OutFile | None = None


# The handler may return a future that resolves once the run answering the message is done; a
# turn-by-turn surface (the console) waits on it, chat platforms do not.
InboundHandler = Callable[[Inbound], Awaitable["asyncio.Future[None] | None"]]
