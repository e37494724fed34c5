"""The dashboard's chat page: talk to the bot in `main` (as the operator) or in a web session of its own.

GET /chat renders the conversation from the store's history; POST /api/chat hands a message to the
dispatcher (a command too: /clear, /retry, /model, /help work as on any surface) and returns once it is
stored; GET /chat/events streams what the bot says in that chat as it happens (static/chat.js draws it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from bridge.errors import IntakeUnavailable
from bridge.http.dashboard import chat_of
from bridge.http.replies import bad_request, body_of
from bridge.http.webchat.names import SURFACE, BadName, WebTalker, name_of_key, talker
from bridge.http.webchat.sender import ChatEvent, WebSender
from bridge.http.webchat.turns import NotOwner, WebTurns
from bridge.live import LiveEvent
from bridge.sessions import keys

if TYPE_CHECKING:
    from bridge.app import Bridge

log = logging.getLogger(__name__)

# The newest messages the page shows; the session's page and the API page further.
CHAT_MESSAGES = 200
# Web sessions offered in the picker, newest activity first; sessions listed to find them.
PICKER_SESSIONS = 50
LISTED_SESSIONS = 200
# The longest message the page takes.
MAX_TEXT = 100_000
# A comment on an idle event stream this often, so proxies and browsers keep it open.
KEEPALIVE_S = 15.0
# Where workers share a database, a run may write this chat's answer in another process, whose events
# never reach this one: the store is asked this often whether the session moved.
SHARED_POLL_S = 1.0
# What, on the bridge's live stream, means the conversation changed through another surface (an
# owner's Telegram message in main): the page then fetches it again.
_ELSEWHERE = frozenset({"message_in", "message_out"})


class ChatPage:
    """GET /chat, GET /chat/events, POST /api/chat."""

    def __init__(
        self, bridge: Bridge, render: Callable[..., web.Response], turns: WebTurns, sender: WebSender
    ) -> None:
        self.bridge = bridge
        self.render = render
        self.turns = turns
        self.sender = sender

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/chat", self.page)
        app.router.add_get("/chat/events", self.events)
        app.router.add_post("/api/chat", self.post)

    async def page(self, request: web.Request) -> web.Response:
        query = request.query
        try:
            # `new`: the picker's field for a session that does not exist yet (it does once written in).
            who = talker(query.get("new") or query.get("session") or keys.MAIN)
            self.turns.check(who)
        except (BadName, NotOwner) as exc:
            return self.render("missing.html", "chat", status=400, what=f"No web chat: {exc}.")
        store = self.bridge.store
        session = await store.active_session(who.key)
        history = await store.history(session.id, CHAT_MESSAGES) if session is not None else []
        profiles = self.bridge.settings.llm
        return self.render(
            "chat.html",
            "chat",
            who=who,
            session=session,
            chat=chat_of([dataclasses.asdict(row) for row in history]),
            names=await self._names(who),
            profile=profiles.profile_of(session.model_profile if session is not None else None),
            running=self.bridge.lanes.busy(who.key),
        )

    async def _names(self, current: WebTalker) -> list[str]:
        """The picker's sessions: main, then the web sessions by newest activity, the open one always."""
        names = [keys.MAIN]
        for summary in await self.bridge.store.list_sessions(limit=LISTED_SESSIONS):
            name = name_of_key(summary.session.key)
            if name is not None and name not in names:
                names.append(name)
            if len(names) > PICKER_SESSIONS:
                break
        if current.name not in names:
            names.append(current.name)
        return names

    async def post(self, request: web.Request) -> web.Response:
        """{"session", "text", "id"?}: the message handed to the dispatcher; answers once it is stored (or
        its command answered), with the session's id then (a new one after /clear)."""
        body = await body_of(request)
        text = body.get("text")
        if not isinstance(text, str) or not text.strip():
            raise bad_request("text: write something")
        if len(text) > MAX_TEXT:
            raise bad_request(f"text: at most {MAX_TEXT} characters")
        message_id = body.get("id")
        try:
            who = talker(str(body.get("session") or keys.MAIN))
            await self.turns.send(who, text, message_id=str(message_id) if message_id else None)
        except BadName as exc:
            raise bad_request(str(exc)) from None
        except NotOwner as exc:
            return web.json_response({"error": "conflict", "detail": str(exc)}, status=409)
        except IntakeUnavailable as exc:
            detail = f"the message could not be stored ({exc}); send it again"
            return web.json_response({"error": "unavailable", "detail": detail}, status=503)
        # Other pages open on this chat show it too (the one that sent it knows it by its id).
        self.sender.publish(who.chat_id, _written(text, message_id))
        session = await self.bridge.store.active_session(who.key)
        return web.json_response(
            {
                "ok": True,
                "session": who.name,
                "key": who.key,
                "session_id": session.id if session is not None else None,
            }
        )

    async def events(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events of one web chat: delta, item, edit, typing, in (see sender.ChatEvent), and
        `stored` when its conversation changed through another surface or worker (fetch it again)."""
        try:
            who = talker(request.query.get("session") or keys.MAIN)
        except BadName as exc:
            raise bad_request(str(exc)) from None
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",
            }
        )
        shared = self.bridge.shared
        newest = await self._newest(who) if shared else 0
        # Watched before the headers go out: a page that sees the stream open misses nothing after.
        with self.sender.watch(who.chat_id) as chat, self.bridge.live.subscribe() as live:
            await response.prepare(request)
            said: asyncio.Future[ChatEvent] | None = None
            happened: asyncio.Future[LiveEvent] | None = None
            try:
                await response.write(b": connected\n\n")
                while True:
                    said = said or asyncio.ensure_future(chat.get())
                    happened = happened or asyncio.ensure_future(live.get())
                    either: set[asyncio.Future[Any]] = {said, happened}
                    done, _ = await asyncio.wait(
                        either,
                        timeout=SHARED_POLL_S if shared else KEEPALIVE_S,
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                    if said in done:
                        await response.write(said.result().sse())
                        said = None
                    if happened in done:
                        if _elsewhere(happened.result(), who):
                            await response.write(b"event: stored\ndata: {}\n\n")
                        happened = None
                    if not done:
                        moved = shared and (now := await self._newest(who)) != newest
                        if moved:
                            newest = now
                        await response.write(b"event: stored\ndata: {}\n\n" if moved else b": keepalive\n\n")
            except ConnectionResetError:
                # The page was closed or left: every chat view ends this way, so it is no error.
                log.debug("a web chat's viewer left (%s)", request.remote)
            finally:
                for waiting in (said, happened):
                    if waiting is not None:
                        waiting.cancel()
        return response

    async def _newest(self, who: WebTalker) -> int:
        session = await self.bridge.store.active_session(who.key)
        rows = await self.bridge.store.history(session.id, 1) if session is not None else []
        return rows[-1].id if rows else 0


def _elsewhere(event: LiveEvent, who: WebTalker) -> bool:
    """Whether a live event is this chat's conversation changing through another surface (the web's own
    come through the web sender)."""
    data = event.data
    return event.kind in _ELSEWHERE and data.get("session_key") == who.key and data.get("surface") != SURFACE


def _written(text: str, message_id: object) -> ChatEvent:
    return ChatEvent("in", text, id=str(message_id) if message_id else None)
