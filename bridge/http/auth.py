"""Who may use the admin server: the token as a bearer header or the login form's cookie; CSRF checks."""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.typedefs import Middleware

from bridge.config import Settings

log = logging.getLogger(__name__)

COOKIE = "bridge_admin"
CSRF_HEADER = "X-CSRF-Token"
CSRF_FIELD = "csrf"
# Routes anyone may reach: the login form itself, and the stylesheet and script it uses (the same
# files for everyone, shipped in the package; nothing in them is secret).
OPEN_PATHS = frozenset({"/login"})
OPEN_PREFIX = "/static/"
# Webhooks ([[hooks]]) are posted by other programs, never by a browser, and each checks its own
# secret (bridge.http.hooks): the admin token must not be handed to them.
SELF_GUARDED_PREFIX = "/hooks/"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# A wrong token costs its sender this long: cheap for a person, slow for a guesser.
WRONG_TOKEN_DELAY_S = 0.5

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def token_file(settings: Settings) -> Path:
    """Where a start without [admin] token keeps the token it made (beside the SQLite file)."""
    return Path(settings.storage.path).parent / "admin.token"


def admin_token(settings: Settings) -> tuple[str, Path | None]:
    """The configured token, or a new random one written (owner-only) to token_file; and that file."""
    configured = settings.admin.token.get_secret_value()
    if configured:
        return configured, None
    path = token_file(settings)
    made = secrets.token_urlsafe(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Created owner-only before the token is written, so it is never readable by others.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(made + "\n")
    os.chmod(path, 0o600)
    return made, path


def read_token(settings: Settings) -> str | None:
    """The token a running `bridge run` uses, as `bridge admin` and `bridge health` find it."""
    configured = settings.admin.token.get_secret_value()
    if configured:
        return configured
    try:
        return token_file(settings).read_text().strip() or None
    except OSError:
        return None


class AdminAuth:
    """Checks a request's credentials. The cookie holds an HMAC of the token, never the token, and
    the CSRF value is another: both change when the token does, which logs every browser out."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()
        self.session = self._derive("session")
        self.csrf = self._derive("csrf")

    def _derive(self, purpose: str) -> str:
        return hmac.new(self._token, f"bridge-admin-{purpose}".encode(), hashlib.sha256).hexdigest()

    def token_ok(self, given: str) -> bool:
        return hmac.compare_digest(given.strip().encode(), self._token)

    def who(self, request: web.Request) -> Literal["bearer", "cookie"] | None:
        header = request.headers.get("Authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer" and value and self.token_ok(value):
            return "bearer"
        cookie = request.cookies.get(COOKIE, "")
        if cookie and hmac.compare_digest(cookie.encode(), self.session.encode()):
            return "cookie"
        return None

    async def csrf_ok(self, request: web.Request) -> bool:
        """A browser's state-changing request: from this origin, with the page's CSRF value."""
        if not same_origin(request):
            return False
        given = request.headers.get(CSRF_HEADER, "")
        if not given and request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
            given = str((await request.post()).get(CSRF_FIELD, ""))
        return bool(given) and hmac.compare_digest(given.encode(), self.csrf.encode())

    def middleware(self) -> Middleware:
        @web.middleware
        async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
            if (
                request.path in OPEN_PATHS
                or (request.path.startswith(OPEN_PREFIX) and request.method in SAFE_METHODS)
                or (request.path.startswith(SELF_GUARDED_PREFIX) and request.method == "POST")
            ):
                return await handler(request)
            who = self.who(request)
            if who is None:
                if request.method in SAFE_METHODS and "text/html" in request.headers.get("Accept", ""):
                    raise web.HTTPSeeOther(f"/login?next={request.path_qs}")
                return web.json_response(
                    {
                        "error": "unauthorized",
                        "detail": "send the [admin] token as 'Authorization: Bearer …'",
                    },
                    status=401,
                    headers={"WWW-Authenticate": 'Bearer realm="bridge"'},
                )
            # A bearer header is never added by a browser on its own, so only cookies can be forged.
            if who == "cookie" and request.method not in SAFE_METHODS and not await self.csrf_ok(request):
                return web.json_response(
                    {"error": "csrf", "detail": "a form of this dashboard, with its csrf value, is required"},
                    status=403,
                )
            return await handler(request)

        return guard


def same_origin(request: web.Request) -> bool:
    """No Origin (or Referer) from another site: a cross-site form or script is refused."""
    claimed = request.headers.get("Origin") or request.headers.get("Referer")
    if not claimed:
        return True  # not a browser's cross-site request (those carry an Origin on POST)
    return urlsplit(claimed).netloc == request.host


def local_path(target: str) -> str:
    """A redirect target after login that stays on this server."""
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target
