"""A scripted fake Anthropic Messages API on 127.0.0.1 that validates requests as strictly as the real one."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
from collections import deque
from collections.abc import Mapping
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from devkit.fakes.loopback import LoopbackServer
from devkit.fakes.openai_server import Reply, decode_base64, delay, write_events

__all__ = [
    "FakeAnthropic",
    "Reply",
    "delay",
    "http_error",
    "images_in",
    "malformed",
    "overloaded",
    "text",
    "tool_use",
    "tool_uses",
]

_ids = itertools.count(1)
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
_TOOL_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
# The real API takes requests up to 32 MB (aiohttp's own default, 1 MiB, is below one photo).
MAX_BODY_BYTES = 32 * 1024**2
IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")


def _message(content: list[dict[str, Any]], stop_reason: str, input_tokens: int, output_tokens: int) -> Reply:
    n = next(_ids)
    return Reply(
        body={
            "id": f"msg_fake{n}",
            "type": "message",
            "role": "assistant",
            "model": "claude-fake",
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
        }
    )


def text(content: str, *, input_tokens: int = 10, output_tokens: int = 5) -> Reply:
    """A plain assistant answer."""
    return _message([{"type": "text", "text": content}], "end_turn", input_tokens, output_tokens)


def tool_use(
    name: str,
    arguments: dict[str, Any],
    call_id: str | None = None,
    *,
    content: str | None = None,
    input_tokens: int = 10,
    output_tokens: int = 5,
) -> Reply:
    """One tool_use block, after an optional text block; call_id None → a generated "toolu_fakeN"."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": content}] if content else []
    blocks.append(
        {"type": "tool_use", "id": call_id or f"toolu_fake{next(_ids)}", "name": name, "input": arguments}
    )
    return _message(blocks, "tool_use", input_tokens, output_tokens)


def tool_uses(*calls: Reply, content: str | None = None) -> Reply:
    """Several tool_use blocks in one reply, each built with tool_use()."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": content}] if content else []
    for reply in calls:
        assert isinstance(reply.body, dict), "tool_uses() takes replies built with tool_use()"
        blocks.extend(b for b in reply.body["content"] if b["type"] == "tool_use")
    return _message(blocks, "tool_use", 10, 5 * len(blocks))


def http_error(
    status: int,
    message: str | bytes | None = None,
    headers: dict[str, str] | None = None,
    *,
    error_type: str = "api_error",
) -> Reply:
    """An error in Anthropic's shape ({"type": "error", "error": {...}}); bytes go out verbatim."""
    if isinstance(message, bytes):
        return Reply(status=status, body=message, headers=dict(headers or {}))
    error = {"type": error_type, "message": message if message is not None else f"fake error {status}"}
    return Reply(status=status, body={"type": "error", "error": error}, headers=dict(headers or {}))


def overloaded(headers: dict[str, str] | None = None) -> Reply:
    """Anthropic's 529: the API is temporarily overloaded."""
    return http_error(529, "Overloaded", headers, error_type="overloaded_error")


def malformed() -> Reply:
    """A 200 whose body claims to be JSON but is cut off mid-way."""
    return Reply(body=b'{"id": "msg_broken", "type": "message", "content": [{"type": "te')


def _invalid(message: str) -> Reply:
    return http_error(400, message, error_type="invalid_request_error")


def images_in(request_body: dict[str, Any]) -> list[tuple[str, bytes]]:
    """(media type, decoded bytes) of every base64 image block in a Messages request, in message and
    block order, images inside tool_result content included; url sources and undecodable data are
    skipped."""
    images: list[tuple[str, bytes]] = []
    messages = request_body.get("messages")
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else ():
            if not isinstance(block, dict):
                continue
            nested = block.get("content") if block.get("type") == "tool_result" else None
            for candidate in nested if isinstance(nested, list) else [block]:
                image = _image(candidate)
                if image is not None:
                    images.append(image)
    return images


def _image(block: Any) -> tuple[str, bytes] | None:
    if not isinstance(block, dict) or block.get("type") != "image":
        return None
    source = block.get("source")
    if not isinstance(source, dict) or source.get("type") != "base64":
        return None
    data = source.get("data")
    decoded = decode_base64(data) if isinstance(data, str) else None
    media_type = source.get("media_type")
    return (media_type, decoded) if decoded is not None and isinstance(media_type, str) else None


def stream_events(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A Messages API response as the events a streaming request gets: text four characters at a time,
    a tool_use's input JSON in two pieces."""
    usage = message.get("usage", {})
    start = {k: v for k, v in message.items() if k not in ("content", "stop_reason", "usage")}
    events: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {**start, "content": [], "usage": {"input_tokens": usage.get("input_tokens", 0)}},
        }
    ]
    for index, block in enumerate(message.get("content", [])):
        if block["type"] == "text":
            events.append(
                {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}
            )
            text = block["text"]
            events += [
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "text_delta", "text": text[i : i + 4]},
                }
                for i in range(0, len(text), 4)
            ]
        else:
            events.append(
                {"type": "content_block_start", "index": index, "content_block": {**block, "input": {}}}
            )
            raw = json.dumps(block.get("input", {}))
            for piece in (raw[: len(raw) // 2], raw[len(raw) // 2 :]):
                events.append(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    }
                )
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": message.get("stop_reason")},
            "usage": {"output_tokens": usage.get("output_tokens", 0)},
        }
    )
    events.append({"type": "message_stop"})
    return events


class FakeAnthropic(LoopbackServer):
    """Serves POST /v1/messages on 127.0.0.1, random port; point base_url at `.base_url`.

    Every request is recorded, then validated like the real API (alternating roles starting with user,
    tool results answering the previous assistant's tool_use blocks, no empty text, max_tokens present,
    no "system" role among the messages...). An invalid request gets a 400 invalid_request_error,
    noted in `rejections`, and consumes no scripted reply. Valid ones are answered from the queue
    filled by push(); with nothing left, a 500 says the script ran out, so the test fails loudly.
    With `api_key` set, any other x-api-key gets a 401 authentication_error.
    """

    def __init__(self, *, api_key: str | None = None) -> None:
        super().__init__()
        self.api_key = api_key
        self.requests: list[dict[str, Any]] = []
        # Case-insensitive, so fake.request_headers[0]["x-api-key"] works however it was sent.
        self.request_headers: list[Mapping[str, str]] = []
        self.paths: list[str] = []
        self.rejections: list[str] = []
        self._replies: deque[Reply] = deque()

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/messages", self._handle)

    @property
    def base_url(self) -> str:
        return self.origin

    def push(self, *replies: Reply) -> None:
        """Queue replies, consumed one per valid request in order."""
        self._replies.extend(replies)

    @property
    def remaining(self) -> int:
        return len(self._replies)

    @property
    def last_request(self) -> dict[str, Any]:
        assert self.requests, "FakeAnthropic: no request received yet"
        return self.requests[-1]

    def tool_names(self, i: int) -> list[str]:
        """Names of the tools offered in request i ([] when the request had no tools)."""
        return [tool["name"] for tool in self.requests[i].get("tools") or []]

    def describe_state(self) -> str:
        return f"{len(self.requests)} request(s), rejections: {self.rejections}"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.clone(client_max_size=MAX_BODY_BYTES).read()
        headers = CIMultiDict(request.headers)
        try:
            body = json.loads(raw)
        except ValueError:
            body = {"_invalid_json": raw.decode("utf-8", "replace")}
        self.requests.append(body)
        self.request_headers.append(headers)
        self.paths.append(request.path)
        self._notify()

        reply = self._check_auth(headers)
        problem = None if reply else self._check(headers, body)
        if problem:
            self.rejections.append(problem)
            reply = _invalid(problem)
        elif reply is None:
            reply = self._next_reply()
        if reply.delay_s > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), reply.delay_s)
        if body.get("stream") and reply.status == 200 and isinstance(reply.body, dict):
            return await self._stream(request, reply)
        payload = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
        return web.Response(
            status=reply.status, body=payload, headers={"Content-Type": "application/json", **reply.headers}
        )

    async def _stream(self, request: web.Request, reply: Reply) -> web.StreamResponse:
        assert isinstance(reply.body, dict)
        events = [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in stream_events(reply.body)]
        return await write_events(request, reply, events)

    def _next_reply(self) -> Reply:
        if self._replies:
            return self._replies.popleft()
        return http_error(
            500, f"FakeAnthropic: script ran out of replies at request #{len(self.requests) - 1}"
        )

    def _check_auth(self, headers: Mapping[str, str]) -> Reply | None:
        if self.api_key is None:
            return None
        key = headers.get("x-api-key")
        if not key:
            return http_error(401, "x-api-key header is required", error_type="authentication_error")
        if key != self.api_key:
            return http_error(401, "invalid x-api-key", error_type="authentication_error")
        return None

    # -- validation, as the real API does it ---------------------------------------------------

    def _check(self, headers: Mapping[str, str], body: dict[str, Any]) -> str | None:
        """What the real API would reject this request for, or None when it is valid."""
        if not headers.get("anthropic-version"):
            return "anthropic-version: header is required"
        if "_invalid_json" in body:
            return "request body is not valid JSON"
        if not isinstance(body.get("model"), str) or not body["model"]:
            return "model: Field required"
        max_tokens = body.get("max_tokens")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            return "max_tokens: Field required"
        temperature = body.get("temperature")
        if temperature is not None and not 0 <= temperature <= 1:
            return "temperature: Input should be less than or equal to 1"
        return (
            _check_system(body.get("system"))
            or _check_tools(body.get("tools"))
            or _check_messages(body.get("messages"))
        )


def _check_system(system: Any) -> str | None:
    if system is None or isinstance(system, str):
        return None
    if isinstance(system, list):
        for i, block in enumerate(system):
            problem = _check_text_block(block, f"system.{i}")
            if problem:
                return problem
        return None
    return "system: Input should be a valid string or list"


def _check_tools(tools: Any) -> str | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        return "tools: Input should be a valid list"
    names: set[str] = set()
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or "function" in tool:
            return f"tools.{i}: Extra inputs are not permitted (use name, description, input_schema)"
        if not isinstance(tool.get("name"), str) or not _TOOL_NAME.match(tool["name"]):
            return f"tools.{i}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'"
        if tool["name"] in names:
            return "tools: Tool names must be unique."
        names.add(tool["name"])
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            return f"tools.{i}.input_schema: Field required"
        if schema.get("type") != "object":
            return f"tools.{i}.input_schema.type: Input should be 'object'"
    return None


def _check_messages(messages: Any) -> str | None:
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            return f"messages.{i}: Input should be a valid dictionary"
        role = message.get("role")
        if role == "system":
            return (
                'messages: Unexpected role "system". The Messages API accepts a top-level `system` '
                'parameter, not "system" as an input message role.'
            )
        if role not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        if i == 0 and role != "user":
            return 'messages: first message must use the "user" role'
        if i > 0 and messages[i - 1].get("role") == role:
            return 'messages: roles must alternate between "user" and "assistant"'
        problem = _check_content(message, i, messages[i - 1] if i > 0 else None)
        if problem:
            return problem
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        called = [b["id"] for b in _blocks(message) if b.get("type") == "tool_use"]
        following = messages[i + 1] if i + 1 < len(messages) else None
        answered = {b.get("tool_use_id") for b in _blocks(following) if b.get("type") == "tool_result"}
        missing = [call for call in called if call not in answered]
        if missing:
            return (
                f"messages.{i + 1}: `tool_use` ids were found without `tool_result` blocks immediately "
                f"after: {', '.join(missing)}. Each `tool_use` block must have a corresponding "
                "`tool_result` block in the next message."
            )
    return None


def _blocks(message: dict[str, Any] | None) -> list[dict[str, Any]]:
    if message is None:
        return []
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or () if isinstance(b, dict)]


def _check_content(message: dict[str, Any], i: int, previous: dict[str, Any] | None) -> str | None:
    content = message.get("content")
    where = f"messages.{i}.content"
    if isinstance(content, str):
        return f"{where}: text content must be non-empty" if not content.strip() else None
    if not isinstance(content, list) or not content:
        return f"{where}: messages must have non-empty content"
    open_calls = {b.get("id") for b in _blocks(previous) if b.get("type") == "tool_use"}
    # The first block that is not a tool_result: every tool_result must come before it.
    seen_other: str | None = None
    for j, block in enumerate(content):
        at = f"{where}.{j}"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            problem = _check_text_block(block, at)
            if problem:
                return problem
            seen_other = seen_other or "text"
        elif kind == "image":
            if message["role"] != "user":
                return f"{at}: image blocks are only allowed in user messages"
            problem = _check_image_block(block, at)
            if problem:
                return problem
            seen_other = seen_other or "image"
        elif kind == "tool_use":
            if message["role"] != "assistant":
                return f"{at}: tool_use blocks are only allowed in assistant messages"
            if not isinstance(block.get("id"), str) or not _TOOL_ID.match(block["id"]):
                return f"{at}.id: String should match pattern '^[a-zA-Z0-9_-]+$'"
            if not isinstance(block.get("name"), str) or not block["name"]:
                return f"{at}.name: Field required"
            if not isinstance(block.get("input"), dict):
                return f"{at}.input: Input should be a valid dictionary"
        elif kind == "tool_result":
            if message["role"] != "user":
                return f"{at}: tool_result blocks are only allowed in user messages"
            if block.get("tool_use_id") not in open_calls:
                return (
                    f"{at}: unexpected `tool_use_id` found in `tool_result` blocks: "
                    f"{block.get('tool_use_id')}. Each `tool_result` block must have a corresponding "
                    "`tool_use` block in the previous message."
                )
            if seen_other:
                return f"{at}: tool_result blocks must come before any {seen_other} in a user message"
            result = block.get("content")
            if isinstance(result, list):
                for k, part in enumerate(result):
                    is_image = isinstance(part, dict) and part.get("type") == "image"
                    check = _check_image_block if is_image else _check_text_block
                    problem = check(part, f"{at}.content.{k}")
                    if problem:
                        return problem
            elif result is not None and not isinstance(result, str):
                return f"{at}.content: Input should be a valid string or list"
        else:
            return f"{at}.type: Input tag {kind!r} does not match any of the expected tags"
    return None


def _check_text_block(block: Any, at: str) -> str | None:
    if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
        return f"{at}: Input should be a text block"
    if not block["text"]:
        return f"{at}: text content blocks must be non-empty"
    if not block["text"].strip():
        return f"{at}: text content blocks must contain non-whitespace text"
    return None


def _check_image_block(block: dict[str, Any], at: str) -> str | None:
    """An image block as the real API checks it: a base64 source (a supported media_type, non-empty
    base64 data of that type) or a url source (an http(s) URL)."""
    source = block.get("source")
    if not isinstance(source, dict):
        return f"{at}.image.source: Field required"
    kind = source.get("type")
    if kind == "url":
        url = source.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            return f"{at}.image.source.url.url: Input should be a valid URL"
        return None
    if kind != "base64":
        return (
            f"{at}.image.source: Input tag {kind!r} found using 'type' does not match any of the expected "
            "tags: 'base64', 'url'"
        )
    media_type = source.get("media_type")
    if media_type not in IMAGE_TYPES:
        return (
            f"{at}.image.source.base64.media_type: Input should be 'image/jpeg', 'image/png', "
            "'image/gif' or 'image/webp'"
        )
    data = source.get("data")
    if not isinstance(data, str) or not data:
        return f"{at}.image.source.base64.data: Field required"
    decoded = decode_base64(data)
    if decoded is None:
        return f"{at}.image.source.base64.data: Invalid base64 data"
    actual = _sniff(decoded)
    if actual is not None and actual != media_type:
        return f"{at}.image.source.base64.data: Image does not match the provided media type {media_type}"
    return None


def _sniff(data: bytes) -> str | None:
    """The image type `data` recognisably is, by its leading bytes; None when it matches none of them.

    Data that is plainly another type than the one declared is refused, as the real API refuses it;
    bytes no signature matches pass, so tests may send short stand-ins for images.
    """
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None
