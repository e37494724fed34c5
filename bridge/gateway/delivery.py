"""Delivery: hands outbound items to the right adapter; tool activity is its own message."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import cast

from bridge.agent.runner import ToolStep
from bridge.events import Outbound, OutboundKind, Route, Sender
from bridge.gateway.policy import Decision, PolicyGate
from bridge.store.base import OutboxItem, OutboxState, SessionRow, Store

log = logging.getLogger(__name__)

TYPING_INTERVAL_S = 4.0
_MARK = {"running": "…", "ok": "✓", "error": "✗"}


def render_step(step: ToolStep) -> str:
    mark = _MARK[step.status] + (f" {step.error_code}" if step.error_code else "")
    return f"⚙ {step.name}({step.summary}) {mark}"


class Delivery:
    """The one place outbound items leave the core: the send policy decides, the outbox records.

    Every item is written to the outbox before it is sent (pending → sent or failed); an item the
    policy denies is written as suppressed with the rule that denied it, so nothing vanishes
    silently. Without a gate and a store (unit tests), items go straight to the adapter.
    """

    def __init__(self, gate: PolicyGate | None = None, store: Store | None = None) -> None:
        self._senders: dict[str, Sender] = {}
        self.gate = gate
        self.store = store

    def register(self, sender: Sender) -> None:
        self._senders[sender.surface] = sender

    def sender(self, surface: str) -> Sender | None:
        return self._senders.get(surface)

    async def may_speak(self, route: Route, session_key: str | None) -> bool:
        if self.gate is None or session_key is None:
            return True
        return (await self.gate.decide(session_key, route.surface)).speaks

    async def send(self, item: Outbound) -> str | None:
        """Send (or suppress) one item; the platform message id, or None when nothing was sent."""
        session = None
        if self.store is not None and item.session_key is not None:
            session = await self.store.active_session(item.session_key)
        decision = self._decide(item, session)
        row_id = await self._record(item, decision, session)
        if row_id is None and self.store is not None:
            log.info("%s %s was handed over before; not sending it twice", item.kind, item.dedupe_key)
            return None
        if not decision.speaks:
            log.info("%s for %s suppressed by %s", item.kind, item.session_key, decision.reason)
            return None
        return await self._hand_over(row_id, item)

    async def deliver_pending(self) -> int:
        """Send what a crash left `pending`, oldest first (so each chat keeps its order).

        The policy allowed these when they were written. Tool activity of a run that no longer
        exists would only confuse, so it is marked failed instead of sent. Returns how many went out.
        """
        if self.store is None:
            return 0
        sent = 0
        for row in await self.store.outbox(state="pending"):
            item = row.item
            if item.kind == "activity":
                await self._mark(
                    row.id, "failed", reason="activity of an interrupted run; not sent after restart"
                )
                continue
            route = Route(item.surface, item.chat_id, item.thread_id, item.reply_to)
            outbound = Outbound(
                route,
                cast(OutboundKind, item.kind),
                item.text,
                item.run_id,
                session_key=item.session_key,
                dedupe_key=item.dedupe_key,
            )
            if await self._hand_over(row.id, outbound) is not None:
                sent += 1
        return sent

    async def _hand_over(self, row_id: int | None, item: Outbound) -> str | None:
        """Give a recorded item to its adapter and record the outcome."""
        sender = self._senders.get(item.route.surface)
        if sender is None:
            log.error("no adapter for surface %s; %s not delivered", item.route.surface, item.kind)
            await self._mark(row_id, "failed", reason=f"no adapter for surface {item.route.surface}")
            return None
        try:
            message_id = await sender.send(item)
        except Exception as exc:
            log.exception("sending %s to %s failed", item.kind, item.route.surface)
            await self._mark(row_id, "failed", reason=f"{type(exc).__name__}: {exc}"[:500])
            return None
        await self._mark(row_id, "sent", platform_msg_id=message_id)
        return message_id

    def _decide(self, item: Outbound, session: SessionRow | None) -> Decision:
        if item.policy_exempt:
            return Decision("allow", "an owner's command is always answered")
        if self.gate is None or item.session_key is None:
            return Decision("allow", "not tied to a session")
        return self.gate.decide_for(item.session_key, item.route.surface, session)

    async def _record(self, item: Outbound, decision: Decision, session: SessionRow | None) -> int | None:
        if self.store is None:
            return None
        route = item.route
        return await self.store.add_outbox(
            OutboxItem(
                kind=item.kind,
                surface=route.surface,
                chat_id=route.chat_id,
                thread_id=route.thread_id,
                reply_to=route.reply_to,
                text=item.text,
                state="pending" if decision.speaks else "suppressed",
                reason=None if decision.speaks else decision.reason,
                session_key=item.session_key,
                session_id=session.id if session else None,
                run_id=item.run_id,
                dedupe_key=item.dedupe_key,
            )
        )

    async def _mark(
        self,
        row_id: int | None,
        state: OutboxState,
        *,
        platform_msg_id: str | None = None,
        reason: str | None = None,
    ) -> None:
        if self.store is not None and row_id is not None:
            await self.store.mark_outbox(row_id, state, platform_msg_id=platform_msg_id, reason=reason)

    async def edit(self, route: Route, message_id: str, text: str, session_key: str | None = None) -> None:
        sender = self._senders.get(route.surface)
        # A chat denied since the message was sent gets no more edits either.
        if sender is None or not await self.may_speak(route, session_key):
            return
        try:
            await sender.edit(route, message_id, text)
        except Exception:
            log.exception("editing a message on %s failed", route.surface)

    def activity(
        self, route: Route, run_id: str | None = None, session_key: str | None = None
    ) -> ActivityReporter:
        return ActivityReporter(self, route, run_id, session_key)

    @contextlib.asynccontextmanager
    async def typing(self, route: Route, session_key: str | None = None) -> AsyncIterator[None]:
        """Show typing for as long as the block runs (not where the bot may not speak)."""
        sender = self._senders.get(route.surface)
        if sender is not None and not await self.may_speak(route, session_key):
            sender = None
        task = asyncio.create_task(self._keep_typing(sender, route)) if sender else None
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _keep_typing(self, sender: Sender, route: Route) -> None:
        while True:
            try:
                await sender.typing(route)
            except Exception:
                log.debug("typing indicator failed on %s", route.surface, exc_info=True)
            await asyncio.sleep(TYPING_INTERVAL_S)


class ActivityReporter:
    """Tool activity of one run: one message edited in place, or one line per finished tool.

    Edits are coalesced in the background, at most one per the platform's min_edit_interval_s, so a
    tool-heavy run neither trips the platform's flood limits nor waits for its own progress display.
    """

    def __init__(
        self, delivery: Delivery, route: Route, run_id: str | None, session_key: str | None = None
    ) -> None:
        self.delivery = delivery
        # Activity is not a reply to the user's message; only the final answer is.
        self.route = Route(route.surface, route.chat_id, route.thread_id)
        self.run_id = run_id
        self.session_key = session_key
        self._first_sent = False
        self.steps: list[ToolStep] = []
        self.message_id: str | None = None
        sender = delivery.sender(route.surface)
        self.in_place = bool(sender and sender.supports_edit)
        self.min_interval = float(getattr(sender, "min_edit_interval_s", 0.0))
        self._shown = ""
        self._pending = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None

    def render(self) -> str:
        return "\n".join(render_step(step) for step in self.steps)

    async def tool_started(self, step: ToolStep) -> None:
        self.steps.append(step)
        if self.in_place:
            await self._update()

    async def tool_finished(self, step: ToolStep) -> None:
        if self.in_place:
            await self._update()
        else:
            await self.delivery.send(self._outbound(render_step(step)))

    def _outbound(self, text: str) -> Outbound:
        return Outbound(self.route, "activity", text, self.run_id, session_key=self.session_key)

    async def _update(self) -> None:
        if not self._first_sent:
            # The first display is sent at once, so it always comes before the reply.
            self._first_sent = True
            self._shown = self.render()
            self.message_id = await self.delivery.send(self._outbound(self._shown))
            return
        if self.message_id is None:
            # The first display was suppressed or failed: no message to edit, and no flood of new ones.
            return
        self._pending.set()
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())

    async def _flush(self) -> None:
        while self._pending.is_set():
            self._pending.clear()
            text = self.render()
            if text != self._shown and self.message_id is not None:
                self._shown = text
                await self.delivery.edit(self.route, self.message_id, text, self.session_key)
                if self._pending.is_set():
                    await asyncio.sleep(self.min_interval)

    async def close(self) -> None:
        """Wait until the display shows the final state (before the reply is sent)."""
        if self._flusher is not None:
            await self._flusher
