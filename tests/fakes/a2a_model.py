"""A scripted model for agent-to-agent tests: it answers by what the last message asks of it.

One model serves every session, so it tells the turns apart by the text Bridge injects: a request
from another agent, a reply-back turn, or the announce step.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from devkit.fakes.openai_server import Reply, text, tool_call

AGENT_MARK = "[Agent-to-agent message from the agent of session"


@dataclass
class AgentToAgentModel:
    """Call it with a request body (FakeOpenAI script).

    A human message containing `trigger` makes the agent load `sessions` and call sessions_send
    with `send_args`. An injected request gets `target_reply` (after `target_delay_s`); reply-back
    turns take the next entry of `requester_turns` / `target_turns` (REPLY_SKIP when empty); the
    announce step gets `announce`.
    """

    send_args: dict[str, Any]
    trigger: str = "ask the other chat"
    target_reply: str = "All quiet here."
    target_delay_s: float = 0.0
    requester_turns: deque[str] = field(default_factory=deque)
    target_turns: deque[str] = field(default_factory=deque)
    announce: str = "ANNOUNCE_SKIP"
    # What each kind of turn saw, for assertions: "request", "reply", "announce", "send_result".
    seen: dict[str, list[str]] = field(default_factory=dict)

    def _saw(self, kind: str, content: str) -> None:
        self.seen.setdefault(kind, []).append(content)

    async def __call__(self, request: dict[str, Any]) -> Reply:
        messages = request["messages"]
        last = messages[-1]
        if last["role"] == "tool":
            call = _last_call(messages)
            if call == "load_tool_group":
                return tool_call("sessions_send", self.send_args)
            self._saw("send_result", str(last.get("content")))
            return text(f"Relayed: {last.get('content')}")
        content = str(last.get("content") or "")
        if content.startswith(AGENT_MARK):
            if "has ended" in content:
                self._saw("announce", content)
                return text(self.announce)
            if "Reply to continue" in content:
                self._saw("reply", content)
                from_target = f"session '{self.send_args['session_key']}'" in content.splitlines()[0]
                turns = self.requester_turns if from_target else self.target_turns
                return text(turns.popleft() if turns else "REPLY_SKIP")
            self._saw("request", content)
            if self.target_delay_s:
                await asyncio.sleep(self.target_delay_s)
            return text(self.target_reply)
        if self.trigger in content:
            return tool_call("load_tool_group", {"group_name": "sessions"})
        return text(f"ok: {content}")


def _last_call(messages: list[dict[str, Any]]) -> str | None:
    for message in reversed(messages):
        for call in reversed(message.get("tool_calls") or []):
            return str(call["function"]["name"])
    return None


def tool_result(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON of the last tool message."""
    return dict(json.loads(messages[-1]["content"]))
