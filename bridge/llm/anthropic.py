"""A Provider for the native Anthropic Messages API (POST /v1/messages)."""

from __future__ import annotations

import base64
import json
import re
import uuid
from typing import Any

from bridge.jsonutil import loads
from bridge.llm.base import ChatMessage, Completion, ToolCall, Usage
from bridge.llm.http import AttemptFailed, HTTPProvider, as_int
from bridge.llm.sse import StreamAssembler

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
# The Messages API has no server-side default for max_tokens: every request must carry one.
DEFAULT_MAX_TOKENS = 4096
_INVALID_ID_CHARS = re.compile(r"[^A-Za-z0-9_-]")
# Anthropic takes images up to 5 MB each, as sent (base64).
MAX_IMAGE_BASE64 = 5 * 1024 * 1024


class AnthropicProvider(HTTPProvider):
    """Anthropic Messages over HTTP with retries; every failure surfaces as a readable ProviderError."""

    default_base_url = DEFAULT_BASE_URL

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "anthropic-version": API_VERSION}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return headers

    def _endpoint(self) -> str:
        # Accept base_url with or without the version segment, as OpenAI-style configs carry "/v1".
        if self._base_url.endswith("/v1"):
            return f"{self._base_url}/messages"
        return f"{self._base_url}/v1/messages"

    def _request_body(self, messages: list[ChatMessage], tools: list[dict[str, Any]]) -> dict[str, Any]:
        system, turns = to_anthropic_messages(messages)
        body: dict[str, Any] = {
            "model": self._settings.model,
            "max_tokens": self._settings.max_tokens or DEFAULT_MAX_TOKENS,
        }
        if system:
            body["system"] = system
        body["messages"] = turns
        if tools:
            body["tools"] = [to_anthropic_tool(tool) for tool in tools]
        if self._settings.temperature is not None:
            body["temperature"] = self._settings.temperature
        return body

    def _parse(self, data: Any) -> Completion:
        return parse_message(data)

    def _streamed(self, body: dict[str, Any]) -> dict[str, Any]:
        return {**body, "stream": True}

    def _assembler(self) -> StreamAssembler:
        return AnthropicStream()


class AnthropicStream:
    """Messages API stream events put back together as the message they stand for."""

    def __init__(self) -> None:
        self.done = False
        self._message: dict[str, Any] = {"type": "message", "role": "assistant", "content": []}
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}
        self._usage: dict[str, Any] = {}

    def feed(self, event: str, data: str) -> str:
        payload = json.loads(data)
        kind = payload.get("type", event)
        if kind == "message_start":
            start = payload.get("message") or {}
            self._message.update({k: v for k, v in start.items() if k not in ("content", "usage")})
            self._usage.update(start.get("usage") or {})
        elif kind == "content_block_start":
            self._blocks[int(payload["index"])] = dict(payload.get("content_block") or {})
        elif kind == "content_block_delta":
            index, delta = int(payload["index"]), payload.get("delta") or {}
            block = self._blocks.setdefault(index, {"type": "text", "text": ""})
            if delta.get("type") == "text_delta":
                text = str(delta.get("text", ""))
                block["text"] = str(block.get("text", "")) + text
                return text
            if delta.get("type") == "input_json_delta":
                self._json.setdefault(index, []).append(str(delta.get("partial_json", "")))
        elif kind == "message_delta":
            self._message.update(payload.get("delta") or {})
            self._usage.update(payload.get("usage") or {})
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            error = payload.get("error") or {}
            raise ValueError(f"the stream reported an error: {error.get('message', error)}")
        return ""

    def result(self, *, partial: bool = False) -> dict[str, Any]:
        content = []
        for index in sorted(self._blocks):
            block = dict(self._blocks[index])
            if block.get("type") == "tool_use":
                if partial:
                    continue
                raw = "".join(self._json.get(index, [])) or "{}"
                block["input"] = json.loads(raw)
            content.append(block)
        return {**self._message, "content": content, "usage": self._usage}


# -- wire format -----------------------------------------------------------------------------


def to_anthropic_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI function-tool schema as an Anthropic tool definition."""
    function = tool.get("function")
    if not isinstance(function, dict):
        return tool  # already in Anthropic form
    wire: dict[str, Any] = {"name": function["name"]}
    if function.get("description"):
        wire["description"] = function["description"]
    wire["input_schema"] = function.get("parameters") or {"type": "object", "properties": {}}
    return wire


def to_anthropic_messages(messages: list[ChatMessage]) -> tuple[str, list[dict[str, Any]]]:
    """The system text and the user/assistant turns, in the strictly alternating form Anthropic requires.

    Tool results become tool_result blocks of a user turn, and any run of same-role messages (parallel
    tool results, a user message after them, two user messages with no answer between) is merged into
    one turn, because the API rejects two user or two assistant messages in a row.
    """
    system = "\n\n".join(m.content for m in messages if m.role == "system" and m.content.strip())
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue
        role = "assistant" if message.role == "assistant" else "user"
        if message.role == "assistant":
            blocks = _text_blocks(message.content) + [_tool_use(call) for call in message.tool_calls]
        elif message.role == "tool":
            blocks = _tool_result(message, _open_tool_uses(turns))
        else:
            blocks = _image_blocks(message) + _text_blocks(message.content)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    for turn in turns:
        if turn["role"] == "user":
            # Within a user turn, tool results must come before any text; the sort is stable.
            turn["content"].sort(key=lambda block: block["type"] != "tool_result")
    return system, turns


def _image_blocks(message: ChatMessage) -> list[dict[str, Any]]:
    # Images first, then the text about them: the order Anthropic's documentation recommends.
    blocks = []
    for image in message.images:
        data = base64.b64encode(image.data).decode() if image.data else ""
        # The API refuses the whole request over one image past its limit: such an image is left to
        # its name in the text, as for a model that can't see.
        if data and len(data) <= MAX_IMAGE_BASE64:
            source = {"type": "base64", "media_type": image.mime, "data": data}
            blocks.append({"type": "image", "source": source})
    return blocks


def _text_blocks(text: str) -> list[dict[str, Any]]:
    # The API rejects empty (or whitespace-only) text blocks, so such text is left out entirely.
    return [{"type": "text", "text": text}] if text.strip() else []


def _wire_id(call_id: str | None) -> str:
    # Tool-use ids must match ^[a-zA-Z0-9_-]+$; history from another server may hold other ids.
    return _INVALID_ID_CHARS.sub("_", call_id or "") or "call"


def _tool_use(call: ToolCall) -> dict[str, Any]:
    try:
        arguments = loads(call.arguments or "{}")
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        # The API requires `input` to be an object, so malformed arguments cannot be replayed as they
        # were. The tool_result that follows already tells the model its call was broken, so {} keeps
        # the history acceptable without hiding the failure.
        arguments = {}
    return {"type": "tool_use", "id": _wire_id(call.id), "name": call.name, "input": arguments}


def _open_tool_uses(turns: list[dict[str, Any]]) -> set[str]:
    """Ids of the tool_use blocks in the newest assistant turn, which results may answer."""
    for turn in reversed(turns[-2:]):
        if turn["role"] == "assistant":
            return {block["id"] for block in turn["content"] if block["type"] == "tool_use"}
    return set()


def _tool_result(message: ChatMessage, open_ids: set[str]) -> list[dict[str, Any]]:
    call_id = _wire_id(message.tool_call_id)
    if call_id not in open_ids:
        # A result without its call (text-mode history, say) would be rejected as a tool_result.
        return _text_blocks(message.content)
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id}
    if message.content.strip():
        block["content"] = message.content
    return [block]


def parse_message(data: Any) -> Completion:
    """A Messages API response body as a Completion; raises a retryable failure when malformed."""
    if not isinstance(data, dict):
        raise AttemptFailed("malformed", "not an object", detail="not a JSON object")
    content = data.get("content")
    if not isinstance(content, list):
        error = data.get("error")
        hint = str(error.get("message", "")) if isinstance(error, dict) else ""
        raise AttemptFailed("malformed", "no content", detail=f"no content{': ' + hint if hint else ''}")
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            texts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_use":
            calls.append(_parse_tool_use(block))
    usage = data.get("usage")
    if not isinstance(usage, dict):
        usage = {}
    # Cached prompt tokens are counted apart from input_tokens; all of them were read as the prompt.
    prompt_tokens = sum(
        as_int(usage.get(key))
        for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    )
    return Completion(
        content="".join(texts),
        tool_calls=tuple(calls),
        usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=as_int(usage.get("output_tokens"))),
        raw=data,
    )


def _parse_tool_use(block: dict[str, Any]) -> ToolCall:
    name = block.get("name")
    if not isinstance(name, str) or not name:
        raise AttemptFailed("malformed", "bad tool call", detail="a tool_use block without a name")
    arguments = block.get("input")
    call_id = block.get("id")
    if not isinstance(call_id, str) or not call_id:
        # Tool results are matched to calls by id, so a server that omits it still needs one.
        call_id = f"toolu_{uuid.uuid4().hex[:12]}"
    return ToolCall(
        id=call_id,
        name=name,
        arguments=json.dumps(arguments if arguments is not None else {}, ensure_ascii=False),
    )
