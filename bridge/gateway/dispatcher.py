"""The dispatcher: an Inbound becomes a command answer or a stored message and a run in its lane."""

from __future__ import annotations

import asyncio
import logging

from bridge.agent.runner import RETRY_HINT, AgentRunner
from bridge.config import RunsSettings
from bridge.events import Inbound, Outbound, Route
from bridge.gateway.access import AccessPolicy, Verdict, refusal_text
from bridge.gateway.commands import Commands, parse_command
from bridge.gateway.delivery import Delivery
from bridge.gateway.lanes import Lanes
from bridge.gateway.policy import PolicyGate
from bridge.sessions.service import SessionService
from bridge.store.base import RunRow
from bridge.tools.base import AGENT_CHANNEL

log = logging.getLogger(__name__)


def unsupported_text(kind: str) -> str:
    return f"Sorry, I can't open {kind} messages yet. Please send it as text (a caption works too)."


class Dispatcher:
    """Receives every Inbound from every adapter."""

    def __init__(
        self,
        sessions: SessionService,
        runner: AgentRunner,
        delivery: Delivery,
        lanes: Lanes,
        commands: Commands,
        access: AccessPolicy,
        gate: PolicyGate,
        runs: RunsSettings,
    ) -> None:
        self.runs = runs
        # Set at shutdown: answers in progress finish, new messages are turned away with a notice.
        self.closing = False
        self.access = access
        self.gate = gate
        self.sessions = sessions
        self.runner = runner
        self.delivery = delivery
        self.lanes = lanes
        self.commands = commands

    async def handle(self, inbound: Inbound) -> asyncio.Future[None] | None:
        """Handle one message; the future (if any) resolves when the run answering it has finished."""
        verdict = self.access.check(inbound)
        if verdict is Verdict.IGNORE:
            return None
        key = self.sessions.key_for(inbound)
        owner = self.sessions.is_owner(inbound)
        command = parse_command(inbound.text)
        if command is not None and command.name == "retry" and verdict is Verdict.ALLOW:
            return await self._retry(inbound, key, owner)
        if command is not None and owner:
            # An owner's command is answered whatever the send policy says: it is how they change it.
            answer = await self.commands.handle(command, key, surface=inbound.surface, is_owner=True)
            await self.delivery.send(
                Outbound(inbound.route, "notice", answer, session_key=key, policy_exempt=True)
            )
            return None
        decision = await self.gate.decide(key, inbound.surface)
        if not decision.processes:
            log.debug("ignoring a message in %s: %s", key, decision.reason)
            return None
        if verdict is Verdict.REFUSE:
            await self._notice(inbound, key, refusal_text(inbound))
            return None
        if inbound.unsupported:
            await self._notice(inbound, key, unsupported_text(inbound.unsupported))
            return None
        if command is not None:
            await self._notice(
                inbound,
                key,
                await self.commands.handle(command, key, surface=inbound.surface, is_owner=False),
            )
            return None
        if not inbound.text.strip():
            return None
        if self.closing:
            await self._notice(
                inbound,
                key,
                "Bridge is restarting and not taking new messages. Please send it again in a minute.",
            )
            return None
        if self.lanes.queued(key) >= self.runs.max_queued:
            # Refused before it is stored, and said so: nothing is dropped silently.
            await self._notice(
                inbound,
                key,
                f"⚠️ {self.runs.max_queued} messages are already waiting for an answer here, so I did not "
                "take this one. Please send it again once I have caught up.",
            )
            return None
        session = await self.sessions.active(inbound)
        # Stored before any work begins: whatever happens next, the user's words are kept. In a
        # denied session too: shadow mode reads and answers, it only does not speak.
        stored = await self.sessions.store.add_user_message(
            session.id, inbound.text, sender=inbound.sender, platform_msg_id=inbound.platform_msg_id
        )
        if stored is None:
            log.info("dropping redelivered message %s", inbound.platform_msg_id)
            return None
        if self.runs.queue_mode == "followup":
            return self.lanes.schedule(key, lambda: self._run(key, inbound, upto=stored), merge=False)
        return self.lanes.schedule(key, lambda: self._run(key, inbound))

    async def _retry(self, inbound: Inbound, key: str, owner: bool) -> asyncio.Future[None] | None:
        """/retry: answer the session's last message again, e.g. after an interrupted run."""
        if not owner and not (await self.gate.decide(key, inbound.surface)).processes:
            return None
        session = await self.sessions.active(inbound)
        last = await self.sessions.store.history(session.id, 1, chat_only=True)
        if not last or last[-1].kind != "user":
            await self._notice(inbound, key, "Nothing to retry: your last message has its answer.")
            return None
        if self.lanes.busy(key):
            await self._notice(
                inbound, key, "I am still answering; /stop first if you want me to start over."
            )
            return None
        return self.lanes.schedule(key, lambda: self._run(key, inbound))

    async def tell_interrupted(self, run: RunRow) -> None:
        """Tell the chat of a run a crash cut short that its message is safe and can be retried."""
        session = await self.sessions.store.get_session(run.session_id)
        route = Route.from_json(session.last_route) if session else None
        if session is None or not session.active or route is None or run.channel == AGENT_CHANNEL:
            return
        rows = await self.sessions.store.history(session.id, 50, chat_only=True)
        asked = next((r.content for r in reversed(rows) if r.id == run.input_upto), None)
        quoted = f" (“{asked[:80]}{'…' if len(asked) > 80 else ''}”)" if asked else ""
        await self.delivery.send(
            Outbound(
                route,
                "notice",
                f"⚠️ I was interrupted (Bridge restarted) while answering your message{quoted}. "
                "It is saved: send /retry and I will answer it, or just write again.",
                session_key=session.key,
                dedupe_key=f"interrupted:{run.id}",
            )
        )

    async def _notice(self, inbound: Inbound, key: str, text: str) -> None:
        await self.delivery.send(Outbound(inbound.route, "notice", text, session_key=key))

    async def _run(self, key: str, inbound: Inbound, upto: int | None = None) -> None:
        # Read the active session now, not when the message came: /clear may have replaced it.
        session = await self.sessions.active_for_key(key)
        route = inbound.route
        async with self.delivery.typing(route, key):
            reporter = self.delivery.activity(route, session_key=key)
            try:
                result = await self.runner.run(session, channel=inbound.surface, observer=reporter, upto=upto)
            except asyncio.CancelledError:
                if self.closing:
                    # Stopped by the shutdown's grace period running out: say so, the message is kept.
                    await asyncio.shield(
                        self._notice(
                            inbound,
                            key,
                            "⚠️ Bridge is shutting down and had to stop this answer. Your message is "
                            "saved: send /retry once I am back.",
                        )
                    )
                raise
            except Exception as exc:
                await reporter.close()
                log.exception("run for %s failed", key)
                await self._notice(
                    inbound,
                    key,
                    f"⚠️ Something went wrong while answering ({type(exc).__name__}). {RETRY_HINT}",
                )
                return
            await reporter.close()
        await self.delivery.send(
            Outbound(
                route,
                "reply",
                result.reply,
                result.run_id,
                session_key=key,
                dedupe_key=f"reply:{result.run_id}",
            )
        )
