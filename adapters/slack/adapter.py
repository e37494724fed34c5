"""The Slack surface on slack_sdk: DMs, channels and threads, over Socket Mode (no public URL).

slack_sdk rather than slack-bolt: Bolt's app acknowledges an event before its listener runs (unless
told to process it first, and then a failing listener still gets it acknowledged as handled), while
Bridge must store a message before Slack is told it arrived, and leave it unacknowledged when the
store can't take it, so that Slack delivers it again. Bolt's routing and middleware add nothing
for one kind of event. So the adapter uses Bolt's own parts underneath: slack_sdk's AsyncWebClient
for the Web API and its aiohttp SocketModeClient for the connection (adapters/slack/socket.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack import media as slack_media
from adapters.slack.events import Identity, Remembered, normalize
from adapters.slack.format import escape, to_mrkdwn
from adapters.slack.retrying import SEND_BACKOFF, classify, describe, error_code, refusals
from adapters.slack.socket import PING_INTERVAL_S, SocketIntake
from bridge.config import Settings
from bridge.config.platforms import SlackSettings
from bridge.errors import AdapterStartError
from bridge.events import Attachment, InboundHandler, Outbound, Route
from bridge.platform import Adapter
from bridge.retry import with_retries
from bridge.text import split_message

log = logging.getLogger(__name__)
T = TypeVar("T")

# Slack cuts a message's text at 40,000 characters, but asks for at most 4,000 ("for best results"):
# longer ones are folded behind "Show more" and are slow to read on a phone. Counted as sent, with
# `&`, `<` and `>` escaped, so what Slack receives is within it.
TEXT_LIMIT = 4000
# Below this a reply whose mrkdwn grew past the limit (a wide table) goes as escaped plain text.
_SMALLEST_RENDERED_SPLIT = 1024
# A Web API call: a connection within 10 s, then no read waiting longer than this for the answer.
READ_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 10.0
# Connections for sends and edits.
CONNECTIONS = 100


def _escaped_len(text: str) -> int:
    return len(escape(text))


class SlackAdapter(Adapter):
    """One Slack app: events in over Socket Mode, Web API calls out; what it sends pings no one."""

    surface = "slack"
    supports_edit = True
    text_limit = TEXT_LIMIT
    # chat.update is rate-limited per app and workspace (Tier 3, about 50 a minute): one edit every
    # 1.5 s keeps a streamed answer and its tool activity under it, and a 429 waits its Retry-After.
    min_edit_interval_s = 1.5
    # The answer streams into a draft message updated as it grows; the reply then edits it into its
    # first chunk, as mrkdwn (bridge.gateway.streaming.DraftReply).
    streams_drafts = True
    # chat.postMessage takes no idempotency key: a post cut short may or may not have arrived, and
    # [delivery] resend_uncertain decides (dedupes_by_nonce stays False).

    def __init__(
        self,
        settings: SlackSettings,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        read_timeout_s: float = READ_TIMEOUT_S,
        ping_interval_s: float = PING_INTERVAL_S,
    ) -> None:
        self.settings = settings
        self._sleep = sleep
        self._read_timeout_s = read_timeout_s
        self._ping_interval_s = ping_interval_s
        self._session: aiohttp.ClientSession | None = None
        self._web: AsyncWebClient | None = None
        self._intake: SocketIntake | None = None
        self._handler: InboundHandler | None = None
        self._threads = Remembered()
        self._handed_over = Remembered()
        self.me: Identity | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> SlackAdapter:
        return cls(settings.slack)

    # ------------------------------------------------------------------ lifecycle

    async def start_sending(self) -> None:
        """Connect for sending only: the Web API client, checked with auth.test, without Socket Mode
        (a worker that answers chats while another worker holds the connection)."""
        if self._web is not None:
            raise RuntimeError("this Slack adapter is already connected")
        cfg = self.settings
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=CONNECT_TIMEOUT_S, sock_read=self._read_timeout_s
        )
        session = aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=CONNECTIONS))
        web = AsyncWebClient(
            token=cfg.bot_token.get_secret_value(),
            base_url=f"{cfg.api_base}/",
            session=session,
            # Retries are bridge.retry's (this module's _retrying): the SDK's own would repeat a post
            # whose connection dropped, which may show it twice.
            retry_handlers=[],
        )
        try:
            auth = await web.auth_test()
        except SlackApiError as exc:
            await session.close()
            code = error_code(exc)
            raise AdapterStartError(
                f"Slack rejected the bot token ({code}). Check [slack] bot_token, or "
                "BRIDGE_SLACK__BOT_TOKEN: OAuth & Permissions → Bot User OAuth Token (xoxb-…), after "
                "installing the app."
            ) from None
        except (OSError, TimeoutError) as exc:
            await session.close()
            raise AdapterStartError(f"Can't reach the Slack API at {cfg.api_base}: {describe(exc)}") from None
        self.me = Identity(
            user_id=str(auth.get("user_id") or ""),
            bot_id=str(auth.get("bot_id") or ""),
            team_id=str(auth.get("team_id") or ""),
            name=str(auth.get("user") or ""),
        )
        self._session, self._web = session, web

    async def start(self, handler: InboundHandler) -> None:
        if self._intake is not None:
            raise RuntimeError("this Slack adapter is already running")
        self._handler = handler
        if self._web is None:
            await self.start_sending()
        intake = SocketIntake(
            self.web,
            self.settings.app_token.get_secret_value(),
            self._take,
            sleep=self._sleep,
            ping_interval_s=self._ping_interval_s,
        )
        try:
            await intake.start()
        except BaseException:
            await self.stop()
            raise
        self._intake = intake
        assert self.me is not None
        log.info("Slack: @%s is connected (Socket Mode)", self.me.name)

    async def stop(self) -> None:
        """Close the Socket Mode connection and the Web API client; within seconds, never raising."""
        intake, self._intake = self._intake, None
        session, self._session = self._session, None
        self._web = None
        if intake is not None:
            await intake.stop()
        if session is not None:
            try:
                await session.close()
            except Exception as exc:  # stopping must never fail
                log.info("Slack: closing the Web API client: %r", exc)

    @property
    def web(self) -> AsyncWebClient:
        if self._web is None:
            raise RuntimeError("the Slack adapter is not started")
        return self._web

    # ------------------------------------------------------------------ inbound

    async def _take(self, event: Any) -> None:
        """Normalize one event and hand it to the core; what the core raises goes up (socket.py)."""
        if self._handler is None or self.me is None:
            return
        inbound = normalize(event, self.me, self._threads)
        if inbound is None:
            return
        seen = (inbound.chat_id, inbound.message_id or "")
        if seen in self._handed_over:
            # The same message as a mention after its message event, or delivered again.
            return
        # The handler returns once the message is stored; a future it may return is the run's.
        await self._handler(inbound)
        self._handed_over.add(*seen)

    # ------------------------------------------------------------------ outbound

    def split(self, kind: str, text: str) -> list[str]:
        """The pieces an outbound item is sent as: send() sends each as one message."""
        return [source for _, source in self._chunks(kind, text)]

    def _chunks(self, kind: str, text: str) -> list[tuple[str, str]]:
        """(what is sent, its Markdown source) per message; only replies carry Markdown."""
        pieces = split_message(text, TEXT_LIMIT, _escaped_len)
        if kind != "reply":
            return [(escape(piece), piece) for piece in pieces]
        chunks: list[tuple[str, str]] = []
        for piece in pieces:
            chunks.extend(self._rendered(piece, TEXT_LIMIT))
        return chunks

    def _rendered(self, piece: str, limit: int) -> list[tuple[str, str]]:
        rendered = to_mrkdwn(piece)
        if not rendered.strip():
            return [(escape(piece), piece)]
        if len(rendered) <= TEXT_LIMIT:
            return [(rendered, piece)]
        if limit < _SMALLEST_RENDERED_SPLIT:
            # Still too long rendered: the piece goes as escaped plain text, which fits. This also
            # keeps split() stable: chunking a piece again yields that piece.
            return [(escape(piece), piece)]
        # Rendering made the text longer (tables are padded, lists indented): split it finer.
        out: list[tuple[str, str]] = []
        for smaller in split_message(piece, limit // 2, _escaped_len):
            out.extend(self._rendered(smaller, limit // 2))
        return out

    async def send(self, item: Outbound) -> str | None:
        ids = [await self._post(item.route, text) for text, _ in self._chunks(item.kind, item.text)]
        if not ids:
            return None
        # Activity is updated later through its first message; a reply is known by its last.
        return ids[0] if item.kind == "activity" else ids[-1]

    async def _post(self, route: Route, text: str) -> str:
        """One message, in its thread where it has one. Never repeated once it may have reached Slack."""
        args: dict[str, Any] = {
            "channel": route.chat_id,
            "text": text,
            # Links stay links without a preview card; names written as @word stay words.
            "unfurl_links": False,
            "unfurl_media": False,
            "link_names": False,
        }
        if route.thread_id is not None:
            args["thread_ts"] = route.thread_id
        with refusals("chat.postMessage"):
            response = await self._retrying(
                lambda: self.web.chat_postMessage(**args), what="chat.postMessage", idempotent=False
            )
        if route.thread_id is not None:
            self._threads.add(route.chat_id, route.thread_id)
        return str(response["ts"])

    async def edit(self, route: Route, message_id: str, text: str) -> None:
        await self._update(route, message_id, escape(_tail(text, TEXT_LIMIT)))

    async def edit_reply(self, route: Route, message_id: str, text: str) -> None:
        """Turn a streamed draft into the reply's first chunk, as mrkdwn, as send() renders it."""
        chunks = self._chunks("reply", text)
        if chunks:
            await self._update(route, message_id, chunks[0][0])

    async def _update(self, route: Route, ts: str, text: str) -> None:
        # An update sets the text to what it is anyway, so repeating one is harmless.
        with refusals("chat.update", posts=False):
            await self._retrying(
                lambda: self.web.chat_update(channel=route.chat_id, ts=ts, text=text, link_names=False),
                what="chat.update",
                idempotent=True,
            )

    async def send_file(self, item: Outbound) -> str | None:
        """A file with its caption (files_upload_v2); a caption past the limit follows as messages."""
        assert item.file is not None
        file, route = item.file, item.route
        data = await slack_media.read(file)
        pieces = [text for text, _ in self._chunks("notice", item.text)] if item.text else []
        args: dict[str, Any] = {
            "channel": route.chat_id,
            "file": data,
            "filename": file.name,
            "title": file.name,
        }
        if pieces:
            args["initial_comment"] = pieces[0]
        if route.thread_id is not None:
            args["thread_ts"] = route.thread_id
        # The upload is shared by its last call (files.completeUploadExternal), a post like any other.
        with refusals("files.completeUploadExternal"):
            response = await self._retrying(
                lambda: self.web.files_upload_v2(**args), what="files_upload_v2", idempotent=False
            )
        sent: str | None = None
        uploaded = response.get("file")
        if isinstance(uploaded, dict) and uploaded.get("id"):
            sent = str(uploaded["id"])
        for piece in pieces[1:]:
            sent = await self._post(route, piece)
        return sent

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """An Inbound file's bytes from its url_private, with the bot token; MediaError when it can't."""
        if self._session is None:
            raise RuntimeError("the Slack adapter is not started")
        token = self.settings.bot_token.get_secret_value()
        return await slack_media.download(self._session, token, attachment, max_bytes, sleep=self._sleep)

    async def _retrying(self, call: Callable[[], Awaitable[T]], *, what: str, idempotent: bool) -> T:
        """Honour 429's Retry-After; retry 5xx and the network; repeat what may have arrived if idempotent."""
        return await with_retries(
            call,
            what=f"Slack: {what}",
            log=log,
            classify=classify,
            backoff=SEND_BACKOFF,
            safe_to_resend=idempotent,
            describe=describe,
            level=logging.INFO,
            sleep=self._sleep,
        )


def _tail(text: str, limit: int) -> str:
    """The end of a long activity log, which is the part worth seeing, within the limit once escaped."""
    if _escaped_len(text) <= limit:
        return text
    lines = text.splitlines()
    while len(lines) > 1 and _escaped_len("…\n" + "\n".join(lines)) > limit:
        lines.pop(0)
    tail = "…\n" + "\n".join(lines)
    while _escaped_len(tail) > limit:
        tail = "…" + tail[len(tail) // 2 :]
    return tail
