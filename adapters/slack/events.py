"""Slack's message events as Inbound: who wrote, where (a DM, a channel, a thread), to whom, and what.

Events come from the Events API (over Socket Mode here): `message` for DMs (`message.im`), channels
(`message.channels`, `message.groups`, `message.mpim`) and thread replies (with `thread_ts`), and
`app_mention` where the bot is named. One message the bot is subscribed to twice (as a channel
message and as a mention) arrives as two events with the same channel and ts: they normalise to the
same Inbound, and the core stores it once.
"""

from __future__ import annotations

import html
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from bridge.events import Attachment, ChatType, Inbound, MediaKind
from bridge.gateway.commands import COMMANDS

SURFACE = "slack"
# Subtypes that are people writing: a plain message has none. Edits, deletions, joins, topic changes
# and other bots' posts have subtypes of their own and are not looked at.
_USER_SUBTYPES = frozenset({None, "file_share", "thread_broadcast", "me_message"})
# Files whose content Slack withheld (deleted, or past a free workspace's history limit).
_GONE_MODES = frozenset({"tombstone", "hidden_by_limit"})
_COMMAND_NAMES = frozenset(name for name, _ in COMMANDS)
# <@U123> or <@U123|name>, <#C123|name>, <!here>, <!subteam^S1|@team>, <https://x|label>, <https://x>
_ANGLED = re.compile(r"<([^<>|]*)(?:\|([^<>]*))?>")
# The (channel, ts) pairs remembered at once: threads the bot is in, messages handed over; the
# oldest are forgotten first.
REMEMBERED = 10_000


@dataclass(frozen=True, slots=True)
class Identity:
    """Who the bot is on Slack, from auth.test."""

    user_id: str  # U…: how it is mentioned (<@U…>) and how its own messages are told apart
    bot_id: str  # B…: on every message the app posts
    team_id: str
    name: str


class Remembered:
    """A bounded set of (channel, ts): the threads the bot has written in since it started (a reply
    there is addressed to it, as a reply to its message is on Telegram and Discord), and the messages
    handed to the core lately (one Slack sends twice, as a channel message and as a mention, or again
    around a reconnect, is handed over once, so a command in it is not carried out twice)."""

    def __init__(self, limit: int = REMEMBERED) -> None:
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._limit = limit

    def add(self, channel: str, thread_ts: str) -> None:
        self._seen[(channel, thread_ts)] = None
        self._seen.move_to_end((channel, thread_ts))
        while len(self._seen) > self._limit:
            self._seen.popitem(last=False)

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._seen


class NotAMessage(ValueError):
    """An event with the type of a message but not its shape (a field missing or of the wrong type)."""


def _text_field(event: dict[str, Any], name: str, *, required: bool = True) -> str | None:
    value = event.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value):
        raise NotAMessage(f"the event's {name!r} is {type(value).__name__}, not a string")
    return value


def normalize(event: Any, me: Identity, threads: Remembered) -> Inbound | None:
    """A message event as an Inbound, None when the bot should not look at it (its own posts, other
    bots, edits, joins); NotAMessage when it claims to be a message and is not one."""
    if not isinstance(event, dict):
        raise NotAMessage(f"the event is {type(event).__name__}, not an object")
    kind = event.get("type")
    if kind not in ("message", "app_mention"):
        return None
    subtype = event.get("subtype")
    if subtype not in _USER_SUBTYPES or event.get("bot_id") or event.get("hidden"):
        return None
    user = _text_field(event, "user")
    if user == me.user_id:
        return None
    channel = _text_field(event, "channel")
    ts = _text_field(event, "ts")
    assert user is not None and channel is not None and ts is not None
    raw_text = event.get("text") or ""
    if not isinstance(raw_text, str):
        raise NotAMessage(f"the event's 'text' is {type(raw_text).__name__}, not a string")
    thread_ts = _text_field(event, "thread_ts", required=False)
    files = event.get("files") or []
    if not isinstance(files, list):
        raise NotAMessage("the event's 'files' is not a list")
    attachments = tuple(a for f in files if (a := attachment_of(f)) is not None)
    mentioned, text = _addressing(raw_text, me.user_id)
    unsupported = None
    if not text and not attachments:
        if not files:
            return None
        unsupported = "file"  # every file was withheld: the user is told it can't be read
    chat_type = _chat_type(event, channel)
    # A thread's parent carries thread_ts == ts once it has replies: it is no reply itself.
    thread = thread_ts if thread_ts and thread_ts != ts else None
    if thread is not None and (event.get("parent_user_id") == me.user_id or (channel, thread) in threads):
        mentioned = True
    command = re.match(r"^/([A-Za-z]+)\b", text)
    if command and command.group(1).lower() in _COMMAND_NAMES:
        mentioned = True
    return Inbound(
        surface=SURFACE,
        chat_type=chat_type,
        chat_id=channel,
        sender_id=user,
        text=text,
        message_id=ts,
        thread_id=thread,
        mentioned=chat_type == "dm" or mentioned or kind == "app_mention",
        sender_name=_sender_name(event),
        unsupported=unsupported,
        attachments=attachments,
    )


def _chat_type(event: dict[str, Any], channel: str) -> ChatType:
    # app_mention carries no channel_type; a DM's channel id starts with D.
    channel_type = event.get("channel_type")
    if channel_type == "im" or (channel_type is None and channel.startswith("D")):
        return "dm"
    return "group"  # public and private channels, and group DMs (mpim)


def _sender_name(event: dict[str, Any]) -> str | None:
    profile = event.get("user_profile")
    if not isinstance(profile, dict):
        return None
    for key in ("display_name", "real_name", "name"):
        value = profile.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _addressing(raw: str, bot_user_id: str) -> tuple[bool, str]:
    """(the bot is mentioned, the text as people read it): the bot's mention taken out, and Slack's
    escapes and angle-bracket sequences written back as text (a link as its address, a channel as
    #name, a user as @U…)."""
    mentioned = False

    def readable(match: re.Match[str]) -> str:
        nonlocal mentioned
        target, label = match.group(1), match.group(2)
        if target in (f"@{bot_user_id}",):
            mentioned = True
            return ""
        if target.startswith("@"):
            return f"@{label or target[1:]}"
        if target.startswith("#"):
            return f"#{label or target[1:]}"
        if target.startswith("!"):
            word = target[1:].split("^", 1)[0]
            return label or f"@{word}"
        return f"{label} ({target})" if label and label != target else target

    text = _ANGLED.sub(readable, raw)
    text = html.unescape(text) if "&" in text else text
    return mentioned, re.sub(r"[ \t]{2,}", " ", text).strip()


def attachment_of(file: Any) -> Attachment | None:
    """One of a message's files as an Attachment, fetched later with the bot token; None when Slack
    withheld it or it is not a file object."""
    if not isinstance(file, dict) or file.get("mode") in _GONE_MODES:
        return None
    url = file.get("url_private_download") or file.get("url_private")
    if not isinstance(url, str) or not url:
        return None
    mime = file.get("mimetype") if isinstance(file.get("mimetype"), str) else None
    name = file.get("name") or file.get("title") or file.get("id") or "file"
    size = file.get("size")
    # A clip recorded in Slack (a voice message) is an audio file with subtype slack_audio.
    voice = file.get("subtype") == "slack_audio"
    kind: MediaKind = (
        "audio"
        if voice or (mime or "").startswith("audio/")
        else "image"
        if (mime or "").startswith("image/")
        else "file"
    )
    return Attachment(
        kind,
        str(name),
        url,
        mime,
        size if isinstance(size, int) and not isinstance(size, bool) else None,
        voice=voice,
    )
