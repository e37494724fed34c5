"""The `web` group: webfetch, and web_search once a provider is configured.

`guard` is the SSRF guard (every tool that reaches the web dials through it), `text` turns HTML into
readable text, `fetch` is webfetch and `search` is web_search with its providers.
"""

from __future__ import annotations

from bridge.config.tools import ToolsSettings
from bridge.tools.base import ToolGroup
from bridge.tools.builtin.web.fetch import webfetch
from bridge.tools.builtin.web.guard import (
    GuardedNetworkBackend,
    GuardedTransport,
    is_blocked_address,
    system_resolver,
)
from bridge.tools.builtin.web.search import web_search
from bridge.tools.builtin.web.text import html_to_text


def web_group(settings: ToolsSettings | None = None) -> ToolGroup:
    """The `web` group: webfetch, and web_search where [tools.web_search] names a provider."""
    if settings is not None and settings.web_search.enabled:
        return ToolGroup(
            name="web",
            description="Search the web, and fetch a page to read its text",
            tools=(webfetch, web_search),
        )
    return ToolGroup(name="web", description="Fetch a web page and read its text", tools=(webfetch,))


__all__ = [
    "GuardedNetworkBackend",
    "GuardedTransport",
    "html_to_text",
    "is_blocked_address",
    "system_resolver",
    "web_group",
    "web_search",
    "webfetch",
]
