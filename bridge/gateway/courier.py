"""The courier: sends outbox rows one chat at a time, in order, each chunk marked in flight before it goes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

from bridge.errors import AdapterLifecycleError, DeliveryRefused, DeliveryUncertain
from bridge.events import Outbound, OutboundKind, OutFile, Route
from bridge.live import LiveEvents
from bridge.platform import Sender
from bridge.store.base import OutboxRow, OutboxState
from bridge.store.tables import DatabaseStore

log = logging.getLogger(__name__)

ChatKey = tuple[str, str]
EARLIER_PART_FAILED = "an earlier part of this message could not be sent"


@dataclass(slots=True)
class _Job:
    rows: Sequence[OutboxRow]
    done: asyncio.Future[list[str | None]]


@dataclass(slots=True)
class _Chat:
    jobs: deque[_Job] = field(default_factory=deque)
    worker: asyncio.Task[None] | None = None


def outbound_of(row: OutboxRow) -> Outbound:
    """The item a row asks to send: one chunk, replying to the user's message only in its first part."""
    item = row.item
    reply_to = item.reply_to if item.part == 0 else None
    return Outbound(
        Route(item.surface, item.chat_id, item.thread_id, reply_to),
        cast(OutboundKind, item.kind),
        item.text,
        item.run_id,
        session_key=item.session_key,
        dedupe_key=item.dedupe_key,
        nonce=item.nonce,
        edit_of=item.edit_of if item.part == 0 else None,
        file=OutFile.from_json(item.file),
    )


class Courier:
    """One worker per chat with something to send, so a slow chat (a 429 back-off) holds up only itself.

    Every chunk is marked `sending` before it is handed to the platform and `sent` (with the platform's
    message id) or `failed` after: a crash in between leaves it `sending`, which the next start knows
    to be uncertain. Without a store (unit tests) rows are only sent.
    """

    def __init__(self, store: DatabaseStore | None, senders: dict[str, Sender]) -> None:
        self.store = store
        self.senders = senders
        self._chats: dict[ChatKey, _Chat] = {}
        # The admin server's live stream (replaced by the composition root's).
        self.live = LiveEvents()

    def submit(self, rows: Sequence[OutboxRow]) -> asyncio.Future[list[str | None]]:
        """Send rows of one chat after what that chat already waits for; the future resolves with each
        row's platform message id (None where it was not sent)."""
        done: asyncio.Future[list[str | None]] = asyncio.get_running_loop().create_future()
        if not rows:
            done.set_result([])
            return done
        key = (rows[0].item.surface, rows[0].item.chat_id)
        chat = self._chats.setdefault(key, _Chat())
        chat.jobs.append(_Job(rows, done))
        if chat.worker is None or chat.worker.done():
            chat.worker = asyncio.create_task(self._work(key, chat), name=f"courier:{key[0]}:{key[1]}")
        return done

    async def idle(self) -> None:
        """Wait until every chat's queue is empty."""
        while workers := [
            chat.worker for chat in self._chats.values() if chat.worker and not chat.worker.done()
        ]:
            await asyncio.gather(*workers, return_exceptions=True)

    def busy(self) -> bool:
        """Whether any chat has something queued or on its way."""
        return any(chat.worker is not None and not chat.worker.done() for chat in self._chats.values())

    async def close(self) -> None:
        """Stop sending. A chunk in flight stays `sending` (uncertain); queued ones stay `pending`."""
        chats, self._chats = list(self._chats.values()), {}
        for chat in chats:
            if chat.worker is not None:
                chat.worker.cancel()
        for chat in chats:
            if chat.worker is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await chat.worker
            for job in chat.jobs:
                if not job.done.done():
                    job.done.cancel()

    async def _work(self, key: ChatKey, chat: _Chat) -> None:
        try:
            while chat.jobs:
                job = chat.jobs[0]
                try:
                    ids = await self._send_rows(job.rows)
                except Exception as exc:  # a bug here must not silence the chat for good
                    log.exception("delivering to %s:%s failed", *key)
                    if not job.done.done():
                        job.done.set_exception(exc)
                else:
                    if not job.done.done():
                        job.done.set_result(ids)
                chat.jobs.popleft()
        finally:
            if self._chats.get(key) is chat and not chat.jobs:
                del self._chats[key]

    async def _send_rows(self, rows: Sequence[OutboxRow]) -> list[str | None]:
        ids: list[str | None] = []
        # Whether an earlier chunk of the item being sent failed. An item's chunks come in part
        # order, its first (part 0) starting it; ids need not be consecutive (PostgreSQL hands out
        # ids to concurrent transactions in turn).
        item_failed = False
        for row in rows:
            if row.item.part == 0:
                item_failed = False
            if item_failed:
                await self._mark(row, "failed", reason=EARLIER_PART_FAILED)
                ids.append(None)
                continue
            try:
                message_id, ok = await self._send(row)
            except AdapterLifecycleError as exc:
                # The adapter is not running (not started yet, or stopped): nothing reached the
                # platform, so this row and the rest stay `pending`, for the next start to send.
                log.warning(
                    "%s is not running; %d outbox row(s) stay queued: %s",
                    row.item.surface,
                    len(rows) - len(ids),
                    exc,
                )
                await self._mark(row, "pending")
                return ids + [None] * (len(rows) - len(ids))
            if not ok:
                item_failed = True
            ids.append(message_id)
        return ids

    async def _send(self, row: OutboxRow) -> tuple[str | None, bool]:
        item = row.item
        sender = self.senders.get(item.surface)
        if sender is None:
            log.error("no adapter for surface %s; %s not delivered", item.surface, item.kind)
            await self._mark(row, "failed", reason=f"no adapter for surface {item.surface}")
            return None, False
        await self._mark(row, "sending")
        out = outbound_of(row)
        try:
            if out.file is not None:
                # A platform without files sends the caption with the file named (Sender.send_file).
                message_id = await sender.send_file(out)
            elif out.edit_of:
                # The reply's first chunk into the draft it streamed into, formatted as a reply.
                await sender.edit_reply(out.route, out.edit_of, out.text)
                message_id = out.edit_of
            else:
                message_id = await sender.send(out)
        except AdapterLifecycleError:
            raise
        except DeliveryRefused as exc:
            # Blocked by the user, removed from the group: the chat's doing, not a bug; one line that
            # says where, no traceback.
            log.warning(
                "%s refused %s row %d for %s (chat %s), marked failed: %s",
                item.surface,
                item.kind,
                row.id,
                item.session_key or "no session",
                item.chat_id,
                exc,
            )
            await self._mark(row, "failed", reason=str(exc)[:500])
            return None, False
        except DeliveryUncertain as exc:
            # Not sent again by itself: the user may have it. The dashboard offers a Retry that says so.
            log.warning(
                "%s row %d for %s (chat %s) may have reached %s; marked uncertain: %s",
                item.kind,
                row.id,
                item.session_key or "no session",
                item.chat_id,
                item.surface,
                exc,
            )
            await self._mark(row, "uncertain", reason=str(exc)[:500])
            return None, False
        except Exception as exc:
            log.exception(
                "sending %s row %d to %s (chat %s) failed", item.kind, row.id, item.surface, item.chat_id
            )
            await self._mark(row, "failed", reason=_reason(exc)[:500])
            return None, False
        await self._mark(row, "sent", platform_msg_id=message_id)
        self.live.publish(
            "message_out",
            session_key=item.session_key,
            surface=item.surface,
            chat_id=item.chat_id,
            kind=item.kind,
            text=item.text,
        )
        return message_id, True

    async def _mark(
        self,
        row: OutboxRow,
        state: OutboxState,
        *,
        platform_msg_id: str | None = None,
        reason: str | None = None,
    ) -> None:
        if self.store is not None and row.id > 0:
            # Shielded: a cancel (shutdown) must not leave a chunk Telegram took marked `sending`.
            await asyncio.shield(
                self.store.mark_outbox(row.id, state, platform_msg_id=platform_msg_id, reason=reason)
            )
        if state != "sending":
            # The dashboard's conversation and Outbox pages follow each row's state; a failure is a
            # line on the overview's feed.
            publish_delivery(self.live, row, state, reason)


def publish_delivery(live: LiveEvents, row: OutboxRow, state: OutboxState, reason: str | None) -> None:
    """A `delivery` live event: an outbox row reached `state` (sent, failed, uncertain, suppressed,
    pending again), with the reason where there is one."""
    item = row.item
    said = f"{item.kind} {state}" + (f": {reason}" if reason else "")
    live.publish(
        "delivery",
        row=row.id,
        state=state,
        kind=item.kind,
        session_key=item.session_key,
        surface=item.surface,
        reason=reason,
        text=said,
    )


def _reason(exc: BaseException) -> str:
    """An exception as a failed row's reason: its class and message, the class once (Telegram's
    "Forbidden: …" already starts with it)."""
    name, text = type(exc).__name__, str(exc)
    return text if text.startswith(name) else f"{name}: {text}" if text else name
