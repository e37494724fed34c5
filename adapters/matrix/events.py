"""Matrix room events as Inbound: who wrote, where (a direct room, a room, a thread), to whom, and what.

Works on the events as the homeserver sent them (nio keeps each one's `source`), so what is read
here is the spec's, not a library's: `m.room.message` (text, emotes, images, audio, files),
`m.sticker`, and `m.room.encrypted`, which the bot cannot read. Edits (`m.replace`), notices (what
bots send, so two bots never answer each other forever), redacted events and the bot's own are not
looked at.

Addressing: in a room the bot answers when it is mentioned (in `m.mentions`, by a pill to it in the
HTML, by its user id or, at the start, its display name), when a message replies to one of its own
or is in a thread it has written in, and for commands (/clear).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import unquote

from bridge.events import Attachment, ChatType, Inbound, MediaKind
from bridge.gateway.commands import COMMANDS

SURFACE = "matrix"
ENCRYPTED = "end-to-end encrypted"
_COMMAND_NAMES = frozenset(name for name, _ in COMMANDS)
# The ids remembered at once (events the bot sent, threads it is in); the oldest are forgotten first.
REMEMBERED = 10_000
_UNSUPPORTED = {"m.video": "video", "m.location": "location", "m.sticker": "sticker"}
_VOICE = ("org.matrix.msc3245.voice", "m.voice")


@dataclass(frozen=True, slots=True)
class Identity:
    """Who the bot is: its user id (how it is mentioned, and how its own events are told apart) and
    its display name."""

    user_id: str
    display_name: str | None


@dataclass(frozen=True, slots=True)
class Place:
    """What the adapter knows of the room an event is in."""

    room_id: str
    direct: bool
    title: str | None = None
    # The bot's name in this room, where it has one of its own.
    my_name: str | None = None


class Remembered:
    """A bounded set of ids: events the bot sent (a reply to one is addressed to it), threads it has
    written in, rooms told lately that their encryption can't be read."""

    def __init__(self, limit: int = REMEMBERED) -> None:
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._limit = limit

    def add(self, key: str, when: float = 0.0) -> None:
        self._seen[key] = when
        self._seen.move_to_end(key)
        while len(self._seen) > self._limit:
            self._seen.popitem(last=False)

    def when(self, key: str) -> float | None:
        return self._seen.get(key)

    def __contains__(self, key: str) -> bool:
        return key in self._seen


class NotAMessage(ValueError):
    """An event with the type of a message but not its shape (a field missing or of the wrong type)."""


def _string(data: dict[str, Any], name: str) -> str:
    value = data.get(name)
    if not isinstance(value, str) or not value:
        raise NotAMessage(f"the event's {name!r} is {type(value).__name__}, not a string")
    return value


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def relation(content: dict[str, Any]) -> dict[str, Any]:
    return _dict(content.get("m.relates_to"))


def normalize(
    event: Any, place: Place, me: Identity, mine: Remembered, threads: Remembered, sender_name: str | None
) -> Inbound | None:
    """A room event as an Inbound; None when the bot should not look at it; NotAMessage when it
    claims to be a message and is not one. An encrypted event comes as one that can't be read
    (`unsupported`), addressed to the bot: the adapter hands over one a room an hour."""
    if not isinstance(event, dict):
        raise NotAMessage(f"the event is {type(event).__name__}, not an object")
    kind = event.get("type")
    if kind not in ("m.room.message", "m.sticker", "m.room.encrypted") or "state_key" in event:
        return None
    sender = _string(event, "sender")
    if sender == me.user_id:
        return None
    event_id = _string(event, "event_id")
    content = event.get("content")
    if not isinstance(content, dict) or not content:
        return None  # redacted
    related = relation(content)
    if related.get("rel_type") == "m.replace":
        return None  # an edit: the message was answered as it was sent
    thread = related.get("event_id") if related.get("rel_type") == "m.thread" else None
    thread = thread if isinstance(thread, str) and thread else None
    chat_type: ChatType = "dm" if place.direct else "group"
    base = Inbound(
        surface=SURFACE,
        chat_type=chat_type,
        chat_id=place.room_id,
        sender_id=sender,
        text="",
        message_id=event_id,
        thread_id=thread,
        sender_name=sender_name,
        chat_title=None if place.direct else place.title,
    )
    if kind == "m.room.encrypted":
        return replace(base, unsupported=ENCRYPTED, mentioned=True)
    msgtype = "m.sticker" if kind == "m.sticker" else content.get("msgtype")
    if msgtype == "m.notice" or not isinstance(msgtype, str):
        return None
    body = content.get("body", "")
    if not isinstance(body, str):
        raise NotAMessage(f"the event's 'body' is {type(body).__name__}, not a string")
    if msgtype in _UNSUPPORTED:
        return replace(base, unsupported=_UNSUPPORTED[msgtype], mentioned=chat_type == "dm")
    attachments: tuple[Attachment, ...] = ()
    if msgtype in ("m.image", "m.audio", "m.file"):
        attachment = attachment_of(msgtype, content)
        if attachment is None:
            # Only an encrypted file has no url: its key is in the content the bot can't read.
            return replace(base, unsupported=ENCRYPTED, mentioned=chat_type == "dm")
        attachments = (attachment,)
        body = _caption(content, body)
    elif msgtype not in ("m.text", "m.emote"):
        return None  # a type of message Bridge does not know (polls, key verification, ...)
    replied = _dict(related.get("m.in_reply_to")).get("event_id")
    if isinstance(replied, str):
        body = _without_reply_fallback(body)
    mentioned, text = _addressing(content, body, me, place)
    if msgtype == "m.emote" and text:
        text = f"* {sender_name or sender} {text}"
    if not text and not attachments:
        return None
    if (isinstance(replied, str) and replied in mine) or (thread is not None and thread in threads):
        mentioned = True
    command = re.match(r"^/([A-Za-z]+)\b", text)
    if command and command.group(1).lower() in _COMMAND_NAMES:
        mentioned = True
    return replace(base, text=text, attachments=attachments, mentioned=chat_type == "dm" or mentioned)


def _caption(content: dict[str, Any], body: str) -> str:
    """A file's caption: since Matrix 1.10, the body when a filename is given beside it."""
    filename = content.get("filename")
    if isinstance(filename, str) and filename and body != filename:
        return body
    return ""


def _without_reply_fallback(body: str) -> str:
    """A reply's body without the quoted lines older clients put before it ("> <@ann:x> hi")."""
    lines = body.split("\n")
    if not lines or not lines[0].startswith("> "):
        return body
    while lines and lines[0].startswith(">"):
        lines.pop(0)
    return "\n".join(lines).lstrip("\n")


def _mentions_me(content: dict[str, Any], me: Identity) -> bool:
    mentions = _dict(content.get("m.mentions"))
    users = mentions.get("user_ids")
    if isinstance(users, list) and me.user_id in users:
        return True
    html = content.get("formatted_body")
    if isinstance(html, str) and "matrix.to/#/" in html:
        for href in re.findall(r"""href=["']https?://matrix\.to/#/([^"'?]+)""", html):
            if unquote(href) == me.user_id:
                return True
    return False


def _addressing(content: dict[str, Any], body: str, me: Identity, place: Place) -> tuple[bool, str]:
    """(the bot is mentioned, the text as people read it, without the mention)."""
    mentioned = _mentions_me(content, me)
    text = body
    if me.user_id in text:
        mentioned = True
        text = text.replace(me.user_id, "")
    for name in {n for n in (place.my_name, me.display_name) if n}:
        # A pill's plain text is the name, usually at the start ("Bridge: hi"); the name anywhere
        # else, as a word, also counts.
        lead = re.match(rf"^\s*@?{re.escape(name)}\s*[:,]?\s*", text, re.IGNORECASE)
        if lead:
            mentioned = True
            text = text[lead.end() :]
        elif re.search(rf"(?<![\w@]){re.escape(name)}(?!\w)", text, re.IGNORECASE):
            mentioned = True
    return mentioned, re.sub(r"[ \t]{2,}", " ", text).strip()


def attachment_of(msgtype: str, content: dict[str, Any]) -> Attachment | None:
    """An image, audio or file message as an Attachment, fetched later from its mxc:// URL; None for
    an encrypted file (its URL and key are in `file`)."""
    url = content.get("url")
    if not isinstance(url, str) or not url.startswith("mxc://"):
        return None
    info = _dict(content.get("info"))
    mime = info.get("mimetype") if isinstance(info.get("mimetype"), str) else None
    size = info.get("size")
    name = content.get("filename") or content.get("body") or "file"
    voice = any(key in content for key in _VOICE)
    kind: MediaKind
    if msgtype == "m.audio" or (mime or "").startswith("audio/"):
        kind = "audio"
    elif msgtype == "m.image" or (mime or "").startswith("image/"):
        kind = "image"
    else:
        kind = "file"
    return Attachment(
        kind,
        str(name),
        url,
        mime,
        size if isinstance(size, int) and not isinstance(size, bool) else None,
        voice=voice and kind == "audio",
    )
