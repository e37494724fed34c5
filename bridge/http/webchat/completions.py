"""POST /v1/chat/completions: Bridge's agent, with its sessions and tools, behind OpenAI's chat API.

Bridge keeps each session's history itself, so only the last user message of `messages` is taken, as
the new message of the session the call names (header `X-Bridge-Session`, else `user`, else `api`;
`main` is the operator's own thread). The answer is the run's final reply, as stored; with `stream`, the
answer's text is sent as it is written (chat.completion.chunk events, then `[DONE]`). `model` picks the
session's model profile the way `/model NAME` does ("bridge" leaves it as it is). Errors are OpenAI's
shape: `{"error": {"message", "type", "code"}}`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bridge.errors import IntakeUnavailable
from bridge.http.webchat.names import SURFACE, BadName, WebTalker, talker
from bridge.http.webchat.sender import ChatEvent, WebSender
from bridge.http.webchat.turns import Answer, NotOwner, Sent, WebTurns

if TYPE_CHECKING:
    from bridge.app import Bridge

log = logging.getLogger(__name__)

SESSION_HEADER = "X-Bridge-Session"
TIMEOUT_HEADER = "X-Bridge-Timeout"
# The model name that keeps the session's own profile (whatever /model chose for it).
OWN_MODEL = "bridge"
# How long a call waits for its answer unless X-Bridge-Timeout says otherwise, and the most it may say.
DEFAULT_TIMEOUT_S = 300.0
MAX_TIMEOUT_S = 3600.0
# The longest message taken (a turn's whole input is the history budget's business; this only stops
# a runaway body before it is stored).
MAX_TEXT = 100_000
ErrorType = Literal["invalid_request_error", "authentication_error", "server_error", "timeout_error"]


class ApiError(Exception):
    """An error answered in OpenAI's shape."""

    def __init__(self, status: int, message: str, kind: ErrorType, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.code = status, message, kind, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "code": self.code}}

    def response(self) -> web.Response:
        return web.json_response(self.body(), status=self.status)


class _Message(BaseModel):
    # Clients send names, tool calls and more on their messages: read what is used, leave the rest.
    model_config = ConfigDict(extra="ignore")
    role: str
    content: str | list[dict[str, Any]] | None = None


class _StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class CompletionRequest(BaseModel):
    """The request's fields Bridge reads; sampling settings and the like are ignored (the profile has
    its own)."""

    model_config = ConfigDict(extra="ignore")
    model: str = Field(min_length=1)
    messages: list[_Message] = Field(min_length=1)
    stream: bool = False
    stream_options: _StreamOptions | None = None
    user: str | None = None


def last_user_text(messages: list[_Message]) -> str:
    """The text of the last user message (a list content's text parts joined)."""
    for message in reversed(messages):
        if message.role != "user":
            continue
        content = message.content
        if isinstance(content, list):
            parts = [part.get("text") for part in content if part.get("type") == "text"]
            if len(parts) != len(content):
                raise ApiError(
                    400, "only text content is taken", "invalid_request_error", "unsupported_content"
                )
            content = "\n".join(str(part) for part in parts)
        if not content or not content.strip():
            raise ApiError(400, "the last user message is empty", "invalid_request_error", "empty_message")
        if len(content) > MAX_TEXT:
            raise ApiError(400, f"the message is over {MAX_TEXT} characters", "invalid_request_error")
        return content
    raise ApiError(400, "messages has no user message", "invalid_request_error", "no_user_message")


class Completions:
    """The OpenAI-compatible endpoint and its model list."""

    def __init__(self, bridge: Bridge, turns: WebTurns, sender: WebSender) -> None:
        self.bridge = bridge
        self.turns = turns
        self.sender = sender

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self.complete)
        app.router.add_get("/v1/models", self.models)

    async def models(self, request: web.Request) -> web.Response:
        """The names `model` takes: "bridge" (the session's own profile), "default", each profile."""
        names = [OWN_MODEL, *self.bridge.settings.llm.profile_names()]
        data = [{"id": name, "object": "model", "created": 0, "owned_by": "bridge"} for name in names]
        return web.json_response({"object": "list", "data": data})

    async def complete(self, request: web.Request) -> web.StreamResponse:
        try:
            asked = await _request_of(request)
            text = last_user_text(asked.messages)
            profile = self._profile(asked.model)
            who = _talker(request.headers.get(SESSION_HEADER) or asked.user)
            timeout_s = _timeout(request)
        except ApiError as exc:
            return exc.response()
        # Watched before the message is handed over, so no piece of the answer is missed.
        with self.sender.watch(who.chat_id) as events:
            try:
                sent = await self.turns.send(who, text, profile=profile)
            except NotOwner as exc:
                return ApiError(409, str(exc), "invalid_request_error", "operator_not_owner").response()
            except IntakeUnavailable as exc:
                return ApiError(503, f"the message could not be stored ({exc})", "server_error").response()
            reply = Reply(self, sent, asked, events, timeout_s)
            if asked.stream:
                return await reply.stream(request)
            try:
                return web.json_response(await reply.whole(), headers=reply.headers)
            except ApiError as exc:
                return exc.response()

    def _profile(self, model: str) -> str | None:
        """The profile `model` switches the session to; None: keep its own."""
        if model == OWN_MODEL:
            return None
        names = self.bridge.settings.llm.profile_names()
        for name in (model, model.lower()):
            if name in names:
                return name
        raise ApiError(
            404,
            f"The model `{model}` does not exist: use {OWN_MODEL!r} (the session's own profile) or a "
            f"profile: {', '.join(names)}",
            "invalid_request_error",
            "model_not_found",
        )


class Reply:
    """One call's answer: waited for whole, or streamed as its text comes."""

    def __init__(
        self,
        endpoint: Completions,
        sent: Sent,
        asked: CompletionRequest,
        events: asyncio.Queue[ChatEvent],
        timeout_s: float,
    ) -> None:
        self.endpoint = endpoint
        self.sent = sent
        self.asked = asked
        self.events = events
        self.timeout_s = timeout_s
        self.id = f"chatcmpl-{secrets.token_hex(12)}"
        self.created = int(time.time())
        # Notices the chat got meanwhile (a command's answer, a failed run's apology).
        self.notices: list[str] = []
        self.headers = {"X-Bridge-Session-Key": sent.talker.key}

    async def whole(self) -> dict[str, Any]:
        answer = await self._wait()
        self._drain(lambda event: None)
        text, usage = await self._final(answer)
        message = {"role": "assistant", "content": text}
        body: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.asked.model,
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        }
        if usage is not None:
            body["usage"] = usage
        return body

    async def stream(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",
                **self.headers,
            }
        )
        await response.prepare(request)
        shown = Shown()
        waiting = asyncio.ensure_future(self._wait())
        try:
            await self._write(response, {"role": "assistant", "content": ""})
            while not waiting.done():
                getting = asyncio.ensure_future(self.events.get())
                await asyncio.wait({getting, waiting}, return_when=asyncio.FIRST_COMPLETED)
                if getting.done():
                    if delta := shown.take(getting.result(), self.notices):
                        await self._write(response, {"content": delta})
                else:
                    getting.cancel()
            pieces: list[str] = []
            self._drain(lambda event: pieces.append(shown.take(event, self.notices)))
            try:
                answer = waiting.result()
                text, usage = await self._final(answer)
            except ApiError as exc:
                await response.write(_sse(exc.body()))
                return response
            rest = "".join(pieces) + shown.rest(text)
            if rest:
                await self._write(response, {"content": rest})
            await self._write(response, {}, finish="stop")
            if usage is not None and self.asked.stream_options and self.asked.stream_options.include_usage:
                await response.write(_sse({**self._chunk_head(), "choices": [], "usage": usage}))
            await response.write(b"data: [DONE]\n\n")
        except ConnectionResetError:
            # The caller left: its message stays stored and the run goes on; the answer is in the chat.
            log.debug("a streamed completion's caller left (%s)", self.sent.talker.key)
        finally:
            if not waiting.done():
                waiting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await waiting
        return response

    async def _wait(self) -> Answer | None:
        turns = self.endpoint.turns
        try:
            answer = await turns.answer(self.sent, self.timeout_s)
        except TimeoutError:
            raise ApiError(
                504,
                f"no answer within {self.timeout_s:g} s; the message is stored and its answer will be in "
                f"the session {self.sent.talker.key}",
                "timeout_error",
                "timeout",
            ) from None
        if answer is None and await turns.stored(self.sent) and self.sent.done is None:
            # Stored with nothing running it here: Bridge is shutting down, or the policy ignores the chat.
            raise ApiError(
                503,
                f"the message is stored in {self.sent.talker.key}, but nobody answers it now (Bridge is "
                "stopping); it is answered after the restart",
                "server_error",
                "not_answered",
            )
        return answer

    async def _final(self, answer: Answer | None) -> tuple[str, dict[str, int] | None]:
        """The answer's text and usage: the run's reply, or the notices the chat got instead."""
        key = self.sent.talker.key
        if answer is None:
            if self.notices:
                return "\n\n".join(self.notices), None
            if await self.endpoint.turns.stored(self.sent):
                raise ApiError(
                    502,
                    f"the message is stored in {key}, but its run ended without an answer (stopped, or "
                    "it failed): see the session's runs",
                    "server_error",
                    "no_answer",
                )
            raise ApiError(
                403,
                f"Bridge did not take this message in {key} (the send policy ignores the chat)",
                "invalid_request_error",
                "not_taken",
            )
        decision = await self.endpoint.bridge.gate.decide(key, SURFACE)
        if not decision.speaks:
            # Shadow mode answers and stores, but does not speak; a caller asking here is the chat too.
            raise ApiError(
                403,
                f"the send policy keeps the bot silent in {key} ({decision.reason}); the answer is stored",
                "invalid_request_error",
                "send_policy",
            )
        usage = {
            "prompt_tokens": answer.prompt_tokens,
            "completion_tokens": answer.completion_tokens,
            "total_tokens": answer.prompt_tokens + answer.completion_tokens,
        }
        return answer.text, usage

    def _drain(self, take: Callable[[ChatEvent], object]) -> None:
        """Everything the chat's queue still holds (published before the turn ended), in order."""
        while not self.events.empty():
            event = self.events.get_nowait()
            if event.type == "item" and event.kind == "notice":
                self.notices.append(event.text)
            else:
                take(event)

    def _chunk_head(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.asked.model,
        }

    async def _write(
        self, response: web.StreamResponse, delta: dict[str, Any], finish: str | None = None
    ) -> None:
        chunk = {**self._chunk_head(), "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        await response.write(_sse(chunk))


class Shown:
    """What of the answer a stream has shown: text written before tool calls stays shown (a stream is
    never taken back), and the reply's text continues the last part."""

    def __init__(self) -> None:
        self.any = False
        # The text since the last tool activity: what the reply is expected to start with.
        self.part = ""
        self._break = False

    def take(self, event: ChatEvent, notices: list[str]) -> str:
        """The text to send for a chat event ("" for none); notices are kept aside."""
        if event.type == "delta" and event.text:
            lead = "\n\n" if self._break and self.any else ""
            self._break = False
            self.any = True
            self.part += event.text
            return lead + event.text
        if event.type == "item" and event.kind == "activity" and self.part:
            # Tool calls follow: what streamed was a preamble, and the answer is a new part.
            self.part, self._break = "", True
        elif event.type == "item" and event.kind == "notice":
            notices.append(event.text)
        return ""

    def rest(self, final: str) -> str:
        """What of the final answer is still to send."""
        if self.part and final.startswith(self.part):
            return final[len(self.part) :]
        return ("\n\n" if self.any else "") + final


def _sse(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


async def _request_of(request: web.Request) -> CompletionRequest:
    try:
        raw = await request.json()
    except ValueError:
        raise ApiError(400, "the body must be JSON", "invalid_request_error") from None
    try:
        return CompletionRequest.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        raise ApiError(400, f"{where}: {first['msg']}", "invalid_request_error", "invalid_body") from None


def _talker(name: str | None) -> WebTalker:
    try:
        return talker(name)
    except BadName as exc:
        raise ApiError(400, str(exc), "invalid_request_error", "invalid_session") from None


def _timeout(request: web.Request) -> float:
    raw = request.headers.get(TIMEOUT_HEADER)
    if raw is None:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not 0 < value <= MAX_TIMEOUT_S:
        raise ApiError(
            400, f"{TIMEOUT_HEADER} is seconds, over 0 and at most {MAX_TIMEOUT_S:g}", "invalid_request_error"
        )
    return value
