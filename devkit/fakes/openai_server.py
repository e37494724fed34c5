"""A scripted fake OpenAI-compatible server on 127.0.0.1 for tests: /chat/completions (image parts
included) and /audio/transcriptions."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import inspect
import itertools
import json
import re
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict

from aiohttp import BodyPartReader, web
from multidict import CIMultiDict

from devkit.fakes.loopback import LoopbackServer

_ids = itertools.count(1)
# Bodies are read up to this size (aiohttp's own default, 1 MiB, is below a photo or a voice note).
MAX_BODY_BYTES = 64 * 1024**2
# The image types OpenAI takes in a data URL, and the audio file extensions its transcription takes.
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
AUDIO_EXTENSIONS = ("flac", "m4a", "mp3", "mp4", "mpeg", "mpga", "oga", "ogg", "wav", "webm")
TRANSCRIPT_FORMATS = ("json", "text", "verbose_json")
DEFAULT_TRANSCRIPT = "(transcript)"
_DATA_URL = re.compile(r"^data:([^;,]*);base64,(.*)$", re.DOTALL)


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


def invalid_request(message: str, param: str | None = None, code: str | None = None) -> Reply:
    """A 400 as OpenAI words a malformed request: {"error": {"message", "type": "invalid_request_error",
    "param", "code"}}."""
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    return Reply(status=400, body={"error": error})


def decode_base64(data: str) -> bytes | None:
    """`data` decoded as strict base64 (standard alphabet, padded, no whitespace); None when it is not."""
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def _data_url(url: str) -> tuple[str, bytes] | None:
    match = _DATA_URL.match(url)
    if match is None:
        return None
    data = decode_base64(match.group(2))
    return None if data is None else (match.group(1), data)


def images_in(request_body: dict[str, Any]) -> list[tuple[str, bytes]]:
    """(mime type, decoded bytes) of every inline image in a chat request, in message and part order.

    Only base64 data URLs count: an http(s) image URL, or a part that does not decode, is skipped.
    """
    images: list[tuple[str, bytes]] = []
    messages = request_body.get("messages")
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else ():
            if not isinstance(part, dict) or part.get("type") != "image_url":
                continue
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else None
            decoded = _data_url(url) if isinstance(url, str) else None
            if decoded is not None:
                images.append(decoded)
    return images


def _check_chat(body: Any) -> Reply | None:
    """The 400 OpenAI answers a chat request with malformed content parts; None when they are valid.

    Only list content is checked (string content, roles and the rest go through as before): each part
    needs a known type; text parts a string; image parts an image_url.url that is an http(s) URL or a
    base64 data URL of a supported image type, and only in user messages.
    """
    messages = body.get("messages") if isinstance(body, dict) else None
    for i, message in enumerate(messages if isinstance(messages, list) else ()):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        if not content:
            return invalid_request(
                f"Invalid 'messages[{i}].content': empty array. Expected an array with minimum length 1, "
                "but got an empty array instead.",
                f"messages.[{i}].content",
                "empty_array",
            )
        for j, part in enumerate(content):
            problem = _check_part(part, message.get("role"), f"messages[{i}].content[{j}]")
            if problem is not None:
                return problem
    return None


def _check_part(part: Any, role: Any, at: str) -> Reply | None:
    param = at.replace("[", ".[")
    if not isinstance(part, dict):
        return invalid_request(
            f"Invalid type for '{at}': expected an object, but got {type(part).__name__} instead.",
            param,
            "invalid_type",
        )
    kind = part.get("type")
    if kind is None:
        return invalid_request(
            f"Missing required parameter: '{at}.type'.", f"{param}.type", "missing_required_parameter"
        )
    if kind == "text":
        if not isinstance(part.get("text"), str):
            return invalid_request(
                f"Missing required parameter: '{at}.text'.", f"{param}.text", "missing_required_parameter"
            )
        return None
    if kind in ("input_audio", "file", "refusal"):
        return None
    if kind != "image_url":
        return invalid_request(
            f"Invalid value: '{kind}'. Supported values are: 'text', 'image_url', 'input_audio', 'refusal', "
            "and 'file'.",
            f"{param}.type",
            "invalid_value",
        )
    if role != "user":
        return invalid_request(
            f"Invalid '{at}': Image URLs are only allowed for messages with role 'user', but this message "
            f"with role '{role}' contains an image URL.",
            param,
            "invalid_value",
        )
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else None
    if not isinstance(url, str) or not url:
        return invalid_request(
            f"Missing required parameter: '{at}.image_url.url'.",
            f"{param}.image_url.url",
            "missing_required_parameter",
        )
    detail = image.get("detail") if isinstance(image, dict) else None
    if detail is not None and detail not in ("auto", "low", "high"):
        return invalid_request(
            f"Invalid value: '{detail}'. Supported values are: 'auto', 'low', and 'high'.",
            f"{param}.image_url.detail",
            "invalid_value",
        )
    return _check_image_url(url, f"{at}.image_url.url", f"{param}.image_url.url")


def _check_image_url(url: str, at: str, param: str) -> Reply | None:
    if url.startswith(("http://", "https://")):
        return None
    expected = (
        f"Invalid '{at}'. Expected a base64-encoded data URL with an image MIME type "
        "(e.g. 'data:image/png;base64,aW1nIGJ5dGVzIGhlcmU='), but got "
    )
    match = _DATA_URL.match(url)
    if match is None:
        return invalid_request(expected + "a value that is not one.", param, "invalid_image_url")
    if match.group(1) not in IMAGE_TYPES:
        return invalid_request(
            expected + f"unsupported MIME type '{match.group(1)}'.", param, "invalid_image_format"
        )
    if not match.group(2) or decode_base64(match.group(2)) is None:
        return invalid_request(expected + "data that is not valid base64.", param, "invalid_image_url")
    return None


class Transcription(TypedDict):
    """One POST /audio/transcriptions as the fake received it (None: the part was not sent)."""

    model: str | None
    filename: str | None
    content_type: str | None
    data: bytes
    language: str | None
    prompt: str | None
    response_format: str | None
    authorization: str | None


@dataclass(frozen=True, slots=True)
class _Upload:
    filename: str | None
    content_type: str | None
    data: bytes


async def _read_form(request: web.Request) -> tuple[dict[str, str], dict[str, _Upload]]:
    """The text fields and the file parts of a multipart/form-data body (a url-encoded form has fields
    only); ValueError when the body is neither."""
    if request.content_type == "application/x-www-form-urlencoded":
        form = await request.clone(client_max_size=MAX_BODY_BYTES).post()
        return {name: value for name, value in form.items() if isinstance(value, str)}, {}
    if request.content_type != "multipart/form-data":
        raise ValueError(f"expected multipart/form-data, got {request.content_type or 'no content type'}")
    reader = await request.clone(client_max_size=MAX_BODY_BYTES).multipart()
    fields: dict[str, str] = {}
    files: dict[str, _Upload] = {}
    async for part in reader:
        if not isinstance(part, BodyPartReader) or not part.name:
            raise ValueError("a multipart part without a name")
        data = await part.read(decode=True)
        if part.filename is not None:
            files[part.name] = _Upload(part.filename, part.headers.get("Content-Type"), bytes(data))
        else:
            fields[part.name] = data.decode("utf-8", "replace")
    return fields, files


def _message(reply: Reply) -> dict[str, Any]:
    assert isinstance(reply.body, dict), "tool_calls() takes replies built with tool_call()"
    return reply.body["choices"][0]["message"]


class FakeOpenAI(LoopbackServer):
    """Serves POST /v1/chat/completions (also /chat/completions) on 127.0.0.1, random port.

    Replies come from `script(body)` when given, else from the queue filled by push(). A request
    with nothing left to answer gets a 500 saying the script ran out, so the test fails loudly.
    A chat request whose list content has malformed parts (see _check_chat) is recorded, then gets
    OpenAI's 400 invalid_request_error, noted in `rejections`, and consumes no reply.

    Also serves POST /v1/audio/transcriptions (also /audio/transcriptions), multipart like OpenAI's:
    each one is recorded in `transcriptions`; the text comes from the queue push_transcript() fills
    (`default_transcript` when it is empty), and a queued Reply is sent verbatim instead.
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
        # What a 400 (chat or transcription) was about, in order.
        self.rejections: list[str] = []
        self.transcriptions: list[Transcription] = []
        self.transcripts: deque[str | Reply] = deque()
        self.default_transcript = DEFAULT_TRANSCRIPT
        # When set, each valid transcription is answered by it from the audio's bytes (the queue is
        # not used): a transcript that travels with the audio, whatever order requests come in.
        self.transcribe: Callable[[bytes], Awaitable[str | Reply]] | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_post("/chat/completions", self._handle)
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
        app.router.add_post("/audio/transcriptions", self._transcribe)

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

    def push_transcript(self, *items: str | Reply) -> None:
        """Queue transcription answers, one per valid request in order: a string is the transcript
        (shaped by the request's response_format); a Reply (http_error(...), delay(...)) goes out as is."""
        self.transcripts.extend(items)

    @property
    def last_transcription(self) -> Transcription:
        assert self.transcriptions, "FakeOpenAI: no transcription request received yet"
        return self.transcriptions[-1]

    def describe_state(self) -> str:
        return (
            f"{len(self.requests)} chat request(s), {len(self.transcriptions)} transcription(s), "
            f"rejections: {self.rejections}"
        )

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
        raw = await request.clone(client_max_size=MAX_BODY_BYTES).read()
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
        self._notify()

        reply = _check_chat(body)
        if reply is not None:
            self._reject(reply)
        else:
            reply = await self._next_reply(body, index)
        await self._wait(reply)
        if body.get("stream") and reply.status == 200 and isinstance(reply.body, dict):
            return await self._stream(request, body, reply)
        return _send(reply)

    async def _transcribe(self, request: web.Request) -> web.StreamResponse:
        fields: dict[str, str] = {}
        files: dict[str, _Upload] = {}
        unreadable: str | None = None
        try:
            fields, files = await _read_form(request)
        except ValueError as exc:
            unreadable = str(exc)
        upload = files.get("file")
        self.transcriptions.append(
            Transcription(
                model=fields.get("model"),
                filename=upload.filename if upload else None,
                content_type=upload.content_type if upload else None,
                data=upload.data if upload else b"",
                language=fields.get("language"),
                prompt=fields.get("prompt"),
                response_format=fields.get("response_format"),
                authorization=request.headers.get("Authorization"),
            )
        )
        self._notify()

        response_format = fields.get("response_format") or "json"
        problem = _check_transcription(unreadable, fields, upload, response_format)
        if problem is not None:
            self._reject(problem)
            return _send(problem)
        if self.transcribe is not None:
            item = await self.transcribe(upload.data if upload else b"")
        else:
            item = self.transcripts.popleft() if self.transcripts else self.default_transcript
        if isinstance(item, Reply):
            await self._wait(item)
            return _send(item)
        if response_format == "text":
            return web.Response(text=item, content_type="text/plain")
        if response_format == "verbose_json":
            language = fields.get("language") or "english"
            verbose = {
                "task": "transcribe",
                "language": language,
                "duration": 1.0,
                "text": item,
                "segments": [],
            }
            return web.json_response(verbose)
        return web.json_response({"text": item})

    def _reject(self, reply: Reply) -> None:
        assert isinstance(reply.body, dict)
        self.rejections.append(reply.body["error"]["message"])
        self._notify()

    async def _wait(self, reply: Reply) -> None:
        if reply.delay_s > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), reply.delay_s)

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


def _send(reply: Reply) -> web.Response:
    payload = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
    headers = {"Content-Type": "application/json", **reply.headers}
    return web.Response(status=reply.status, body=payload, headers=headers)


def _check_transcription(
    unreadable: str | None, fields: dict[str, str], upload: _Upload | None, response_format: str
) -> Reply | None:
    """The 400 OpenAI answers a malformed transcription request with; None when it is valid."""
    if unreadable is not None:
        return invalid_request(f"Could not parse multipart form: {unreadable}.")
    if upload is None:
        message = "Missing required parameter: 'file'."
        if "file" in fields:
            message = "Invalid 'file': expected a file upload (a part with a filename), got a plain field."
        return invalid_request(message, "file", "missing_required_parameter")
    if not fields.get("model"):
        return invalid_request("Missing required parameter: 'model'.", "model", "missing_required_parameter")
    name = upload.filename or ""
    extension = name.rpartition(".")[2].lower() if "." in name else ""
    if extension not in AUDIO_EXTENSIONS:
        return invalid_request(
            f"Invalid file format. Supported formats: {list(AUDIO_EXTENSIONS)}", "file", "invalid_value"
        )
    if not upload.data:
        return invalid_request(
            "Audio file is too short. Minimum audio length is 0.1 seconds.", "file", "audio_too_short"
        )
    if response_format not in TRANSCRIPT_FORMATS:
        return invalid_request(
            f"Invalid value: '{response_format}'. Supported values are: 'json', 'text' and 'verbose_json'.",
            "response_format",
            "invalid_value",
        )
    return None
