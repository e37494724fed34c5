"""Tool activity of a run: one message edited in place where the platform allows, else a line per tool."""

from __future__ import annotations

import asyncio
from typing import Protocol

from bridge.agent.toolcalls import ToolStep
from bridge.events import Outbound, Route
from bridge.platform import Sender


class Outlet(Protocol):
    """What the activity display and streamed drafts need of delivery (bridge.gateway.delivery): the
    chat's sender, the outbox, and edits in place. Delivery makes them and hands itself in; typed by
    this, they need not import it back."""

    def sender(self, surface: str) -> Sender | None: ...

    async def enqueue(self, item: Outbound, *, durable: bool = True) -> asyncio.Future[str | None]: ...

    async def edit(
        self, route: Route, message_id: str, text: str, session_key: str | None = None
    ) -> None: ...


_MARK = {"running": "…", "ok": "✓", "error": "✗"}


def render_step(step: ToolStep) -> str:
    mark = _MARK[step.status] + (f" {step.error_code}" if step.error_code else "")
    return f"⚙ {step.name}({step.summary}) {mark}"


class ActivityReporter:
    """Tool activity of one run: one message edited in place, or one line per finished tool.

    The run never waits for its progress display: each display is written to the outbox and left to
    the courier, and edits are coalesced in the background, at most one per the platform's
    min_edit_interval_s, so a tool-heavy run does not trip the platform's flood limits either.
    """

    def __init__(
        self, delivery: Outlet, route: Route, run_id: str | None, session_key: str | None = None
    ) -> None:
        self.delivery = delivery
        # Activity is not a reply to the user's message; only the final answer is.
        self.route = Route(route.surface, route.chat_id, route.thread_id)
        self.run_id = run_id
        self.session_key = session_key
        self.steps: list[ToolStep] = []
        # The first display's platform message id, once the courier has sent it.
        self._first: asyncio.Future[str | None] | None = None
        self._lines: list[asyncio.Future[str | None]] = []
        sender = delivery.sender(route.surface)
        self.in_place = bool(sender and sender.supports_edit)
        self.min_interval = float(sender.min_edit_interval_s) if sender is not None else 0.0
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
            self._lines.append(await self.delivery.enqueue(self._outbound(render_step(step))))

    def _outbound(self, text: str) -> Outbound:
        return Outbound(self.route, "activity", text, self.run_id, session_key=self.session_key)

    async def _update(self) -> None:
        if self._first is None:
            # Queued at once, so it always goes before the reply (the courier keeps a chat's order).
            self._shown = self.render()
            self._first = await self.delivery.enqueue(self._outbound(self._shown))
            return
        self._pending.set()
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush(self._first), name="activity-edits")

    async def _flush(self, first: asyncio.Future[str | None]) -> None:
        message_id = await first
        if message_id is None:
            # The first display was suppressed or failed: no message to edit, and no flood of new ones.
            self._pending.clear()
            return
        while self._pending.is_set():
            self._pending.clear()
            text = self.render()
            if text != self._shown:
                self._shown = text
                await self.delivery.edit(self.route, message_id, text, self.session_key)
                if self._pending.is_set():
                    await asyncio.sleep(self.min_interval)

    async def settled(self) -> None:
        """Wait until what was queued so far has been sent (not the edits still coalescing)."""
        waits = [*self._lines, *([self._first] if self._first else [])]
        await asyncio.gather(*waits, return_exceptions=True)

    async def close(self) -> None:
        """Wait until the display shows the final state."""
        waits = [*self._lines, *([self._first] if self._first else [])]
        await asyncio.gather(*waits, return_exceptions=True)
        if self._flusher is not None:
            await self._flusher
