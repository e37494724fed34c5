"""Runs nobody typed (a task's firing, a webhook's event): a prompt into a session of its own, the
answer to a chat through the outbox, under that chat's send policy."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from bridge.events import Outbound, Route
from bridge.sessions.authority import Authority
from bridge.sessions.service import chat_route
from bridge.store.base import OutboxItem
from bridge.store.tables import DatabaseStore

if TYPE_CHECKING:
    from bridge.agent.runner import AgentRunner
    from bridge.gateway.delivery import Delivery
    from bridge.gateway.lanes import Lanes

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Outcome:
    # not_begun: the run never started (a shutdown dropped it from its lane's queue); it is the
    # caller's to leave for the next start, which runs it. interrupted: it began and was stopped
    # (/stop, /clear of its session, or a shutdown past its grace period).
    status: Literal["ok", "error", "not_begun", "interrupted"]
    run_id: str
    # Why it failed, in a line for the log, the firing's record and the chat.
    detail: str | None = None


class Headless:
    """Runs a prompt in a session and delivers the answer elsewhere; also sends such runs' notices."""

    def __init__(self, store: DatabaseStore, runner: AgentRunner, lanes: Lanes, delivery: Delivery) -> None:
        self.store = store
        self.runner = runner
        self.lanes = lanes
        self.delivery = delivery

    def canonical(self, key: str) -> str:
        """An owner's DM key names main: a task or hook delivering there must not open a second
        session beside it, with its own history and send policy."""
        return self.runner.authorities.canonical(key)

    async def route(self, key: str, fallback: str | None = None) -> Route | None:
        """Where a chat is: where it was last written in, else `fallback` (a stored route), else what
        its key says."""
        return await chat_route(self.store, self.canonical(key), fallback)

    async def notice(self, key: str, text: str, dedupe: str, *, fallback: str | None = None) -> None:
        """A notice to a chat, once per `dedupe`, under its send policy; logged where it has no address."""
        key = self.canonical(key)
        route = await self.route(key, fallback)
        if route is None:
            log.warning("a notice for %s has no chat to go to: %s", key, text)
            return
        await self.delivery.send(Outbound(route, "notice", text, session_key=key, dedupe_key=dedupe))

    async def run(
        self,
        *,
        key: str,
        prompt: str,
        sender: str,
        channel: str,
        run_id: str,
        deliver_to: str,
        authority: Authority,
        fallback: str | None = None,
    ) -> Outcome:
        """The prompt as a user message of the active session of `key`, a run there (in the key's lane,
        so runs of one session never overlap), and its answer queued in the transaction that ends the
        run, then sent. The run acts with `authority` (a task's maker's, a hook's). Returns once it is
        sent (or held back by the policy), or once a shutdown dropped it from the lane's queue unbegun."""
        deliver_to = self.canonical(deliver_to)
        route = await self.route(deliver_to, fallback)
        if route is None:
            # Checked first: a run whose answer nobody could receive would only spend tokens.
            detail = (
                f"no chat to deliver to: nobody has written in '{deliver_to}' yet, so its address is unknown"
            )
            return Outcome("error", run_id, detail)
        outcome: Outcome | None = None
        began = False

        async def plan(run: str, text: str) -> list[OutboxItem]:
            return await self.delivery.plan_reply(
                route, text, run, session_key=deliver_to, dedupe_key=f"{channel}:{run}"
            )

        async def job() -> None:
            nonlocal outcome, began
            began = True
            try:
                session = await self.store.ensure_active_session(key)
                await self.store.add_user_message(session.id, prompt, sender=sender, queued=False)
                result = await self.runner.run(
                    session, channel=channel, run_id=run_id, reply=plan, authority=authority
                )
            except Exception as exc:
                log.exception("the run of %s failed", key)
                outcome = Outcome("error", run_id, f"{type(exc).__name__}: {exc}"[:500])
                return
            # "stopped" (cut short for going in circles) was still answered, and the answer sent.
            answered = result.status in ("ok", "stopped")
            detail = None if result.status == "ok" else (result.stop_reason or result.reply)[:500]
            outcome = Outcome("ok" if answered else "error", result.run_id, detail)
            if result.outbox:
                # Waited for, as a chat's turn waits for its reply: the caller records the end after.
                await self.delivery.deliver(result.outbox)

        await self.lanes.schedule(key, job, merge=False)
        if outcome is not None:
            return outcome
        if not began:
            return Outcome("not_begun", run_id, "dropped from the queue before it began")
        return Outcome("interrupted", run_id, "stopped before it ended")
