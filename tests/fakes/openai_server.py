"""A scripted fake OpenAI-compatible /chat/completions server on 127.0.0.1 for tests."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import json
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from tests.fakes.loopback import LoopbackServer

_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted answer: a status, a body (dict → JSON, bytes → verbatim), headers, an optional delay."""

    status: int = 200
    body: dict[str, Any] | bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


Script = Callable[[dict[str, Any]], "Reply | Awaitable[Reply]"]


def _completion(
    message: dict[str, Any], finish_reason: str, prompt_tokens: int, completion_tokens: int
) -> Reply:
    n = next(_ids)
    return Reply(
        body={
            "id": f"chatcmpl-fake{n}",
            "object": "chat.completion",
            "created": 1_700_000_000 + n,
            "model": "fake-model",
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
    )


def text(content: str, *, prompt_tokens: int = 10, completion_tokens: int = 5) -> Reply:
    """A plain assistant answer."""
    return _completion({"role": "assistant", "content": content}, "stop", prompt_tokens, completion_tokens)


def tool_call(
    name: str,
    arguments: dict[str, Any] | str,
    call_id: str | None = None,
    *,
    content: str | None = None,
    prompt_tokens: int = 10,
    completion_tokens: int = 5,
) -> Reply:
    """One tool call. String arguments go out verbatim (malformed JSON is allowed).

    call_id None → a generated "call_fakeN"; call_id "" → the id field is left out entirely.
    """
    wire_arguments = arguments if isinstance(arguments, str) else json.dumps(arguments)
    call: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": wire_arguments}}
    if call_id is None:
        call_id = f"call_fake{next(_ids)}"
    if call_id:
        call = {"id": call_id, **call}
    message = {"role": "assistant", "content": content, "tool_calls": [call]}
    return _completion(message, "tool_calls", prompt_tokens, completion_tokens)


def tool_calls(*calls: Reply, content: str | None = None) -> Reply:
    """Several tool calls in one reply, each built with tool_call()."""
    merged = [call for reply in calls for call in _message(reply).get("tool_calls", [])]
    message = {"role": "assistant", "content": content, "tool_calls": merged}
    return _completion(message, "tool_calls", 10, 5 * len(merged))


def http_error(
    status: int, body: dict[str, Any] | str | bytes | None = None, headers: dict[str, str] | None = None
) -> Reply:
    """An error response. body None → a default OpenAI error; str → {"error": {"message": str}};
    dict → that JSON; bytes → sent verbatim (e.g. an HTML error page from a proxy)."""
    if body is None:
        body = f"fake error {status}"
    if isinstance(body, str):
        body = {"error": {"message": body, "type": "fake_error", "code": status}}
    return Reply(status=status, body=body, headers=dict(headers or {}))


def delay(seconds: float, reply: Reply) -> Reply:
    """`reply`, sent only after `seconds` (the request is recorded at once, before the wait)."""
    return replace(reply, delay_s=reply.delay_s + seconds)


def malformed() -> Reply:
    """A 200 whose body claims to be JSON but is cut off mid-way."""
    return Reply(body=b'{"id": "chatcmpl-broken", "choices": [{"message": {"role": "assist')


def _message(reply: Reply) -> dict[str, Any]:
    assert isinstance(reply.body, dict), "tool_calls() takes replies built with tool_call()"
    return reply.body["choices"][0]["message"]


class FakeOpenAI(LoopbackServer):
    """Serves POST /v1/chat/completions (also /chat/completions) on 127.0.0.1, random port.

    Replies come from `script(body)` when given, else from the queue filled by push(). A request
    with nothing left to answer gets a 500 saying the script ran out, so the test fails loudly.
    """

    def __init__(self, script: Script | None = None) -> None:
        super().__init__()
        self.script = script
        self.requests: list[dict[str, Any]] = []
        # Case-insensitive, so fake.request_headers[0]["authorization"] works however it was sent.
        self.request_headers: list[Mapping[str, str]] = []
        self.paths: list[str] = []
        self._replies: deque[Reply] = deque()
        self._arrived = asyncio.Condition()

    # -- lifecycle -------------------------------------------------------------------------

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_post("/chat/completions", self._handle)

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1" if self.origin else ""

    # -- scripting and assertions ----------------------------------------------------------

    def push(self, *replies: Reply) -> None:
        """Queue replies, consumed one per request in order (used when there is no script)."""
        self._replies.extend(replies)

    @property
    def remaining(self) -> int:
        """Queued replies not yet consumed."""
        return len(self._replies)

    # The timeout parameter is the documented API that tests call; it bounds an internal wait.
    async def wait_for_requests(self, n: int, timeout: float = 5.0) -> None:  # noqa: ASYNC109
        """Return once at least `n` requests have arrived; AssertionError after `timeout` seconds."""
        try:
            async with asyncio.timeout(timeout):
                async with self._arrived:
                    await self._arrived.wait_for(lambda: len(self.requests) >= n)
        except TimeoutError:
            raise AssertionError(
                f"FakeOpenAI: expected {n} request(s) within {timeout} s, got {len(self.requests)}"
            ) from None

    @property
    def last_request(self) -> dict[str, Any]:
        assert self.requests, "FakeOpenAI: no request received yet"
        return self.requests[-1]

    def tool_names(self, i: int) -> list[str]:
        """Names of the tools offered in request i ([] when the request had no tools)."""
        return [tool["function"]["name"] for tool in self.requests[i].get("tools") or []]

    # -- serving ---------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = {"_invalid_json": raw.decode("utf-8", "replace")}
        async with self._arrived:
            self.requests.append(body)
            self.request_headers.append(CIMultiDict(request.headers))
            self.paths.append(request.path)
            index = len(self.requests) - 1
            self._arrived.notify_all()

        reply = await self._next_reply(body, index)
        if reply.delay_s > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), reply.delay_s)
        payload = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
        headers = {"Content-Type": "application/json", **reply.headers}
        return web.Response(status=reply.status, body=payload, headers=headers)

    async def _next_reply(self, body: dict[str, Any], index: int) -> Reply:
        if self.script is not None:
            try:
                outcome = self.script(body)
                return await outcome if inspect.isawaitable(outcome) else outcome
            except Exception as exc:  # a broken script should fail the test, not hang it
                return http_error(500, f"FakeOpenAI: script raised {exc!r} on request #{index}")
        if self._replies:
            return self._replies.popleft()
        return http_error(500, f"FakeOpenAI: script ran out of replies at request #{index}")
