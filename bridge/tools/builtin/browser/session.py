"""The browser's lifecycle: one Chromium, started on first use and closed with the registry, and one
context per session (its Tab), closed after `idle_close_s` without a call.

Playwright is imported here only when Chromium is first needed (engine imports it), so a Bridge without
the `browser` extra still loads the group; its tools then answer `unavailable`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bridge.config.tools import BrowserSettings
from bridge.tools.builtin.browser.failure import BrowserFailure
from bridge.tools.builtin.browser.guard import Policy

if TYPE_CHECKING:
    from bridge.tools.builtin.browser.engine import Chromium, Tab

log = logging.getLogger(__name__)

INSTALL_HINT = "install Bridge with the browser extra (pip install 'bridge[browser]')"


@dataclass(eq=False)
class BrowserSession:
    """One session's context and its bookkeeping: calls in flight (never closed under one), the last
    use (for idle closing), and `closed`, set once the context is gone."""

    session_id: str
    tab: Tab
    # Calls of this session run one at a time: a context's page is one cursor.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0
    last_used: float = 0.0
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    watcher: asyncio.Task[None] | None = None


class BrowserManager:
    """Chromium and the sessions' contexts. `policy` decides what every context may reach."""

    def __init__(self, settings: BrowserSettings, policy: Policy) -> None:
        self.settings = settings
        self.policy = policy
        self._chromium: Chromium | None = None
        self._sessions: dict[str, BrowserSession] = {}
        # Held while Chromium starts or a context opens, so concurrent first calls start one of each.
        self._opening = asyncio.Lock()
        self._closed = False

    @property
    def running(self) -> bool:
        """Chromium is started and still connected."""
        return self._chromium is not None and self._chromium.connected

    def session(self, session_id: str) -> BrowserSession | None:
        """The open context of session_id, if any."""
        return self._sessions.get(session_id)

    @contextlib.asynccontextmanager
    async def use(self, session_id: str) -> AsyncIterator[Tab]:
        """The session's Tab for one call, opened (and Chromium started) if need be; BrowserFailure
        ("unavailable") if it cannot be."""
        entry = self._sessions.get(session_id)
        if entry is not None:
            # Claimed before any await, so the idle watcher cannot close it under this call.
            entry.users += 1
        else:
            entry = await self._open(session_id)
        loop = asyncio.get_running_loop()
        try:
            async with entry.lock:
                yield entry.tab
        finally:
            entry.users -= 1
            entry.last_used = loop.time()

    async def _open(self, session_id: str) -> BrowserSession:
        async with self._opening:
            if self._closed:
                raise BrowserFailure("unavailable", "The browser is shutting down.")
            entry = self._sessions.get(session_id)
            if entry is not None:
                entry.users += 1
                return entry
            chromium = await self._started()
            tab = await chromium.new_tab(self.policy, self.settings.timeout_s)
            entry = BrowserSession(session_id, tab, users=1, last_used=asyncio.get_running_loop().time())
            entry.watcher = asyncio.create_task(self._watch(entry), name=f"browser-idle:{session_id}")
            self._sessions[session_id] = entry
            return entry

    async def _started(self) -> Chromium:
        if self._chromium is not None and self._chromium.connected:
            return self._chromium
        if self._chromium is not None:
            # Chromium died (crashed, killed): its contexts went with it.
            log.warning("browser: Chromium is gone; starting it again")
            stale, self._sessions = list(self._sessions.values()), {}
            await asyncio.gather(*(self._close_entry(entry) for entry in stale))
            await self._chromium.close()
            self._chromium = None
        try:
            from bridge.tools.builtin.browser.engine import Chromium
        except ImportError as exc:
            raise BrowserFailure(
                "unavailable",
                f"The browser needs Playwright, which is not installed ({exc.name}); {INSTALL_HINT}.",
            ) from None
        self._chromium = await Chromium.launch(self.settings.executable)
        return self._chromium

    async def _watch(self, entry: BrowserSession) -> None:
        """Close entry's context once nothing used it for idle_close_s."""
        loop = asyncio.get_running_loop()
        idle = self.settings.idle_close_s
        while True:
            wait = entry.last_used + idle - loop.time()
            if wait <= 0 and entry.users == 0:
                break
            await asyncio.sleep(max(wait, idle / 10, 0.01))
        # No await between the check and the removal: a call claims the entry synchronously too.
        if self._sessions.get(entry.session_id) is entry:
            del self._sessions[entry.session_id]
        entry.watcher = None
        log.debug("browser: closing the idle context of session %s", entry.session_id)
        await self._close_entry(entry)

    async def _close_entry(self, entry: BrowserSession) -> None:
        watcher, entry.watcher = entry.watcher, None
        if watcher is not None and watcher is not asyncio.current_task():
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        try:
            await entry.tab.close()
        finally:
            entry.closed.set()

    async def aclose(self) -> None:
        """Close every context and Chromium (ToolGroup.closer: the registry's aclose calls it)."""
        async with self._opening:
            self._closed = True
            entries, self._sessions = list(self._sessions.values()), {}
            await asyncio.gather(*(self._close_entry(entry) for entry in entries), return_exceptions=True)
            chromium, self._chromium = self._chromium, None
            if chromium is not None:
                await chromium.close()
