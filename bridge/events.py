"""Inbound, Route, Outbound and the attachments they carry: the vocabulary between adapters and the
core (the seam itself, what an adapter can do, is bridge.platform). A base module: it imports nothing
of Bridge's."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

ChatType = Literal["dm", "group", "channel"]
# "draft": an answer shown as it streams, edited as it grows; its reply then edits it (edit_of).
OutboundKind = Literal["activity", "reply", "notice", "draft"]


# image: shown to vision models; audio: transcribed; file: named to the model, never opened.
MediaKind = Literal["image", "audio", "file"]
_KINDS = ("image", "audio", "file")


def megabytes(size: int) -> str:
    """A size as people read it: "20 MB", "1.5 MB", "300 KB", "100 bytes"."""
    for unit, scale in (("MB", 1024 * 1024), ("KB", 1024)):
        if size >= scale:
            return f"{size / scale:.1f}".removesuffix(".0") + f" {unit}"
    return f"{size} bytes"


@dataclass(frozen=True, slots=True)
class Attachment:
    """One attachment of a message: where the platform keeps it, and what became of it.

    An adapter fills the first fields; the run that answers the message fills the rest (`sha256`
    once the bytes are in the media store, `problem` when they could not be used), so a message is
    fetched and transcribed once, whichever run or restart gets to it.
    """

    kind: MediaKind
    name: str
    # The platform's handle to fetch it with: a Telegram file_id, a Discord attachment URL.
    ref: str
    mime: str | None = None
    # As the platform announced it; None when it did not say.
    size: int | None = None
    # A voice note recorded in the app, rather than an audio file.
    voice: bool = False
    sha256: str | None = None
    # The message's text holds its transcript (audio).
    transcribed: bool = False
    # Why it could not be used: too large, the download failed, voice is not set up.
    problem: str | None = None

    @property
    def pending(self) -> bool:
        """Still to fetch (and transcribe): not stored yet, and nothing has ruled it out."""
        return self.kind != "file" and self.sha256 is None and self.problem is None

    def label(self) -> str:
        """How the attachment reads in text: to a model that cannot see it, and in sessions_history."""
        if self.kind == "audio":
            what = "voice message" if self.voice else f"audio: {self.name}"
            state = ", transcribed" if self.transcribed else ""
        else:
            what, state = f"{self.kind}: {self.name}", ""
        if self.problem:
            state = f" ({self.problem})"
        return f"[{what}{state}]"

    def to_dict(self) -> dict[str, Any]:
        # Defaults are left out: rows stay small and older rows read the same.
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != f.default
        }

    @classmethod
    def from_dict(cls, data: Any) -> Attachment | None:
        """The attachment a stored object describes; None for one that is not (a damaged row)."""
        if not isinstance(data, dict) or data.get("kind") not in _KINDS:
            return None
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in fields}
        for name, value in values.items():
            # A damaged row must not reach a request as, say, a hash that is a number.
            expected = _TYPES[name]
            if not isinstance(value, expected) or (isinstance(value, bool) and bool not in expected):
                return None
        try:
            return cls(**values)
        except TypeError:
            return None


# The types a stored attachment's fields may have (JSON gives no guarantee).
_TYPES: dict[str, tuple[type, ...]] = {
    "kind": (str,),
    "name": (str,),
    "ref": (str,),
    "mime": (str, type(None)),
    "size": (int, type(None)),
    "voice": (bool,),
    "sha256": (str, type(None)),
    "transcribed": (bool,),
    "problem": (str, type(None)),
}


def dumps(attachments: tuple[Attachment, ...] | list[Attachment]) -> str | None:
    """The attachments as stored in a message's media column; None when there are none."""
    return json.dumps([a.to_dict() for a in attachments], ensure_ascii=False) if attachments else None


def loads(text: str | None) -> tuple[Attachment, ...]:
    """A media column back as attachments; damaged entries are skipped, never fatal to a run."""
    if not text:
        return ()
    try:
        data = json.loads(text)
    except ValueError:
        return ()
    if not isinstance(data, list):
        return ()
    return tuple(a for item in data if (a := Attachment.from_dict(item)) is not None)


def framed(content: str, media: str | None) -> str:
    """A message's text with its attachments named first, as a text-only reader sees it."""
    labels = " ".join(a.label() for a in loads(media))
    if not labels:
        return content
    return f"{labels}\n{content}" if content else labels


@dataclass(frozen=True, slots=True)
class OutFile:
    """A file the bot sends (send_file): a copy in the media store, so a resend after a crash sends
    the same bytes whatever became of the workspace file since."""

    name: str
    path: str
    size: int
    mime: str | None = None
    # Sent as a photo where the platform shows one inline; else as a document.
    photo: bool = False
    # A spoken reply (OGG/Opus): sent as a voice message where the platform plays one; else as a file.
    voice: bool = False

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str | None) -> OutFile | None:
        if not text:
            return None
        try:
            data = json.loads(text)
            return cls(
                str(data["name"]),
                str(data["path"]),
                int(data["size"]),
                data.get("mime"),
                bool(data.get("photo")),
                bool(data.get("voice")),
            )
        except (ValueError, KeyError, TypeError, OverflowError):
            return None


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
