"""Talking to the bot from the dashboard, and from other programs through OpenAI's chat API.

    names.py        who talks: the operator in `main`, or a named member session `web:dm:<name>`
    sender.py       the `web` surface's Sender: what the bot says, published to the chat's watchers
    turns.py        a message handed to the dispatcher, and its answer found in the store
    page.py         GET /chat, its event stream, POST /api/chat (static/chat.js, templates/chat.html)
    completions.py  POST /v1/chat/completions and GET /v1/models

The web surface is a Sender registered with the Bridge when the admin server's routes are made: web
chats are answered like any other chat, through the dispatcher, the lanes, the send policy and the
outbox. May import what bridge.http may (layers below it), never bridge.cli.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from bridge.http.pages import DashboardPart, Render
from bridge.http.webchat.completions import Completions
from bridge.http.webchat.names import SURFACE, WEB_OPERATOR
from bridge.http.webchat.page import ChatPage
from bridge.http.webchat.sender import WebSender
from bridge.http.webchat.turns import WebTurns

if TYPE_CHECKING:
    from bridge.app import Bridge


class WebChat(DashboardPart):
    """The chat page and the completions endpoint of one Bridge, and its `web` sender."""

    def __init__(self, bridge: Bridge, render: Render) -> None:
        super().__init__(bridge, render)
        self.sender = web_sender(bridge)
        self.turns = WebTurns(bridge)

    def routes(self, app: web.Application) -> None:
        ChatPage(self.bridge, self.render, self.turns, self.sender).routes(app)
        Completions(self.bridge, self.turns, self.sender).routes(app)


def web_sender(bridge: Bridge) -> WebSender:
    """The Bridge's web sender, registered on first use: one per Bridge however often the admin app is
    made, so every page and call watches the sender that delivery uses."""
    found = bridge.delivery.sender(SURFACE)
    if isinstance(found, WebSender):
        return found
    sender = WebSender()
    bridge.add_sender(sender)
    return sender


__all__ = ["SURFACE", "WEB_OPERATOR", "WebChat", "WebSender", "web_sender"]
