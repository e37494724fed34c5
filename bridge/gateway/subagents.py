"""Sub-agents (spawn_agent): a task run in a session of its own, its answer back to the parent or its chat.

A run that calls spawn_agent is the *parent*; the sub-agent it starts is the *child*:

- **Its own context.** The child runs in a new session `agent:<parent session id>:<n>` (n counts the
  parent session's children from 1), in a lane of its own. Its history is the task alone: it sees
  nothing of the parent's chat.
- **At most the parent's authority.** The child acts with the parent run's authority narrowed to its
  own session, a `spawn:` step in the chain (Authority.spawned): a member's child is a member's, and
  even an owner's reads no other chat. Depth 1: a child never starts another (the tool refuses it).
- **Where the answer goes.** With `wait`, the child's answer is the tool's result, if it comes within
  [agent] subagent_wait_s. Otherwise (no wait, or the wait ran out, or the parent stopped waiting) it
  is posted in the parent's chat (for a task's or a hook's run, the chat it acts in) as a reply,
  through the outbox under that chat's send policy, once: its rows are written with the child's
  answer in one transaction, with a dedupe key. Which way it goes is decided in one step of the event
  loop, so an answer never goes both ways.
- **Its agent.** The parent chat's own agent ([agents.NAME], or the default one), so a child never
  has more tool groups than its parent; an owner may name another (`agent`), as with /agent.
- **Limits.** At most [agent] max_subagents children run at once for the chat where the chain began,
  counted against it as caps are; `/stop` and `/clear` in the parent's chat stop its children too.
- **Traces.** The child's run row names its parent's run (`parent_run_id`): the run page and
  `bridge trace` list a run's sub-agents.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from bridge.agent.runner import RETRY_HINT, AgentRunner
from bridge.agent.runstate import RunResult
from bridge.config import Settings
from bridge.config.agents import DEFAULT_AGENT
from bridge.gateway.delivery import Delivery
from bridge.gateway.lanes import Lanes
from bridge.sessions import keys
from bridge.sessions.authority import Authority
from bridge.sessions.service import chat_route
from bridge.store.base import OutboxItem, SessionRow
from bridge.store.sessions import new_id
from bridge.store.tables import DatabaseStore
from bridge.tools.base import SUBAGENT_CHANNEL, ToolResult

log = logging.getLogger(__name__)

# How much of the task names a child's answer when it is posted in the chat.
TASK_SHOWN = 80


def task_text(task: str) -> str:
    """The child's one message: the task, and how its answer is used (it cannot ask back)."""
    return (
        f"{task}\n\n(You are a sub-agent: do this task on your own with your tools, then answer with "
        "the result. Nobody reads along and nobody can answer questions; your answer is the result.)"
    )


def chat_text(task: str, answer: str) -> str:
    """A child's answer as the parent's chat reads it, later than the turn that asked for it."""
    shown = " ".join(task.split())
    if len(shown) > TASK_SHOWN:
        shown = shown[: TASK_SHOWN - 1] + "…"
    if answer.endswith(RETRY_HINT):
        # A failed run's notice tells the chat to /retry, which would redo the parent's last message,
        # not the child's task.
        reason = answer.removesuffix(RETRY_HINT).strip().removeprefix("⚠️").strip()
        return f'⚠️ The sub-agent working on "{shown}" could not finish: {reason}'
    return f'Sub-agent result for "{shown}":\n\n{answer}'


@dataclass(slots=True)
class _Child:
    key: str
    run_id: str
    task: str
    # The parent's session key: where /stop and /clear stop the child, and where its answer goes.
    parent_key: str
    # The chat the parent run acts in: where the answer goes when the parent's session is no chat
    # (a task's firing, a hook's event).
    chat: str
    # The chat where the chain began: the cap counts here.
    origin: str
    # The parent run waits for the answer as its tool result; False once it stopped waiting.
    parent_waiting: bool
    # The answer is going to the parent's tool result (decided when the run ended): not to the chat.
    to_parent: bool = False
    # Stopped (/stop, /clear) before its run began: a run slot freed later must not start it.
    stopped: bool = False
    # The child's result, or None when it never ran or was stopped.
    done: asyncio.Future[RunResult | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class SubAgents:
    """Starts sub-agents, tracks those running, and stops a chat's children (bridge.tools.base.
    SubAgentSpawner, for spawn_agent)."""

    def __init__(
        self, settings: Settings, store: DatabaseStore, runner: AgentRunner, lanes: Lanes, delivery: Delivery
    ) -> None:
        self.settings = settings
        self.store = store
        self.runner = runner
        self.lanes = lanes
        self.delivery = delivery
        # The children running (or waiting for a run slot), by their session key.
        self._running: dict[str, _Child] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        # A child's place under the limit, its number and its session are taken in one step per process.
        self._numbering = asyncio.Lock()

    def running(self, origin: str | None = None) -> int:
        """Children running, all of them or those of the chain that began in `origin`."""
        return sum(1 for child in self._running.values() if origin is None or child.origin == origin)

    def children_of(self, parent_key: str) -> list[str]:
        """The keys of the children running for the session key `parent_key`."""
        return [child.key for child in self._running.values() if child.parent_key == parent_key]

    async def spawn(
        self,
        parent: SessionRow,
        parent_run_id: str,
        authority: Authority,
        task: str,
        *,
        agent: str | None,
        wait: bool,
    ) -> ToolResult:
        limit = self.settings.agent.max_subagents
        if limit == 0:
            return ToolResult.error(
                "unavailable", "Sub-agents are turned off here ([agent] max_subagents = 0); do it yourself."
            )
        chosen = self._agent(parent, authority, agent)
        if isinstance(chosen, ToolResult):
            return chosen
        # Counted and registered in one step: two parents of one chain cannot both take the last place.
        async with self._numbering:
            if self.running(authority.origin) >= limit:
                return ToolResult.error(
                    "limit",
                    f"{limit} sub-agent(s) are already running for this chat, the most allowed. Wait "
                    "for one to finish, or do this yourself.",
                )
            session = await self._new_session(parent)
            child = _Child(
                session.key,
                new_id(),
                task,
                parent.key,
                authority.chat,
                authority.origin,
                parent_waiting=wait,
            )
            self._running[child.key] = child
        started = asyncio.create_task(
            self._run(child, session, chosen, authority.spawned(child.key), parent_run_id),
            name=f"subagent:{child.key}",
        )
        self._tasks.add(started)
        started.add_done_callback(self._tasks.discard)
        log.info(
            "run %s in %s started sub-agent %s (run %s)", parent_run_id, parent.key, child.key, child.run_id
        )
        if not wait:
            return ToolResult.success(
                {
                    "status": "started",
                    "session_key": child.key,
                    "run_id": child.run_id,
                    "note": "It works on its own now; its answer will be posted in this chat when "
                    "it is done. You need not wait for it.",
                }
            )
        return await self._wait(child)

    def _agent(self, parent: SessionRow, authority: Authority, name: str | None) -> str | ToolResult | None:
        """The [agents.NAME] the child's session is set to (None: the default agent), or the refusal.
        Left out, it is the parent chat's own agent: a child never has more tool groups than that."""
        agents = self.runner.agents
        own = agents.of(parent)
        if name is None or name == own.name:
            return None if own.is_default else own.name
        if name != DEFAULT_AGENT and agents.agents.get(name) is None:
            return ToolResult.error(
                "unknown_agent",
                f"There is no agent named '{name}' (agents: {', '.join(agents.agents.names)}). Leave "
                "'agent' out to use this chat's own agent.",
            )
        if not authority.may_choose_agent:
            return ToolResult.error(
                "not_allowed",
                f"Only an owner of this bot can run a sub-agent as another agent than this chat's "
                f"({own.name}); leave 'agent' out.",
            )
        return None if name == DEFAULT_AGENT else name

    async def _new_session(self, parent: SessionRow) -> SessionRow:
        """The next child's session under `parent`: a new key, so it starts with no history."""
        prefix = f"agent:{parent.id}:"
        taken = [keys.parse(key).thread_id for key in await self.store.keys_under(prefix)]
        number = max((int(n) for n in taken if n is not None), default=0) + 1
        return await self.store.ensure_active_session(str(keys.agent(parent.id, number)))

    async def _wait(self, child: _Child) -> ToolResult:
        wait_s = self.settings.agent.subagent_wait_s
        try:
            result = await asyncio.wait_for(asyncio.shield(child.done), wait_s)
        except TimeoutError:
            if not child.to_parent:
                # The child goes on; its answer goes to the chat instead (`plan` in _run).
                child.parent_waiting = False
                return ToolResult.success(
                    {
                        "status": "running",
                        "session_key": child.key,
                        "run_id": child.run_id,
                        "note": f"No answer within {wait_s:g} s. The sub-agent goes on; its answer will "
                        "be posted in this chat when it is done.",
                    }
                )
            # Its answer is being stored for this very wait: it is moments away.
            result = await child.done
        except asyncio.CancelledError:
            # The parent was stopped, or its run or tool call ran out of time: nobody reads the
            # answer here any more, so it goes to the chat.
            child.parent_waiting = False
            raise
        return _result(child, result)

    async def _run(
        self, child: _Child, session: SessionRow, agent: str | None, authority: Authority, parent_run_id: str
    ) -> None:
        outcome: list[RunResult] = []

        async def plan(run_id: str, text: str) -> list[OutboxItem]:
            # Decided before any await: an answer goes to the waiting parent or to the chat, never both.
            if child.parent_waiting:
                child.to_parent = True
                return []
            for key in dict.fromkeys((child.parent_key, child.chat)):
                route = await chat_route(self.store, key)
                if route is not None:
                    return await self.delivery.plan_reply(
                        route,
                        chat_text(child.task, text),
                        run_id,
                        session_key=key,
                        dedupe_key=f"spawn:{run_id}",
                    )
            log.warning("sub-agent %s: its answer has no chat to go to (%s)", child.key, child.parent_key)
            return []

        async def job() -> None:
            if child.stopped:
                return
            if agent is not None:
                # On the session row, as /agent sets a chat's: the runner picks the agent by it.
                await self.store.set_agent(session.id, agent)
            current = await self.store.active_session(child.key) or session
            # The task is marked as from the parent's agent: never taken for a person's message, by
            # the prompt (bridge.agent.history) or by a restart that answers what was left unanswered.
            await self.store.add_user_message(current.id, task_text(child.task), via_session=child.parent_key)
            result = await self.runner.run(
                current,
                channel=SUBAGENT_CHANNEL,
                run_id=child.run_id,
                reply=plan,
                authority=authority,
                parent_run_id=parent_run_id,
            )
            outcome.append(result)
            if result.outbox:
                await self.delivery.deliver(result.outbox)

        try:
            await self.lanes.schedule(child.key, job, merge=False)
        except Exception:
            log.exception("sub-agent %s failed", child.key)
        finally:
            self._running.pop(child.key, None)
            if not child.done.done():
                child.done.set_result(outcome[0] if outcome else None)

    async def stop_children(self, parent_key: str) -> int:
        """Stop the children of `parent_key` (/stop, /clear there); returns how many were stopped."""
        stopped = 0
        for key in self.children_of(parent_key):
            child = self._running.get(key)
            if child is not None:
                child.parent_waiting = False
                child.stopped = True
            if await self.lanes.cancel(key) or key in self._running:
                stopped += 1
        return stopped

    async def idle(self) -> None:
        """Wait until every child has ended and its answer was delivered."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        for key in list(self._running):
            await self.lanes.cancel(key)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def _result(child: _Child, result: RunResult | None) -> ToolResult:
    shown: dict[str, Any] = {"session_key": child.key, "run_id": child.run_id}
    if result is None:
        outcome = {**shown, "status": "error", "error": "The sub-agent was stopped before it answered."}
        return ToolResult(ok=False, content=json.dumps(outcome, ensure_ascii=False), code="cancelled")
    if result.status not in ("ok", "stopped"):
        error = result.reply.removesuffix(RETRY_HINT).strip()
        outcome = {**shown, "status": "error", "error": error}
        # The documented JSON shape, marked failed so the run's failure breaker counts it.
        return ToolResult(ok=False, content=json.dumps(outcome, ensure_ascii=False), code="run_failed")
    return ToolResult.success({**shown, "status": "ok", "answer": result.reply})
