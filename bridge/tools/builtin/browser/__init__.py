"""The `browser` group: open, snapshot, click, type and screenshot, on Playwright driving Chromium.

Off until `[tools.browser] enabled`. Each session gets its own browser context (its own cookies and
pages), closed when idle; one Chromium serves them all, started on first use and closed with the
registry. What the browser may reach is webfetch's rule: public addresses only unless
`[tools] allow_private_network`, judged on every request, redirect and WebSocket.

`guard` decides on a URL or a host, `proxy` is the vetting proxy each context's requests all go
through, `snapshot` reads a page and marks its text untrusted, `engine` is the only module that imports
Playwright (loaded on first use), `session` keeps Chromium and the contexts, `tools` are the tools.
May import bridge.config, bridge.errors and bridge.tools.
"""

from __future__ import annotations

from bridge.config import Settings
from bridge.tools.base import ToolGroup
from bridge.tools.builtin.browser.failure import BrowserFailure
from bridge.tools.builtin.browser.guard import Policy, Refusal
from bridge.tools.builtin.browser.session import BrowserManager
from bridge.tools.builtin.browser.tools import browser_tools

DESCRIPTION = "Browse the web in a real browser: open pages, read them, click, fill in forms, screenshots"


def group_of(manager: BrowserManager) -> ToolGroup:
    """The group on `manager`: its tools act on it, and closing the registry closes it."""
    return ToolGroup(
        name="browser",
        description=DESCRIPTION,
        tools=browser_tools(manager),
        closer=manager.aclose,
    )


def browser_group(settings: Settings) -> ToolGroup:
    """The `browser` group for a Bridge with these settings ([tools.browser], allow_private_network)."""
    policy = Policy(allow_private_network=settings.tools.allow_private_network)
    return group_of(BrowserManager(settings.tools.browser, policy))


__all__ = ["BrowserFailure", "BrowserManager", "Policy", "Refusal", "browser_group", "group_of"]
