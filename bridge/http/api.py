"""The admin JSON API: sessions, runs and their traces, the outbox, and the actions an owner takes."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from bridge.agent.trace import expand_trace
from bridge.errors import SessionKeyError
from bridge.gateway.policy import Place
from bridge.http.replies import bad_request, body_of, not_found
from bridge.sessions.keys import kind as key_kind
from bridge.store.base import OutboxRow, OutboxState, SessionRow

if TYPE_CHECKING:
    from bridge.app import Bridge

# A comment on an idle event stream this often, so proxies and browsers keep it open.
KEEPALIVE_S = 15.0
OUTBOX_STATES = frozenset({"pending", "sending", "sent", "suppressed", "failed", "uncertain"})
SEND_MODES = frozenset({"on", "off", "inherit"})
MAX_LIMIT = 500


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
        add.add_get("/api/runs", self.runs)
        add.add_get("/api/runs/{run_id}", self.run)
        add.add_get("/api/outbox", self.outbox)
        add.add_post("/api/outbox/{row_id}/retry", self.retry)
        add.add_get("/api/events", self.events)

    # ------------------------------------------------------------------ sessions

    async def sessions(self, request: web.Request) -> web.Response:
        """Active sessions, newest activity first: ?surface=, ?kind=, ?active_minutes=, ?q= (key or
        name), ?limit=."""
        limit = _limit(request, 100)
        minutes = _number(request, "active_minutes")
        since = time.time() - minutes * 60 if minutes else None
        surface, kind, query = (request.query.get(name) for name in ("surface", "kind", "q"))
        found = []
        # Filtered here, from a generous page of the newest (the store lists by activity only); each
        # session listed costs a count of its messages, so without filters only `limit` are read.
        page = MAX_LIMIT * 4 if surface or kind or query else limit
        for summary in await self.bridge.store.list_sessions(limit=page, active_since=since):
            row = summary.session
            if surface and row.surface != surface:
                continue
            if kind and _kind(row.key) != kind:
                continue
            if query and query.lower() not in f"{row.key} {row.display_name or ''}".lower():
                continue
            found.append({**_session(row), "messages": summary.message_count})
            if len(found) >= limit:
                break
        return web.json_response({"sessions": found})

    async def session(self, request: web.Request) -> web.Response:
        """One session: its history with tool calls and results, loaded groups, memories, policy
        with its explanation, model profile, queue depth and runs."""
        row = await self._active(request)
        store, bridge = self.bridge.store, self.bridge
        limit = _limit(request, 200)
        history = await store.history(row.id, limit)
        place = Place.of(row.key, row.surface)
        decision = bridge.gate.decide_for(row.key, row.surface, row)
        runs = await store.list_runs(session_key=row.key, limit=20)
        body = {
            "session": _session(row),
            "history": [dataclasses.asdict(message) for message in history],
            "loaded_groups": sorted(bridge.registry.known_groups(await store.loaded_groups(row.id))),
            "memories": await store.memories(row.key, bridge.settings.agent.memory_limit),
            "policy": {
                "action": decision.action,
                "reason": decision.reason,
                "override": row.send_policy,
                "explain": bridge.policy.explain(place, row.send_policy),
            },
            "model_profile": row.model_profile or "default",
            "queue_depth": bridge.lanes.queued(row.key),
            "running": bridge.lanes.busy(row.key),
            "runs": [dataclasses.asdict(run) for run, _ in runs],
        }
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

    async def _active(self, request: web.Request) -> SessionRow:
        key = _key(request)
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
        row = await self.bridge.store.get_run(run_id)
        if row is None:
            raise not_found(f"no run {run_id}")
        trace = await self.bridge.store.get_trace(run_id)
        body = {"run": dataclasses.asdict(row), "trace": expand_trace(json.loads(trace)) if trace else None}
        return web.json_response(body, dumps=_dumps)

    # ------------------------------------------------------------------ outbox

    async def outbox(self, request: web.Request) -> web.Response:
        """Outbox rows, newest first: ?state= (pending, sending, sent, suppressed, failed, uncertain)."""
        state = request.query.get("state")
        if state is not None and state not in OUTBOX_STATES:
            raise bad_request(f"state must be one of {', '.join(sorted(OUTBOX_STATES))}")
        rows = await self.bridge.store.outbox(
            state=_state(state) if state else None, newest=_limit(request, 100)
        )
        return web.json_response({"outbox": [_outbox(row) for row in reversed(rows)]})

    async def retry(self, request: web.Request) -> web.Response:
        """Send a failed row again, after what its chat already waits for."""
        try:
            row_id = int(request.match_info["row_id"])
        except ValueError:
            raise bad_request("the row id is a number") from None
        # Failed to pending in one conditional write: two retries at once send it once.
        row = await self.bridge.store.reopen_failed(row_id, "retried from the admin API")
        if row is None:
            raise not_found(f"no failed reply or notice {row_id} (tool activity is never sent again)")
        self.bridge.delivery.deliver([row])
        return web.json_response({"ok": True, "row": _outbox(row)})

    # ------------------------------------------------------------------ live

    async def events(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events: message_in, run_started, tool, run_finished and message_out, as they
        happen in this process; a comment every KEEPALIVE_S keeps proxies from closing the stream."""
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",
            }
        )
        await response.prepare(request)
        with self.bridge.live.subscribe() as queue:
            await response.write(b": connected\n\n")
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
                except TimeoutError:
                    await response.write(b": keepalive\n\n")
                    continue
                data = json.dumps({**event.data, "at": event.at}, default=str)
                await response.write(f"event: {event.kind}\ndata: {data}\n\n".encode())


def _session(row: SessionRow) -> dict[str, Any]:
    return {**dataclasses.asdict(row), "kind": _kind(row.key)}


def _outbox(row: OutboxRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "platform_msg_id": row.platform_msg_id,
        "created_at": row.created_at,
        **dataclasses.asdict(row.item),
    }


def _kind(key: str) -> str:
    try:
        return str(key_kind(key))
    except SessionKeyError:
        return "unknown"


def _key(request: web.Request) -> str:
    key = request.match_info["key"]
    try:
        key_kind(key)
    except SessionKeyError as exc:
        raise bad_request(f"not a session key: {exc}") from None
    return key


def _state(value: str) -> OutboxState:
    assert value in OUTBOX_STATES
    return value  # type: ignore[return-value]


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
