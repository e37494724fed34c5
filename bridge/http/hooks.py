"""`POST /hooks/<name>`: check the size, the signature and its timestamp, store the event (and the
signature, taken once), answer 202; the run follows.

Served by the admin server, or by the Telegram webhook's server (see `http_routes` in
adapters/base.py), with the same handler. Its own secret guards it, not the admin token.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from aiohttp import web

from bridge.jobs.hooks import HookService
from bridge.jsonutil import loads
from bridge.tasks.hooks import TIMESTAMP_HEADER, check, event_key

if TYPE_CHECKING:
    from bridge.gateway.lifecycle import GuardedAdapter

log = logging.getLogger(__name__)

PATH = "/hooks/{name}"
# The most often a hook's refused replays are logged: one line, then at most one a minute.
REPLAY_LOG_EVERY_S = 60.0


def _answer(code: int, /, **body: Any) -> web.Response:
    return web.json_response(body, status=code)


async def read_capped(request: web.Request, cap: int) -> bytes | None:
    """The body, or None when it is longer than `cap` (read no further than that)."""
    if request.content_length is not None and request.content_length > cap:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > cap:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


class HookEndpoint:
    """The aiohttp handler of every [[hooks]] entry."""

    def __init__(self, hooks: HookService) -> None:
        self.hooks = hooks
        # Replays refused per hook since its last log line, and when that line was written.
        self._replays: dict[str, int] = {}
        self._told_at: dict[str, float] = {}

    def _replayed(self, name: str) -> None:
        """Count a refused replay; say so at most once every REPLAY_LOG_EVERY_S per hook, since
        whoever holds a captured request could otherwise write a log line per try."""
        self._replays[name] = self._replays.get(name, 0) + 1
        now = time.monotonic()
        if now - self._told_at.get(name, -REPLAY_LOG_EVERY_S) < REPLAY_LOG_EVERY_S:
            return
        log.warning(
            "webhook %s: refused %d request(s) whose signature was taken before (this line comes at "
            "most once a minute). A replay, or a sender that retries a request as it was: have it sign "
            "each try again with a fresh %s.",
            name,
            self._replays.pop(name),
            TIMESTAMP_HEADER,
        )
        self._told_at[name] = now

    def routes(self) -> list[tuple[str, str, Any]]:
        """(method, path, handler) for a server to add, the admin server's or an adapter's."""
        return [("POST", PATH, self.receive)]

    async def receive(self, request: web.Request) -> web.Response:
        name = request.match_info.get("name", "")
        hook = self.hooks.get(name)
        if hook is None:
            return _answer(404, error="not_found", detail=f"no webhook named {name!r} is configured")
        body = await read_capped(request, hook.max_body_bytes)
        if body is None:
            return _answer(
                413, error="too_large", detail=f"the body is over this hook's {hook.max_body_bytes} bytes"
            )
        verdict = check(hook, request.headers, body, self.hooks.clock())
        if verdict.refused is not None:
            # Nothing is stored. A wrong secret is told apart from nothing else; a stale or missing
            # timestamp is told so that an honest sender can mend it.
            return _answer(401, error="unauthorized", detail=verdict.refused)
        try:
            data = loads(body) if body.strip() else None
        except (ValueError, UnicodeDecodeError):
            return _answer(400, error="bad_request", detail="the body is not JSON")
        try:
            key = event_key(hook, request.headers, data, key_signed=verdict.key_signed)
        except ValueError as exc:
            return _answer(400, error="bad_request", detail=str(exc))
        try:
            stored = await self.hooks.accept(hook, data, key, verdict.once)
        except Exception:
            log.exception("webhook %s: the event could not be stored", name)
            return _answer(503, error="unavailable", detail="not stored; send it again")
        if stored is None:
            self._replayed(name)
            return _answer(
                401,
                error="unauthorized",
                detail=f"this signature was taken before: sign each request with a fresh {TIMESTAMP_HEADER}",
            )
        event, new = stored
        if not new:
            return _answer(200, status="duplicate", event=event.id, state=event.state)
        return _answer(202, status="accepted", event=event.id, session=event.session_key)


def serve_beside_platforms(hooks: HookService, adapters: Sequence[GuardedAdapter]) -> None:
    """Without the admin server, [[hooks]] are served by a platform's own HTTP server (the Telegram
    webhook's); the config check made sure there is one."""
    routes = HookEndpoint(hooks).routes()
    if not any(adapter.offer_http_routes(routes) for adapter in adapters):
        log.error("[[hooks]]: no server takes their requests; set [admin] enabled = true to serve them")
