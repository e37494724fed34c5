"""A Provider for any OpenAI-compatible /chat/completions endpoint (OpenAI, llama.cpp, vLLM, Ollama...)."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

from bridge.llm.base import ChatMessage, Completion, ToolCall, Usage
from bridge.llm.http import AttemptFailed, HTTPProvider, as_int
from bridge.llm.sse import StreamAssembler

DEFAULT_BASE_URL = "https://api.openai.com/v1"


class OpenAIProvider(HTTPProvider):
    """Chat completions over HTTP with retries; every failure surfaces as a readable ProviderError."""

    default_base_url = DEFAULT_BASE_URL

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _endpoint(self) -> str:
        return f"{self._base_url}/chat/completions"

    def _request_body(self, messages: list[ChatMessage], tools: list[dict[str, Any]]) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self._settings.model,
            "messages": [serialize_message(message) for message in messages],
        }
        # Some servers reject an empty tools list, so offer tools only when there are any.
        if tools:
            body["tools"] = tools
        if self._settings.temperature is not None:
            body["temperature"] = self._settings.temperature
        if self._settings.max_tokens is not None:
            body["max_tokens"] = self._settings.max_tokens
        return body

    def _parse(self, data: Any) -> Completion:
        return parse_completion(data)

    def _streamed(self, body: dict[str, Any]) -> dict[str, Any]:
        # The usage chunk comes last; without it a streamed run would count no tokens.
        return {**body, "stream": True, "stream_options": {"include_usage": True}}

    def _assembler(self) -> StreamAssembler:
        return OpenAIStream()


class OpenAIStream:
    """chat.completion.chunk events put back together as the chat.completion they stand for."""

    def __init__(self) -> None:
        self.done = False
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._head: dict[str, Any] = {}
        self._finish: str | None = None
        self._usage: dict[str, Any] | None = None

    def feed(self, event: str, data: str) -> str:
        if data.strip() == "[DONE]":
            self.done = True
            return ""
        chunk = json.loads(data)
        if not isinstance(chunk, dict):
            raise ValueError("a stream chunk that is not an object")
        for key in ("id", "created", "model"):
            if key in chunk:
                self._head.setdefault(key, chunk[key])
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        choices = chunk.get("choices") or []
        choice = choices[0] if isinstance(choices, list) and choices else None
        if not isinstance(choice, dict):
            return ""
        self._finish = choice.get("finish_reason") or self._finish
        delta: dict[str, Any] = choice["delta"] if isinstance(choice.get("delta"), dict) else {}
        for raw in delta.get("tool_calls") or ():
            if isinstance(raw, dict):
                self._call(raw)
        text = _content_text(delta.get("content"))
        self._text.append(text)
        return text

    def _call(self, raw: dict[str, Any]) -> None:
        index = raw.get("index")
        index = index if isinstance(index, int) else len(self._calls)
        call = self._calls.setdefault(index, {"type": "function", "function": {"name": "", "arguments": ""}})
        if raw.get("id"):
            call["id"] = raw["id"]
        function: dict[str, Any] = raw["function"] if isinstance(raw.get("function"), dict) else {}
        if function.get("name"):
            call["function"]["name"] += function["name"]
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            call["function"]["arguments"] += arguments
        elif arguments is not None:
            call["function"]["arguments"] += json.dumps(arguments, ensure_ascii=False)

    def result(self, *, partial: bool = False) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._text)}
        calls = [self._calls[i] for i in sorted(self._calls)]
        if calls and not partial:
            message["tool_calls"] = calls
        body: dict[str, Any] = {
            "object": "chat.completion",
            **self._head,
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish}],
        }
        if self._usage is not None:
            body["usage"] = self._usage
        return body


# -- wire format -----------------------------------------------------------------------------


def serialize_message(message: ChatMessage) -> dict[str, Any]:
    """One ChatMessage in OpenAI wire format."""
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": message.content}
    if message.role == "assistant" and message.tool_calls:
        wire: dict[str, Any] = {
            "role": "assistant",
            # OpenAI wants null, not "", when the assistant only called tools.
            "content": message.content or None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in message.tool_calls
            ],
        }
    elif message.images and any(image.data for image in message.images):
        wire = {"role": message.role, "content": _parts(message)}
    else:
        wire = {"role": message.role, "content": message.content}
    if message.name:
        wire["name"] = message.name
    return wire


def _parts(message: ChatMessage) -> list[dict[str, Any]]:
    """A user message with images: its text, then each image as a base64 data URL."""
    parts: list[dict[str, Any]] = [{"type": "text", "text": message.content}] if message.content else []
    for image in message.images:
        if image.data:
            url = f"data:{image.mime};base64,{base64.b64encode(image.data).decode()}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


def parse_completion(data: Any) -> Completion:
    """A chat.completion JSON body as a Completion; raises a retryable failure when malformed."""
    if not isinstance(data, dict):
        raise AttemptFailed("malformed", "not an object", detail="not a JSON object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        error = data.get("error")
        hint = str(error.get("message", "")) if isinstance(error, dict) else ""
        raise AttemptFailed("malformed", "no choices", detail=f"no choices{': ' + hint if hint else ''}")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise AttemptFailed("malformed", "no message", detail="choice without a message")

    tool_calls = tuple(_parse_tool_call(raw) for raw in message.get("tool_calls") or ())
    usage = data.get("usage")
    if not isinstance(usage, dict):
        usage = {}
    return Completion(
        content=_content_text(message.get("content")),
        tool_calls=tool_calls,
        usage=Usage(
            prompt_tokens=as_int(usage.get("prompt_tokens")),
            completion_tokens=as_int(usage.get("completion_tokens")),
        ),
        raw=data,
    )


def _parse_tool_call(raw: Any) -> ToolCall:
    function = raw.get("function") if isinstance(raw, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(function, dict) or not isinstance(name, str) or not name:
        raise AttemptFailed("malformed", "bad tool call", detail="a tool call without a function name")
    arguments = function.get("arguments")
    if arguments is None:
        arguments = "{}"
    elif not isinstance(arguments, str):
        # A few servers send the arguments as an object rather than JSON text.
        arguments = json.dumps(arguments, ensure_ascii=False)
    call_id = raw.get("id")
    if not isinstance(call_id, str) or not call_id:
        # Tool results are matched to calls by id, so a server that omits it still needs one.
        call_id = f"call_{uuid.uuid4().hex[:12]}"
    return ToolCall(id=call_id, name=name, arguments=arguments)


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, list):
        # Content-part arrays: keep the text parts.
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)
