"""The dashboard's tools page: MCP servers' state, their tools and token cost, skills and tool groups."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from bridge.app import Bridge


class ToolsPage:
    """Being built (issue 33)."""

    def __init__(self, bridge: Bridge, render: Callable[..., web.Response]) -> None:
        self.bridge = bridge
        # Dashboard.render: (template, page, *, status=200, **context) -> a page with the CSRF value.
        self.render = render

    def routes(self, app: web.Application) -> None:
        pass
