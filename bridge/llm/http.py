"""What HTTP model providers share: one JSON POST per attempt, retries, readable errors, no leaked secret."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from collections.abc import Awaitable
from typing import Any

import httpx

from bridge.config.base import REDACTED, mask_url
from bridge.config.llm import LLMSettings
from bridge.errors import ProviderError
from bridge.jsonutil import dump_bytes, loads
from bridge.llm.base import ChatMessage, Completion, TextSink
from bridge.llm.sse import StreamAssembler, events
from bridge.llm.transport import AiohttpTransport, ModelClient
from bridge.localmodel import is_local_model_url
from bridge.logs import redacting, secret_values
from bridge.retry import Backoff, RetryableError, Sleep, parse_retry_after, with_retries

# Statuses that say "this exact request will never work": retrying only delays the bad news.
NOT_RETRYABLE_KEY = frozenset({401, 403})
# 408 (request timeout) and 409 (conflict) are transient on some gateways, like 429 and 5xx.
RETRYABLE_4XX = frozenset({408, 409, 429})
_JSON = {"Content-Type": "application/json"}
_SSE = {"Content-Type": "application/json", "Accept": "text/event-stream"}
# What of the server's own words reaches the chat: one line, this long at most.
MAX_SUMMARY_CHARS = 200
# What of the server's answer a run's trace keeps; an HTML error page can run to megabytes.
MAX_BODY_CHARS = 10_000
# A URL in a server's text may name internal hosts or carry credentials; the chat sees "<url>".
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>()\[\]{}]*[^\s'\"<>()\[\]{}.,;:!?]")
# Key-shaped words a server may echo that are not in our settings: "sk-...", "Bearer ...".
_TOKEN = re.compile(r"\bsk-[A-Za-z0-9_-]{8,}|\bBearer\s+\S+", re.IGNORECASE)


class AttemptFailed(RetryableError):
    """A retryable attempt failure, with what the final user-facing message needs."""

    def __init__(
        self,
        kind: str,
        reason: str,
        *,
        status: int | None = None,
        detail: str = "",
        body: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(reason, retry_after=retry_after)
        self.kind = kind  # refused | unreachable | timeout | http | malformed
        self.status = status
        # `detail` is the short explanation the user's message summarises; `body` is all of the
        # server's answer (or the connection error), for the run's trace.
        self.detail = detail
        self.body = body


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
        # The base URL as messages show it: any user and password in it masked.
        self._shown_url = mask_url(self._base_url)
        self._parsed_url: httpx.URL | None = None
        self._api_key = settings.api_key.get_secret_value()
        # The key at any length (a short one is still a key), and the credentials in base_url.
        self._redact_secrets = redacting([*secret_values(settings), self._api_key])
        self._backoff = Backoff(
            attempts=settings.max_retries + 1,
            base=backoff_base,
            cap=backoff_cap,
            retry_after_cap=retry_after_cap,
        )
        self._sleep = sleep
        # Named after the concrete provider's module, so log filters keep working per provider.
        self._log = logging.getLogger(type(self).__module__)
        self._client = ModelClient(
            timeout=settings.timeout_s, headers=self._headers(), transport=transport or AiohttpTransport()
        )

    async def complete(
        self, messages: list[ChatMessage], tools: list[dict[str, Any]], sink: TextSink | None = None
    ) -> Completion:
        body = self._request_body(messages, tools)
        streamed = sink is not None and self._settings.stream
        if streamed:
            body = self._streamed(body)
        # Serialized once, not once per attempt: the body repeats the whole history and the tools.
        payload = dump_bytes(body)

        def attempt() -> Awaitable[Completion]:
            if streamed:
                assert sink is not None
                return self._attempt_stream(payload, sink)
            return self._attempt(payload)

        try:
            completion = await with_retries(
                attempt,
                what="Model request",
                log=self._log,
                backoff=self._backoff,
                describe=self._reason,
                sleep=self._sleep,
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

    def _url(self) -> httpx.URL:
        """The endpoint, parsed on first use only: httpx parses a URL given as text on every request."""
        if self._parsed_url is None:
            self._parsed_url = httpx.URL(self._endpoint())
        return self._parsed_url

    def _request_body(self, messages: list[ChatMessage], tools: list[dict[str, Any]]) -> dict[str, Any]:
        raise NotImplementedError

    def _parse(self, data: Any) -> Completion:
        """The decoded 200 body as a Completion; raises AttemptFailed("malformed", ...) when it is not one."""
        raise NotImplementedError

    def _streamed(self, body: dict[str, Any]) -> dict[str, Any]:
        """The request body asking for a stream of events."""
        raise NotImplementedError

    def _assembler(self) -> StreamAssembler:
        """What puts the provider's stream events back together."""
        raise NotImplementedError

    # -- one attempt -----------------------------------------------------------------------

    async def _attempt(self, payload: bytes) -> Completion:
        try:
            response = await self._client.post(self._url(), content=payload, headers=_JSON)
        except httpx.RequestError as exc:
            raise _failed(exc) from exc
        if response.status_code != 200:
            self._raise_for_status(response)
        return self._parse_body(response.content, response.text)

    def _parse_body(self, content: bytes, text: str) -> Completion:
        try:
            data = loads(content)
        except ValueError as exc:
            raise AttemptFailed("malformed", "invalid JSON", detail="not valid JSON", body=text) from exc
        try:
            return self._parse(data)
        except AttemptFailed as failure:
            # The parsers see decoded JSON; the trace wants the answer as the server sent it.
            failure.body = failure.body or text
            raise

    async def _attempt_stream(self, payload: bytes, sink: TextSink) -> Completion:
        """One streamed attempt: each piece of text goes to `sink` as it comes, and the answer is the
        body a non-streamed request would have got, put back together (traces and history are the
        same either way). A stream that breaks before any text was shown fails the attempt, to be
        retried; after that, the answer is what arrived, marked cut_short."""
        await sink.begin()
        assembler = self._assembler()
        try:
            request = self._client.stream("POST", self._url(), content=payload, headers=_SSE)
            async with request as response:
                if response.status_code != 200:
                    await response.aread()
                    self._raise_for_status(response)
                if "text/event-stream" not in response.headers.get("content-type", ""):
                    # A server that does not stream answers with the whole body.
                    content = await response.aread()
                    return self._parse_body(content, response.text)
                async for event, data in events(response.aiter_lines()):
                    try:
                        piece = assembler.feed(event, data)
                    except (ValueError, TypeError, KeyError, AttributeError) as exc:
                        raise AttemptFailed("malformed", "unreadable stream event", body=data) from exc
                    if piece:
                        await sink.text(piece)
                    if assembler.done:
                        break
        except httpx.RequestError as exc:
            failure = _failed(exc)
            if sink.shown:
                return self._cut_short(assembler, str(failure))
            raise failure from exc
        except AttemptFailed as failure:
            if sink.shown:
                return self._cut_short(assembler, str(failure))
            raise
        if not assembler.done:
            if sink.shown:
                return self._cut_short(assembler, "the stream ended before the answer did")
            raise AttemptFailed("malformed", "the stream ended early", detail="the stream ended early")
        return self._parse(assembler.result())

    def _cut_short(self, assembler: StreamAssembler, why: str) -> Completion:
        self._log.warning("streamed answer cut short after text was shown: %s", why)
        partial = self._parse(assembler.result(partial=True))
        return dataclasses.replace(partial, tool_calls=(), cut_short=why)

    def _raise_for_status(self, response: httpx.Response) -> None:
        status = response.status_code
        detail = error_detail(response)
        said = None  # what the chat is told, where it differs from the message
        # 529 ("overloaded", Anthropic) is covered by the 5xx rule.
        if status in RETRYABLE_4XX or status >= 500:
            raise AttemptFailed(
                "http",
                f"HTTP {status}",
                status=status,
                detail=detail,
                body=response.text,
                retry_after=parse_retry_after(response.headers),
            )
        if status in NOT_RETRYABLE_KEY:
            message = f"The model server rejected the API key (HTTP {status}). Check [llm] api_key."
        elif status == 404:
            message = (
                f"The model server has no such endpoint or model (HTTP 404): check [llm] base_url "
                f"({self._shown_url}) and [llm] model ({self._settings.model})."
            )
        elif status < 400:
            message = f"The model server answered with an unexpected HTTP {status}."
        else:
            message = said = f"The model server refused the request (HTTP {status})."
            if detail.strip():
                message = f"{message[:-1]}: {self._summary(detail)}"
        raise ProviderError(
            self._redact(message),
            retryable=False,
            status=status,
            detail=self._full(response.text),
            # The chat hears what failed, never the server's own words (those are in the trace).
            user_message=said,
        )

    # -- failure reporting -----------------------------------------------------------------

    def _exhausted(self, failure: AttemptFailed) -> ProviderError:
        attempts = failure.attempts
        tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
        if failure.kind in ("refused", "unreachable"):
            why = "connection refused" if failure.kind == "refused" else self._summary(failure.detail)
            message = (
                f"Can't reach the model server at {self._shown_url}: {why} ({tries}). {self._reach_hint()}"
            )
        elif failure.kind == "timeout":
            message = (
                f"The model server at {self._shown_url} did not answer within "
                f"{self._settings.timeout_s:g} s ({tries})."
            )
        elif failure.kind == "http":
            message = f"The model server kept failing (HTTP {failure.status}) after {tries}"
            said = f"{message}."
            message += f": {self._summary(failure.detail)}" if failure.detail.strip() else "."
        else:
            summary = self._summary(failure.detail)
            message = f"The model server sent a malformed response ({summary}) after {tries}."
            said = f"The model server sent a malformed response after {tries}."
        return ProviderError(
            self._redact(message),
            retryable=True,
            status=failure.status,
            detail=self._full(failure.body or failure.detail),
            # The chat hears what failed, never the server's own words (those are in the trace).
            user_message=self._redact(said) if failure.kind in ("http", "malformed") else None,
        )

    def _reach_hint(self) -> str:
        """What to run or check when nothing answers at the base URL."""
        if is_local_model_url(self._base_url):
            return "Start it with `bridge local-model start`."
        return "Check that it is running and that [llm] base_url is right."

    def _reason(self, error: BaseException) -> str:
        """A failed attempt for the retry log line: its reason, secrets masked."""
        return self._redact(error.reason if isinstance(error, RetryableError) else str(error))

    def _redact(self, text: str) -> str:
        # Servers sometimes echo the key back ("Incorrect API key provided: sk-..."); never pass it on.
        return mask_url(self._redact_secrets(text))

    def _summary(self, text: str) -> str:
        """The server's words as the chat may see them: secrets and URLs masked, one line, short."""
        # URLs first: once a password inside one is masked, the URL no longer reads as one.
        text = " ".join(self._redact(_TOKEN.sub(REDACTED, _URL.sub("<url>", text))).split())
        return text if len(text) <= MAX_SUMMARY_CHARS else text[: MAX_SUMMARY_CHARS - 1] + "…"

    def _full(self, text: str) -> str:
        """The server's whole answer for the run's trace: secrets masked first, then cut to size."""
        text = self._redact(text)
        return text if len(text) <= MAX_BODY_CHARS else text[:MAX_BODY_CHARS] + "…"


# -- helpers ---------------------------------------------------------------------------------


def error_detail(response: httpx.Response) -> str:
    """The server's own explanation: error.message from a JSON body, else its text (not yet shortened)."""
    try:
        data = loads(response.content)
    except ValueError:
        return response.text
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str):
            return error
        for key in ("message", "detail"):
            if isinstance(value := data.get(key), str):
                return value
    return ""


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
    return str(exc) or type(exc).__name__


def chain(exc: BaseException) -> str:
    """An exception and its causes, one line each, for the run's trace."""
    lines: list[str] = []
    seen: BaseException | None = exc
    while seen is not None and len(lines) < 10:  # the bound guards against cycles
        lines.append(f"{type(seen).__name__}: {seen}")
        seen = seen.__cause__ or seen.__context__
    return "\n".join(lines)


def _failed(exc: httpx.RequestError) -> AttemptFailed:
    """A request that got no usable answer, as the retryable failure it is."""
    if isinstance(exc, httpx.TimeoutException):
        return AttemptFailed("timeout", f"timed out ({type(exc).__name__})", body=chain(exc))
    if isinstance(exc, httpx.ConnectError):
        if is_refused(exc):
            return AttemptFailed("refused", "connection refused", body=chain(exc))
        return AttemptFailed("unreachable", "cannot connect", detail=describe_exc(exc), body=chain(exc))
    if isinstance(exc, httpx.TransportError):
        return AttemptFailed("unreachable", "connection failed", detail=describe_exc(exc), body=chain(exc))
    # DecodingError and friends: the bytes arrived but could not be read.
    return AttemptFailed("malformed", "unreadable body", detail=describe_exc(exc), body=chain(exc))
