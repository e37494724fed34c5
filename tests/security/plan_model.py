"""A fake model that follows a plan of tool calls, as a hostile chat member would steer the real one.

A plan is picked by a marker word in the newest user message (a chat message, or a task's or hook's
prompt). The model makes the plan's calls one after another, each after the previous one's result,
then answers with every result it got, so whatever a tool let through ends up in the chat, where the
test looks for it. A request with no plan is answered "ok".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from devkit.fakes.openai_server import Reply, text, tool_call

Call = tuple[str, dict[str, Any]]
RESULTS = "RESULTS:"
# Ends every answer with results: a long one is split into several messages, and this is in the last.
END = "END-OF-RESULTS"


def _since_last_user(messages: list[dict[str, Any]]) -> tuple[str, list[str]]:
    """The newest user message's text, and the tool results that came after it."""
    results: list[str] = []
    for message in reversed(messages):
        if message.get("role") == "tool":
            results.insert(0, str(message.get("content", "")))
        elif message.get("role") == "user":
            content = message.get("content", "")
            if isinstance(content, list):
                content = " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
            return str(content), results
    return "", results


@dataclass
class PlanModel:
    """Call it with a chat request body; `plans` maps a marker word to the calls to make."""

    plans: Mapping[str, list[Call]]
    # Every answer it gave that carried results, in order: what the tools let through.
    answers: list[str] = field(default_factory=list)

    def __call__(self, request: dict[str, Any]) -> Reply:
        said, results = _since_last_user(request["messages"])
        plan = next((calls for marker, calls in self.plans.items() if marker in said), None)
        if plan is None:
            return text("ok")
        if len(results) < len(plan):
            name, args = plan[len(results)]
            return tool_call(name, args)
        # Plain text, not JSON: the chat renders it from Markdown, which would eat JSON's escapes.
        answer = f"{RESULTS} {' | '.join(results)} {END}"
        self.answers.append(answer)
        return text(answer)
