"""Relay, a toy chat service on 127.0.0.1 for the suite's example plugin (tests/platforms/thirdparty).

The smallest platform with what the conformance suite asks of one, in the shape most chat APIs have:

    GET  {api_base}/updates?offset=N&timeout=S   long-polled: {"updates": [...]}, each with an
                                                  update_id; an offset confirms every update below it
    POST {api_base}/messages                      {"chat", "text", "key"} → {"id"}: a message from the
                                                  bot; a key seen before in the chat answers the first
                                                  message's id and posts nothing (idempotent sends)

Every request carries `Authorization: Bearer <token>`. An update's message is {"id", "chat": {"id",
"type": "dm" | "group"}, "from", "text", "mentions": [user ids]}. Faults: `rate_limit_next_post(s)` (429
with Retry-After), `hang_after_next_post()` (the message is posted and the request never answered),
and `push_raw(update)` for any shape.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from aiohttp import web

from devkit.fakes.loopback import LoopbackServer

BOT = "relay-bot"


class FakeRelay(LoopbackServer):
    def __init__(self, token: str = "relay-token") -> None:
        super().__init__()
        self.token = token
        self.posted: list[dict[str, Any]] = []  # the bot's messages: chat, id, text, key
        self.post_requests: list[dict[str, Any]] = []  # every POST /messages: at, status
        self.polls = 0  # GET /updates requests so far
        self._updates: list[dict[str, Any]] = []
        self._confirmed_below = 1
        self._ids = itertools.count(1)
        self._by_key: dict[tuple[str, str], dict[str, Any]] = {}
        self._rate_limits: list[float] = []
        self._hangs = 0

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/v1/updates", self._get_updates)
        app.router.add_post("/v1/messages", self._post_message)

    @property
    def api_base(self) -> str:
        return f"{self.origin}/v1"

    async def stop(self) -> None:
        self._closing.set()
        self._notify()  # open long polls answer at once
        await super().stop()

    # -- users ------------------------------------------------------------------------------------

    def dm(self, user: str, text: str) -> dict[str, Any]:
        return self._push(f"dm-{user}", "dm", user, text, [BOT])

    def group(self, chat: str, user: str, text: str, *, mention: bool) -> dict[str, Any]:
        return self._push(chat, "group", user, text, [BOT] if mention else [])

    def push_raw(self, update: dict[str, Any]) -> None:
        """An update exactly as given, with the next update_id."""
        self._updates.append({**update, "update_id": len(self._updates) + 1})
        self._notify()

    def _push(self, chat: str, kind: str, user: str, text: str, mentions: list[str]) -> dict[str, Any]:
        message = {
            "id": f"u{next(self._ids)}",
            "chat": {"id": chat, "type": kind},
            "from": user,
            "text": text,
            "mentions": mentions,
        }
        self.push_raw({"message": message})
        return message

    @property
    def pending(self) -> list[dict[str, Any]]:
        """Updates not confirmed yet."""
        return [u for u in self._updates if u["update_id"] >= self._confirmed_below]

    def messages_in(self, chat: str) -> list[dict[str, Any]]:
        return [m for m in self.posted if m["chat"] == chat]

    # -- faults -----------------------------------------------------------------------------------

    def rate_limit_next_post(self, retry_after: float) -> None:
        self._rate_limits.append(retry_after)

    def hang_after_next_post(self) -> None:
        self._hangs += 1

    # -- serving ----------------------------------------------------------------------------------

    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bearer {self.token}"

    async def _get_updates(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"error": "unauthorized"}, status=401)
        self.polls += 1
        offset = int(request.query.get("offset", "0"))
        self._confirmed_below = max(self._confirmed_below, offset)
        self._notify()
        try:
            async with asyncio.timeout(float(request.query.get("timeout", "0"))):
                while not self.pending and not self._closing.is_set():
                    await self._changed.wait()
        except TimeoutError:
            pass
        return web.json_response({"updates": self.pending})

    async def _post_message(self, request: web.Request) -> web.Response:
        record: dict[str, Any] = {"at": asyncio.get_running_loop().time(), "status": 200}
        self.post_requests.append(record)
        self._notify()
        if not self._authorized(request):
            record["status"] = 401
            return web.json_response({"error": "unauthorized"}, status=401)
        if self._rate_limits:
            wait = self._rate_limits.pop(0)
            record["status"] = 429
            return web.json_response(
                {"error": "rate_limited", "retry_after": wait},
                status=429,
                headers={"Retry-After": f"{wait:g}"},
            )
        body = await request.json()
        key = (str(body["chat"]), str(body.get("key") or ""))
        message = self._by_key.get(key) if key[1] else None
        if message is None:
            message = {"chat": str(body["chat"]), "id": f"b{next(self._ids)}", "text": body["text"]}
            message["key"] = key[1] or None
            self.posted.append(message)
            if key[1]:
                self._by_key[key] = message
            self._notify()
        if self._hangs:
            self._hangs -= 1
            record["status"] = "hang"
            await self._closing.wait()  # posted, never answered
        return web.json_response({"id": message["id"]})
