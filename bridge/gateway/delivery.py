"""Delivery: the send policy decides, the outbox records each chunk, the courier sends it."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence

from bridge.errors import DeliveryRefused
from bridge.events import Outbound, Route
from bridge.gateway.activity import ActivityReporter
from bridge.gateway.courier import Courier, publish_delivery
from bridge.gateway.policy import Decision, PolicyGate
from bridge.gateway.streaming import DraftReply, LiveReply
from bridge.platform import Sender
from bridge.store.base import OPEN_STATES, OutboxItem, OutboxRow, SessionRow
from bridge.store.sessions import new_id
from bridge.store.tables import DatabaseStore

log = logging.getLogger(__name__)

# A run still going this long in shows typing, once.
TYPING_AFTER_S = 1.0
UNCERTAIN_REASON = (
    "in flight when Bridge stopped, so it may have arrived; not sent again ([delivery] resend_uncertain)"
)


class Delivery:
    """The one place outbound items leave the core.

    An item is split into the chunks its platform takes, and each chunk is written to the outbox
    before anything is sent: `pending`, then `sending` while the platform has it, then `sent` or
    `failed`. An item the policy denies is written whole as `suppressed` with the rule that denied it,
    so nothing vanishes silently. Once `enqueue` returns, the item survives a crash: the next start
    sends what is left. Without a gate and a store (unit tests), items go straight to the adapter.
    """

    def __init__(
        self,
        gate: PolicyGate | None = None,
        store: DatabaseStore | None = None,
        *,
        resend_uncertain: bool = True,
    ) -> None:
        self._senders: dict[str, Sender] = {}
        self.gate = gate
        self.store = store
        self.resend_uncertain = resend_uncertain
        self.courier = Courier(store, self._senders)
        self._memory_ids = 0  # row ids for the store-less mode
        # Where workers share the database: written on each row, so another worker can tell this
        # one's rows from a dead worker's (bridge.gateway.sharing).
        self.worker_id: str | None = None

    def register(self, sender: Sender) -> None:
        self._senders[sender.surface] = sender

    def sender(self, surface: str) -> Sender | None:
        return self._senders.get(surface)

    def surfaces(self) -> list[str]:
        """The surfaces this process can send on."""
        return list(self._senders)

    async def may_speak(self, route: Route, session_key: str | None) -> bool:
        if self.gate is None or session_key is None:
            return True
        return (await self.gate.decide(session_key, route.surface)).speaks

    # -- writing items down ------------------------------------------------------------------

    async def plan(self, item: Outbound) -> list[OutboxItem]:
        """The outbox rows for an item: its chunks, or one `suppressed` row where it may not be sent."""
        session = None
        if self.store is not None and item.session_key is not None:
            session = await self.store.active_session(item.session_key)
        return self.plan_for(item, session)

    async def plan_reply(
        self,
        route: Route,
        text: str,
        run_id: str,
        *,
        session_key: str,
        dedupe_key: str,
        draft: LiveReply | DraftReply | None = None,
    ) -> list[OutboxItem]:
        """A run's answer as its outbox rows, in one call: the send policy decides, the text is cut
        into the platform's chunks, and the first chunk replaces the `draft` the answer streamed
        into, where there is one. Written by the runner with the answer, in one transaction."""
        edit_of = await draft.reply_target() if draft is not None else None
        item = Outbound(
            route, "reply", text, run_id, session_key=session_key, dedupe_key=dedupe_key, edit_of=edit_of
        )
        return await self.plan(item)

    def plan_for(self, item: Outbound, session: SessionRow | None) -> list[OutboxItem]:
        """plan() for a caller that has read the item's session already (or runs where it cannot await)."""
        decision = self._decide(item, session)
        route = item.route
        whole = OutboxItem(
            kind=item.kind,
            surface=route.surface,
            chat_id=route.chat_id,
            text=item.text,
            state="pending",
            thread_id=route.thread_id,
            reply_to=route.reply_to,
            session_key=item.session_key,
            session_id=session.id if session else None,
            run_id=item.run_id,
            dedupe_key=item.dedupe_key,
            worker_id=self.worker_id,
            file=item.file.to_json() if item.file is not None else None,
        )
        if not decision.speaks:
            return [dataclasses.replace(whole, state="suppressed", reason=decision.reason)]
        # A file goes whole, its text the caption (the adapter sends a caption too long as a message).
        pieces = [item.text] if item.file is not None else self._split(item) or [item.text]
        # Every chunk carries a nonce: cheap, and a platform that dedupes by it (Discord) makes a resend
        # after a crash harmless even when the adapter was not yet up when the row was written.
        return [
            dataclasses.replace(
                whole,
                text=piece,
                part=index,
                parts=len(pieces),
                nonce=new_id(),
                edit_of=item.edit_of if index == 0 else None,
            )
            for index, piece in enumerate(pieces)
        ]

    async def enqueue(self, item: Outbound, *, durable: bool = True) -> asyncio.Future[str | None]:
        """Write the item down and queue it for its chat; the future gives its platform message id
        once sent (None when suppressed, failed, or handed over before). `durable=False` queues it
        without writing it down: it is not sent again after a crash (a streamed draft)."""
        planned = await self.plan(item)
        if self.store is None or not durable:
            rows = [self._in_memory(p) for p in planned]
        else:
            ids = await self.store.add_outbox(*planned)
            if not ids:
                log.info("%s %s was handed over before; not sending it twice", item.kind, item.dedupe_key)
                return _resolved(None)
            rows = [OutboxRow(i, p, None, 0.0) for i, p in zip(ids, planned, strict=True)]
        return self.deliver(rows)

    async def send(self, item: Outbound) -> str | None:
        """Write the item down, send it, and return its platform message id (None when nothing was sent).

        Activity is known by its first message (it is edited through it), anything else by its last.
        """
        return await (await self.enqueue(item))

    def deliver(self, rows: Sequence[OutboxRow]) -> asyncio.Future[str | None]:
        """Send rows already written down (a run's reply, written with its answer), after what their
        chat already waits for."""
        sendable = [row for row in rows if row.item.state in OPEN_STATES]
        if not sendable:
            for row in rows:
                log.info("%s for %s suppressed by %s", row.item.kind, row.item.session_key, row.item.reason)
                if row.item.state == "suppressed":
                    publish_delivery(self.courier.live, row, "suppressed", row.item.reason)
            return _resolved(None)
        sent = self.courier.submit(sendable)
        kind = sendable[0].item.kind
        result: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()

        def settle(done: asyncio.Future[list[str | None]]) -> None:
            if result.done():
                return
            if done.cancelled():
                result.cancel()
            elif done.exception() is not None:
                result.set_result(None)
            else:
                ids = done.result()
                result.set_result(ids[0] if kind == "activity" else ids[-1])

        sent.add_done_callback(settle)
        return result

    async def recover(
        self, rows: Sequence[OutboxRow] | None = None, *, upto: int | None = None
    ) -> list[asyncio.Future[list[str | None]]]:
        """Queue what a crash left undelivered (or the given rows, a dead worker's), oldest first in
        each chat; the futures resolve once each chat's share has gone.

        `pending` rows were never handed over: they go. A `sending` row was in flight, so the platform
        may have it: it goes again where the platform drops repeats (a stored nonce), or where
        [delivery] resend_uncertain allows; otherwise it is marked `uncertain`. Tool activity of a run
        that no longer exists would only confuse, so it is marked failed instead of sent. Rows of a
        surface this process does not serve are left for the process that does. `upto`: only rows up
        to this id, those open before this process began; later ones are already in the courier's
        hands, and queuing them again would send them twice.
        """
        if self.store is None:
            return []
        by_chat: defaultdict[tuple[str, str], list[OutboxRow]] = defaultdict(list)
        for row in rows if rows is not None else await self.store.outbox(state=OPEN_STATES, upto=upto):
            item = row.item
            if item.surface not in self._senders:
                continue
            if item.kind == "activity":
                await self.store.mark_outbox(
                    row.id, "failed", reason="activity of an interrupted run; not sent after restart"
                )
                continue
            if item.state == "sending" and not self._may_resend(item):
                log.warning(
                    "outbox row %d may have reached %s before a crash; not resent", row.id, item.surface
                )
                await self.store.mark_outbox(row.id, "uncertain", reason=UNCERTAIN_REASON)
                publish_delivery(self.courier.live, row, "uncertain", UNCERTAIN_REASON)
                continue
            by_chat[(item.surface, item.chat_id)].append(row)
        return [self.courier.submit(rows) for rows in by_chat.values()]

    def _may_resend(self, item: OutboxItem) -> bool:
        sender = self._senders.get(item.surface)
        dedupes = sender is not None and sender.dedupes_by_nonce and item.nonce is not None
        return dedupes or self.resend_uncertain

    def _split(self, item: Outbound) -> list[str]:
        sender = self._senders.get(item.route.surface)
        # At the platform's text_limit, or the platform's own way (Sender.split).
        return list(sender.split(item.kind, item.text)) if sender is not None else [item.text]

    def _decide(self, item: Outbound, session: SessionRow | None) -> Decision:
        if item.policy_exempt:
            return Decision("allow", "an owner's command is always answered")
        if self.gate is None or item.session_key is None:
            return Decision("allow", "not tied to a session")
        return self.gate.decide_for(item.session_key, item.route.surface, session)

    def _in_memory(self, item: OutboxItem) -> OutboxRow:
        self._memory_ids -= 1  # negative: the courier marks nothing for them
        return OutboxRow(self._memory_ids, item, None, 0.0)

    # -- shutdown ----------------------------------------------------------------------------

    async def idle(self) -> None:
        await self.courier.idle()

    async def close(self) -> None:
        await self.courier.close()

    # -- edits and typing: not recorded, they change nothing the user has not seen ------------

    async def edit(self, route: Route, message_id: str, text: str, session_key: str | None = None) -> None:
        sender = self._senders.get(route.surface)
        # A chat denied since the message was sent gets no more edits either.
        if sender is None or not await self.may_speak(route, session_key):
            return
        try:
            await sender.edit(route, message_id, text)
        except DeliveryRefused as exc:
            # The chat refuses the bot now (blocked, removed): the send that follows says so once.
            log.warning(
                "%s refused an edit in %s (chat %s): %s", route.surface, session_key, route.chat_id, exc
            )
        except Exception:
            log.exception("editing a message on %s failed", route.surface)

    def activity(
        self, route: Route, run_id: str | None = None, session_key: str | None = None
    ) -> ActivityReporter:
        return ActivityReporter(self, route, run_id, session_key)

    async def live_reply(
        self, route: Route, session_key: str, activity: ActivityReporter
    ) -> LiveReply | DraftReply | None:
        """The streamed display of a run's answer, where the send policy lets the bot speak here (a
        shadowed chat gets nothing, streamed or not): printed as it comes where the surface can
        (supports_stream), else a draft message edited as it grows where it offers that (streams_drafts)."""
        sender = self.sender(route.surface)
        if sender is None or not await self.may_speak(route, session_key):
            return None
        if sender.supports_stream:
            return LiveReply(sender, route, activity)
        if sender.streams_drafts:
            return DraftReply(self, route, session_key, float(sender.min_edit_interval_s))
        return None

    @contextlib.asynccontextmanager
    async def typing(self, route: Route, session_key: str | None = None) -> AsyncIterator[None]:
        """Show typing once, if the block still runs TYPING_AFTER_S in (not where the bot may not
        speak). A quick answer needs no indicator, and each one is a platform request: sending it at
        the start of every run, and again every few seconds, made it one Bot API call in four."""
        sender = self._senders.get(route.surface)
        task = asyncio.create_task(self._type_later(sender, route, session_key)) if sender else None
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _type_later(self, sender: Sender, route: Route, session_key: str | None) -> None:
        await asyncio.sleep(TYPING_AFTER_S)
        try:
            if await self.may_speak(route, session_key):
                await sender.typing(route)
        except Exception:
            log.debug("typing indicator failed on %s", route.surface, exc_info=True)


def _resolved(value: str | None) -> asyncio.Future[str | None]:
    future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future
