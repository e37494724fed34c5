"""The Discord adapter: discord.py's client, its gateway events in, sends and edits out."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import re
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import discord
import yarl
from discord.gateway import DiscordWebSocket
from discord.http import Route as DiscordRoute

from adapters.discord import media as discord_media
from bridge.config import Settings
from bridge.config.platforms import DiscordSettings
from bridge.errors import AdapterStartError, DeliveryRefused, IntakeUnavailable
from bridge.events import Attachment, ChatType, Inbound, InboundHandler, Outbound, Route
from bridge.gateway.commands import COMMANDS
from bridge.platform import Adapter
from bridge.retry import GIVE_UP, RETRY, Backoff, Verdict, with_retries
from bridge.text import split_message

log = logging.getLogger(__name__)

TEXT_LIMIT = 2000
SEND_ATTEMPTS = 4
SEND_BACKOFF = Backoff(attempts=SEND_ATTEMPTS, cap=8.0)
READY_TIMEOUT_S = 60.0
# A message the store could not take is offered again for up to a minute before it is given up:
# Discord never delivers an event twice, so this is all the redelivery it gets.
INTAKE_ATTEMPTS = 8
INTAKE_BACKOFF_CAP_S = 15.0
INTAKE_BACKOFF = Backoff(attempts=INTAKE_ATTEMPTS, cap=INTAKE_BACKOFF_CAP_S, total_s=60.0)
_COMMAND_NAMES = frozenset(name for name, _ in COMMANDS)
_CHAT_MESSAGE_TYPES = (discord.MessageType.default, discord.MessageType.reply)


def _send_verdict(exc: BaseException) -> Verdict:
    """A lost connection or a 5xx is retried (discord.py retries 500/502/504 itself; this adds 503)."""
    return RETRY if isinstance(exc, aiohttp.ClientError | discord.DiscordServerError | OSError) else GIVE_UP


def _intake_verdict(exc: BaseException) -> Verdict:
    """The store could not take the message now: offer it again. Anything else is not the store's."""
    return RETRY if isinstance(exc, IntakeUnavailable) else GIVE_UP


def point_discord_at(api_base: str | None, gateway_url: str | None) -> None:
    """The one place that redirects discord.py to another Discord (a test server, a proxy).

    Both are class attributes read when the client logs in and connects, so this runs before login.
    """
    if api_base:
        DiscordRoute.BASE = api_base
    if gateway_url:
        DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(gateway_url)


class DiscordAdapter(Adapter):
    """One bot account over the gateway; everything it sends pings no one."""

    surface = "discord"
    supports_edit = True
    text_limit = TEXT_LIMIT
    # Discord allows 5 edits per 5 s per channel; one a second leaves room for the replies.
    min_edit_interval_s = 1.0
    # A create with a nonce Discord has seen from us in the last minutes returns that message instead
    # of posting again (enforce_nonce), so a chunk cut short by a crash can be sent again safely.
    dedupes_by_nonce = True
    # The answer streams into a draft message, edited at most once a second; the reply then edits it
    # into its first chunk (bridge.gateway.streaming.DraftReply).
    streams_drafts = True
    # The largest file send_file may send (a server without boosts).
    max_upload_bytes = discord_media.MAX_UPLOAD_BYTES

    def __init__(
        self,
        settings: DiscordSettings,
        *,
        client_options: dict[str, Any] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.settings = settings
        # Extra discord.Client keyword arguments (tests shorten guild_ready_timeout).
        self._client_options = client_options or {}
        self._sleep = sleep
        self._handler: InboundHandler | None = None
        self._client: discord.Client | None = None
        self._connection: asyncio.Task[None] | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> DiscordAdapter:
        return cls(settings.discord)

    # ------------------------------------------------------------------ lifecycle

    async def start_sending(self) -> None:
        """Log in for sending only: the REST client, without the gateway (a worker that answers
        chats while another worker holds the gateway connection)."""
        point_discord_at(self.settings.api_base, self.settings.gateway_url)
        intents = discord.Intents.default()
        intents.message_content = True
        client = discord.Client(
            intents=intents, allowed_mentions=discord.AllowedMentions.none(), **self._client_options
        )
        client.on_message = self._on_message  # type: ignore[attr-defined]
        try:
            await client.login(self.settings.token.get_secret_value())
        except discord.LoginFailure:
            await client.close()
            raise AdapterStartError(
                "Discord rejected the bot token. Check [discord] token, or BRIDGE_DISCORD__TOKEN "
                "(Developer Portal → your application → Bot → Reset Token)."
            ) from None
        except (discord.HTTPException, OSError) as exc:
            await client.close()
            raise AdapterStartError(f"Can't reach the Discord API: {exc}") from None
        self._client = client

    async def start(self, handler: InboundHandler) -> None:
        self._handler = handler
        if self._client is None:
            await self.start_sending()
        client = self.client
        # Reconnects and RESUME are discord.py's job; connect() returns only when the client closes.
        self._connection = asyncio.create_task(client.connect(reconnect=True), name="discord-gateway")
        ready = asyncio.create_task(client.wait_until_ready())
        done, _ = await asyncio.wait(
            {ready, self._connection}, timeout=READY_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED
        )
        if ready not in done:
            ready.cancel()
            error = self._connection.exception() if self._connection in done else None
            await self.stop()
            if isinstance(error, discord.PrivilegedIntentsRequired):
                raise AdapterStartError(
                    "Discord refused the message-content intent: enable it in the Developer Portal "
                    "(Bot → Privileged Gateway Intents → Message Content Intent)."
                )
            raise AdapterStartError(f"Discord gateway did not become ready: {error or 'timed out'}")
        assert client.user is not None
        log.info("Discord: %s is connected", client.user)

    async def stop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(connection, 5)

    @property
    def client(self) -> discord.Client:
        if self._client is None:
            raise RuntimeError("the Discord adapter is not started")
        return self._client

    # ------------------------------------------------------------------ inbound

    async def _on_message(self, message: discord.Message) -> None:
        """Hand one gateway message to the core. Discord never delivers an event again, so a store that
        is briefly unavailable is waited out here; a message that can't be handled is logged once."""
        if self._handler is None:
            return
        try:
            inbound = self.normalize(message)
            if inbound is None:
                return
            handler = self._handler
            await with_retries(
                lambda: handler(inbound),
                what=f"Discord: storing message {message.id}",
                log=log,
                classify=_intake_verdict,
                backoff=INTAKE_BACKOFF,
                sleep=self._sleep,
            )
        except Exception:
            log.exception(
                "Discord: message %s in channel %s could not be handled; skipped",
                message.id,
                message.channel.id,
            )

    def normalize(self, message: discord.Message) -> Inbound | None:
        """A Discord message as an Inbound, or None when the bot should not look at it."""
        me = self.client.user
        if me is None or message.author.bot or message.type not in _CHAT_MESSAGE_TYPES:
            return None
        channel = message.channel
        guild_id = parent_id = None
        chat_type: ChatType
        if isinstance(channel, discord.DMChannel):
            chat_type, title = "dm", None
        elif isinstance(channel, discord.Thread):
            chat_type, title, parent_id = "channel", channel.name, str(channel.parent_id)
        elif isinstance(channel, discord.TextChannel | discord.VoiceChannel | discord.StageChannel):
            chat_type, title = "channel", channel.name
        else:
            return None  # group DMs, forums' starter posts handled as threads, unknown kinds
        if message.guild is not None:
            guild_id = str(message.guild.id)
        text = message.content
        attachments = discord_media.attachments_of(message)
        unsupported = None
        if not text.strip() and not attachments:
            if message.stickers:
                unsupported = "sticker"
            else:
                return None  # embeds-only or empty system-ish messages
        mentioned, text = self._addressing(message, text, me.id)
        return Inbound(
            surface=self.surface,
            chat_type=chat_type,
            chat_id=str(channel.id),
            sender_id=str(message.author.id),
            text=text,
            message_id=str(message.id),
            mentioned=chat_type == "dm" or mentioned,
            sender_name=message.author.display_name,
            chat_title=title,
            unsupported=unsupported,
            attachments=attachments,
            guild_id=guild_id,
            parent_id=parent_id,
        )

    def _addressing(self, message: discord.Message, text: str, bot_id: int) -> tuple[bool, str]:
        mention = re.compile(rf"<@!?{bot_id}>")
        mentioned = any(user.id == bot_id for user in message.mentions) or bool(mention.search(text))
        text = re.sub(r"[ \t]{2,}", " ", mention.sub("", text)).strip()
        resolved = message.reference.resolved if message.reference else None
        if isinstance(resolved, discord.Message) and resolved.author.id == bot_id:
            mentioned = True
        command = re.match(r"^/([A-Za-z]+)\b", text)
        if command and command.group(1).lower() in _COMMAND_NAMES:
            mentioned = True
        return mentioned, text

    # ------------------------------------------------------------------ outbound

    def split(self, kind: str, text: str) -> list[str]:
        """The pieces an item is sent as, one Discord message each."""
        return split_message(text, TEXT_LIMIT)

    async def send(self, item: Outbound) -> str | None:
        channel = self.client.get_partial_messageable(int(item.route.chat_id))
        ids: list[int] = []
        # One piece when the core split it already (it stores each chunk as a row of its own).
        for index, chunk in enumerate(self.split(item.kind, item.text)):
            extra: dict[str, Any] = {}
            if index == 0 and item.route.reply_to is not None:
                extra["reference"] = discord.MessageReference(
                    message_id=int(item.route.reply_to), channel_id=channel.id, fail_if_not_exists=False
                )
                extra["mention_author"] = False
            # The stored nonce for the core's chunk, so a resend after a restart is the same create.
            nonce = item.nonce if index == 0 and item.nonce else secrets.token_hex(8)
            sent = await self._send_once(channel, chunk, nonce, extra)
            ids.append(sent.id)
        if not ids:
            return None
        return str(ids[0] if item.kind == "activity" else ids[-1])

    async def _send_once(
        self,
        channel: discord.PartialMessageable,
        chunk: str,
        nonce: str,
        extra: dict[str, Any],
        *,
        file: Callable[[], discord.File] | None = None,
    ) -> discord.Message:
        """Send one chunk, retrying lost connections and 5xx with the same nonce.

        With a nonce and enforce_nonce (discord.py sets it whenever a nonce is given), Discord answers a
        repeated create with the message it already made, so a retry after a request that did arrive
        never posts the chunk twice. discord.py retries 500/502/504 itself (with that same payload);
        this covers dropped connections and 503.
        """

        def attempt() -> Awaitable[discord.Message]:
            if file is not None:
                extra["file"] = file()
            return channel.send(chunk, nonce=nonce, allowed_mentions=discord.AllowedMentions.none(), **extra)

        try:
            return await with_retries(
                attempt,
                what="Discord: send",
                log=log,
                classify=_send_verdict,
                backoff=SEND_BACKOFF,
                # The nonce makes a repeat of a send that did arrive harmless.
                safe_to_resend=True,
                level=logging.INFO,
                sleep=self._sleep,
            )
        except (discord.Forbidden, discord.NotFound) as exc:
            # No access to the channel, DMs closed, the channel deleted: final, and the chat's doing.
            raise DeliveryRefused(str(exc)) from exc

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """An Inbound attachment's bytes from Discord's CDN; MediaError when it can't."""
        return await discord_media.download(self.client, attachment, max_bytes, sleep=self._sleep)

    async def send_file(self, item: Outbound) -> str | None:
        """A file with its caption (a caption past Discord's limit follows as messages of its own)."""
        assert item.file is not None
        channel = self.client.get_partial_messageable(int(item.route.chat_id))
        pieces = self.split("reply", item.text) if item.text else [""]
        data, name = await discord_media.read(item.file), item.file.name
        extra: dict[str, Any] = {}
        if item.route.reply_to is not None:
            extra["reference"] = discord.MessageReference(
                message_id=int(item.route.reply_to), channel_id=channel.id, fail_if_not_exists=False
            )
            extra["mention_author"] = False
        # A File is closed once sent, so each attempt gets its own.
        sent = await self._send_once(
            channel,
            pieces[0],
            item.nonce or secrets.token_hex(8),
            extra,
            file=lambda: discord.File(io.BytesIO(data), filename=name),
        )
        for piece in pieces[1:]:
            sent = await self._send_once(channel, piece, secrets.token_hex(8), {})
        return str(sent.id)

    async def edit(self, route: Route, message_id: str, text: str) -> None:
        channel = self.client.get_partial_messageable(int(route.chat_id))
        text = text if len(text) <= TEXT_LIMIT else "…" + text[-(TEXT_LIMIT - 1) :]
        await channel.get_partial_message(int(message_id)).edit(
            content=text, allowed_mentions=discord.AllowedMentions.none()
        )

    async def typing(self, route: Route) -> None:
        await self.client.get_partial_messageable(int(route.chat_id)).typing()
