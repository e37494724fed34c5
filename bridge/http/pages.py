"""The dashboard's HTML: Jinja2 templates shipped in the package, escaped by default, with safe headers."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote
from zoneinfo import ZoneInfo

import jinja2
from aiohttp import web

from bridge.events import framed

if TYPE_CHECKING:
    from bridge.app import Bridge

# Pages hold conversations and config: no caching, no framing, no script or style from elsewhere.
# Every script and style is a file under /static/, so no inline code is allowed at all.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


# Dashboard.render: (template, page, *, status=200, **context) -> a page with the CSRF value.
Render = Callable[..., web.Response]


class DashboardPart:
    """A page (and its API) that the admin server adds beside the dashboard's own: the logs, tasks,
    tools and chat pages. Built with the Bridge and the dashboard's `render`; `routes` adds its own."""

    def __init__(self, bridge: Bridge, render: Render) -> None:
        self.bridge = bridge
        self.render = render

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError


class Pages:
    """Renders the templates in bridge/http/templates with the filters they share."""

    def __init__(self, timezone: str = "UTC") -> None:
        self.zone = ZoneInfo(timezone)
        self.env = jinja2.Environment(
            loader=jinja2.PackageLoader("bridge.http", "templates"),
            autoescape=True,
            # Lenient: a trace or row without an optional field renders as empty, never as a 500.
            undefined=jinja2.ChainableUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters.update(
            when=self.when,
            ms=duration,
            age=age,
            ago=lambda stamp: age(time.time() - stamp) if stamp else "—",
            path=path_part,
            pretty=pretty_json,
            short=shorten,
            send_mode=send_mode,
            # A user message with its attachments named, as sessions_history shows it.
            framed=framed,
        )

    def render(self, template: str, *, status: int = 200, **context: Any) -> web.Response:
        text = self.env.get_template(template).render(**context)
        return web.Response(text=text, status=status, content_type="text/html", headers=SECURITY_HEADERS)

    def when(self, stamp: float | None) -> str:
        """A Unix time in the agent's time zone, to the second."""
        if not stamp:
            return "—"
        return dt.datetime.fromtimestamp(stamp, self.zone).strftime("%Y-%m-%d %H:%M:%S")


def send_mode(override: str | None) -> str:
    """A session's stored override as /send names it: on, off or inherit."""
    return {"allow": "on", "deny": "off"}.get(override or "", "inherit")


def duration(ms: float | None) -> str:
    if ms is None:
        return "—"
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    return f"{ms / 60_000:.1f} min"


def age(seconds: float | None) -> str:
    """How long something has run or waited, as an operator reads it at a glance: 8 s, 3 min 5 s,
    2 h 10 min."""
    if seconds is None:
        return "—"
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


def path_part(value: str) -> str:
    """A session key or id as one path segment of a link (a key holds ':' and may hold '/')."""
    return quote(str(value), safe=":")


def pretty_json(raw: Any) -> str:
    """Tool arguments and results as indented JSON where they are JSON, else as they are."""
    value = raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError:
            return raw
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def shorten(text: str | None, limit: int = 140) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
