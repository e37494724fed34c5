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
    # Streamed (the request asked for a stream): the connection is dropped after this many chunks.
    cut_after: int | None = None
    # Streamed: seconds between chunks, so a test can watch the text arrive.
    chunk_delay_s: float = 0.0


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


def cut(reply: Reply, after: int) -> Reply:
    """`reply`, but when streamed the connection drops after `after` chunks (0: before any)."""
    return replace(reply, cut_after=after)


def paced(reply: Reply, seconds: float) -> Reply:
    """`reply`, streamed one chunk every `seconds`."""
    return replace(reply, chunk_delay_s=seconds)


def stream_chunks(body: dict[str, Any], usage: bool) -> list[dict[str, Any]]:
    """A chat.completion as the chat.completion.chunk events a streaming server sends: the text a
    few characters at a time, each tool call's name then its arguments in two pieces, then the
    finish reason, then (when asked for) the usage."""
    head = {"id": body.get("id", "chatcmpl-fake"), "object": "chat.completion.chunk", "model": "fake-model"}
    choice = body["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    content = message.get("content") or ""
    chunks += [chunk({"content": content[i : i + 4]}) for i in range(0, len(content), 4)]
    for index, call in enumerate(message.get("tool_calls") or []):
        function = {"name": call["function"]["name"], "arguments": ""}
        first: dict[str, Any] = {"index": index, "type": "function", "function": function}
        if "id" in call:
            first["id"] = call["id"]
        chunks.append(chunk({"tool_calls": [first]}))
        arguments = call["function"]["arguments"]
        half = len(arguments) // 2
        for piece in (arguments[:half], arguments[half:]):
            chunks.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
    chunks.append(chunk({}, choice.get("finish_reason") or "stop"))
    if usage and "usage" in body:
        chunks.append({**head, "choices": [], "usage": body["usage"]})
    return chunks


async def write_events(request: web.Request, reply: Reply, events: list[str]) -> web.StreamResponse:
    """Send server-sent events as `reply` says: paced, or dropped mid-way after `cut_after` of them."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", **reply.headers})
    await response.prepare(request)
    for number, event in enumerate(events):
        if reply.cut_after is not None and number >= reply.cut_after:
            # Dropped mid-answer, as a crashed server or a cut connection would.
            assert request.transport is not None
            request.transport.close()
            return response
        if reply.chunk_delay_s:
            await asyncio.sleep(reply.chunk_delay_s)
        await response.write(event.encode())
    await response.write_eof()
    return response


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
        if body.get("stream") and reply.status == 200 and isinstance(reply.body, dict):
            return await self._stream(request, body, reply)
        payload = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
        headers = {"Content-Type": "application/json", **reply.headers}
        return web.Response(status=reply.status, body=payload, headers=headers)

    async def _stream(self, request: web.Request, body: dict[str, Any], reply: Reply) -> web.StreamResponse:
        assert isinstance(reply.body, dict)
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        events = [f"data: {json.dumps(chunk)}\n\n" for chunk in stream_chunks(reply.body, usage)]
        return await write_events(request, reply, [*events, "data: [DONE]\n\n"])

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
