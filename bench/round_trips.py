"""Round trips: the FEAT-044 scenarios run with group restoration and without it, model calls counted."""

from __future__ import annotations

import asyncio
import re
import tempfile
from pathlib import Path
from typing import Any

from bench.common import table, write_results
from bench.throughput import NullSender, settings_for
from bridge.app import Bridge
from bridge.events import Inbound
from bridge.llm.base import ChatMessage, Completion
from bridge.llm.openai import parse_completion, serialize_message
from devkit.fakes.openai_server import Reply, tool_call
from devkit.fakes.scripted_model import HistoryTrustingModel

# Three chats, five turns each; groups loaded in one turn are used again in later ones.
SCENARIOS = {
    "ops": ["show my sessions", "the sessions again", "what time is it", "sessions, once more", "thanks"],
    "docs": ["list my files", "files again please", "and the sessions", "files one last time", "sessions?"],
    "mixed": ["what time is it", "sessions please", "now my files", "sessions again", "files again"],
}
NOT_LOADED = "Error [not_loaded]"


class HintFollowingModel(HistoryTrustingModel):
    """The tests' history-trusting model, plus what a good model does with "not loaded": load, retry."""

    def __call__(self, request: dict[str, Any]) -> Reply:
        last = request["messages"][-1]
        hint = re.search(r"group_name='([^']+)'", str(last.get("content", "")))
        if last["role"] == "tool" and str(last.get("content", "")).startswith(NOT_LOADED) and hint:
            self.seen_errors.append(last["content"])
            return tool_call("load_tool_group", {"group_name": hint.group(1)})
        return super().__call__(request)


class ScriptedProvider:
    """The scripted model, called in process with each request as it would go on the wire."""

    def __init__(self) -> None:
        self.model = HintFollowingModel()
        self.calls = 0

    async def complete(
        self, messages: list[ChatMessage], tools: list[dict[str, Any]], sink: Any = None
    ) -> Completion:
        self.calls += 1
        reply = self.model({"messages": [serialize_message(m) for m in messages], "tools": tools})
        assert isinstance(reply.body, dict)
        return parse_completion(reply.body)

    async def aclose(self) -> None:
        return None


async def scenario_run(restore: bool) -> dict[str, Any]:
    provider = ScriptedProvider()
    with tempfile.TemporaryDirectory() as tmp:
        async with Bridge(settings_for(Path(tmp), 10), provider=provider) as bridge:
            bridge.runner.restore_groups = restore
            bridge.add_sender(NullSender())
            for name, turns in SCENARIOS.items():
                for number, text in enumerate(turns):
                    inbound = Inbound("bench", "dm", name, name, text, message_id=str(number))
                    done = await bridge.handle(inbound)
                    assert done is not None
                    await done
    errors = [e for e in provider.model.seen_errors if e.startswith(NOT_LOADED)]
    total_turns = sum(len(t) for t in SCENARIOS.values())
    return {
        "restoration": "on" if restore else "off",
        "turns": total_turns,
        "model_calls": provider.calls,
        "not_available_errors": len(errors),
    }


async def run(smoke: bool = False) -> dict[str, Any]:
    results = [await scenario_run(True), await scenario_run(False)]
    print(
        table(
            f"Round trips: FEAT-044 scenarios ({len(SCENARIOS)} chats × 5 turns) with a model that trusts "
            "its history",
            ["restoration", "turns", "model calls", "'not available' errors"],
            [list(r.values()) for r in results],
        )
    )
    on, off = results
    data = {
        "results": results,
        "saved_model_calls": off["model_calls"] - on["model_calls"],
        "targets": {"no_not_available_errors_with_restoration": on["not_available_errors"] == 0},
    }
    print(f"restoration saves {data['saved_model_calls']} model calls; targets: {data['targets']}\n")
    write_results("round_trips", data, smoke=smoke)
    return data


if __name__ == "__main__":
    asyncio.run(run())
