"""A run's answer shown as it streams: printed as it comes (bridge chat), or in a draft message
edited as it grows (Telegram, Discord) that the reply then turns into its first chunk."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from bridge.events import Outbound, Route
from bridge.gateway.activity import ActivityReporter, Outlet
from bridge.platform import Sender

log = logging.getLogger(__name__)
# How long the reply waits for its draft to be sent before it goes as a message of its own.
DRAFT_WAIT_S = 10.0


class LiveReply:
    """The live display of one run: a segment per model request, each printed as its text comes."""

    def __init__(self, sender: Sender, route: Route, activity: ActivityReporter) -> None:
        self.sender = sender
        self.route = route
        # The tool activity is printed by the courier; the stream waits for it, so a tool line never
        # lands inside the text of the answer that follows it.
        self.activity = activity

    def segment(self) -> LiveSegment:
        return LiveSegment(self)

    async def reply_target(self) -> str | None:
        # The console prints the reply's rest itself (ConsoleAdapter.send); there is nothing to edit.
        return None

    async def close(self, *, final_edits: bool = True) -> None:
        return None


class LiveSegment:
    """One model request's text, as the runner's TextSink."""

    def __init__(self, reply: LiveReply) -> None:
        self.reply = reply
        self._shown = False

    @property
    def shown(self) -> bool:
        return self._shown

    async def begin(self) -> None:
        # Nothing is shown until text arrives, and a request is only tried again if none was.
        return None

    async def text(self, delta: str) -> None:
        if not delta:
            return
        if not self._shown:
            # Printed directly, not through the courier: wait (a little, at most) for the tool
            # activity the courier prints, so a tool line never lands inside the answer.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.reply.activity.settled(), DRAFT_WAIT_S)
            self._shown = True
        await self.reply.sender.stream(self.reply.route, delta)


class DraftReply:
    """The live display on a surface that edits messages: each model request's text goes into a
    draft message as it streams, edited at most once per the platform's min_edit_interval_s. The
    reply then edits the last draft into its first chunk, formatted (reply_target)."""

    def __init__(self, delivery: Outlet, route: Route, session_key: str, interval: float) -> None:
        self.delivery = delivery
        # The draft answers the user's message as the reply would (Telegram quotes it in groups); the
        # reply, which edits it, keeps that.
        self.route = route
        self.session_key = session_key
        self.interval = interval
        self._segments: list[DraftSegment] = []

    def segment(self) -> DraftSegment:
        segment = DraftSegment(self)
        self._segments.append(segment)
        return segment

    async def reply_target(self) -> str | None:
        """The draft the reply should replace: the last request's, once its edits have stopped (so no
        late edit can undo the reply). None where it showed nothing or was not sent in time."""
        await self.close(final_edits=False)
        last = self._segments[-1] if self._segments else None
        if last is None or last.sent is None or last.sent.cancelled():
            return None
        try:
            return await asyncio.wait_for(asyncio.shield(last.sent), DRAFT_WAIT_S)
        except TimeoutError:
            log.info("%s: the draft was not sent in time; the reply is a new message", self.session_key)
            return None

    async def close(self, *, final_edits: bool = True) -> None:
        """Stop the drafts' edits. Earlier drafts (text before tool calls) get their last text; the
        last one too unless the reply is about to replace it."""
        for index, segment in enumerate(self._segments):
            last = index == len(self._segments) - 1
            await segment.stop(flush=final_edits or not last)


class DraftSegment:
    """One model request's text in one draft message, as the runner's TextSink."""

    def __init__(self, reply: DraftReply) -> None:
        self.reply = reply
        self.body = ""
        # The draft's platform message id once sent (None: suppressed or failed); None before.
        self.sent: asyncio.Future[str | None] | None = None
        self._shown = ""
        self._pending = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None
        # The edit on its way to the platform, if one is: stop() lets it finish (see _flush).
        self._editing: asyncio.Future[None] | None = None
        self._stopped = False

    @property
    def shown(self) -> bool:
        return bool(self.body)

    async def begin(self) -> None:
        return None

    async def text(self, delta: str) -> None:
        if not delta or self._stopped:
            return
        self.body += delta
        reply = self.reply
        if self.sent is None:
            # Queued, not awaited: the courier keeps the chat's order (the draft comes below the tool
            # activity queued before it), and the run never waits for the platform.
            self._shown = self.body
            # Not written to the outbox: a draft left from a crash is not sent again at the next start.
            draft = Outbound(reply.route, "draft", self.body, session_key=reply.session_key)
            self.sent = await reply.delivery.enqueue(draft, durable=False)
            return
        self._pending.set()
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush(self.sent), name="draft-edits")

    async def _flush(self, sent: asyncio.Future[str | None]) -> None:
        # Shielded: stopping the edits cancels this task, and a task's cancel would otherwise cancel
        # the future it awaits, which the reply still needs (reply_target).
        message_id = await asyncio.shield(sent)
        if message_id is None:
            self._pending.clear()
            return
        while self._pending.is_set():
            self._pending.clear()
            # Shielded, and awaited by stop(): an edit cancelled on its way may still reach the
            # platform, after the reply's own edit of the draft, which would then show the draft's
            # text again in place of the reply (the soak caught it, with a long answer).
            self._editing = asyncio.ensure_future(self._edit(message_id))
            await asyncio.shield(self._editing)
            # Coalesced: whatever arrives meanwhile goes in the next edit, one interval later.
            await asyncio.sleep(self.reply.interval)

    async def _edit(self, message_id: str) -> None:
        text = self.body
        if text != self._shown:
            reply = self.reply
            await reply.delivery.edit(reply.route, message_id, text, reply.session_key)
            self._shown = text

    async def stop(self, *, flush: bool) -> None:
        """End the draft's edits; once only, so a later close() never edits over the reply."""
        if self._stopped:
            return
        self._stopped = True
        if self._flusher is not None and not self._flusher.done():
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        if self._editing is not None and not self._editing.done():
            # Bounded like reply_target: past it, the reply goes ahead anyway.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._editing), DRAFT_WAIT_S)
        if flush and self.sent is not None and not self.sent.cancelled():
            # Bounded like reply_target: the reply is planned after this, and a platform that hangs
            # on the draft must not keep the answer from being stored.
            try:
                message_id = await asyncio.wait_for(asyncio.shield(self.sent), DRAFT_WAIT_S)
            except TimeoutError:
                return
            if message_id is not None:
                await self._edit(message_id)
