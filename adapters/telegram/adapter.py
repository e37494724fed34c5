"""The Telegram surface on python-telegram-bot: DMs, groups and forum topics."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import re
from collections.abc import Awaitable, Callable
from html import unescape
from typing import Any, TypeVar
from urllib.parse import urlparse

from telegram import BotCommand, Message, ReplyParameters, Update
from telegram.constants import ChatAction, ChatType, ParseMode
from telegram.error import (
    BadRequest,
    InvalidToken,
    NetworkError,
    TelegramError,
)

from adapters.telegram import media as telegram_media
from adapters.telegram.format import to_telegram_html
from adapters.telegram.media import attachments_of
from adapters.telegram.retrying import SEND_BACKOFF, classify, refusals
from adapters.telegram.transport import AiohttpRequest
from adapters.telegram.updates import (
    ALLOWED_UPDATES,
    Intake,
    IntakeBot,
    Poller,
    WebhookServer,
    close_quietly,
)
from bridge.config import Settings
from bridge.config.platforms import TelegramSettings
from bridge.errors import AdapterStartError
from bridge.events import Attachment, Inbound, InboundHandler, Outbound, Route
from bridge.gateway.commands import COMMANDS
from bridge.platform import Adapter
from bridge.retry import with_retries
from bridge.serving import ConnectionLimits
from bridge.text import split_message, utf16_len

log = logging.getLogger(__name__)

TEXT_LIMIT = 4096
GENERAL_TOPIC = 1
# Connections for sends and edits; PTB's Application used as many. aiohttp's pool takes an idle one
# without looking at the others, so a large pool costs nothing per request.
SEND_CONNECTIONS = 256
_MEDIA_KINDS = (
    "photo",
    "sticker",
    "voice",
    "video",
    "video_note",
    "audio",
    "document",
    "animation",
    "location",
    "venue",
    "contact",
    "poll",
    "dice",
)
T = TypeVar("T")


def webhook_secret_of(token: str) -> str:
    """The webhook's secret where [telegram] webhook_secret is not set: derived from the bot token, so
    every worker of one bot registers the same one. (Each drew its own at random, Telegram kept the
    last registered, and the other workers answered 403: 24 of 40 updates refused.) An HMAC, so it
    tells nothing of the token; hex, within Telegram's A-Z, a-z, 0-9, _, - and 1-256 characters."""
    return hmac.new(token.encode(), b"bridge: telegram webhook secret", hashlib.sha256).hexdigest()


class TelegramAdapter(Adapter):
    """One bot: long polling (or a webhook) in, Bot API calls out."""

    surface = "telegram"
    supports_edit = True
    text_limit = TEXT_LIMIT
    # Telegram allows about one message or edit a second per chat; activity edits are coalesced to that.
    min_edit_interval_s = 1.0
    # The answer streams into a draft message, edited at most that often; the reply then edits it
    # into its first chunk, formatted (bridge.gateway.streaming.DraftReply).
    streams_drafts = True
    # Set by the core where several workers listen at once (sharing a database): they share the port.
    shared_intake = False
    # The largest file and photo send_file may send (the Bot API's limits for bots).
    max_upload_bytes = telegram_media.MAX_UPLOAD_BYTES
    max_photo_bytes = telegram_media.MAX_PHOTO_BYTES

    def __init__(
        self, settings: TelegramSettings, *, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    ):
        self.settings = settings
        self._sleep = sleep
        self._bot: IntakeBot | None = None
        self._files = telegram_media.FileClient()
        self._poller: Poller | None = None
        self._webhook: WebhookServer | None = None
        self._handler: InboundHandler | None = None
        # Set by the core before start: its routes, served by the webhook's server (adapters/base.py).
        self.http_routes: list[tuple[str, str, Any]] = []
        self.bot_id: int | None = None
        self.username: str = ""

    @classmethod
    def from_settings(cls, settings: Settings) -> TelegramAdapter:
        return cls(settings.telegram)

    # ------------------------------------------------------------------ lifecycle

    async def start_sending(self) -> None:
        """Connect for sending only: the Bot API client, without polling or a webhook (a worker that
        answers chats while another worker polls)."""
        if self._bot is not None:
            raise RuntimeError("this Telegram adapter is already connected")
        cfg = self.settings
        bot = IntakeBot(
            cfg.token.get_secret_value(),
            base_url=f"{cfg.api_base}/bot",
            base_file_url=f"{cfg.api_base}/file/bot",
            request=AiohttpRequest(connections=SEND_CONNECTIONS),
            # A long poll is answered within poll_timeout_s; the extra 10 s covers a slow network.
            # Two connections, so stop()'s final confirmation never waits for an abandoned poll's.
            get_updates_request=AiohttpRequest(connections=2, read_timeout=cfg.poll_timeout_s + 10),
        )
        try:
            await bot.initialize()  # getMe
        except InvalidToken:
            await close_quietly(bot)
            raise AdapterStartError(
                "Telegram rejected the bot token (Unauthorized). Check [telegram] token, or "
                "BRIDGE_TELEGRAM__TOKEN; @BotFather's /token shows it."
            ) from None
        except NetworkError as exc:
            await close_quietly(bot)
            raise AdapterStartError(f"Can't reach the Telegram Bot API at {cfg.api_base}: {exc}") from None
        self._bot = bot
        self.bot_id, self.username = bot.id, (bot.username or "").lower()
        try:
            await bot.set_my_commands([BotCommand(name, text) for name, text in COMMANDS])
        except TelegramError as exc:  # the menu is a nicety; the bot works without it
            log.warning("Telegram: setMyCommands failed: %s", exc)

    async def start(self, handler: InboundHandler) -> None:
        if self._poller is not None or self._webhook is not None:
            raise RuntimeError("this Telegram adapter is already running")
        self._handler = handler
        cfg = self.settings
        if self._bot is None:
            await self.start_sending()
        bot = self._bot
        assert bot is not None
        intake = Intake(self._take)
        try:
            if cfg.mode == "webhook":
                await self._start_webhook(bot, intake)
            else:
                self._poller = Poller(bot, intake, timeout_s=cfg.poll_timeout_s, sleep=self._sleep)
                self._poller.start()
        except BaseException:
            await self.stop()
            raise
        log.info("Telegram: @%s is listening (%s)", self.username, cfg.mode)

    async def _start_webhook(self, bot: IntakeBot, intake: Intake) -> None:
        cfg = self.settings
        assert cfg.webhook_url is not None
        secret = cfg.webhook_secret.get_secret_value() or webhook_secret_of(cfg.token.get_secret_value())
        path = urlparse(cfg.webhook_url).path or "/"
        server = WebhookServer(
            intake,
            listen=cfg.listen,
            port=cfg.port,
            path=path,
            secret=secret,
            reuse_port=self.shared_intake,
            routes=self.http_routes,
            limits=ConnectionLimits(cfg.webhook_max_connections, cfg.webhook_header_timeout_s),
        )
        try:
            await server.start()
        except OSError as exc:
            raise AdapterStartError(
                f"Can't listen on {cfg.listen}:{cfg.port} for the Telegram webhook ({exc}). Set [telegram] "
                "listen and port to a free address."
            ) from None
        self._webhook = server
        # The server is up first, so the updates Telegram sends at once find it listening.
        try:
            await bot.set_webhook(cfg.webhook_url, secret_token=secret, allowed_updates=ALLOWED_UPDATES)
        except TelegramError as exc:
            raise AdapterStartError(f"Telegram refused the webhook {cfg.webhook_url}: {exc}") from None

    async def stop(self) -> None:
        """Stop listening and close the Bot API client; returns within seconds and never raises."""
        poller, self._poller = self._poller, None
        webhook, self._webhook = self._webhook, None
        bot, self._bot = self._bot, None
        if poller is not None:
            await poller.stop()
        if webhook is not None:
            await webhook.stop()
        if bot is not None:
            await close_quietly(bot)
        await self._files.aclose()

    @property
    def bot(self) -> IntakeBot:
        if self._bot is None:
            raise RuntimeError("the Telegram adapter is not started")
        return self._bot

    # ------------------------------------------------------------------ inbound

    async def _take(self, raw: Any) -> None:
        """Parse one raw update, normalize it and hand it to the core; what the core raises goes up."""
        # PTB parses each update on its own here: one it can't parse fails alone (a poison update).
        update = Update.de_json(raw, self.bot)
        message = update.message
        if message is None or self._handler is None:
            return
        inbound = self.normalize(message)
        if inbound is not None:
            # The handler returns once the message is stored; a future it may return is the run's
            # completion, which intake must not wait for.
            await self._handler(inbound)

    def normalize(self, message: Message) -> Inbound | None:
        """A Telegram message as an Inbound, or None when the bot should not look at it."""
        user, chat = message.from_user, message.chat
        if user is None or user.is_bot or chat.type == ChatType.CHANNEL:
            return None
        text = message.text or message.caption or ""
        attachments = attachments_of(message)
        unsupported = None
        if not text and not attachments:
            unsupported = next((kind for kind in _MEDIA_KINDS if getattr(message, kind, None)), None)
            if unsupported is None:
                return None  # service messages: joins, pins, topic edits
        is_dm = chat.type == ChatType.PRIVATE
        mentioned, text, elsewhere = self._addressing(message, text)
        if elsewhere:
            return None
        thread = message.message_thread_id if message.is_topic_message else None
        return Inbound(
            surface=self.surface,
            chat_type="dm" if is_dm else "group",
            chat_id=str(chat.id),
            sender_id=str(user.id),
            text=text,
            message_id=str(message.message_id),
            # The General topic is the group itself: never keyed or addressed as thread 1.
            thread_id=str(thread) if thread not in (None, GENERAL_TOPIC) else None,
            mentioned=is_dm or mentioned,
            sender_name=user.full_name,
            chat_title=chat.title,
            unsupported=unsupported,
            attachments=attachments,
        )

    def _addressing(self, message: Message, text: str) -> tuple[bool, str, bool]:
        """(addressed to this bot?, text without the bot's mention, addressed to another bot?)."""
        mentioned = False
        command = re.match(r"^/([A-Za-z0-9_]+)(?:@([A-Za-z0-9_]+))?", text)
        if command:
            target = (command.group(2) or "").lower()
            if target and target != self.username:
                return False, text, True
            # A command is addressed to the bot unless it names another bot.
            mentioned = True
            text = f"/{command.group(1)}{text[command.end() :]}"
        if self.username:
            pattern = re.compile(rf"(?<![\w@])@{re.escape(self.username)}\b", re.IGNORECASE)
            if pattern.search(text):
                mentioned = True
                text = re.sub(r"[ \t]{2,}", " ", pattern.sub("", text)).strip()
        replied = message.reply_to_message
        # In forum topics every message "replies" to the topic's first message; that is no reply.
        if (
            replied is not None
            and replied.from_user is not None
            and replied.from_user.id == self.bot_id
            and replied.message_id != message.message_thread_id
        ):
            mentioned = True
        return mentioned, text, False

    # ------------------------------------------------------------------ outbound

    async def send(self, item: Outbound) -> str | None:
        chat_id = int(item.route.chat_id)
        params = self._params(item.route)
        ids: list[int] = []
        # A piece from split() is one message; a longer text is still split here, as a safety net.
        for index, (html, plain) in enumerate(self._chunks(item.kind, item.text)):
            reply_to = item.route.reply_to if index == 0 else None
            with refusals():
                ids.append(await self._send_chunk(chat_id, html, plain, reply_to, params))
        if not ids:
            return None
        # Activity is edited later through its first message; a reply is known by its last.
        return str(ids[0] if item.kind == "activity" else ids[-1])

    def split(self, kind: str, text: str) -> list[str]:
        """The plain-text pieces an outbound item is sent as: send() sends each as one message."""
        return [plain for _, plain in self._chunks(kind, text)]

    def _chunks(self, kind: str, text: str) -> list[tuple[str | None, str]]:
        """(html or None, plain text) per message; only replies carry Markdown."""
        pieces = split_message(text, TEXT_LIMIT, utf16_len)
        if kind != "reply":
            return [(None, piece) for piece in pieces]
        chunks: list[tuple[str | None, str]] = []
        for piece in pieces:
            chunks.extend(self._rendered(piece, TEXT_LIMIT))
        return chunks

    def _rendered(self, piece: str, limit: int) -> list[tuple[str | None, str]]:
        html = to_telegram_html(piece)
        if not html.strip():
            return [(None, piece)]
        if utf16_len(_visible(html)) <= TEXT_LIMIT:
            return [(html, piece)]
        if limit < 1024:
            # Still too long rendered (a table padded very wide): the piece goes as the plain text,
            # which fits. This also keeps split() stable: chunking a piece again yields that piece.
            return [(None, piece)]
        # Rendering made the text longer (tables are padded): split that piece finer.
        out: list[tuple[str | None, str]] = []
        for smaller in split_message(piece, limit // 2, utf16_len):
            out.extend(self._rendered(smaller, limit // 2))
        return out

    def _params(self, route: Route) -> dict[str, Any]:
        # Plain JSON rather than PTB's objects: the sends (_send_chunk) go as raw Bot API calls.
        params: dict[str, Any] = {"link_preview_options": {"is_disabled": True}}
        if route.thread_id is not None and int(route.thread_id) != GENERAL_TOPIC:
            params["message_thread_id"] = int(route.thread_id)
        return params

    async def _send_chunk(
        self, chat_id: int, html: str | None, plain: str, reply_to: str | None, params: dict[str, Any]
    ) -> int:
        """One message sent; its id."""
        data = {"chat_id": chat_id, **params}
        if reply_to is not None:
            data["reply_parameters"] = {"message_id": int(reply_to), "allow_sending_without_reply": True}
        if html is not None:
            try:
                return await self._send_message({**data, "text": html, "parse_mode": ParseMode.HTML})
            except BadRequest as exc:
                if "parse entities" not in str(exc).lower():
                    raise
                # Telegram refused the markup, so nothing was sent: the same chunk goes as plain text.
                log.warning("Telegram refused the HTML of a reply (%s); sending it as plain text", exc)
        return await self._send_message({**data, "text": plain})

    async def _send_message(self, data: dict[str, Any]) -> int:
        sent = await self._retrying(
            lambda: self.bot.call_raw("sendMessage", data), what="send", idempotent=False
        )
        return int(sent["message_id"])

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """An Inbound attachment's bytes (getFile, then the file itself); MediaError when it can't."""
        return await telegram_media.download(
            self.bot,
            self._files,
            attachment,
            max_bytes,
            lambda call: self._retrying(call, what="download", idempotent=True),
        )

    async def send_file(self, item: Outbound) -> str | None:
        """A file with its caption; a caption too long for Telegram follows as a message of its own."""
        assert item.file is not None
        file, chat_id, params = item.file, int(item.route.chat_id), self._params(item.route)
        if item.route.reply_to is not None:
            params["reply_parameters"] = ReplyParameters(
                message_id=int(item.route.reply_to), allow_sending_without_reply=True
            )
        fits = utf16_len(item.text) <= telegram_media.CAPTION_LIMIT
        with refusals():
            sent = await self._retrying(
                lambda: telegram_media.send_file(self.bot, chat_id, file, item.text if fits else "", params),
                what="send a file",
                idempotent=False,
            )
            sent_id = sent.message_id
            if not fits:
                params.pop("reply_parameters", None)
                for html, plain in self._chunks("notice", item.text):
                    sent_id = await self._send_chunk(chat_id, html, plain, None, params)
        return str(sent_id)

    async def edit_reply(self, route: Route, message_id: str, text: str) -> None:
        """Turn a streamed draft into the reply's first chunk: its Markdown rendered, as send() does."""
        html, plain = self._chunks("reply", text)[0]
        target = {"chat_id": int(route.chat_id), "message_id": int(message_id)}

        async def call() -> None:
            try:
                if html is not None:
                    try:
                        await self.bot.call_raw(
                            "editMessageText", {**target, "text": html, "parse_mode": ParseMode.HTML}
                        )
                        return
                    except BadRequest as exc:
                        if "parse entities" not in str(exc).lower():
                            raise
                        log.warning("Telegram refused the HTML of a reply (%s); editing as plain text", exc)
                await self.bot.call_raw("editMessageText", {**target, "text": plain})
            except BadRequest as exc:
                if "not modified" not in str(exc).lower():
                    raise

        with refusals():
            await self._retrying(call, what="edit", idempotent=True)

    async def edit(self, route: Route, message_id: str, text: str) -> None:
        data = {"chat_id": int(route.chat_id), "message_id": int(message_id), "text": _tail(text, TEXT_LIMIT)}

        async def call() -> None:
            try:
                await self.bot.call_raw("editMessageText", data)
            except BadRequest as exc:
                if "not modified" not in str(exc).lower():
                    raise

        with refusals():
            await self._retrying(call, what="edit", idempotent=True)

    async def typing(self, route: Route) -> None:
        params = self._params(route)
        params.pop("link_preview_options")
        # Not retried: it is shown once, a second into a slow answer (bridge/gateway/delivery.py), and
        # a back-off here would only hold a connection for an indicator that has expired by then.
        await self.bot.send_chat_action(int(route.chat_id), ChatAction.TYPING, **params)

    async def _retrying(self, call: Callable[[], Awaitable[T]], *, what: str, idempotent: bool) -> T:
        """Honour RetryAfter; retry network errors and 5xx; repeat what may have arrived if idempotent."""
        return await with_retries(
            call,
            what=f"Telegram: {what}",
            log=log,
            classify=classify,
            backoff=SEND_BACKOFF,
            safe_to_resend=idempotent,
            level=logging.INFO,
            sleep=self._sleep,
        )


def _visible(markup: str) -> str:
    """The text Telegram will show for this HTML: tags dropped, entities unescaped."""
    return unescape(re.sub(r"<[^>]+>", "", markup))


def _tail(text: str, limit: int) -> str:
    """The end of a long activity log, which is the part worth seeing."""
    if utf16_len(text) <= limit:
        return text
    lines = text.splitlines()
    while lines and utf16_len("…\n" + "\n".join(lines)) > limit:
        lines.pop(0)
    return "…\n" + "\n".join(lines)
