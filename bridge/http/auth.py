"""Who may use the admin server: the token as a bearer header or the login form's cookie; CSRF checks."""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import stat
import unicodedata
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Literal
from urllib.parse import quote, unquote, urlsplit

from aiohttp import web
from aiohttp.typedefs import Middleware

from bridge.config import Settings
from bridge.errors import ConfigError
from bridge.http.throttle import WrongTokens

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
# How many times a redirect target is percent-decoded while looking for a way off this server; a
# target still encoded after that is refused.
DECODE_ROUNDS = 3

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def token_file(settings: Settings) -> Path:
    """Where a start without [admin] token keeps the token it made (beside the SQLite file; that path
    is resolved against the config file's folder, so every `bridge` command finds the same file)."""
    return Path(settings.storage.path).parent / "admin.token"


def admin_token(settings: Settings) -> tuple[str, Path | None]:
    """The configured token; else the one kept in token_file; else a new one written there (owner-only).
    Kept across starts, so a dashboard login (its cookie derives from the token) survives a restart."""
    configured = settings.admin.token.get_secret_value()
    if configured:
        return configured, None
    path = token_file(settings)
    kept = kept_token(path)
    if kept is not None:
        return kept, path
    return write_token(path), path


def kept_token(path: Path) -> str | None:
    """The token in PATH, or None when it is missing, unreadable or empty. A file others may read is
    made owner-only first, with a warning that names it."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            try:
                os.chmod(path, 0o600)
                log.warning("%s was readable by others (mode %o): made owner-only (0600)", path, mode)
            except OSError as exc:
                log.warning(
                    "%s is readable by others (mode %o) and could not be made owner-only (%s): "
                    "run `chmod 600 %s`",
                    path,
                    mode,
                    exc.strerror or exc,
                    path,
                )
        return path.read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def write_token(path: Path) -> str:
    """A new random token in PATH, replacing any there: written owner-only (0600) to a new file beside
    it, then renamed over it, so the file is never readable by others nor seen half-written."""
    made = secrets.token_urlsafe(32)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                os.fchmod(out.fileno(), 0o600)  # whatever the umask
                out.write(made + "\n")
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, path)
        finally:
            temporary.unlink(missing_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"Can't write the admin token to {path} ({exc.strerror or exc})",
            remedy="make its folder writable by this user, or set [admin] token (or BRIDGE_ADMIN__TOKEN)",
        ) from None
    return made


def read_token(settings: Settings) -> str | None:
    """The token a running `bridge run` uses, as `bridge admin` and `bridge health` find it."""
    configured = settings.admin.token.get_secret_value()
    if configured:
        return configured
    return kept_token(token_file(settings))


class AdminAuth:
    """Checks a request's credentials. The cookie holds an HMAC of the token, never the token, and
    the CSRF value is another: both change when the token does, which logs every browser out.
    Wrong tokens, as a bearer header or at the login form, are counted in `wrong` (bridge.http.throttle)."""

    def __init__(self, token: str, wrong: WrongTokens | None = None) -> None:
        self._token = token.encode()
        self.session = self._derive("session")
        self.csrf = self._derive("csrf")
        self.wrong = wrong or WrongTokens()

    def _derive(self, purpose: str) -> str:
        return hmac.new(self._token, f"bridge-admin-{purpose}".encode(), hashlib.sha256).hexdigest()

    def token_ok(self, given: str) -> bool:
        return hmac.compare_digest(given.strip().encode(), self._token)

    def who(self, request: web.Request) -> Literal["bearer", "cookie"] | int | None:
        """How the request is authenticated; None: it is not; a number: a locked-out client's bearer
        header, not checked, and the seconds to wait (see bridge.http.throttle)."""
        header = request.headers.get("Authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer" and value:
            client = client_address(request)
            wait = self.wrong.wait_s(client)
            if wait is not None:
                return wait
            if self.token_ok(value):
                return "bearer"
            self.wrong.failed(client)
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
            if isinstance(who, int):
                return too_many(who)
            if who is None:
                if request.method in SAFE_METHODS and "text/html" in request.headers.get("Accept", ""):
                    raise web.HTTPSeeOther("/login?next=" + quote(request.raw_path, safe="/"))
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


def client_address(request: web.Request) -> str:
    """Whom wrong tokens are counted against: the peer's address (a proxy in front counts as one)."""
    return request.remote or "unknown"


def too_many(wait_s: int) -> web.Response:
    """The answer to a locked-out client's token, bearer or API (the login form renders its own)."""
    return web.json_response(
        {
            "error": "too_many_wrong_tokens",
            "detail": f"too many wrong tokens from this address lately; try again in {wait_s} s",
        },
        status=429,
        headers={"Retry-After": str(wait_s)},
    )


def local_path(target: str) -> str:
    """A redirect target after login that stays on this server: a path of it, else "/".

    A browser reads a Location more loosely than urllib: it drops tabs and newlines anywhere and
    spaces and control characters at the ends, and takes a backslash for a slash, so
    `/<TAB>/evil.example` reaches it as `//evil.example`, another host. So a target with any control
    or space character, a backslash, a scheme or a host, or a start of `//`, is refused outright (not
    cleaned up), in the form given and in each percent-decoding of it.
    """
    form = target
    for _ in range(DECODE_ROUNDS):
        if not _a_plain_path(form):
            return "/"
        decoded = unquote(form)
        if decoded == form:
            return target
        form = decoded
    return "/"  # still encoded after DECODE_ROUNDS: nothing a page of ours would link to


def _a_plain_path(target: str) -> bool:
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        return False
    # Cc (controls, tab and newline among them), Cf (invisible format characters), Zs/Zl/Zp (spaces).
    if any(unicodedata.category(ch)[0] in "CZ" for ch in target):
        return False
    parts = urlsplit(target)
    return not parts.scheme and not parts.netloc
