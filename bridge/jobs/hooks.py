"""Webhook events ([[hooks]]): a request the HTTP route found authentic is stored as an event, then run
in a `hook:` session with the hook's authority, and the answer goes to the hook's chat through the
outbox, under that chat's send policy."""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import Any

from bridge.config.tasks import HookSettings
from bridge.jobs.loop import DueLoop
from bridge.jobs.tasks import ANSWERED
from bridge.store.hooks import HookEvent, HookState, Nonce
from bridge.store.sessions import new_id
from bridge.tasks import template
from bridge.tasks.hooks import hook_prompt

log = logging.getLogger(__name__)

# The channel a hook's run is marked with (traces, runs); no person is behind it.
HOOK_CHANNEL = "hook"
# Events one pass of the loop takes up; a larger burst is taken in passes one after another.
EVENTS_PER_PASS = 100


class HookService(DueLoop):
    """Stores the events the HTTP route accepts, and runs each once, in the order they came."""

    name = "hooks"

    @property
    def hooks(self) -> dict[str, HookSettings]:
        """The enabled hooks by name."""
        return {hook.name: hook for hook in self.settings.hooks if hook.enabled}

    def get(self, name: str) -> HookSettings | None:
        return self.hooks.get(name)

    async def accept(
        self, hook: HookSettings, body: Any, key: str | None, once: Nonce | None = None
    ) -> tuple[HookEvent, bool] | None:
        """Store an event (True), or find the one stored before with the same key (False); None when
        `once`, the request's signature, was taken before (a replay: nothing stored). Its run starts
        after this returns: the sender's answer waits for the store, never for the model."""
        name = secrets.token_hex(4)
        prompt = template.render(hook.prompt, body=body, hook=hook.name, event_id=key or name)
        session, now = hook.session_key(name), self.clock()
        if once is None:
            stored = await self.store.add_hook_event(hook.name, key, session, hook.deliver_to, prompt, now)
        else:
            taken = await self.store.add_signed_hook_event(
                once, hook.name, key, session, hook.deliver_to, prompt, now
            )
            if taken is None:
                return None
            stored = taken
        if stored[1]:
            self.wake()
        return stored

    async def start(self, *, alone: bool) -> None:
        """Begin running events; the first pass takes those stored while the bot was down. `alone`: no
        other process shares the database, so events left running are a crash's, settled from their
        run's own row, never run twice."""
        if alone:
            for event in await self.store.hook_events_in(("running",), limit=10_000):
                await self._settle(event)
        self.begin()

    async def tick(self) -> int:
        started = 0
        batch = await self.store.hook_events_in(("pending",), limit=EVENTS_PER_PASS)
        if len(batch) == EVENTS_PER_PASS:
            self.wake()  # a burst: the next pass follows at once, not after the poll interval
        for event in batch:
            run_id = new_id()
            if await self.store.claim_hook_event(event.id, run_id, self.clock()):
                self.spawn(self._run_event(event, run_id), f"hook:{event.hook}:{event.id}")
                started += 1
        return started

    async def _run_event(self, event: HookEvent, run_id: str) -> None:
        try:
            outcome = await self.headless.run(
                key=event.session_key,
                prompt=hook_prompt(event, self.settings.agent.timezone),
                sender=f"hook:{event.hook}",
                channel=HOOK_CHANNEL,
                run_id=run_id,
                deliver_to=event.deliver_to,
                authority=self.authorities.for_hook(event.hook, event.deliver_to),
            )
        except asyncio.CancelledError:
            # Stopped with the bot: a run that never began is left for the next start to run.
            await asyncio.shield(self._stopped(event, run_id))
            raise
        except Exception as exc:
            log.exception("webhook %s: event %s failed", event.hook, event.id)
            await self._finish(event, "error", f"{type(exc).__name__}: {exc}"[:500])
            return
        if outcome.status == "not_begun":
            log.info("webhook %s: event %s waits for the next start", event.hook, event.id)
        elif outcome.status == "interrupted":
            await self._cut_short(event, "before it finished")
        else:
            await self._finish(event, outcome.status, outcome.detail)

    async def _stopped(self, event: HookEvent, run_id: str) -> None:
        """The bot stops while an event runs: one whose run never began is left for the next start."""
        if await self.store.get_run(run_id) is not None:
            await self._cut_short(event, "by a shutdown")

    async def _ended(self, event: HookEvent, state: HookState, detail: str | None) -> None:
        """Record how an event's run ended, and count it."""
        await self.store.finish_hook_event(event.id, state, self.clock(), detail)
        if self.metrics is not None:
            self.metrics.hook_event(event.hook, state)

    async def _finish(self, event: HookEvent, state: HookState, detail: str | None) -> None:
        await self._ended(event, state, detail)
        if state == "error":
            log.warning("webhook %s: event %s was not answered: %s", event.hook, event.id, detail)
            await self.headless.notice(
                event.deliver_to,
                f"⚠️ A '{event.hook}' webhook event ({event.event_key or event.id}) could not be answered: "
                f"{detail or 'unknown error'}.",
                f"hook-failed:{event.id}",
            )

    async def _settle(self, event: HookEvent) -> None:
        """An event a crash left running. Its run never began (no row: nothing was asked or sent): it
        runs now, still once. Its run ended (the answer was queued with that end, and the outbox's
        recovery sends it): ok. Otherwise it is interrupted, and its chat is told."""
        run = await self.store.get_run(event.run_id) if event.run_id else None
        if run is None and event.run_id:
            log.info(
                "webhook %s: event %s never began before a restart; running it now", event.hook, event.id
            )
            self.spawn(self._run_event(event, event.run_id), f"hook:{event.hook}:{event.id}")
        elif run is not None and run.status in ANSWERED:
            await self._ended(event, "ok", None)
        else:
            await self._cut_short(event, "by a restart")

    async def _cut_short(self, event: HookEvent, why: str) -> None:
        """An event whose run began and did not end: interrupted, never run again, and told."""
        log.warning("webhook %s: event %s was cut short %s", event.hook, event.id, why)
        await self._ended(event, "interrupted", f"cut short {why}")
        await self.headless.notice(
            event.deliver_to,
            f"⚠️ A '{event.hook}' webhook event ({event.event_key or event.id}) was cut short {why} and was "
            "not answered.",
            f"hook-interrupted:{event.id}",
        )
