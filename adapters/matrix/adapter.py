"""The Matrix surface on matrix-nio: direct rooms, rooms and threads, listening with /sync.

matrix-nio rather than mautrix: a plain asyncio client of the client-server API on aiohttp (which
Bridge has already), with the rooms' state kept from /sync and nothing else around it; mautrix's
client is built for bridges and appservices, its state store and dispatch would be a second
framework beside the core's. End-to-end encryption would need nio's libolm extra; Bridge does not
use it (see docs/matrix.md): an encrypted room is told, once an hour, that the bot can't read it.

Once: every message is sent with PUT /rooms/{room}/send/{type}/{txnId}, the transaction id being the
outbox row's nonce, kept across restarts. The homeserver answers a repeat from the same device with
the event it made the first time, so a row resent after a crash shows once (`dedupes_by_nonce`).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import aiohttp
from nio import AsyncClient, AsyncClientConfig

from adapters.matrix import media as matrix_media
from adapters.matrix.events import Identity, Remembered
from adapters.matrix.format import text_content
from adapters.matrix.listening import Listener
from adapters.matrix.retrying import SEND_BACKOFF, MatrixError, checked, classify, describe, refusals
from bridge.config import Settings
from bridge.config.platforms import MatrixSettings
from bridge.errors import AdapterStartError
from bridge.events import Attachment, InboundHandler, Outbound, Route
from bridge.platform import Adapter
from bridge.retry import with_retries
from bridge.text import split_message

log = logging.getLogger(__name__)
T = TypeVar("T")

# A Matrix event may hold 64 KiB in all (body, HTML and envelope). A chunk of 12,000 characters of
# Markdown stays under it with its HTML even in a script of 3-byte characters; a reply whose HTML
# still grew past CONTENT_LIMIT (a wide table, much escaping) is split finer.
TEXT_LIMIT = 12_000
CONTENT_LIMIT = 48_000
_SMALLEST_RENDERED_SPLIT = 1024
REQUEST_TIMEOUT_S = 30.0
TYPING_TIMEOUT_MS = 10_000


def _utf8_len(text: str) -> int:
    return len(text.encode())


class MatrixAdapter(Adapter):
    """One bot account: events in over /sync, sends out with transaction ids; it pings no one."""

    surface = "matrix"
    supports_edit = True
    text_limit = TEXT_LIMIT
    # Edits are events like any other, and homeservers limit a user's events per second (Synapse:
    # rc_message, 0.2/s with bursts of 10 by default): one edit a second, and a 429 waits its time.
    min_edit_interval_s = 1.0
    # The answer streams into a draft message edited as it grows; the reply then edits it into its
    # first chunk, as HTML (bridge.gateway.streaming.DraftReply).
    streams_drafts = True
    # A send repeated with its transaction id is dropped by the homeserver (see the module's note).
    dedupes_by_nonce = True

    def __init__(
        self,
        settings: MatrixSettings,
        owners: Iterable[str] = (),
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        sync_timeout_s: float = 30.0,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        self.settings = settings
        # Owners as `owners` writes them (matrix:@ann:example.org): a direct invite from one is joined.
        self.owners = frozenset(
            owner.removeprefix("matrix:") for owner in owners if owner.startswith("matrix:")
        )
        self._sleep = sleep
        self._sync_timeout_s = sync_timeout_s
        self._request_timeout_s = request_timeout_s
        self._client: AsyncClient | None = None
        self._listener: Listener | None = None
        # Events the bot sent: a reply to one is addressed to it; those sent as notices are edited
        # as notices. Threads it has written in: a message there needs no mention.
        self._mine = Remembered()
        self._notices = Remembered()
        self._threads = Remembered()
        self.me: Identity | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> MatrixAdapter:
        return cls(settings.matrix, settings.owners)

    # ------------------------------------------------------------------ lifecycle

    async def start_sending(self) -> None:
        """Log in for sending only, without /sync (a worker that answers chats while another worker
        listens)."""
        if self._client is not None:
            raise RuntimeError("this Matrix adapter is already connected")
        cfg = self.settings
        client = AsyncClient(
            cfg.homeserver,
            cfg.user_id,
            device_id=cfg.device_id or None,
            config=AsyncClientConfig(
                # Retries are bridge.retry's: nio's own would wait out every 429 and timeout forever.
                max_limit_exceeded=0,
                max_timeouts=0,
                request_timeout=self._request_timeout_s,
                encryption_enabled=False,
                store_sync_tokens=False,
            ),
        )
        # No proxy variables: the homeserver is asked directly, as the other adapters' APIs are.
        client.client_session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10.0), trust_env=False
        )
        try:
            await self._log_in(client)
            name = checked(await client.get_displayname(cfg.user_id), "profile").displayname
        except AdapterStartError:
            await client.close()
            raise
        except MatrixError as exc:
            await client.close()
            raise AdapterStartError(
                f"The Matrix homeserver refused the bot's profile: {describe(exc)}"
            ) from None
        except (OSError, TimeoutError, aiohttp.ClientError) as exc:
            await client.close()
            raise AdapterStartError(
                f"Can't reach the Matrix homeserver at {cfg.homeserver} (check [matrix] homeserver): "
                f"{describe(exc)}"
            ) from None
        self.me = Identity(cfg.user_id, name if isinstance(name, str) and name else None)
        self._client = client

    async def _log_in(self, client: AsyncClient) -> None:
        cfg = self.settings
        token = cfg.access_token.get_secret_value()
        if token:
            client.user_id, client.access_token = cfg.user_id, token
            try:
                who = checked(await client.whoami(), "whoami")
            except MatrixError as exc:
                raise AdapterStartError(
                    f"The Matrix homeserver rejected the access token ({exc.errcode}). Check [matrix] "
                    "access_token, or BRIDGE_MATRIX__ACCESS_TOKEN (docs/matrix.md: getting a token)."
                ) from None
            if who.user_id != cfg.user_id:
                raise AdapterStartError(
                    f"[matrix] access_token belongs to {who.user_id}, not to [matrix] user_id {cfg.user_id}"
                )
            client.device_id = who.device_id
            return
        try:
            checked(await client.login(cfg.password.get_secret_value(), device_name="Bridge"), "login")
        except MatrixError as exc:
            raise AdapterStartError(
                f"The Matrix homeserver refused the login of {cfg.user_id} ({exc.errcode}). Check "
                "[matrix] user_id and password, or BRIDGE_MATRIX__PASSWORD."
            ) from None

    async def start(self, handler: InboundHandler) -> None:
        if self._listener is not None:
            raise RuntimeError("this Matrix adapter is already running")
        if self._client is None:
            await self.start_sending()
        assert self.me is not None
        listener = Listener(
            self.client,
            self.settings,
            self.me,
            self.owners,
            handler,
            mine=self._mine,
            threads=self._threads,
            sync_timeout_s=self._sync_timeout_s,
        )
        try:
            await listener.start()
        except (MatrixError, OSError, TimeoutError, aiohttp.ClientError) as exc:
            await self.stop()
            raise AdapterStartError(f"Matrix: the first /sync failed: {describe(exc)}") from None
        except BaseException:
            await self.stop()
            raise
        self._listener = listener
        log.info("Matrix: %s is connected (/sync)", self.me.user_id)

    async def stop(self) -> None:
        """Stop /sync and close the client; within seconds, never raising."""
        listener, self._listener = self._listener, None
        client, self._client = self._client, None
        if listener is not None:
            await listener.stop()
        if client is not None:
            try:
                await client.close()
            except Exception as exc:  # stopping must never fail
                log.info("Matrix: closing the client: %r", exc)

    @property
    def client(self) -> AsyncClient:
        if self._client is None:
            raise RuntimeError("the Matrix adapter is not started")
        return self._client

    # ------------------------------------------------------------------ outbound

    def split(self, kind: str, text: str) -> list[str]:
        """The pieces an outbound item is sent as: send() sends each as one event."""
        return [source for source, _ in self._chunks(kind, text)]

    def _chunks(self, kind: str, text: str) -> list[tuple[str, dict[str, Any]]]:
        """(the Markdown source, the content it is sent as) per event; only replies and drafts are
        Markdown, and tool activity and notices go as notices (grey, and never answered by bots)."""
        msgtype = "m.text" if kind in ("reply", "draft") else "m.notice"
        markdown = kind == "reply"
        out: list[tuple[str, dict[str, Any]]] = []
        for piece in split_message(text, TEXT_LIMIT):
            out.extend(self._rendered(piece, msgtype, markdown, TEXT_LIMIT))
        return out

    def _rendered(
        self, piece: str, msgtype: str, markdown: bool, limit: int
    ) -> list[tuple[str, dict[str, Any]]]:
        content = text_content(msgtype, piece, markdown=markdown)
        if _utf8_len(str(content)) <= CONTENT_LIMIT or not markdown:
            return [(piece, content)]
        if limit < _SMALLEST_RENDERED_SPLIT:
            return [(piece, text_content(msgtype, piece, markdown=False))]
        out: list[tuple[str, dict[str, Any]]] = []
        for smaller in split_message(piece, limit // 2):
            out.extend(self._rendered(smaller, msgtype, markdown, limit // 2))
        return out

    async def send(self, item: Outbound) -> str | None:
        ids = []
        for index, (_, content) in enumerate(self._chunks(item.kind, item.text)):
            ids.append(await self._post(item.route, content, _txn(item.nonce, index)))
        if not ids:
            return None
        # Activity is edited later through its first event; a reply is known by its last.
        return ids[0] if item.kind == "activity" else ids[-1]

    async def _post(self, route: Route, content: dict[str, Any], txn_id: str) -> str:
        """One event, in its thread where it has one; repeated with the same transaction id until
        the homeserver answers, which makes a repeat of one that arrived harmless."""
        if route.thread_id is not None:
            content["m.relates_to"] = {
                "rel_type": "m.thread",
                "event_id": route.thread_id,
                # For clients without threads: a reply to the message it answers.
                "is_falling_back": True,
                "m.in_reply_to": {"event_id": route.reply_to or route.thread_id},
            }
        with refusals(f"send to {route.chat_id}"):
            response = await self._retrying(
                lambda: self._send_event(route.chat_id, "m.room.message", content, txn_id), what="send"
            )
        event_id = str(response.event_id)
        self._mine.add(event_id)
        if content.get("msgtype") == "m.notice":
            self._notices.add(event_id)
        if route.thread_id is not None:
            self._threads.add(route.thread_id)
        return event_id

    async def _send_event(self, room_id: str, kind: str, content: dict[str, Any], txn_id: str) -> Any:
        return checked(await self.client.room_send(room_id, kind, content, tx_id=txn_id), "send")

    async def edit(self, route: Route, message_id: str, text: str) -> None:
        msgtype = "m.notice" if message_id in self._notices else "m.text"
        await self._replace(route, message_id, text_content(msgtype, _tail(text, TEXT_LIMIT), markdown=False))

    async def edit_reply(self, route: Route, message_id: str, text: str) -> None:
        """Turn a streamed draft into the reply's first chunk, with its HTML, as send() renders it."""
        chunks = self._chunks("reply", text)
        if chunks:
            await self._replace(route, message_id, chunks[0][1])

    async def _replace(self, route: Route, message_id: str, new: dict[str, Any]) -> None:
        """An edit (m.replace): the new content, and a fallback body for clients without edits."""
        content = {
            "msgtype": new["msgtype"],
            "body": f"* {new['body']}",
            "m.new_content": new,
            "m.relates_to": {"rel_type": "m.replace", "event_id": message_id},
            "m.mentions": {},
        }
        # An edit sets the text to what it is anyway, so its own transaction id may be repeated.
        txn_id = secrets.token_hex(12)
        with refusals(f"edit in {route.chat_id}"):
            await self._retrying(
                lambda: self._send_event(route.chat_id, "m.room.message", content, txn_id), what="edit"
            )

    async def typing(self, route: Route) -> None:
        await self.client.room_typing(route.chat_id, True, timeout=TYPING_TIMEOUT_MS)

    async def send_file(self, item: Outbound) -> str | None:
        """Upload the file, then send it as an image, audio or file message with its caption; a
        caption past the limit follows as messages. The message's transaction id is the row's nonce."""
        assert item.file is not None
        file, route = item.file, item.route
        data = await matrix_media.read(file)
        pieces = self.split("reply", item.text) if item.text else []

        async def upload() -> Any:
            answer, _ = await self.client.upload(
                lambda *_: data,
                content_type=file.mime or "application/octet-stream",
                filename=file.name,
                filesize=len(data),
            )
            return checked(answer, "upload")

        # Repeating an upload costs a copy on the homeserver, never a message shown twice.
        uploaded = await self._retrying(upload, what="upload")
        content = matrix_media.file_content(file, str(uploaded.content_uri), pieces[0] if pieces else None)
        sent = await self._post(route, content, _txn(item.nonce, 0))
        for index, piece in enumerate(pieces[1:], start=1):
            sent = await self._post(
                route, text_content("m.text", piece, markdown=True), _txn(item.nonce, index)
            )
        return sent

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """An Inbound file's bytes from the homeserver's media API; MediaError when it can't."""
        client = self.client
        assert client.client_session is not None
        return await matrix_media.download(
            client.client_session,
            self.settings.homeserver,
            str(client.access_token),
            attachment,
            max_bytes,
            sleep=self._sleep,
        )

    async def _retrying(self, call: Callable[[], Awaitable[T]], *, what: str) -> T:
        """Honour 429's wait; retry 5xx and the network, which every call here may repeat safely."""
        return await with_retries(
            call,
            what=f"Matrix: {what}",
            log=log,
            classify=classify,
            backoff=SEND_BACKOFF,
            safe_to_resend=True,
            describe=describe,
            level=logging.INFO,
            sleep=self._sleep,
        )


def _txn(nonce: str | None, index: int) -> str:
    """The transaction id of an outbound item's index-th event: from the row's nonce where it has
    one, so the same row sends the same ids after a restart."""
    if nonce is None:
        return f"bridge-{secrets.token_hex(12)}"
    return nonce if index == 0 else f"{nonce}.{index}"


def _tail(text: str, limit: int) -> str:
    """The end of a long activity log, which is the part worth seeing, within the limit."""
    if len(text) <= limit:
        return text
    lines = text.splitlines()
    while len(lines) > 1 and len("…\n" + "\n".join(lines)) > limit:
        lines.pop(0)
    tail = "…\n" + "\n".join(lines)
    return tail if len(tail) <= limit else "…" + tail[-(limit - 1) :]
