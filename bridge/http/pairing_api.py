"""The admin API of DM pairing: the codes waiting and the people approved; approve a code, revoke a person."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import TYPE_CHECKING, Any

from aiohttp import web

from bridge.errors import PairingLimited
from bridge.http.replies import bad_request, body_of, not_found

if TYPE_CHECKING:
    from bridge.app import Bridge
    from bridge.gateway.pairing import Pairing

# Who an approval from the dashboard is recorded as.
DASHBOARD = "dashboard"


class PairingApi:
    """Routes under /api/pairing, through the same service as `/pair` and `bridge pair`."""

    def __init__(self, bridge: Bridge) -> None:
        self.bridge = bridge

    @property
    def pairing(self) -> Pairing:
        return self.bridge.pairing

    def routes(self, app: web.Application) -> None:
        add = app.router
        add.add_get("/api/pairing", self.listing)
        add.add_post("/api/pairing/approve", self.approve)
        add.add_post("/api/pairing/revoke", self.revoke)

    async def listing(self, request: web.Request) -> web.Response:
        """{"pending": [{surface, user_id, display_name, code, chat_id, created_at, expires_at, sent_at}],
        "approved": [{surface, user_id, display_name, approved_at, approved_by}]}"""
        pending = [dataclasses.asdict(code) for code in await self.pairing.pending()]
        approved = [dataclasses.asdict(user) for user in await self.pairing.approved()]
        return web.json_response({"pending": pending, "approved": approved})

    async def approve(self, request: web.Request) -> web.Response:
        """{"code": "ABCD-EFGH"} → {"ok": true, "approved": {...}}; 404 for a wrong or expired code,
        429 after too many wrong ones."""
        code = _text(await body_of(request, forms=True), "code")
        try:
            user = await self.pairing.approve(code, by=DASHBOARD)
        except PairingLimited as exc:
            raise _too_many(exc) from None
        if user is None:
            raise not_found("no such code: it is wrong, or it expired")
        return web.json_response({"ok": True, "approved": dataclasses.asdict(user)})

    async def revoke(self, request: web.Request) -> web.Response:
        """{"surface": "telegram", "user_id": "777"} → {"ok": true}; 404 when they were not approved."""
        body = await body_of(request, forms=True)
        surface, user_id = _text(body, "surface"), _text(body, "user_id")
        if not await self.pairing.revoke(surface, user_id):
            raise not_found(f"{surface}:{user_id} is not approved")
        return web.json_response({"ok": True})


def _text(body: dict[str, Any], name: str) -> str:
    """A required text field; user ids may come as JSON numbers."""
    value = body.get(name)
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise bad_request(f"{name} is required")
    return value.strip()


def _too_many(exc: PairingLimited) -> web.HTTPTooManyRequests:
    return web.HTTPTooManyRequests(
        text=json.dumps({"error": "too_many_attempts", "detail": str(exc)}),
        content_type="application/json",
        headers={"Retry-After": str(math.ceil(exc.retry_after_s))},
    )
