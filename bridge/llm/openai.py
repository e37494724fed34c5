"""A Provider for any OpenAI-compatible /chat/completions endpoint (OpenAI, llama.cpp, vLLM, Ollama...)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import uuid
from typing import Any

import httpx

from bridge.config import LLMSettings
from bridge.llm.base import ChatMessage, Completion, ProviderError, ToolCall, Usage
from bridge.llm.retry import RetryableError, Sleep, parse_retry_after, with_retries

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Statuses that say "this exact request will never work": retrying only delays the bad news.
_NOT_RETRYABLE_KEY = frozenset({401, 403})
# 408 (request timeout) and 409 (conflict) are transient on some gateways, like 429 and 5xx.
_RETRYABLE_4XX = frozenset({408, 409, 429})
_MAX_DETAIL_CHARS = 300


class _Failed(RetryableError):
    """A retryable attempt failure, with what the final user-facing message needs."""

    def __init__(
        self,
        kind: str,
        reason: str,
        *,
        status: int | None = None,
        detail: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(reason, retry_after=retry_after)
        self.kind = kind  # refused | unreachable | timeout | http | malformed
        self.status = status
        self.detail = detail


class OpenAIProvider:
    """Chat completions over HTTP with retries; every failure surfaces as a readable ProviderError."""

    def __init__(
        self,
        settings: LLMSettings,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        backoff_base: float = 0.5,
        backoff_cap: float = 20.0,
        retry_after_cap: float = 60.0,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._settings = settings
        self._base_url = settings.base_url or DEFAULT_BASE_URL
        self._api_key = settings.api_key.get_secret_value()
        self._backoff_base = backoff_base
        self._backoff_cap = backoff_cap
        self._retry_after_cap = retry_after_cap
        self._sleep = sleep
        headers = {"Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        self._client = httpx.AsyncClient(timeout=settings.timeout_s, headers=headers, transport=transport)

    async def complete(self, messages: list[ChatMessage], tools: list[dict[str, Any]]) -> Completion:
        body = self._request_body(messages, tools)
        try:
            completion = await with_retries(
                lambda: self._attempt(body),
                max_retries=self._settings.max_retries,
                backoff_base=self._backoff_base,
                backoff_cap=self._backoff_cap,
                retry_after_cap=self._retry_after_cap,
                sleep=self._sleep,
                on_retry=self._log_retry,
            )
        except _Failed as failure:
            raise self._exhausted(failure) from None
        return dataclasses.replace(completion, request=body)

    async def aclose(self) -> None:
        await self._client.aclose()

    # -- request ---------------------------------------------------------------------------

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

    async def _attempt(self, body: dict[str, Any]) -> Completion:
        url = f"{self._base_url}/chat/completions"
        try:
            response = await self._client.post(url, json=body)
        except httpx.TimeoutException as exc:
            raise _Failed("timeout", f"timed out ({type(exc).__name__})") from exc
        except httpx.ConnectError as exc:
            if _is_refused(exc):
                raise _Failed("refused", "connection refused") from exc
            raise _Failed("unreachable", "cannot connect", detail=_describe_exc(exc)) from exc
        except httpx.TransportError as exc:
            raise _Failed("unreachable", "connection failed", detail=_describe_exc(exc)) from exc
        except httpx.RequestError as exc:
            # DecodingError and friends: the bytes arrived but could not be read.
            raise _Failed("malformed", "unreadable body", detail=_describe_exc(exc)) from exc

        if response.status_code != 200:
            self._raise_for_status(response)
        try:
            data = response.json()
        except ValueError as exc:
            raise _Failed("malformed", "invalid JSON", detail="not valid JSON") from exc
        return parse_completion(data)

    def _raise_for_status(self, response: httpx.Response) -> None:
        status = response.status_code
        detail = _error_detail(response)
        if status in _RETRYABLE_4XX or status >= 500:
            raise _Failed(
                "http",
                f"HTTP {status}",
                status=status,
                detail=detail,
                retry_after=parse_retry_after(response.headers),
            )
        if status in _NOT_RETRYABLE_KEY:
            message = f"The model server rejected the API key (HTTP {status}). Check [llm] api_key."
        elif status == 404:
            message = (
                f"The model server has no such endpoint or model (HTTP 404): check [llm] base_url "
                f"({self._base_url}) and [llm] model ({self._settings.model})."
            )
        elif status < 400:
            message = f"The model server answered with an unexpected HTTP {status}."
        else:
            message = f"The model server refused the request (HTTP {status})"
            message += f": {detail}" if detail else "."
        raise ProviderError(self._redact(message), retryable=False, status=status)

    # -- failure reporting -----------------------------------------------------------------

    def _exhausted(self, failure: _Failed) -> ProviderError:
        attempts = failure.attempts
        tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
        if failure.kind == "refused":
            message = f"Can't reach the model server at {self._base_url}: connection refused ({tries})."
        elif failure.kind == "unreachable":
            message = f"Can't reach the model server at {self._base_url}: {failure.detail} ({tries})."
        elif failure.kind == "timeout":
            message = (
                f"The model server at {self._base_url} did not answer within "
                f"{self._settings.timeout_s:g} s ({tries})."
            )
        elif failure.kind == "http":
            message = f"The model server kept failing (HTTP {failure.status}) after {tries}"
            message += f": {failure.detail}" if failure.detail else "."
        else:
            message = f"The model server sent a malformed response ({failure.detail}) after {tries}."
        return ProviderError(self._redact(message), retryable=True, status=failure.status)

    def _log_retry(self, error: RetryableError, attempt: int, wait: float) -> None:
        total = self._settings.max_retries + 1
        log.warning(
            "Model request failed (%s); retrying in %.1f s (attempt %d of %d)",
            self._redact(error.reason),
            wait,
            attempt,
            total,
        )

    def _redact(self, text: str) -> str:
        # Servers sometimes echo the key back ("Incorrect API key provided: sk-..."); never pass it on.
        return text.replace(self._api_key, "***") if self._api_key else text


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
        raise _Failed("malformed", "not an object", detail="not a JSON object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        error = data.get("error")
        hint = _trim(str(error.get("message", ""))) if isinstance(error, dict) else ""
        raise _Failed("malformed", "no choices", detail=f"no choices{': ' + hint if hint else ''}")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise _Failed("malformed", "no message", detail="choice without a message")

    tool_calls = tuple(_parse_tool_call(raw) for raw in message.get("tool_calls") or ())
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    return Completion(
        content=_content_text(message.get("content")),
        tool_calls=tool_calls,
        usage=Usage(
            prompt_tokens=_int(usage.get("prompt_tokens")),
            completion_tokens=_int(usage.get("completion_tokens")),
        ),
        raw=data,
    )


def _parse_tool_call(raw: Any) -> ToolCall:
    function = raw.get("function") if isinstance(raw, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str) or not name:
        raise _Failed("malformed", "bad tool call", detail="a tool call without a function name")
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


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _error_detail(response: httpx.Response) -> str:
    """The server's own explanation: error.message from a JSON body, else the start of the text."""
    try:
        data = response.json()
    except ValueError:
        return _trim(response.text)
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return _trim(str(error["message"]))
        if isinstance(error, str):
            return _trim(error)
        if isinstance(data.get("message"), str):
            return _trim(data["message"])
        if isinstance(data.get("detail"), str):
            return _trim(data["detail"])
    return ""


def _trim(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_DETAIL_CHARS else text[: _MAX_DETAIL_CHARS - 1] + "…"


def _is_refused(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    for _ in range(10):  # the cause chain is short; the bound guards against cycles
        if seen is None:
            return False
        if isinstance(seen, ConnectionRefusedError):
            return True
        if "refused" in str(seen).lower():
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _describe_exc(exc: BaseException) -> str:
    return _trim(str(exc)) or type(exc).__name__
