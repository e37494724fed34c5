"""Run traces: what one run sent to the model, what came back, which tools ran, how long it all took."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from typing import Any

from bridge.jsonutil import dumps, loads
from bridge.llm.base import ChatMessage, Completion, ToolCall
from bridge.media.parts import without_image_data
from bridge.tools.base import ToolResult

Redact = Callable[[str], str]


def _ms(since: float) -> float:
    return round((time.monotonic() - since) * 1000, 2)


def _plain(value: Any) -> Any:
    """JSON for what json cannot write itself: slotted dataclasses (messages, tool calls) as objects."""
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    names = getattr(type(value), "__slots__", None)
    if names is not None and dataclasses.is_dataclass(value):
        return {name: getattr(value, name) for name in names}
    return str(value)


class RunTrace:
    """Collects one run's steps in memory; the runner stores it (redacted JSON) when the run ends."""

    def __init__(
        self,
        run_id: str,
        session_id: str,
        session_key: str,
        channel: str | None,
        input_hash: str,
        *,
        profile: str | None = None,
        model: str | None = None,
        acting: str | None = None,
    ) -> None:
        self.header: dict[str, Any] = {
            "run_id": run_id,
            "session_id": session_id,
            "session_key": session_key,
            "channel": channel,
            "input_hash": input_hash,
            "started_at": time.time(),
        }
        if acting is not None:
            # Whom the run acted for (bridge.sessions.authority), e.g. "member telegram:7 in …".
            self.header["acting_for"] = acting
        self.use_model(profile, model)
        self.steps: list[dict[str, Any]] = []
        self._started = time.monotonic()
        self._sent: list[Any] = []  # the messages of the previous model request, to share its prefix

    @staticmethod
    def clock() -> float:
        return time.monotonic()

    def elapsed(self) -> float:
        """Seconds since the run began."""
        return time.monotonic() - self._started

    def use_model(self, profile: str | None, model: str | None) -> None:
        """The model profile (/model) the run asks, and its model name."""
        if profile is not None:
            self.header["profile"] = profile
        if model is not None:
            self.header["model"] = model

    def model_call(
        self,
        started: float,
        messages: list[ChatMessage],
        tools: list[dict[str, Any]],
        completion: Completion | None = None,
        error: str | None = None,
        *,
        error_detail: str = "",
        final: bool = False,
        fallback: str | None = None,
    ) -> None:
        # The exact body the provider sent when it reports one; else the structured request. The
        # messages are kept as they are (immutable) and turned into JSON once, in to_json.
        request = (completion.request if completion and completion.request else None) or {
            "messages": list(messages),
            "tools": tools,
        }
        # Images are kept out: a trace records that a photo went, not its megabytes. Only a request
        # that carries one is copied to blank it out (copying every body was 9.5% of a turn).
        if any(image.data for message in messages for image in message.images):
            request = without_image_data(request)
        step: dict[str, Any] = {"type": "model", "ms": _ms(started), "request": self._shared(request)}
        if final:
            step["final_without_tools"] = True
        if fallback is not None:
            # Asked of the fallback profile because the run's own model failed for good.
            step["fallback_profile"] = fallback
        if completion is not None:
            step["response"] = completion.raw
            step["content"] = completion.content
            step["tool_calls"] = [dataclasses.asdict(c) for c in completion.tool_calls]
            step["usage"] = dataclasses.asdict(completion.usage)
        if error is not None:
            step["error"] = error
        if error_detail:
            # What the server answered in full (the user saw a one-line summary); to_json redacts it.
            step["error_detail"] = error_detail
        self.steps.append(step)

    def _shared(self, request: dict[str, Any]) -> dict[str, Any]:
        """The request with the messages it repeats from the previous one replaced by their count.

        Each request of a run resends the whole conversation plus what the last step added, so a
        trace that stored every request whole would grow with the square of the steps; expand_trace
        puts the shared messages back.
        """
        sent = request.get("messages")
        if not isinstance(sent, list):
            return request
        same = 0
        for before, now in zip(self._sent, sent, strict=False):
            if before is not now and before != now:
                break
            same += 1
        self._sent = sent
        if not same:
            return request
        return {**request, "messages": sent[same:], "messages_from_previous": same}

    def tool_call(self, started: float, call: ToolCall, result: ToolResult) -> None:
        try:
            parsed: Any = loads(call.arguments or "{}")
        except ValueError:
            parsed = None
        self.steps.append(
            {
                "type": "tool",
                "ms": _ms(started),
                "call_id": call.id,
                "name": call.name,
                "raw_arguments": call.arguments,
                "parsed_arguments": parsed,
                "status": result.status,
                "code": result.code,
                "result": result.content,
            }
        )

    def to_json(self, status: str, usage: dict[str, int], redact: Redact) -> str:
        data = {
            **self.header,
            "status": status,
            "duration_ms": _ms(self._started),
            "usage": usage,
            "steps": self.steps,
        }
        return redact(dumps(data, default=_plain))


def expand_trace(data: dict[str, Any]) -> dict[str, Any]:
    """A stored trace with every model request whole again (see RunTrace._shared)."""
    previous: list[Any] = []
    for step in data.get("steps", []):
        request = step.get("request")
        if step.get("type") != "model" or not isinstance(request, dict):
            continue
        same = request.pop("messages_from_previous", 0)
        if isinstance(request.get("messages"), list):
            request["messages"] = previous[:same] + request["messages"]
            previous = request["messages"]
    return data


# How `bridge trace` says whose words an answer is, where they are not the model's.
ANSWERED_FROM = {
    "tool_result": "answered in Bridge's words: the last tool result, as the model gave no answer",
    "rule": "answered with the loop rule's message: the model gave no answer and no tool succeeded",
}


def format_trace(text: str) -> str:
    """A stored trace as `bridge trace` prints it: a header, then one block per step."""
    data = expand_trace(json.loads(text))
    usage = data.get("usage") or {}
    lines = [
        f"run {data['run_id']}  session {data.get('session_key')} ({data.get('session_id')})",
        f"channel {data.get('channel')}  status {data.get('status')}  {data.get('duration_ms')} ms  "
        f"tokens {usage.get('prompt_tokens', 0)} in / {usage.get('completion_tokens', 0)} out",
        f"input sha256 {data.get('input_hash')}",
    ]
    if data.get("model") or data.get("profile"):
        lines.append(f"model {data.get('model')} (profile {data.get('profile') or 'default'})")
    if data.get("fallback"):
        fell = data["fallback"]
        lines.append(f"answered by the fallback profile {fell.get('profile')} ({fell.get('model')})")
    if data.get("stop_rule"):
        lines.append(f"stopped by loop rule {data['stop_rule']}")
    said = ANSWERED_FROM.get(data.get("answered_from", "model"))
    if said:
        lines.append(said)
    for number, step in enumerate(data.get("steps", []), 1):
        if step["type"] == "model":
            request = step.get("request") or {}
            tools = [t.get("function", t).get("name", "?") for t in request.get("tools") or []]
            final = " (final answer, no tools)" if step.get("final_without_tools") else ""
            if step.get("fallback_profile"):
                final += f" (fallback profile {step['fallback_profile']})"
            lines.append(
                f"\n[{number}] model request{final}: {len(request.get('messages', []))} messages, "
                f"{len(tools)} tools ({', '.join(tools) or 'none'}), {step['ms']} ms"
            )
            if "error" in step:
                lines.append(f"    error: {step['error']}")
            if step.get("error_detail"):
                lines.append("    detail: " + str(step["error_detail"]).replace("\n", "\n      "))
            for call in step.get("tool_calls") or []:
                lines.append(f"    asked for {call['name']}({call['arguments']})")
            if step.get("content"):
                lines.append(f"    text: {step['content']}")
        else:
            repeat = " (refused: a repeat)" if step.get("refused_as_repeat") else ""
            lines.append(f"\n[{number}] tool {step['name']}{repeat}: {step['status']}, {step['ms']} ms")
            lines.append(f"    raw arguments: {step['raw_arguments']}")
            lines.append(f"    result: {step['result'][:500]}")
    return "\n".join(lines)
