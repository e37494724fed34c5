"""Tool calls written as text: the strict text-mode protocol, and calls a native-mode server left in text."""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from bridge.jsonutil import loads
from bridge.llm.base import ChatMessage, Completion, Provider, ToolCall

FENCE_CORRECTION = (
    "[Bridge: that was not run. To call a tool, write the JSON inside a fenced block that starts with "
    "```json on its own line and ends with ``` on its own line.]"
)
# Output-only marker for tool results in the transcript: never a callable name, whatever the model echoes.
RESERVED_NAMES = frozenset({"tool.result", "tool_result"})
CALL_LABELS = frozenset({"json", "tool"})
# A fence opens at the start of a line (after optional indentation) and closes on a line of its own,
# so inline ``` in prose never starts a block. The body is matched lazily: the first closing fence ends it.
_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w.-]*)[ \t]*\r?\n(.*?)^[ \t]*```[ \t]*$", re.DOTALL | re.MULTILINE)
_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")

ResultRole = Literal["tool", "user"]


@dataclass(frozen=True, slots=True)
class Ignored:
    """A fenced block that looked like a call but is not one, and why (kept for traces and tests)."""

    name: str
    reason: Literal["reserved", "not_allowed", "echo", "extra_call"]


@dataclass(frozen=True, slots=True)
class ParsedReply:
    """A model reply split into the one call it makes (if any) and the text around it."""

    call: ToolCall | None
    text: str
    ignored: tuple[Ignored, ...] = ()


def parse_reply(text: str, allowed: Collection[str], *, echoes: Collection[str] = ()) -> ParsedReply:
    """The tool call a reply makes under the strict protocol, if any.

    Only a fenced ```json or ```tool block holding one JSON object {"tool_name": ..., "arguments": {...}}
    (or {"name": ..., "arguments": ...}) whose name is in `allowed` is a call. Blocks that repeat a
    tool result seen earlier (`echoes`) are not calls. The first call wins; later call blocks are
    dropped from the text so the transcript never shows a call that did not run. Never raises.
    """
    call: ToolCall | None = None
    ignored: list[Ignored] = []
    drop: list[tuple[int, int]] = []
    for match in _FENCE.finditer(text):
        if match.group(1).lower() not in CALL_LABELS:
            continue
        body = match.group(2).strip()
        found = _as_call(body)
        if found is None:
            continue
        name, arguments = found
        if name in RESERVED_NAMES:
            ignored.append(Ignored(name, "reserved"))
        elif name not in allowed:
            ignored.append(Ignored(name, "not_allowed"))
        elif any(body in echo for echo in echoes):
            ignored.append(Ignored(name, "echo"))
        elif call is not None:
            ignored.append(Ignored(name, "extra_call"))
            drop.append(match.span())
        else:
            call = ToolCall(id=f"call_{uuid.uuid4().hex[:12]}", name=name, arguments=arguments)
            drop.append(match.span())
    if call is None:
        return ParsedReply(None, text, tuple(ignored))
    return ParsedReply(call, _without(text, drop), tuple(ignored))


def parse_leaked(text: str, allowed: Collection[str], *, echoes: Collection[str] = ()) -> ParsedReply:
    """For native mode: a call the server did not turn into `tool_calls` and left in the text.

    Either the strict fenced forms, or a reply that is nothing but one bare JSON call object naming a
    tool in `allowed` (what a small model writes when the server's template parser misses it). JSON
    inside prose is never a call.
    """
    parsed = parse_reply(text, allowed, echoes=echoes)
    if parsed.call is not None:
        return parsed
    bare = _bare_call(text, allowed, echoes)
    return ParsedReply(bare, "") if bare is not None else parsed


def _bare_call(text: str, allowed: Collection[str], echoes: Collection[str]) -> ToolCall | None:
    """The call when the whole text is one unfenced call object naming an allowed tool; else None."""
    body = text.strip()
    if not (body.startswith("{") and body.endswith("}")) or any(body in echo for echo in echoes):
        return None
    found = _as_call(body)
    if found is None or found[0] in RESERVED_NAMES or found[0] not in allowed:
        return None
    return ToolCall(id=f"call_{uuid.uuid4().hex[:12]}", name=found[0], arguments=found[1])


def _as_call(body: str) -> tuple[str, str] | None:
    """(name, arguments JSON) when a block body has the shape of a call; None otherwise."""
    try:
        value = loads(body)
    except ValueError:
        return None
    if isinstance(value, list):
        # A list of calls in one block: the first is the call, like the first of several blocks.
        value = value[0] if value else None
    if not isinstance(value, dict):
        return None
    name = value.get("tool_name")
    if name is None:
        name = value.get("name")
        # {"name": ...} alone is ordinary JSON (a person, a file); only with arguments is it a call.
        if not any(key in value for key in ("arguments", "parameters")):
            return None
    if not isinstance(name, str) or not _NAME.match(name):
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):
        # Some models encode the arguments twice, as JSON text inside the JSON.
        try:
            arguments = loads(arguments) if arguments.strip() else {}
        except ValueError:
            return None
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return None
    return name, json.dumps(arguments, ensure_ascii=False)


def _without(text: str, spans: list[tuple[int, int]]) -> str:
    parts, last = [], 0
    for start, end in spans:
        parts.append(text[last:start])
        last = end
    parts.append(text[last:])
    return re.sub(r"\n{3,}", "\n\n", "".join(parts)).strip()


# -- the prompt side ---------------------------------------------------------------------------


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


def _results(messages: list[ChatMessage]) -> list[str]:
    return [m.content for m in messages if m.role == "tool"]


def _with_text_call(completion: Completion, parsed: ParsedReply) -> Completion:
    """The completion with the call found in its text as its one tool call, and the rest as its text."""
    if parsed.call is None:
        return completion
    return dataclasses.replace(completion, content=parsed.text, tool_calls=(parsed.call,))


class TextModeProvider:
    """Wraps any Provider so a model without native tool calling uses the strict text protocol."""

    def __init__(
        self,
        inner: Provider,
        *,
        known: Callable[[str], bool] = lambda _name: False,
        result_role: ResultRole = "tool",
    ) -> None:
        self.inner = inner
        # Tools that exist but are not loaded still count as calls, so the runner can answer
        # "load its group first" instead of the model's block being shown to the user as text.
        self._known = known
        self._result_role = result_role

    async def complete(self, messages: list[ChatMessage], tools: list[dict[str, Any]]) -> Completion:
        completion = await self.inner.complete(to_text_messages(messages, tools, self._result_role), [])
        allowed = _Allowed(tools, self._known)
        if completion.tool_calls:
            # A server that parsed calls natively anyway: still at most one, and only a permitted name.
            native = next((c for c in completion.tool_calls if c.name in allowed), None)
            return dataclasses.replace(completion, tool_calls=(native,) if native else ())
        echoes = _results(messages)
        parsed = parse_reply(completion.content, allowed, echoes=echoes)
        if parsed.call is None and _bare_call(completion.content, allowed, echoes) is not None:
            # A bare call object with no fence: never run (only a fenced block is a call), but close
            # enough that the model is told how to write it, once (see AgentRunner._loop).
            return dataclasses.replace(completion, correction=FENCE_CORRECTION)
        return _with_text_call(completion, parsed)

    async def aclose(self) -> None:
        await self.inner.aclose()


class NativeModeProvider:
    """Native tool calls, plus the one call a server left in the text when its parser missed it."""

    def __init__(self, inner: Provider, *, known: Callable[[str], bool] = lambda _name: False) -> None:
        self.inner = inner
        self._known = known

    async def complete(self, messages: list[ChatMessage], tools: list[dict[str, Any]]) -> Completion:
        completion = await self.inner.complete(messages, tools)
        if completion.tool_calls or not tools:
            # With no tools offered (a run's last request), text is only ever the answer.
            return completion
        allowed = _Allowed(tools, self._known)
        parsed = parse_leaked(completion.content, allowed, echoes=_results(messages))
        return _with_text_call(completion, parsed)

    async def aclose(self) -> None:
        await self.inner.aclose()


class _Allowed:
    """The offered tools plus those a group load would activate, as a membership test."""

    def __init__(self, tools: list[dict[str, Any]], known: Callable[[str], bool]) -> None:
        self.active = {schema.get("function", schema).get("name") for schema in tools}
        self.known = known

    def __contains__(self, name: object) -> bool:
        return name in self.active or (isinstance(name, str) and self.known(name))

    def __iter__(self) -> Iterator[Any]:
        return iter(self.active)

    def __len__(self) -> int:
        return len(self.active)
