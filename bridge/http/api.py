"""The admin JSON API: sessions, runs and their traces, the outbox, and the actions an owner takes."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from bridge.errors import SessionKeyError
from bridge.gateway.courier import publish_delivery
from bridge.http.replies import bad_request, body_of, not_found
from bridge.http.views import (
    MAX_LIMIT,
    OUTBOX_STATES,
    SessionFilter,
    find_sessions,
    outbox_json,
    outbox_state,
    queues_json,
    run_detail,
    session_detail,
)
from bridge.sessions.keys import kind as key_kind
from bridge.store.base import SessionRow

if TYPE_CHECKING:
    from bridge.app import Bridge

# A comment on an idle event stream this often, so proxies and browsers keep it open.
log = logging.getLogger(__name__)
KEEPALIVE_S = 15.0
SEND_MODES = frozenset({"on", "off", "inherit"})


class AdminApi:
    """Routes under /api/. Reads go to the store; actions go through the same code as the chat
    commands (/clear, /send, /stop), so a chat and the dashboard can never disagree."""

    def __init__(self, bridge: Bridge) -> None:
        self.bridge = bridge

    def routes(self, app: web.Application) -> None:
        add = app.router
        add.add_get("/api/sessions", self.sessions)
        add.add_get("/api/sessions/{key}", self.session)
        add.add_post("/api/sessions/{key}/clear", self.clear)
        add.add_post("/api/sessions/{key}/send", self.send)
        add.add_post("/api/sessions/{key}/stop", self.stop)
        add.add_post("/api/sessions/{key}/retry", self.answer_again)
        add.add_get("/api/queues", self.queues)
        add.add_get("/api/runs", self.runs)
        add.add_get("/api/runs/{run_id}", self.run)
        add.add_get("/api/outbox", self.outbox)
        add.add_post("/api/outbox/{row_id}/retry", self.retry)
        add.add_get("/api/events", self.events)

    # ------------------------------------------------------------------ sessions

    async def sessions(self, request: web.Request) -> web.Response:
        """Active sessions, newest activity first: ?surface=, ?kind=, ?active_minutes=, ?q= (key or
        name), ?limit=."""
        surface, kind, query = (request.query.get(name) for name in ("surface", "kind", "q"))
        wanted = SessionFilter(surface, kind, query, _number(request, "active_minutes"), _limit(request, 100))
        return web.json_response({"sessions": await find_sessions(self.bridge, wanted)})

    async def session(self, request: web.Request) -> web.Response:
        """One session in full (see views.session_detail)."""
        row = await self._active(request)
        body = await session_detail(self.bridge, row, _limit(request, 200))
        return web.json_response(body, dumps=_dumps)

    async def clear(self, request: web.Request) -> web.Response:
        # Only a chat that exists: the API makes no sessions for keys nobody has spoken in.
        row = await self._active(request)
        said = await self.bridge.commands.clear(row.key)
        return web.json_response({"ok": True, "said": said})

    async def send(self, request: web.Request) -> web.Response:
        row = await self._active(request)
        mode = str((await body_of(request, forms=True)).get("mode", "")).strip().lower()
        if mode not in SEND_MODES:
            raise bad_request("mode must be on, off or inherit")
        said = await self.bridge.commands.send(row.key, mode, surface=row.surface or "", is_owner=True)
        return web.json_response({"ok": True, "said": said})

    async def stop(self, request: web.Request) -> web.Response:
        row = await self._active(request)
        said = await self.bridge.commands.stop(row.key)
        return web.json_response({"ok": True, "said": said})

    async def answer_again(self, request: web.Request) -> web.Response:
        """What /retry does in the chat: answer the session's last message again (after a failed or
        interrupted run). 409 with the reason where there is nothing to answer or a run is on."""
        row = await self._active(request)
        started, said = await self.bridge.dispatcher.answer_again(row.key)
        if not started:
            return web.json_response({"ok": False, "error": "not_started", "detail": said}, status=409)
        return web.json_response({"ok": True, "said": said})

    async def queues(self, request: web.Request) -> web.Response:
        """Chats with a run in progress or messages waiting in this process, with since when."""
        return web.json_response({"queues": queues_json(self.bridge, time.time())})

    async def _active(self, request: web.Request) -> SessionRow:
        # An owner's DM key names main here as everywhere (bridge.sessions.authority).
        key = self.bridge.authorities.canonical(_key(request))
        row = await self.bridge.store.active_session(key)
        if row is None:
            raise not_found(f"no session {key}")
        return row

    # ------------------------------------------------------------------ runs

    async def runs(self, request: web.Request) -> web.Response:
        listed = await self.bridge.store.list_runs(
            session_key=request.query.get("session"), limit=_limit(request, 50)
        )
        return web.json_response(
            {"runs": [{**dataclasses.asdict(run), "session_key": key} for run, key in listed]}, dumps=_dumps
        )

    async def run(self, request: web.Request) -> web.Response:
        run_id = request.match_info["run_id"]
        body = await run_detail(self.bridge, run_id)
        if body is None:
            raise not_found(f"no run {run_id}")
        return web.json_response(body, dumps=_dumps)

    # ------------------------------------------------------------------ outbox

    async def outbox(self, request: web.Request) -> web.Response:
        """Outbox rows, newest first: ?state= (pending, sending, sent, suppressed, failed, uncertain)."""
        state = request.query.get("state")
        if state is not None and outbox_state(state) is None:
            raise bad_request(f"state must be one of {', '.join(sorted(OUTBOX_STATES))}")
        rows = await self.bridge.store.outbox(state=outbox_state(state), newest=_limit(request, 100))
        return web.json_response({"outbox": [outbox_json(row) for row in reversed(rows)]})

    async def retry(self, request: web.Request) -> web.Response:
        """Send a failed row again, after what its chat already waits for; or an uncertain one, which
        may then show twice (the dashboard says so before it asks)."""
        try:
            row_id = int(request.match_info["row_id"])
        except ValueError:
            raise bad_request("the row id is a number") from None
        # Failed (or uncertain) to pending in one conditional write: two retries at once send it once.
        row = await self.bridge.store.reopen_failed(row_id, "retried from the admin API")
        if row is None:
            raise not_found(
                f"no failed or uncertain reply or notice {row_id} (tool activity is never sent again)"
            )
        publish_delivery(self.bridge.live, row, "pending", "retried from the admin API")
        self.bridge.delivery.deliver([row])
        return web.json_response({"ok": True, "row": outbox_json(row)})

    # ------------------------------------------------------------------ live

    async def events(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events: message_in, run_started, tool, run_finished, message_out and delivery
        (an outbox row's new state: sent, failed, uncertain, suppressed, pending again), as they
        happen in this process; a comment every KEEPALIVE_S keeps proxies from closing the stream."""
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",
            }
        )
        # Subscribed before the headers go out: a client that sees the stream open misses nothing
        # published after that.
        with self.bridge.live.subscribe() as queue:
            await response.prepare(request)
            try:
                await response.write(b": connected\n\n")
                while True:
                    try:
                        event = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
                    except TimeoutError:
                        await response.write(b": keepalive\n\n")
                        continue
                    data = json.dumps({**event.data, "at": event.at}, default=str)
                    await response.write(f"event: {event.kind}\ndata: {data}\n\n".encode())
            except ConnectionResetError:
                # The viewer left (closed the tab, moved to another page): the next write finds the
                # connection gone. aiohttp's ClientConnectionResetError is a ConnectionResetError.
                # Every page view ends this way, so it is no error.
                log.debug("an event stream's viewer left (%s)", request.remote)
        return response


def _key(request: web.Request) -> str:
    key = request.match_info["key"]
    try:
        key_kind(key)
    except SessionKeyError as exc:
        raise bad_request(f"not a session key: {exc}") from None
    return key


def _limit(request: web.Request, default: int) -> int:
    value = _number(request, "limit") or default
    return max(1, min(int(value), MAX_LIMIT))


def _number(request: web.Request, name: str) -> float:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        raise bad_request(f"{name} must be a number") from None
    if value < 0:
        raise bad_request(f"{name} must not be negative")
    return value


def _dumps(data: Any) -> str:
    # Rows hold only JSON's own types, but a set or a value from a plugin must not fail the page.
    return json.dumps(data, default=str)
