"""A Provider for any OpenAI-compatible /chat/completions endpoint (OpenAI, llama.cpp, vLLM, Ollama...)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from bridge.llm.base import ChatMessage, Completion, ToolCall, Usage
from bridge.llm.http import AttemptFailed, HTTPProvider, as_int

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
    else:
        wire = {"role": message.role, "content": message.content}
    if message.name:
        wire["name"] = message.name
    return wire


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
