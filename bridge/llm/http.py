"""What HTTP model providers share: one JSON POST per attempt, retries, readable errors, no leaked key."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

import httpx

from bridge.config import LLMSettings
from bridge.llm.base import ChatMessage, Completion, ProviderError
from bridge.llm.retry import RetryableError, Sleep, parse_retry_after, with_retries

# Statuses that say "this exact request will never work": retrying only delays the bad news.
NOT_RETRYABLE_KEY = frozenset({401, 403})
# 408 (request timeout) and 409 (conflict) are transient on some gateways, like 429 and 5xx.
RETRYABLE_4XX = frozenset({408, 409, 429})
MAX_DETAIL_CHARS = 300


class AttemptFailed(RetryableError):
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


class HTTPProvider:
    """A Provider over one JSON endpoint; subclasses supply the URL, headers, body and parsing."""

    default_base_url = ""

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
        self._base_url = settings.base_url or self.default_base_url
        self._api_key = settings.api_key.get_secret_value()
        self._backoff_base = backoff_base
        self._backoff_cap = backoff_cap
        self._retry_after_cap = retry_after_cap
        self._sleep = sleep
        # Named after the concrete provider's module, so log filters keep working per provider.
        self._log = logging.getLogger(type(self).__module__)
        self._client = httpx.AsyncClient(
            timeout=settings.timeout_s, headers=self._headers(), transport=transport
        )

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
        except AttemptFailed as failure:
            raise self._exhausted(failure) from None
        return dataclasses.replace(completion, request=body)

    async def aclose(self) -> None:
        await self._client.aclose()

    # -- what a subclass defines -----------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        raise NotImplementedError

    def _endpoint(self) -> str:
        raise NotImplementedError

    def _request_body(self, messages: list[ChatMessage], tools: list[dict[str, Any]]) -> dict[str, Any]:
        raise NotImplementedError

    def _parse(self, data: Any) -> Completion:
        """The decoded 200 body as a Completion; raises AttemptFailed("malformed", ...) when it is not one."""
        raise NotImplementedError

    # -- one attempt -----------------------------------------------------------------------

    async def _attempt(self, body: dict[str, Any]) -> Completion:
        try:
            response = await self._client.post(self._endpoint(), json=body)
        except httpx.TimeoutException as exc:
            raise AttemptFailed("timeout", f"timed out ({type(exc).__name__})") from exc
        except httpx.ConnectError as exc:
            if is_refused(exc):
                raise AttemptFailed("refused", "connection refused") from exc
            raise AttemptFailed("unreachable", "cannot connect", detail=describe_exc(exc)) from exc
        except httpx.TransportError as exc:
            raise AttemptFailed("unreachable", "connection failed", detail=describe_exc(exc)) from exc
        except httpx.RequestError as exc:
            # DecodingError and friends: the bytes arrived but could not be read.
            raise AttemptFailed("malformed", "unreadable body", detail=describe_exc(exc)) from exc

        if response.status_code != 200:
            self._raise_for_status(response)
        try:
            data = response.json()
        except ValueError as exc:
            raise AttemptFailed("malformed", "invalid JSON", detail="not valid JSON") from exc
        return self._parse(data)

    def _raise_for_status(self, response: httpx.Response) -> None:
        status = response.status_code
        detail = error_detail(response)
        # 529 ("overloaded", Anthropic) is covered by the 5xx rule.
        if status in RETRYABLE_4XX or status >= 500:
            raise AttemptFailed(
                "http",
                f"HTTP {status}",
                status=status,
                detail=detail,
                retry_after=parse_retry_after(response.headers),
            )
        if status in NOT_RETRYABLE_KEY:
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

    def _exhausted(self, failure: AttemptFailed) -> ProviderError:
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
        self._log.warning(
            "Model request failed (%s); retrying in %.1f s (attempt %d of %d)",
            self._redact(error.reason),
            wait,
            attempt,
            total,
        )

    def _redact(self, text: str) -> str:
        # Servers sometimes echo the key back ("Incorrect API key provided: sk-..."); never pass it on.
        return text.replace(self._api_key, "***") if self._api_key else text


# -- helpers ---------------------------------------------------------------------------------


def error_detail(response: httpx.Response) -> str:
    """The server's own explanation: error.message from a JSON body, else the start of the text."""
    try:
        data = response.json()
    except ValueError:
        return trim(response.text)
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return trim(str(error["message"]))
        if isinstance(error, str):
            return trim(error)
        if isinstance(data.get("message"), str):
            return trim(data["message"])
        if isinstance(data.get("detail"), str):
            return trim(data["detail"])
    return ""


def trim(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_DETAIL_CHARS else text[: MAX_DETAIL_CHARS - 1] + "…"


def as_int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def is_refused(exc: BaseException) -> bool:
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


def describe_exc(exc: BaseException) -> str:
    return trim(str(exc)) or type(exc).__name__
