"""A fake Discord (REST v10 + gateway websocket) on 127.0.0.1 that the real discord.py connects to."""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime as dtm
import hashlib
import hmac
import json
import math
import mimetypes
import re
import struct
import time
import uuid
import zlib
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

import pytest
from aiohttp import BodyPartReader, WSMsgType, web

from devkit.fakes.loopback import LoopbackServer

FaultKind = Literal["429", "403", "500", "502", "503", "drop"]
Snowflake = int | str

DISCORD_EPOCH_MS = 1_420_070_400_000
MAX_CONTENT = 2000
NONCE_WINDOW_S = 300.0  # enforce_nonce dedupes within "a few minutes"
SYNC_FLUSH_SUFFIX = b"\x00\x00\xff\xff"
UPLOAD_LIMIT = 10 * 1024 * 1024  # a bot's total upload per message in an unboosted guild (and in DMs)
CDN_ROUTE = "/attachments/{channel_id}/{attachment_id}/{filename}"
CDN_TTL_S = 24 * 3600  # signed attachment URLs carry ex= (expiry), is= (issued), hm= (signature)
CDN_CHUNK = 64 * 1024

# Message flags.
SUPPRESS_EMBEDS = 1 << 2
SUPPRESS_NOTIFICATIONS = 1 << 12
IS_VOICE_MESSAGE = 1 << 13
SENDABLE_FLAGS = SUPPRESS_EMBEDS | SUPPRESS_NOTIFICATIONS | IS_VOICE_MESSAGE

# Gateway opcodes.
OP_DISPATCH, OP_HEARTBEAT, OP_IDENTIFY, OP_PRESENCE, OP_RESUME = 0, 1, 2, 3, 6
OP_RECONNECT, OP_INVALID_SESSION, OP_HELLO, OP_HEARTBEAT_ACK = 7, 9, 10, 11

# Intent bits the fake honours.
INTENT_GUILDS = 1 << 0
INTENT_MEMBERS = 1 << 1
INTENT_PRESENCES = 1 << 8
INTENT_GUILD_MESSAGES = 1 << 9
INTENT_DIRECT_MESSAGES = 1 << 12
INTENT_MESSAGE_CONTENT = 1 << 15
PRIVILEGED_INTENTS = INTENT_MEMBERS | INTENT_PRESENCES | INTENT_MESSAGE_CONTENT

# VIEW_CHANNEL, SEND_MESSAGES, EMBED_LINKS, ATTACH_FILES, READ_MESSAGE_HISTORY, ADD_REACTIONS,
# SEND_MESSAGES_IN_THREADS: what a bot invited with the usual scopes gets through @everyone + its role.
EVERYONE_PERMISSIONS = (1 << 10) | (1 << 11) | (1 << 14) | (1 << 15) | (1 << 16) | (1 << 6) | (1 << 38)

_MENTION = re.compile(r"<@!?(\d+)>")
_PARAM = re.compile(r"\{\w*\}")


def _iso(at: dtm.datetime | None = None) -> str:
    return (at or dtm.datetime.now(dtm.UTC)).isoformat(timespec="microseconds")


def route_key(method: str, path: str) -> str:
    """The key for faults and records: "POST /channels/{id}/messages" matches any parameter names."""
    return f"{method.upper()} {_PARAM.sub('{}', path)}"


class DiscordApiError(Exception):
    """An error answer: {"message": ..., "code": ...} plus "errors" for form-body errors."""

    def __init__(self, status: int, code: int, message: str, errors: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.errors = errors

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"message": self.message, "code": self.code}
        if self.errors is not None:
            body["errors"] = self.errors
        return body


def _form_error(field_name: str, code: str, message: str) -> DiscordApiError:
    errors = {field_name: {"_errors": [{"code": code, "message": message}]}}
    return DiscordApiError(400, 50035, "Invalid Form Body", errors)


def _too_large() -> DiscordApiError:
    return DiscordApiError(413, 40005, "Request entity too large")


@dataclass(frozen=True)
class Upload:
    """A file on a user's message: post(..., attachments=[Upload(...)]) or dm(..., attachments=...).

    size overrides the advertised size (the CDN then serves data padded with zero bytes, or cut,
    to exactly size bytes, streamed), so a test can fake a 30 MB file without allocating it.
    served makes the CDN stream that many bytes instead, whatever size says (a file that lies about
    its size); chunked streams it without a Content-Length.
    voice=True makes a Discord voice message: the message gets flags IS_VOICE_MESSAGE, the
    attachment duration_secs and a base64 waveform, and content_type is forced to audio/ogg.
    Images (image/*) get width/height: read from a PNG/GIF/JPEG header, else 640x480.
    """

    filename: str
    content_type: str
    data: bytes
    size: int | None = None
    voice: bool = False
    duration_secs: float = 2.5
    served: int | None = None
    chunked: bool = False


AttachmentSpec = Upload | tuple[str, str, bytes] | dict[str, Any]


@dataclass
class _FilePart:
    """A file part of a multipart request (files[n]); data is empty once the request is too large."""

    name: str
    filename: str
    content_type: str
    data: bytes
    size: int


@dataclass
class _StoredFile:
    """What the CDN route serves for one attachment id."""

    channel_id: str
    filename: str
    content_type: str
    data: bytes
    size: int  # the bytes served, streamed when more than data
    chunked: bool = False  # streamed without a Content-Length


@dataclass
class _Close:
    code: int
    reason: str


@dataclass
class _Session:
    session_id: str
    intents: int
    seq: int = 0
    log: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=2000))


@dataclass(eq=False)
class _Conn:
    ws: web.WebSocketResponse
    request: web.Request
    compressor: Any  # zlib's Compress object; one per connection, flushed with Z_SYNC_FLUSH per frame
    outbox: asyncio.Queue[dict[str, Any] | _Close] = field(default_factory=asyncio.Queue)
    session: _Session | None = None
    writer: asyncio.Task[None] | None = None


@dataclass
class _Route:
    method: str
    template: str
    pattern: re.Pattern[str]
    handler: Callable[[web.Request, dict[str, str], dict[str, Any]], Awaitable[web.Response]]


class FakeDiscord(LoopbackServer):
    """Discord's REST API under {origin}/api/v10 and its gateway at {gateway_url}, 127.0.0.1 only.

    Point discord.py at it with patch_discord(monkeypatch). Build the world with add_guild(),
    add_thread(), user(); push traffic with post()/dm(); read what the bot did from requests,
    created, edits and typing; wait_for() re-checks a predicate after every change.
    Attachments: post()/dm() take Upload items, served (signed URLs) by the CDN route at
    {origin}/attachments/{channel_id}/{attachment_id}/{filename} with every GET in downloads;
    files the bot sends (multipart) become attachments too, files_of(message_id) gives their
    bytes, and more than upload_limit bytes of files in one request is a 413 (code 40005).
    """

    def __init__(
        self,
        token: str = "FAKE.DISCORD.TOKEN",
        *,
        bot_id: int = 1_100_000_000_000_000_001,
        bot_name: str = "bridge_bot",
        heartbeat_interval_ms: int = 41_250,
        allowed_privileged_intents: int = INTENT_MESSAGE_CONTENT,
    ) -> None:
        super().__init__()
        self.token = token
        self.bot_id = bot_id
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.allowed_privileged_intents = allowed_privileged_intents
        self.bot_user: dict[str, Any] = {
            "id": str(bot_id),
            "username": bot_name,
            "global_name": None,
            "discriminator": "0",
            "avatar": None,
            "bot": True,
            "system": False,
            "flags": 0,
            "public_flags": 0,
        }
        self.owner_id = 1_100_000_000_000_000_002
        # Records.
        self.requests: list[dict[str, Any]] = []
        self.created: list[dict[str, Any]] = []  # messages the bot created; edits update them in place
        self.edits: list[dict[str, Any]] = []
        self.deleted: list[str] = []
        self.typing: list[str] = []
        # Every GET of the attachment CDN route: attachment_id, channel_id, filename, url, status, at;
        # a streamed one also "sent", the bytes written when it ended (the client gone or not).
        self.downloads: list[dict[str, Any]] = []
        self.upload_limit = UPLOAD_LIMIT  # total bytes of files per request; more → 413, code 40005
        self.gateway_connects: list[dict[str, str]] = []
        self.gateway_received: list[dict[str, Any]] = []
        self.identify_count = 0
        self.resume_count = 0
        self.heartbeats = 0
        self.intents: int | None = None
        # World.
        self._users: dict[str, dict[str, Any]] = {str(bot_id): self.bot_user}
        self._guilds: dict[str, dict[str, Any]] = {}
        self._channels: dict[str, dict[str, Any]] = {}
        self._dm_by_user: dict[str, str] = {}
        self._messages: dict[str, dict[str, Any]] = {}
        self._by_channel: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)
        self._nonces: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
        self._files: dict[str, _StoredFile] = {}  # attachment id → bytes the CDN route serves
        self._cdn_secret = uuid.uuid4().bytes
        # Gateway.
        self._session: _Session | None = None
        self._live: _Conn | None = None
        self._conns: set[_Conn] = set()
        # Faults and change notification.
        self._faults: defaultdict[str, deque[tuple[FaultKind, float]]] = defaultdict(deque)
        self._last_snowflake = 0
        self._routes = self._route_table()

    # -- lifecycle -------------------------------------------------------------------------

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get(CDN_ROUTE, self._cdn, allow_head=False)
        app.router.add_route("*", "/api/v{version:\\d+}/{tail:.*}", self._rest)
        app.router.add_route("*", "/{tail:.*}", self._not_found)

    @property
    def api_base(self) -> str:
        return f"{self.origin}/api/v10"

    @property
    def gateway_url(self) -> str:
        return "ws" + self.origin.removeprefix("http") + "/gateway"

    def patch_discord(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Aim discord.py's REST base and first-connect gateway here; undone with the monkeypatch.

        A plain Client never calls GET /gateway/bot: it connects to DiscordWebSocket.DEFAULT_GATEWAY
        and later RESUMEs at READY's resume_gateway_url (this fake sends gateway_url for both).
        AutoShardedClient asks GET /gateway/bot, which also answers gateway_url.
        """
        import discord.gateway
        import discord.http
        import yarl

        monkeypatch.setattr(discord.http.Route, "BASE", self.api_base)
        monkeypatch.setattr(discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY", yarl.URL(self.gateway_url))

    async def stop(self) -> None:
        self._closing.set()
        for conn in list(self._conns):
            await self._shutdown_conn(conn, 1001)
        self._notify()
        await super().stop()

    # -- world builders --------------------------------------------------------------------

    def user(self, user_id: Snowflake, name: str, bot: bool = False) -> dict[str, Any]:
        """Register (or rename) a user and return its user object."""
        user = self._users.setdefault(str(user_id), {"id": str(user_id)})
        user.update(
            {
                "username": name,
                "global_name": name,
                "discriminator": "0",
                "avatar": None,
                "bot": bot,
                "public_flags": 0,
            }
        )
        return user

    def add_guild(
        self, guild_id: Snowflake, name: str, channels: list[tuple[Snowflake, str]] | None = None
    ) -> dict[str, Any]:
        """A guild the bot is in, with text channels; dispatched as GUILD_CREATE if a session is live."""
        gid = str(guild_id)
        guild: dict[str, Any] = {
            "id": gid,
            "name": name,
            "icon": None,
            "owner_id": str(self.owner_id),
            "afk_channel_id": None,
            "afk_timeout": 300,
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "mfa_level": 0,
            "nsfw_level": 0,
            "premium_tier": 0,
            "premium_subscription_count": 0,
            "preferred_locale": "en-US",
            "system_channel_id": None,
            "system_channel_flags": 0,
            "features": [],
            "emojis": [],
            "stickers": [],
            "roles": [
                {
                    "id": gid,
                    "name": "@everyone",
                    "color": 0,
                    "hoist": False,
                    "position": 0,
                    "permissions": str(EVERYONE_PERMISSIONS),
                    "managed": False,
                    "mentionable": False,
                    "flags": 0,
                }
            ],
            "members": [self._member(self.bot_user)],
            "member_count": 2,
            "large": False,
            "unavailable": False,
            "joined_at": _iso(),
            "channels": [],
            "threads": [],
            "voice_states": [],
            "presences": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
        }
        self._guilds[gid] = guild
        for position, (channel_id, channel_name) in enumerate(channels or []):
            channel: dict[str, Any] = {
                "id": str(channel_id),
                "type": 0,
                "guild_id": gid,
                "name": channel_name,
                "position": position,
                "permission_overwrites": [],
                "nsfw": False,
                "topic": None,
                "last_message_id": None,
                "rate_limit_per_user": 0,
                "parent_id": None,
                "flags": 0,
            }
            guild["channels"].append(channel)
            self._channels[channel["id"]] = channel
        self._dispatch("GUILD_CREATE", self._guild_payload(guild))
        self._notify()
        return guild

    def add_thread(
        self, thread_id: Snowflake, parent_id: Snowflake, guild_id: Snowflake, name: str
    ) -> dict[str, Any]:
        """A public thread (type 11) under a text channel; dispatched as THREAD_CREATE if live."""
        gid = str(guild_id)
        thread: dict[str, Any] = {
            "id": str(thread_id),
            "type": 11,
            "guild_id": gid,
            "parent_id": str(parent_id),
            "name": name,
            "owner_id": str(self.owner_id),
            "last_message_id": None,
            "message_count": 0,
            "member_count": 1,
            "rate_limit_per_user": 0,
            "flags": 0,
            "total_message_sent": 0,
            "thread_metadata": {
                "archived": False,
                "auto_archive_duration": 1440,
                "archive_timestamp": _iso(),
                "locked": False,
                "invitable": True,
                "create_timestamp": _iso(),
            },
        }
        self._guilds[gid]["threads"].append(thread)
        self._channels[thread["id"]] = thread
        self._dispatch("THREAD_CREATE", {**thread, "newly_created": True})
        self._notify()
        return thread

    def dm_channel(self, user_id: Snowflake) -> dict[str, Any]:
        """The DM channel between the bot and user_id, created on first use."""
        uid = str(user_id)
        if uid in self._dm_by_user:
            return self._channels[self._dm_by_user[uid]]
        channel: dict[str, Any] = {
            "id": str(self._snowflake()),
            "type": 1,
            "recipients": [self._user_obj(uid)],
            "last_message_id": None,
            "flags": 0,
        }
        self._channels[channel["id"]] = channel
        self._dm_by_user[uid] = channel["id"]
        return channel

    # -- traffic for the bot ---------------------------------------------------------------

    def post(
        self,
        channel_id: Snowflake,
        author_id: Snowflake,
        content: str = "",
        *,
        mentions_bot: bool = False,
        reply_to: Snowflake | None = None,
        guild_id: Snowflake | None = None,
        author_bot: bool = False,
        message_type: int = 0,
        attachments: Sequence[AttachmentSpec] | None = None,
    ) -> dict[str, Any]:
        """A user's message in a channel or thread, dispatched as MESSAGE_CREATE; returns it.

        guild_id defaults to the channel's guild. `<@id>` in content mentions that user; mentions_bot
        adds the bot to `mentions` even without it. reply_to makes a reply (type 19).
        attachments: Upload or (filename, content_type, data) items, served by the CDN route at each
        attachment's url; a dict is taken verbatim as a ready attachment object (nothing served).
        Content may be empty when there are attachments.
        """
        cid = str(channel_id)
        channel = self._channels.get(cid)
        gid = str(guild_id) if guild_id is not None else (channel or {}).get("guild_id")
        author = self._user_obj(str(author_id), bot=author_bot)
        mentioned = [self._user_obj(uid) for uid in dict.fromkeys(_MENTION.findall(content))]
        if mentions_bot and not any(u["id"] == str(self.bot_id) for u in mentioned):
            mentioned.append(self.bot_user)
        message = self._message(cid, author, content, gid, mentions=mentioned, message_type=message_type)
        for spec in attachments or []:
            if isinstance(spec, dict):
                message["attachments"].append(copy.deepcopy(spec))
                continue
            upload = spec if isinstance(spec, Upload) else Upload(*spec)
            message["attachments"].append(self._inbound_attachment(cid, upload))
            if upload.voice:
                message["flags"] |= IS_VOICE_MESSAGE
        if reply_to is not None:
            self._attach_reply(message, str(reply_to), fail_if_missing=False)
        self._store(message)
        self._dispatch("MESSAGE_CREATE", message)
        self._notify()
        return message

    def dm(
        self,
        user_id: Snowflake,
        content: str = "",
        *,
        name: str | None = None,
        attachments: Sequence[AttachmentSpec] | None = None,
    ) -> dict[str, Any]:
        """A direct message from user_id to the bot (no guild_id), dispatched as MESSAGE_CREATE."""
        if name is not None:
            self.user(user_id, name)
        channel = self.dm_channel(user_id)
        return self.post(channel["id"], user_id, content, attachments=attachments)

    def reconnect(self) -> None:
        """Send op 7 RECONNECT on the live gateway connection; the client closes and RESUMEs."""
        if self._live is not None:
            self._live.outbox.put_nowait({"op": OP_RECONNECT, "d": None})

    def drop_gateway(self) -> None:
        """Cut the live gateway connection without a close frame; the client should RESUME."""
        conn = self._live
        if conn is not None:
            self._live = None
            if conn.request.transport is not None:
                conn.request.transport.close()

    def invalidate_session(self, resumable: bool = False) -> None:
        """Send op 9 INVALID_SESSION; with resumable False the session is forgotten (re-IDENTIFY)."""
        if self._live is not None:
            if not resumable:
                self._session = None
            self._live.outbox.put_nowait({"op": OP_INVALID_SESSION, "d": resumable})

    # -- reading records -------------------------------------------------------------------

    def messages_in(self, channel_id: Snowflake) -> list[dict[str, Any]]:
        """Every message in the channel, pushed or created, oldest first, current content."""
        return list(self._by_channel.get(str(channel_id), []))

    def message(self, message_id: Snowflake) -> dict[str, Any] | None:
        return self._messages.get(str(message_id))

    def files_of(self, message_id: Snowflake) -> list[tuple[str, str, bytes]]:
        """(filename, content_type, data) of each attachment the message has now, in order.

        For the bot's messages data is exactly what discord.py uploaded; for post()/dm() it is the
        Upload's data (not padded to an overridden size). KeyError for an unknown message.
        """
        message = self._messages[str(message_id)]
        files = [self._files.get(str(a["id"])) for a in message["attachments"]]
        return [(f.filename, f.content_type, f.data) for f in files if f is not None]

    def requests_to(self, key: str) -> list[dict[str, Any]]:
        """Requests matching a route key like "POST /channels/{id}/messages", each with its "at"."""
        wanted = route_key(*key.split(" ", 1))
        return [r for r in self.requests if r["key"] == wanted]

    @property
    def connected(self) -> bool:
        return self._live is not None and self._live.session is not None

    def describe_state(self) -> str:
        return (
            f"created={[(m['channel_id'], m['content'][:40]) for m in self.created[-5:]]}, "
            f"last requests={[r['key'] for r in self.requests[-10:]]}, "
            f"identify={self.identify_count} resume={self.resume_count}"
        )

    # -- faults ----------------------------------------------------------------------------

    def fail_next(self, key: str, kind: FaultKind, *, times: int = 1, retry_after: float = 0.2) -> None:
        """Make the next `times` requests to a route (e.g. "POST /channels/{id}/messages") fail.

        "429" → a user-scope rate limit asking for retry_after seconds; "500"/"502"/"503" → a
        server error; "403" → Missing Access (the bot can't see or write in the channel); "drop" →
        the connection closes with no response. Nothing is created.
        """
        if kind not in ("429", "403", "500", "502", "503", "drop"):
            raise ValueError(f"unknown fault kind {kind!r}")
        method, path = key.split(" ", 1)
        self._faults[route_key(method, path)].extend([(kind, retry_after)] * times)

    # -- helpers ---------------------------------------------------------------------------

    def _snowflake(self) -> int:
        value = (int(time.time() * 1000) - DISCORD_EPOCH_MS) << 22
        self._last_snowflake = max(value, self._last_snowflake + 1)
        return self._last_snowflake

    def _user_obj(self, user_id: str, *, bot: bool = False) -> dict[str, Any]:
        if user_id not in self._users:
            self.user(user_id, f"user{user_id[-4:]}", bot=bot)
        return self._users[user_id]

    def _member(self, user: dict[str, Any] | None = None) -> dict[str, Any]:
        member: dict[str, Any] = {
            "roles": [],
            "joined_at": _iso(),
            "deaf": False,
            "mute": False,
            "flags": 0,
            "nick": None,
            "pending": False,
        }
        if user is not None:
            member["user"] = user
        return member

    def _message(
        self,
        channel_id: str,
        author: dict[str, Any],
        content: str,
        guild_id: str | None,
        *,
        mentions: list[dict[str, Any]],
        message_type: int = 0,
    ) -> dict[str, Any]:
        message: dict[str, Any] = {
            "id": str(self._snowflake()),
            "channel_id": channel_id,
            "author": copy.deepcopy(author),
            "content": content,
            "timestamp": _iso(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": copy.deepcopy(mentions),
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "components": [],
            "pinned": False,
            "type": message_type,
            "flags": 0,
        }
        if guild_id is not None:
            message["guild_id"] = guild_id
            message["member"] = self._member()
        return message

    def _attach_reply(self, message: dict[str, Any], reply_to: str, *, fail_if_missing: bool) -> None:
        referenced = self._messages.get(reply_to)
        if referenced is None and fail_if_missing:
            raise _form_error("message_reference", "REPLIES_UNKNOWN_MESSAGE", "Unknown message")
        if referenced is None:
            return
        message["message_reference"] = {
            "type": 0,
            "message_id": reply_to,
            "channel_id": referenced["channel_id"],
            **({"guild_id": referenced["guild_id"]} if "guild_id" in referenced else {}),
        }
        message["referenced_message"] = {
            k: v for k, v in copy.deepcopy(referenced).items() if k != "referenced_message"
        }
        if message["type"] == 0:
            message["type"] = 19

    def _store(self, message: dict[str, Any]) -> None:
        self._messages[message["id"]] = message
        self._by_channel[message["channel_id"]].append(message)
        channel = self._channels.get(message["channel_id"])
        if channel is not None:
            channel["last_message_id"] = message["id"]

    def _guild_payload(self, guild: dict[str, Any]) -> dict[str, Any]:
        return copy.deepcopy(guild)

    # -- attachments and the CDN -----------------------------------------------------------

    def _inbound_attachment(self, channel_id: str, upload: Upload) -> dict[str, Any]:
        size = len(upload.data) if upload.size is None else upload.size
        extra: dict[str, Any] = {}
        content_type = upload.content_type
        if upload.voice:
            waveform = base64.b64encode(_waveform(upload.data, upload.duration_secs)).decode()
            extra = {"duration_secs": upload.duration_secs, "waveform": waveform}
            content_type = "audio/ogg"
        attachment = self._new_attachment(
            channel_id, upload.filename, content_type, upload.data, size, extra=extra
        )
        stored = self._files[attachment["id"]]
        stored.size = size if upload.served is None else upload.served
        stored.chunked = upload.chunked
        return attachment

    def _uploaded_attachments(
        self, channel_id: str, parts: list[_FilePart], described: Any
    ) -> list[dict[str, Any]]:
        """Attachment objects for a request's files[n] parts; payload_json's attachments[] entry
        with id n may rename the file and carry description (and duration_secs/waveform)."""
        meta = {str(a.get("id")): a for a in described or [] if isinstance(a, dict)}
        attachments = []
        for part in parts:
            index = part.name.removeprefix("files[").removesuffix("]")
            entry = meta.get(index, {})
            filename = str(entry.get("filename") or part.filename)
            passed = ("description", "duration_secs", "waveform")
            extra = {k: entry[k] for k in passed if entry.get(k) is not None}
            content_type = _content_type(filename, part.content_type)
            attachments.append(
                self._new_attachment(channel_id, filename, content_type, part.data, part.size, extra=extra)
            )
        return attachments

    def _new_attachment(
        self,
        channel_id: str,
        filename: str,
        content_type: str,
        data: bytes,
        size: int,
        *,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        attachment_id = str(self._snowflake())
        filename = _discord_filename(filename)
        url = self._cdn_url(channel_id, attachment_id, filename)
        attachment: dict[str, Any] = {
            "id": attachment_id,
            "filename": filename,
            "size": size,
            "url": url,
            "proxy_url": url,
            "content_type": content_type,
        }
        if content_type.startswith("image/"):
            attachment["width"], attachment["height"] = _image_size(data)
        attachment.update(extra or {})
        self._files[attachment_id] = _StoredFile(channel_id, filename, content_type, data, size)
        return attachment

    def _cdn_url(self, channel_id: str, attachment_id: str, filename: str) -> str:
        issued = int(time.time())
        ex, is_ = f"{issued + CDN_TTL_S:x}", f"{issued:x}"
        path = CDN_ROUTE.format(channel_id=channel_id, attachment_id=attachment_id, filename=quote(filename))
        return f"{self.origin}{path}?ex={ex}&is={is_}&hm={self._cdn_signature(attachment_id, ex, is_)}&"

    def _cdn_signature(self, attachment_id: str, ex: str, is_: str) -> str:
        message = f"{attachment_id}:{ex}:{is_}".encode()
        return hmac.new(self._cdn_secret, message, hashlib.sha256).hexdigest()

    def _cdn_signed(self, attachment_id: str, query: Any) -> bool:
        ex, is_, hm = query.get("ex", ""), query.get("is", ""), query.get("hm", "")
        try:
            expired = int(ex, 16) < time.time()
        except ValueError:
            return False
        return not expired and hmac.compare_digest(hm, self._cdn_signature(attachment_id, ex, is_))

    async def _cdn(self, request: web.Request) -> web.StreamResponse:
        """GET {origin}/attachments/{channel_id}/{attachment_id}/{filename}?ex=&is=&hm=: the bytes.

        Unknown ids or a wrong channel/filename → 404 "404: Not Found"; a missing or wrong
        signature → 404 "This content is no longer available." (Discord's unsigned-URL answer).
        fail_next("GET /attachments/{}/{}/{}", ...) injects faults here too.
        """
        info = request.match_info
        record: dict[str, Any] = {
            "attachment_id": info["attachment_id"],
            "channel_id": info["channel_id"],
            "filename": info["filename"],
            "url": str(request.url),
            "status": 200,
            "at": asyncio.get_running_loop().time(),
        }
        self.downloads.append(record)
        self._notify()
        key = route_key("GET", CDN_ROUTE)
        if self._faults[key]:
            kind, retry_after = self._faults[key].popleft()
            record["fault"] = kind
            record["status"] = None if kind == "drop" else int(kind)
            if kind == "drop":
                if request.transport is not None:
                    request.transport.close()
                return web.Response()
            return self._fault(kind, retry_after, key)
        stored = self._files.get(info["attachment_id"])
        if stored is None or (stored.channel_id, stored.filename) != (info["channel_id"], info["filename"]):
            record["status"] = 404
            return web.Response(status=404, text="404: Not Found")
        if not self._cdn_signed(info["attachment_id"], request.query):
            record["status"] = 404
            return web.Response(status=404, text="This content is no longer available.")
        headers = {"Content-Type": stored.content_type}
        if stored.size <= len(stored.data) and not stored.chunked:
            return web.Response(body=stored.data[: stored.size], headers=headers)
        response = web.StreamResponse(headers=headers)
        if stored.chunked:
            response.enable_chunked_encoding()
        else:
            response.content_length = stored.size
        record["sent"] = 0
        try:
            await response.prepare(request)
            head = stored.data[: stored.size]
            await response.write(head)
            record["sent"] = len(head)
            zeros = bytes(CDN_CHUNK)
            while record["sent"] < stored.size:
                chunk = zeros[: min(CDN_CHUNK, stored.size - record["sent"])]
                await response.write(chunk)
                record["sent"] += len(chunk)
            await response.write_eof()
        except ConnectionError:
            pass  # the client stopped reading and closed the connection
        finally:
            record["done"] = True
            self._notify()
        return response

    # -- gateway ---------------------------------------------------------------------------

    def _dispatch(self, event: str, data: dict[str, Any]) -> None:
        """Sequence an event into the session's log and send it if a connection is live."""
        session = self._session
        if session is None:
            return
        payload = self._for_intents(event, data, session.intents)
        if payload is None:
            return
        session.seq += 1
        frame = {"op": OP_DISPATCH, "t": event, "s": session.seq, "d": payload}
        session.log.append(frame)
        if self._live is not None and self._live.session is session:
            self._live.outbox.put_nowait(frame)

    def _for_intents(self, event: str, data: dict[str, Any], intents: int) -> dict[str, Any] | None:
        """What a session with these intents gets: message events gated, content maybe blanked."""
        if not event.startswith("MESSAGE_"):
            return copy.deepcopy(data)
        in_guild = "guild_id" in data
        if not intents & (INTENT_GUILD_MESSAGES if in_guild else INTENT_DIRECT_MESSAGES):
            return None
        payload = copy.deepcopy(data)
        author_id = payload.get("author", {}).get("id")
        mentioned = any(u.get("id") == str(self.bot_id) for u in payload.get("mentions", []))
        if (
            in_guild
            and not intents & INTENT_MESSAGE_CONTENT
            and author_id != str(self.bot_id)
            and not mentioned
            and "content" in payload
        ):
            payload.update(content="", embeds=[], attachments=[], components=[])
        return payload

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        self.gateway_connects.append(query)
        self._notify()
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        compressor = zlib.compressobj() if query.get("compress") == "zlib-stream" else None
        conn = _Conn(ws=ws, request=request, compressor=compressor)
        conn.writer = asyncio.create_task(self._writer(conn))
        self._conns.add(conn)
        try:
            if query.get("encoding", "json") != "json" or query.get("v") not in (None, "10"):
                await self._close(conn, 4012, "Invalid API version or encoding.")
            elif query.get("compress") not in (None, "zlib-stream"):
                await self._close(conn, 4000, "Unsupported compression.")
            else:
                conn.outbox.put_nowait(
                    {"op": OP_HELLO, "d": {"heartbeat_interval": self.heartbeat_interval_ms}}
                )
                async for msg in ws:
                    if msg.type is not WSMsgType.TEXT:
                        if msg.type is WSMsgType.BINARY:
                            await self._close(conn, 4002, "Decode error.")
                        continue
                    try:
                        frame = json.loads(msg.data)
                    except ValueError:
                        await self._close(conn, 4002, "Decode error.")
                        continue
                    self.gateway_received.append(frame)
                    await self._on_frame(conn, frame)
                    self._notify()
        finally:
            await self._shutdown_conn(conn, None)
            self._notify()
        return ws

    async def _on_frame(self, conn: _Conn, frame: dict[str, Any]) -> None:
        op, data = frame.get("op"), frame.get("d")
        if op == OP_HEARTBEAT:
            self.heartbeats += 1
            conn.outbox.put_nowait({"op": OP_HEARTBEAT_ACK})
        elif op == OP_IDENTIFY:
            await self._identify(conn, data or {})
        elif op == OP_RESUME:
            await self._resume(conn, data or {})
        elif op == OP_PRESENCE or op == 8:  # presence update, request guild members
            pass
        else:
            await self._close(conn, 4001, "Unknown opcode.")

    async def _identify(self, conn: _Conn, data: dict[str, Any]) -> None:
        if conn.session is not None:
            await self._close(conn, 4005, "Already authenticated.")
            return
        if data.get("token") != self.token:
            await self._close(conn, 4004, "Authentication failed.")
            return
        intents = int(data.get("intents", 0))
        if intents & PRIVILEGED_INTENTS & ~self.allowed_privileged_intents:
            await self._close(conn, 4014, "Disallowed intent(s).")
            return
        self.identify_count += 1
        self.intents = intents
        session = _Session(session_id=uuid.uuid4().hex, intents=intents)
        self._session = conn.session = session
        self._live = conn
        ready = {
            "v": 10,
            "user": copy.deepcopy(self.bot_user),
            "guilds": [{"id": gid, "unavailable": True} for gid in self._guilds],
            "session_id": session.session_id,
            "session_type": "normal",
            "resume_gateway_url": self.gateway_url,
            "private_channels": [],
            "relationships": [],
            "presences": [],
            "guild_join_requests": [],
            "geo_ordered_rtc_regions": [],
            "user_settings": {},
            "application": {"id": str(self.bot_id), "flags": 0},
            "_trace": ['["fake-discord",{"micros":0}]'],
        }
        self._dispatch("READY", ready)
        for guild in self._guilds.values():
            self._dispatch("GUILD_CREATE", self._guild_payload(guild))

    async def _resume(self, conn: _Conn, data: dict[str, Any]) -> None:
        session = self._session
        if data.get("token") != self.token:
            await self._close(conn, 4004, "Authentication failed.")
            return
        if session is None or data.get("session_id") != session.session_id:
            conn.outbox.put_nowait({"op": OP_INVALID_SESSION, "d": False})
            return
        seq = data.get("seq") or 0
        if session.log and seq < session.log[0]["s"] - 1:  # the gap fell out of the replay buffer
            conn.outbox.put_nowait({"op": OP_INVALID_SESSION, "d": False})
            return
        self.resume_count += 1
        if self._live is not None and self._live is not conn:
            old, self._live = self._live, None
            await self._shutdown_conn(old, 4000)
        conn.session = session
        self._live = conn
        for frame in session.log:
            if frame["s"] > seq:
                conn.outbox.put_nowait(frame)
        self._dispatch("RESUMED", {"_trace": ['["fake-discord",{"micros":0}]']})

    async def _close(self, conn: _Conn, code: int, reason: str) -> None:
        """Close after everything already queued has been sent."""
        conn.outbox.put_nowait(_Close(code, reason))
        if conn.writer is not None:
            await asyncio.wait({conn.writer}, timeout=2.0)

    async def _writer(self, conn: _Conn) -> None:
        try:
            while True:
                item = await conn.outbox.get()
                if isinstance(item, _Close):
                    await conn.ws.close(code=item.code, message=item.reason.encode())
                    return
                text = json.dumps(item, separators=(",", ":"))
                if conn.compressor is not None:
                    data = conn.compressor.compress(text.encode()) + conn.compressor.flush(zlib.Z_SYNC_FLUSH)
                    assert data.endswith(SYNC_FLUSH_SUFFIX)
                    await conn.ws.send_bytes(data)
                else:
                    await conn.ws.send_str(text)
        except (ConnectionError, RuntimeError):
            return  # the socket went away under us

    async def _shutdown_conn(self, conn: _Conn, code: int | None) -> None:
        self._conns.discard(conn)
        if self._live is conn:
            self._live = None
        if conn.writer is not None and not conn.writer.done():
            conn.writer.cancel()
            await asyncio.gather(conn.writer, return_exceptions=True)
        if code is not None and not conn.ws.closed:
            try:
                async with asyncio.timeout(1.0):
                    await conn.ws.close(code=code)
            except (TimeoutError, ConnectionError, RuntimeError):
                if conn.request.transport is not None:
                    conn.request.transport.close()

    # -- REST ------------------------------------------------------------------------------

    def _route_table(self) -> list[_Route]:
        table = [
            ("GET", "/users/@me", self._get_me),
            ("GET", "/oauth2/applications/@me", self._get_application),
            ("GET", "/gateway/bot", self._get_gateway_bot),
            ("GET", "/gateway", self._get_gateway),
            ("POST", "/users/@me/channels", self._create_dm),
            ("GET", "/users/{user_id}", self._get_user),
            ("GET", "/channels/{channel_id}", self._get_channel),
            ("POST", "/channels/{channel_id}/messages", self._create_message),
            ("GET", "/channels/{channel_id}/messages/{message_id}", self._get_message),
            ("PATCH", "/channels/{channel_id}/messages/{message_id}", self._edit_message),
            ("DELETE", "/channels/{channel_id}/messages/{message_id}", self._delete_message),
            ("POST", "/channels/{channel_id}/typing", self._typing),
        ]
        routes = []
        for method, template, handler in table:
            regex = "^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", template) + "$"
            routes.append(_Route(method, template, re.compile(regex), handler))
        return routes

    def _json(
        self, status: int, body: Any, *, bucket: str = "", headers: dict[str, str] | None = None
    ) -> web.Response:
        all_headers = self._ratelimit_headers(bucket)
        if headers:
            all_headers.update(headers)
        if status == 204:
            return web.Response(status=204, headers=all_headers)  # no body, so no Content-Type
        all_headers["Content-Type"] = "application/json"  # exactly: discord.py compares the string
        return web.Response(status=status, body=json.dumps(body).encode(), headers=all_headers)

    def _ratelimit_headers(self, bucket: str) -> dict[str, str]:
        return {
            "X-RateLimit-Limit": "5",
            "X-RateLimit-Remaining": "4",
            "X-RateLimit-Reset": f"{time.time() + 1.0:.3f}",
            "X-RateLimit-Reset-After": "1.000",
            "X-RateLimit-Bucket": hashlib.md5(bucket.encode()).hexdigest()[:16],
        }

    async def _not_found(self, request: web.Request) -> web.Response:
        return self._json(404, {"message": "404: Not Found", "code": 0})

    async def _rest(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["tail"]
        method = request.method.upper()
        for route in self._routes:
            match = route.pattern.match(path)
            if route.method == method and match:
                break
        else:
            return self._json(404, {"message": "404: Not Found", "code": 0})
        key = route_key(method, route.template)
        try:
            body = await _read_body(request, self.upload_limit)
        except ValueError:
            return self._json(400, {"message": "400: Bad Request", "code": 0}, bucket=key)
        except web.HTTPRequestEntityTooLarge:  # a JSON body over aiohttp's client_max_size
            return self._json(413, _too_large().body(), bucket=key)
        record: dict[str, Any] = {
            "method": method,
            "path": path,
            "key": key,
            "json": _recordable(body),
            "at": asyncio.get_running_loop().time(),
        }
        if "_files" in body:
            record["files"] = [
                {"name": f.name, "filename": f.filename, "content_type": f.content_type, "size": f.size}
                for f in body["_files"]
            ]
        self.requests.append(record)
        self._notify()
        try:
            if self._faults[key]:
                kind, retry_after = self._faults[key].popleft()
                record["fault"] = kind
                if kind == "drop":
                    if request.transport is not None:
                        request.transport.close()
                    return web.Response()  # never reaches the client: the connection is gone
                return self._fault(kind, retry_after, key)
            if request.headers.get("Authorization") != f"Bot {self.token}":
                return self._json(401, {"message": "401: Unauthorized", "code": 0}, bucket=key)
            if body.get("_too_large"):
                raise _too_large()
            return await route.handler(request, match.groupdict(), body)
        except DiscordApiError as exc:
            return self._json(exc.status, exc.body(), bucket=key)
        finally:
            self._notify()

    def _fault(self, kind: FaultKind, retry_after: float, bucket: str) -> web.Response:
        if kind == "429":
            body = {"message": "You are being rate limited.", "retry_after": retry_after, "global": False}
            headers = {
                "Retry-After": str(math.ceil(retry_after)),
                "X-RateLimit-Remaining": "0",
                "X-RateLimit-Reset": f"{time.time() + retry_after:.3f}",
                "X-RateLimit-Reset-After": f"{retry_after:.3f}",
                "X-RateLimit-Scope": "user",
                "Via": "1.1 google",
            }
            return self._json(429, body, bucket=bucket, headers=headers)
        if kind == "403":
            return self._json(403, {"message": "Missing Access", "code": 50001}, bucket=bucket)
        reasons = {"500": "Internal Server Error", "502": "Bad Gateway", "503": "Service Unavailable"}
        return self._json(int(kind), {"message": f"{kind}: {reasons[kind]}", "code": 0}, bucket=bucket)

    # -- REST handlers ---------------------------------------------------------------------

    async def _get_me(self, request: web.Request, params: dict[str, str], body: Any) -> web.Response:
        return self._json(200, {**self.bot_user, "verified": True, "mfa_enabled": False})

    async def _get_user(self, request: web.Request, params: dict[str, str], body: Any) -> web.Response:
        user = self._users.get(params["user_id"])
        if user is None:
            raise DiscordApiError(404, 10013, "Unknown User")
        return self._json(200, user)

    async def _get_application(self, request: web.Request, params: dict[str, str], body: Any) -> web.Response:
        owner = self._user_obj(str(self.owner_id))
        return self._json(
            200,
            {
                "id": str(self.bot_id),
                "name": self.bot_user["username"],
                "icon": None,
                "description": "",
                "summary": "",
                "type": None,
                "bot_public": False,
                "bot_require_code_grant": False,
                "verify_key": "0" * 64,
                "flags": 0,
                "owner": owner,
                "team": None,
                "bot": self.bot_user,
                "redirect_uris": [],
                "tags": [],
            },
        )

    async def _get_gateway_bot(self, request: web.Request, params: dict[str, str], body: Any) -> web.Response:
        limit = {"total": 1000, "remaining": 999, "reset_after": 86_400_000, "max_concurrency": 1}
        return self._json(200, {"url": self.gateway_url, "shards": 1, "session_start_limit": limit})

    async def _get_gateway(self, request: web.Request, params: dict[str, str], body: Any) -> web.Response:
        return self._json(200, {"url": self.gateway_url})

    async def _create_dm(self, request: web.Request, params: dict[str, str], body: Any) -> web.Response:
        recipient = (body or {}).get("recipient_id")
        if recipient is None:
            raise _form_error("recipient_id", "BASE_TYPE_REQUIRED", "This field is required")
        if str(recipient) not in self._users:
            raise DiscordApiError(400, 50007, "Cannot send messages to this user")
        return self._json(200, self.dm_channel(recipient))

    async def _get_channel(self, request: web.Request, params: dict[str, str], body: Any) -> web.Response:
        return self._json(200, self._channel_or_404(params["channel_id"]))

    def _channel_or_404(self, channel_id: str) -> dict[str, Any]:
        channel = self._channels.get(channel_id)
        if channel is None:
            raise DiscordApiError(404, 10003, "Unknown Channel")
        return channel

    def _message_or_404(self, channel_id: str, message_id: str) -> dict[str, Any]:
        message = self._messages.get(message_id)
        if message is None or message["channel_id"] != channel_id:
            raise DiscordApiError(404, 10008, "Unknown Message")
        return message

    async def _create_message(
        self, request: web.Request, params: dict[str, str], body: dict[str, Any]
    ) -> web.Response:
        cid = params["channel_id"]
        channel = self._channel_or_404(cid)
        content = body.get("content") or ""
        if not isinstance(content, str):
            content = str(content)
        if len(content) > MAX_CONTENT:
            raise _form_error("content", "BASE_TYPE_MAX_LENGTH", f"Must be {MAX_CONTENT} or fewer in length.")
        files = body.get("_files", [])
        if not content and not body.get("embeds") and not files and not body.get("sticker_ids"):
            raise DiscordApiError(400, 50006, "Cannot send an empty message")
        nonce = body.get("nonce")
        now = time.monotonic()
        if nonce is not None and body.get("enforce_nonce"):
            seen = self._nonces.get((cid, str(nonce)))
            if seen is not None and now - seen[0] < NONCE_WINDOW_S:
                return self._json(200, seen[1], bucket=f"POST {cid}")
        mentions = self._allowed_mentions(content, body.get("allowed_mentions"))
        message = self._message(cid, self.bot_user, content, channel.get("guild_id"), mentions=mentions)
        if nonce is not None:
            message["nonce"] = nonce
        if body.get("embeds"):
            message["embeds"] = body["embeds"]
        message["flags"] = int(body.get("flags") or 0) & SENDABLE_FLAGS
        message["attachments"] = self._uploaded_attachments(cid, files, body.get("attachments"))
        reference = body.get("message_reference")
        if reference:
            self._attach_reply(
                message,
                str(reference.get("message_id")),
                fail_if_missing=reference.get("fail_if_not_exists", True),
            )
        message["_request"] = {
            k: body.get(k)
            for k in (
                "nonce",
                "enforce_nonce",
                "allowed_mentions",
                "message_reference",
                "tts",
                "flags",
                "attachments",
            )
        }
        if nonce is not None:
            self._nonces[(cid, str(nonce))] = (now, message)
        self._store(message)
        self.created.append(message)
        self._dispatch("MESSAGE_CREATE", _public(message))
        return self._json(200, _public(message), bucket=f"POST {cid}")

    def _allowed_mentions(self, content: str, allowed: dict[str, Any] | None) -> list[dict[str, Any]]:
        ids = [uid for uid in dict.fromkeys(_MENTION.findall(content)) if uid in self._users]
        if allowed is not None:
            parse = allowed.get("parse", [])
            users = {str(u) for u in allowed.get("users", [])}
            ids = [uid for uid in ids if "users" in parse or uid in users]
        return [self._users[uid] for uid in ids]

    async def _get_message(self, request: web.Request, params: dict[str, str], body: Any) -> web.Response:
        return self._json(200, _public(self._message_or_404(params["channel_id"], params["message_id"])))

    async def _edit_message(
        self, request: web.Request, params: dict[str, str], body: dict[str, Any]
    ) -> web.Response:
        message = self._message_or_404(params["channel_id"], params["message_id"])
        if message["author"]["id"] != str(self.bot_id):
            raise DiscordApiError(403, 50005, "Cannot edit a message authored by another user")
        if "content" in body:
            content = body["content"] or ""
            if len(content) > MAX_CONTENT:
                raise _form_error(
                    "content", "BASE_TYPE_MAX_LENGTH", f"Must be {MAX_CONTENT} or fewer in length."
                )
            message["content"] = content
            message["mentions"] = self._allowed_mentions(content, body.get("allowed_mentions"))
        if "embeds" in body:
            message["embeds"] = body["embeds"] or []
        parts: list[_FilePart] = body.get("_files", [])
        listed = body.get("attachments")
        if listed is not None or parts:
            # attachments[] lists the ones to keep (by id) plus descriptions of new files[n];
            # without it every existing attachment stays and new files are added.
            kept = message["attachments"]
            if listed is not None:
                keep = {str(a.get("id")) for a in listed if isinstance(a, dict)}
                kept = [a for a in kept if str(a["id"]) in keep]
            message["attachments"] = kept + self._uploaded_attachments(message["channel_id"], parts, listed)
        message["edited_timestamp"] = _iso()
        self.edits.append(
            {
                "channel_id": message["channel_id"],
                "message_id": message["id"],
                "content": body.get("content"),
                "json": _recordable(body),
            }
        )
        self._dispatch("MESSAGE_UPDATE", _public(message))
        return self._json(200, _public(message))

    async def _delete_message(self, request: web.Request, params: dict[str, str], body: Any) -> web.Response:
        message = self._message_or_404(params["channel_id"], params["message_id"])
        self._messages.pop(message["id"])
        self._by_channel[message["channel_id"]].remove(message)
        if message in self.created:
            self.created.remove(message)
        self.deleted.append(message["id"])
        event = {"id": message["id"], "channel_id": message["channel_id"]}
        if "guild_id" in message:
            event["guild_id"] = message["guild_id"]
        self._dispatch("MESSAGE_DELETE", event)
        return self._json(204, None)

    async def _typing(self, request: web.Request, params: dict[str, str], body: Any) -> web.Response:
        self._channel_or_404(params["channel_id"])
        self.typing.append(params["channel_id"])
        return self._json(204, None)


def _public(message: dict[str, Any]) -> dict[str, Any]:
    """The message as Discord sends it: without the fake's own bookkeeping keys."""
    return {k: copy.deepcopy(v) for k, v in message.items() if not k.startswith("_")}


async def _read_body(request: web.Request, upload_limit: int) -> dict[str, Any]:
    """JSON, or multipart with payload_json plus files[n] parts, which land in "_files".

    Once the files together pass upload_limit the rest is read and dropped, not kept, and
    "_too_large" is set: the request is still read to its end, so the client gets the 413.
    """
    if not request.can_read_body:
        return {}
    if request.content_type.startswith("multipart/"):
        body: dict[str, Any] = {}
        files: list[_FilePart] = []
        total = 0
        reader = await request.multipart()
        async for part in reader:
            if not isinstance(part, BodyPartReader):
                continue  # a nested multipart: Discord never sends one
            if part.name == "payload_json":
                payload = json.loads(await part.read())
                if not isinstance(payload, dict):
                    raise ValueError("payload_json is not an object")
                body.update(payload)
                continue
            if not part.filename:
                await part.release()
                continue
            chunks: list[bytes] = []
            size = 0
            while chunk := await part.read_chunk(CDN_CHUNK):
                size += len(chunk)
                if total + size <= upload_limit:
                    chunks.append(chunk)
            total += size
            content_type = part.headers.get("Content-Type", "application/octet-stream")
            files.append(_FilePart(part.name or "", part.filename, content_type, b"".join(chunks), size))
        if total > upload_limit:
            body["_too_large"] = True
            for file in files:
                file.data = b""
        body["_files"] = files
        return body
    raw = await request.read()
    if not raw:
        return {}
    parsed = json.loads(raw)
    if not isinstance(parsed, dict):
        raise ValueError("JSON body is not an object")
    return parsed


def _recordable(body: dict[str, Any]) -> dict[str, Any]:
    """The request's JSON (or payload_json) for the records, without the parsed file parts."""
    return {k: v for k, v in body.items() if k not in ("_files", "_too_large")}


def _discord_filename(filename: str) -> str:
    """Discord stores uploaded names with whitespace turned into underscores."""
    return re.sub(r"\s", "_", filename) or "unknown"


def _content_type(filename: str, sent: str) -> str:
    """Discord goes by the file's name (discord.py sends every part as application/octet-stream)."""
    guessed = mimetypes.guess_type(filename, strict=False)[0]
    if guessed is None:
        guessed = sent.split(";")[0].strip() or "application/octet-stream"
    if guessed.startswith("text/"):
        guessed += "; charset=utf-8"
    return guessed


def _image_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG, GIF or JPEG header; 640x480 for anything else."""
    if data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return int(width), int(height)
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        width, height = struct.unpack("<HH", data[6:10])
        return int(width), int(height)
    if data.startswith(b"\xff\xd8"):
        at = 2
        while at + 9 <= len(data) and data[at] == 0xFF:
            marker, length = data[at + 1], int.from_bytes(data[at + 2 : at + 4], "big")
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                height, width = struct.unpack(">HH", data[at + 5 : at + 9])
                return int(width), int(height)
            at += 2 + length
    return 640, 480


def _waveform(data: bytes, duration_secs: float) -> bytes:
    """A plausible voice-message waveform: one amplitude byte per ~100 ms, at most 256."""
    count = max(1, min(256, round(duration_secs * 10)))
    return (hashlib.sha256(data).digest() * (count // 32 + 1))[:count]
