"""Delivery: hands outbound items to the right adapter; tool activity is its own message."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from bridge.agent.runner import ToolStep
from bridge.events import Outbound, Route, Sender

log = logging.getLogger(__name__)

TYPING_INTERVAL_S = 4.0
_MARK = {"running": "…", "ok": "✓", "error": "✗"}


def render_step(step: ToolStep) -> str:
    mark = _MARK[step.status] + (f" {step.error_code}" if step.error_code else "")
    return f"⚙ {step.name}({step.summary}) {mark}"


class Delivery:
    """The one place outbound items leave the core (send policy and outbox attach here)."""

    def __init__(self) -> None:
        self._senders: dict[str, Sender] = {}

    def register(self, sender: Sender) -> None:
        self._senders[sender.surface] = sender

    def sender(self, surface: str) -> Sender | None:
        return self._senders.get(surface)

    async def send(self, item: Outbound) -> str | None:
        sender = self._senders.get(item.route.surface)
        if sender is None:
            log.error("no adapter for surface %s; %s not delivered", item.route.surface, item.kind)
            return None
        try:
            return await sender.send(item)
        except Exception:
            log.exception("sending %s to %s failed", item.kind, item.route.surface)
            return None

    async def edit(self, route: Route, message_id: str, text: str) -> None:
        sender = self._senders.get(route.surface)
        if sender is None:
            return
        try:
            await sender.edit(route, message_id, text)
        except Exception:
            log.exception("editing a message on %s failed", route.surface)

    def activity(self, route: Route, run_id: str | None = None) -> ActivityReporter:
        return ActivityReporter(self, route, run_id)

    @contextlib.asynccontextmanager
    async def typing(self, route: Route) -> AsyncIterator[None]:
        """Show typing for as long as the block runs."""
        sender = self._senders.get(route.surface)
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

    def __init__(self, delivery: Delivery, route: Route, run_id: str | None) -> None:
        self.delivery = delivery
        # Activity is not a reply to the user's message; only the final answer is.
        self.route = Route(route.surface, route.chat_id, route.thread_id)
        self.run_id = run_id
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
            await self.delivery.send(Outbound(self.route, "activity", render_step(step), self.run_id))

    async def _update(self) -> None:
        if self.message_id is None:
            # The first display is sent at once, so it always comes before the reply.
            self._shown = self.render()
            self.message_id = await self.delivery.send(
                Outbound(self.route, "activity", self._shown, self.run_id)
            )
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
                await self.delivery.edit(self.route, self.message_id, text)
                if self._pending.is_set():
                    await asyncio.sleep(self.min_interval)

    async def close(self) -> None:
        """Wait until the display shows the final state (before the reply is sent)."""
        if self._flusher is not None:
            await self._flusher
