"""The text-mode protocol's prompt side: the tools taught in the system prompt, calls and results as text."""

from __future__ import annotations

import json
from typing import Any, Literal

from bridge.jsonutil import loads
from bridge.llm.base import ChatMessage, ToolCall

ResultRole = Literal["tool", "user"]


def render_call(call: ToolCall) -> str:
    """A call in the one canonical form, as the transcript replays it to the model."""
    try:
        arguments: Any = loads(call.arguments or "{}")
    except ValueError:
        arguments = call.arguments
    payload = json.dumps({"tool_name": call.name, "arguments": arguments}, ensure_ascii=False)
    return f"```tool\n{payload}\n```"


def render_result(name: str | None, content: str) -> str:
    return f"[tool.result of {name or 'the tool'}]\n{content}"


def describe_tools(tools: list[dict[str, Any]]) -> str:
    """The system prompt section that teaches the protocol and lists the callable tools."""
    lines = [
        "## Tools",
        "To call a tool, write exactly one fenced block like this and stop:",
        "```tool",
        '{"tool_name": "<tool name>", "arguments": {"<argument>": "<value>"}}',
        "```",
        "Call one tool per reply. Its result comes back in the next message, marked [tool.result]; "
        "then answer, or call another tool. Write a tool block only to call a tool: text outside "
        "blocks goes to the user as written.",
        "",
        "Tools you can call now:",
    ]
    for schema in tools:
        function = schema.get("function", schema)
        lines.append(_describe(function))
    return "\n".join(lines)


def _describe(function: dict[str, Any]) -> str:
    parameters = function.get("parameters") or {}
    properties: dict[str, Any] = parameters.get("properties") or {}
    required = set(parameters.get("required") or ())
    signature = ", ".join(
        f"{key}{'' if key in required else '?'}: {_type(spec)}" for key, spec in properties.items()
    )
    summary = " ".join(str(function.get("description", "")).split())
    line = f"- {function.get('name', '?')}({signature}): {summary}"
    details = [
        f"    {key}: {' '.join(str(spec['description']).split())}"
        for key, spec in properties.items()
        if isinstance(spec, dict) and spec.get("description")
    ]
    return "\n".join([line, *details])


def _type(spec: Any) -> str:
    if not isinstance(spec, dict):
        return "any"
    if "enum" in spec:
        return " | ".join(json.dumps(choice) for choice in spec["enum"])
    kind = spec.get("type", "any")
    if kind == "array":
        return f"{_type(spec.get('items'))}[]"
    return "/".join(kind) if isinstance(kind, list) else str(kind)


def to_text_messages(
    messages: list[ChatMessage], tools: list[dict[str, Any]], result_role: ResultRole
) -> list[ChatMessage]:
    """The conversation with native tool calls turned into fenced blocks and tagged results."""
    out: list[ChatMessage] = []
    pending: dict[str, str] = {}  # call id -> the rendered call, replayed just before its result
    for message in messages:
        if message.role == "system":
            # With no tools offered (a final answer), the protocol is not taught at all.
            section = f"\n\n{describe_tools(tools)}" if tools else ""
            out.append(ChatMessage("system", f"{message.content}{section}".strip()))
        elif message.role == "assistant" and message.tool_calls:
            # One call per assistant message, each followed by its result, so even history written in
            # native mode (several calls per response) reads as the one-call protocol.
            for index, call in enumerate(message.tool_calls):
                preamble = message.content.strip() if index == 0 else ""
                pending[call.id] = "\n\n".join(p for p in (preamble, render_call(call)) if p)
        elif message.role == "tool":
            call_text = pending.pop(message.tool_call_id or "", None)
            if call_text is not None:
                out.append(ChatMessage("assistant", call_text))
            out.append(
                ChatMessage(
                    result_role,
                    render_result(message.name, message.content),
                    tool_call_id=message.tool_call_id if result_role == "tool" else None,
                )
            )
        else:
            out.append(message)
    return out
