"""Agent-to-agent messaging: sessions_send's run in the target, the reply-back ping-pong, the announce."""

from __future__ import annotations

import asyncio
import logging
import secrets
from dataclasses import dataclass
from typing import Any

from bridge.agent.runner import AgentRunner
from bridge.agent.runstate import RunResult
from bridge.config import Settings
from bridge.events import Outbound, Route
from bridge.gateway.delivery import Delivery
from bridge.gateway.lanes import Lanes, SharedLanes
from bridge.gateway.policy import PolicyGate
from bridge.sessions.authority import Authority
from bridge.store.base import SessionRow
from bridge.store.tables import DatabaseStore
from bridge.tools.base import AGENT_CHANNEL

log = logging.getLogger(__name__)

REPLY_SKIP = "REPLY_SKIP"
ANNOUNCE_SKIP = "ANNOUNCE_SKIP"


def request_text(message: str) -> str:
    return f"{message}\n\n(Your reply goes back to that agent, not to this chat.)"


def reply_text(reply: str) -> str:
    return (
        f"{reply}\n\n(Reply to continue this agent-to-agent exchange, or reply exactly {REPLY_SKIP} "
        "to end it. Your reply goes to that agent, not to this chat.)"
    )


def announce_text(requester: str, request: str, first_reply: str, latest: str) -> str:
    return (
        f"The agent-to-agent exchange with session '{requester}' has ended.\n"
        f"Its request: {request}\n"
        f"Your first reply: {first_reply}\n"
        f"Latest reply in the exchange: {latest}\n\n"
        "If the people in this chat should hear about it, write the message to post here now. "
        f"Otherwise reply exactly {ANNOUNCE_SKIP}."
    )


@dataclass(slots=True)
class _Exchange:
    id: str
    requester: SessionRow
    target: SessionRow
    message: str
    # The requester's run's authority; the target's runs get it narrowed to the target's chat.
    authority: Authority

    def authority_in(self, session: SessionRow) -> Authority:
        if session.key == self.requester.key:
            return self.authority
        return self.authority.narrowed(session.key, f"agent:{self.requester.key}")


class AgentToAgent:
    """Carries one session's message to another session's agent and the exchange that follows."""

    def __init__(
        self,
        settings: Settings,
        store: DatabaseStore,
        runner: AgentRunner,
        lanes: Lanes,
        delivery: Delivery,
        gate: PolicyGate,
    ) -> None:
        self.settings = settings
        self.store = store
        self.runner = runner
        self.lanes = lanes
        # Set where several workers share the database (bridge.gateway.sharing).
        self.share: SharedLanes | None = None
        self.delivery = delivery
        self.gate = gate
        self._tasks: set[asyncio.Task[None]] = set()

    async def send(
        self,
        requester: SessionRow,
        target: SessionRow,
        message: str,
        timeout_s: float,
        authority: Authority,
    ) -> dict[str, Any]:
        """Start the exchange; wait up to timeout_s for the target's first reply (0: do not wait)."""
        decision = await self.gate.decide(target.key)
        if not decision.processes:
            return {
                "run_id": None,
                "status": "error",
                "error": f"The send policy ignores session '{target.key}' ({decision.reason}); "
                "the bot does not work there.",
            }
        exchange = _Exchange(secrets.token_hex(8), requester, target, message, authority)
        run_id = secrets.token_hex(8)
        primary: asyncio.Future[RunResult] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(self._exchange(exchange, run_id, primary), name=f"a2a:{exchange.id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if timeout_s <= 0:
            return {"run_id": run_id, "status": "accepted"}
        try:
            result = await asyncio.wait_for(asyncio.shield(primary), timeout_s)
        except TimeoutError:
            return {
                "run_id": run_id,
                "status": "timeout",
                "error": f"No reply within {timeout_s:g} s. The run continues; read its answer later "
                f"with sessions_history('{target.key}').",
            }
        except asyncio.CancelledError:
            if primary.cancelled():
                return {"run_id": run_id, "status": "error", "error": "The run was cancelled."}
            raise
        if result.status != "ok":
            return {"run_id": run_id, "status": "error", "error": result.reply}
        return {"run_id": run_id, "status": "ok", "reply": result.reply}

    async def _exchange(self, exchange: _Exchange, run_id: str, primary: asyncio.Future[RunResult]) -> None:
        try:
            first = await self._turn(exchange, exchange.target, request_text(exchange.message), run_id)
            if first is None:
                primary.cancel()
                return
            primary.set_result(first)
            if first.status != "ok":
                return
            latest = await self._ping_pong(exchange, first.reply)
            await self._announce(exchange, first.reply, latest)
        except asyncio.CancelledError:
            primary.cancel()
            raise
        except Exception:
            log.exception("agent-to-agent exchange %s failed", exchange.id)
            if not primary.done():
                primary.cancel()

    async def _ping_pong(self, exchange: _Exchange, reply: str) -> str:
        """Requester and target take turns until one replies exactly REPLY_SKIP or the turns run out."""
        latest = reply
        speakers = (exchange.requester, exchange.target)
        for turn in range(self.settings.session.agent_to_agent.max_ping_pong_turns):
            result = await self._turn(exchange, speakers[turn % 2], reply_text(latest))
            if result is None or result.status != "ok" or result.reply.strip() == REPLY_SKIP:
                break
            latest = result.reply
        return latest

    async def _announce(self, exchange: _Exchange, first_reply: str, latest: str) -> None:
        target = exchange.target
        text = announce_text(exchange.requester.key, exchange.message, first_reply, latest)
        result = await self._turn(exchange, target, text)
        if result is None or result.status != "ok" or result.reply.strip() == ANNOUNCE_SKIP:
            return
        session = await self.store.active_session(target.key)
        route = Route.from_json(session.last_route if session else target.last_route)
        if route is None:
            log.info("announce of %s has no chat to go to (session %s)", exchange.id, target.key)
            return
        # The dedupe key makes the outbox refuse a second announce of the same exchange.
        await self.delivery.send(
            Outbound(
                route,
                "reply",
                result.reply,
                result.run_id,
                session_key=target.key,
                dedupe_key=f"announce:{exchange.id}",
            )
        )

    async def _turn(
        self, exchange: _Exchange, to: SessionRow, text: str, run_id: str | None = None
    ) -> RunResult | None:
        """Inject `text` into `to`'s session as the other side's agent and run it there, in `to`'s
        lane, with the exchange's authority as it stands in `to`.

        None when the run never happened or was cancelled (/clear, /stop or shutdown in that chat).
        """
        outcome: list[RunResult] = []
        from_ = exchange.target if to.key == exchange.requester.key else exchange.requester
        authority = exchange.authority_in(to)

        async def job() -> None:
            # Injected when the lane gets to it, so a chat message queued earlier is answered first.
            session = await self.store.ensure_active_session(to.key)
            await self.store.add_user_message(session.id, text, via_session=from_.key)
            outcome.append(
                await self.runner.run(session, channel=AGENT_CHANNEL, run_id=run_id, authority=authority)
            )

        if self.share is not None:
            # Workers share the chats: the turn runs where this worker holds `to`'s lease.
            await self.share.when_leased(to.key, job)
        else:
            await self.lanes.schedule(to.key, job, merge=False)
        return outcome[0] if outcome else None

    async def idle(self) -> None:
        """Wait until every exchange in progress has ended (announce included)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
