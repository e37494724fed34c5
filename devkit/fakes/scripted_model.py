"""A scripted model that trusts its history, like the seeds' failing case.

It loads a group once, and in later turns calls the group's tools directly because it can see the
successful load in the history, which is exactly what breaks a bot that forgets loaded groups.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from devkit.fakes.openai_server import Reply, text, tool_call

# user word → (group, tool to use, arguments)
INTENTS: dict[str, tuple[str | None, str, dict[str, Any]]] = {
    "sessions": ("sessions", "sessions_list", {}),
    "time": (None, "get_current_time", {}),
    "files": ("files", "list_files", {}),
    "pdf": ("pdf", "pdf_info", {"path": "report.pdf"}),
}


def _loaded_in_history(messages: list[dict[str, Any]], group: str) -> bool:
    """True when the transcript shows a load_tool_group(group) call whose result was not an error."""
    ids = set()
    for message in messages:
        for call in message.get("tool_calls") or []:
            fn = call["function"]
            if fn["name"] == "load_tool_group":
                try:
                    if json.loads(fn["arguments"]).get("group_name") == group:
                        ids.add(call["id"])
                except ValueError:
                    continue
        if (
            message.get("role") == "tool"
            and message.get("tool_call_id") in ids
            and not str(message.get("content", "")).startswith("Error")
        ):
            return True
    return False


@dataclass
class HistoryTrustingModel:
    """Call it with a request body; it answers like a model that believes its own history."""

    seen_errors: list[str] = field(default_factory=list)

    def __call__(self, request: dict[str, Any]) -> Reply:
        messages = request["messages"]
        last = messages[-1]
        if last["role"] == "tool":
            content = str(last.get("content", ""))
            if content.startswith("Error"):
                self.seen_errors.append(content)
            previous_call = _last_call(messages)
            if previous_call == "load_tool_group" and not content.startswith("Error"):
                intent = self._intent(_last_user(messages))
                if intent is not None:
                    return tool_call(intent[1], intent[2])
            return text(f"Done: {content[:200]}")
        intent = self._intent(last.get("content", ""))
        if intent is None:
            return text("Hello! How can I help?")
        group, tool, args = intent
        if group is not None and not _loaded_in_history(messages, group):
            return tool_call("load_tool_group", {"group_name": group})
        # The failing case: the load is in history, so the model calls the tool straight away.
        return tool_call(tool, args)

    @staticmethod
    def _intent(user_text: str) -> tuple[str | None, str, dict[str, Any]] | None:
        for word, intent in INTENTS.items():
            if word in user_text.lower():
                return intent
        return None


def _last_user(messages: list[dict[str, Any]]) -> str:
    return next((m.get("content") or "" for m in reversed(messages) if m["role"] == "user"), "")


def _last_call(messages: list[dict[str, Any]]) -> str | None:
    for message in reversed(messages):
        if message.get("tool_calls"):
            return message["tool_calls"][-1]["function"]["name"]
    return None
