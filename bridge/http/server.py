"""The admin server inside `bridge run`: login, /healthz, /readyz, /metrics, the API and the dashboard."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from aiohttp import web

from bridge.config import Settings
from bridge.errors import ConfigError
from bridge.http.api import AdminApi
from bridge.http.auth import (
    COOKIE,
    AdminAuth,
    admin_token,
    client_address,
    local_path,
    same_origin,
)
from bridge.http.dashboard import Dashboard
from bridge.http.dashboard.logs import LogsPage
from bridge.http.dashboard.tasks import TasksPage
from bridge.http.dashboard.tools import ToolsPage
from bridge.http.hooks import HookEndpoint
from bridge.http.pages import Pages
from bridge.http.pairing_api import PairingApi
from bridge.http.policy_edit import PolicyEditor
from bridge.http.webchat import WebChat
from bridge.metrics import CONTENT_TYPE_LATEST
from bridge.serving import ConnectionLimits, LimitedServer

if TYPE_CHECKING:
    from bridge.app import Bridge
    from bridge.reload import ConfigReloader

log = logging.getLogger(__name__)

# How long requests in progress (an open event stream) may take to end when the server stops.
STOP_TIMEOUT_S = 1.0
# A store that does not answer a trivial read within this is not healthy.
HEALTH_TIMEOUT_S = 2.0
# Adapter states in which a platform can deliver: listening, or connected for sending only (a
# worker that stands by for another's polling connection).
READY_STATES = frozenset({"running", "sending"})


class PlatformState(Protocol):
    """What /readyz and the dashboard read of a platform: a guarded adapter's surface and lifecycle state."""

    @property
    def surface(self) -> str: ...

    @property
    def state(self) -> str: ...


class AdminServer:
    """Serves the admin routes for one Bridge; every route but /login needs the token (see auth)."""

    def __init__(
        self,
        bridge: Bridge,
        adapters: Sequence[PlatformState],
        settings: Settings,
        *,
        config_path: Path | None = None,
        reloader: ConfigReloader | None = None,
    ) -> None:
        self.bridge = bridge
        self.adapters = adapters
        self.settings = settings
        self.editor = PolicyEditor(bridge, config_path, reloader)
        token, self.token_path = admin_token(settings)
        self.auth = AdminAuth(token)
        self.pages = Pages(settings.agent.timezone)
        self._server: LimitedServer | None = None

    @property
    def url(self) -> str:
        return admin_url(self.settings)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.auth.middleware()])
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/login", self.login_form)
        app.router.add_post("/login", self.login)
        app.router.add_post("/logout", self.logout)
        AdminApi(self.bridge).routes(app)
        PairingApi(self.bridge).routes(app)
        self.editor.routes(app)
        read_only = self.editor.read_only
        dashboard = Dashboard(self.bridge, self._platforms, self.pages, self.auth.csrf, read_only=read_only)
        dashboard.routes(app)
        for page in (LogsPage, TasksPage, ToolsPage, WebChat):
            page(self.bridge, dashboard.render).routes(app)
        if self.bridge.hooks.hooks:
            for method, path, handler in HookEndpoint(self.bridge.hooks).routes():
                app.router.add_route(method, path, handler)
        return app

    @property
    def open_connections(self) -> int:
        return self._server.open_connections if self._server is not None else 0

    async def start(self) -> None:
        cfg = self.settings.admin
        # A short shutdown: an open event stream must not hold a stopping bridge past its grace period.
        server = LimitedServer(
            self.app(),
            listen=cfg.listen,
            port=cfg.port,
            limits=ConnectionLimits(cfg.max_connections, cfg.header_timeout_s),
            name="admin server",
            remedy="[admin] max_connections",
            shutdown_timeout=STOP_TIMEOUT_S,
        )
        try:
            await server.start()
        except OSError as exc:
            raise ConfigError(
                f"Can't listen on {cfg.listen}:{cfg.port} for the admin server ({exc.strerror or exc})",
                remedy="set [admin] port to a free port, or [admin] enabled = false",
            ) from None
        self._server = server
        where = f"; token in {self.token_path}" if self.token_path else ""
        log.info("admin server on %s (`bridge admin` prints how to log in%s)", self.url, where)

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop()

    # ------------------------------------------------------------------ health

    async def _store_answers(self) -> str | None:
        """None when the store answers a trivial read in time, else what went wrong."""
        try:
            await asyncio.wait_for(self.bridge.store.ping(), HEALTH_TIMEOUT_S)
        except TimeoutError:
            return f"no answer within {HEALTH_TIMEOUT_S:g} s"
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        return None

    def _platforms(self) -> dict[str, str]:
        return {a.surface: a.state for a in self.adapters}

    async def healthz(self, request: web.Request) -> web.Response:
        problem = await self._store_answers()
        if problem is not None:
            return web.json_response({"status": "unhealthy", "store": problem}, status=503)
        return web.json_response({"status": "ok", "store": "ok"})

    async def readyz(self, request: web.Request) -> web.Response:
        problem = await self._store_answers()
        platforms = self._platforms()
        ready = problem is None and all(state in READY_STATES for state in platforms.values())
        body = {"status": "ready" if ready else "not ready", "store": problem or "ok", "platforms": platforms}
        return web.json_response(body, status=200 if ready else 503)

    async def metrics(self, request: web.Request) -> web.Response:
        metrics = self.bridge.metrics
        try:
            metrics.set_outbox(await self.bridge.store.outbox_counts())
        except Exception:
            log.warning("metrics: the outbox could not be counted", exc_info=True)
        return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    # ------------------------------------------------------------------ pages

    async def login_form(
        self, request: web.Request, *, wrong: bool = False, wait: int | None = None
    ) -> web.Response:
        target = local_path(request.query.get("next", "/"))
        status = 429 if wait is not None else 401 if wrong else 200
        page = self.pages.render(
            "login.html", status=status, page="login", csrf="", target=target, wrong=wrong, wait=wait
        )
        if wait is not None:
            page.headers["Retry-After"] = str(wait)
        return page

    async def login(self, request: web.Request) -> web.Response:
        if not same_origin(request):
            return web.json_response(
                {"error": "csrf", "detail": "log in from this server's own form"}, status=403
            )
        form = await request.post()
        # A locked-out client's token is not checked, right or wrong (bridge.http.throttle).
        client = client_address(request)
        wait = self.auth.wrong.wait_s(client)
        if wait is not None:
            return await self.login_form(request, wait=wait)
        if not self.auth.token_ok(str(form.get("token", ""))):
            self.auth.wrong.failed(client)
            return await self.login_form(request, wrong=True)
        response = web.HTTPSeeOther(local_path(str(form.get("next", "/"))))
        response.set_cookie(
            COOKIE, self.auth.session, httponly=True, samesite="Strict", secure=request.secure, path="/"
        )
        raise response

    async def logout(self, request: web.Request) -> web.Response:
        response = web.HTTPSeeOther("/login")
        response.del_cookie(COOKIE, path="/")
        raise response


def admin_url(settings: Settings) -> str:
    """Where the admin server answers, as a browser on this machine reaches it."""
    cfg = settings.admin
    host = cfg.listen
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{cfg.port}/"


__all__ = ["AdminServer", "admin_url"]
