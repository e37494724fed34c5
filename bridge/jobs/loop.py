"""The loop under scheduled tasks and webhook events: wake when something is due, start its runs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from bridge.sessions.authority import Authorities

if TYPE_CHECKING:
    from bridge.config import Settings
    from bridge.jobs.headless import Headless
    from bridge.metrics import Metrics
    from bridge.store.tables import DatabaseStore

log = logging.getLogger(__name__)

# The loop looks at the database at least this often: for work another process stored there (a
# `bridge tasks run-now`, a webhook event taken by another worker) and for a clock that jumped (a
# suspended host). One indexed read each time.
POLL_S = 5.0
# After a pass that failed, the loop waits this long before the next: a fault that repeats (the
# database away) must not become a busy loop that floods the log.
RETRY_AFTER_S = 5.0


class DueLoop:
    """Calls `tick()` when woken, at `next_due()`, or every POLL_S; keeps the runs it started (each
    through `headless`), so a shutdown can wait for them or stop them."""

    name = "due"

    def __init__(
        self,
        settings: Settings,
        store: DatabaseStore,
        headless: Headless,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.store = store
        self.headless = headless
        self.clock = clock
        # Who the owners are, for the authority of the runs it starts (the composition root adds the
        # console's).
        self.authorities = Authorities(settings.owners)
        # Where the ends of firings and events are counted; the composition root sets it (as the
        # runner's), and without it nothing is counted.
        self.metrics: Metrics | None = None
        self._wake = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None
        self._runs: set[asyncio.Task[None]] = set()

    async def tick(self) -> int:
        """Start every run that is due now; how many."""
        raise NotImplementedError

    async def next_due(self) -> float | None:
        """When the next run is due (Unix seconds), where known."""
        return None

    def begin(self) -> None:
        self._loop = asyncio.create_task(self._run(), name=self.name)

    def wake(self) -> None:
        self._wake.set()

    def spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        run = asyncio.create_task(work, name=name)
        self._runs.add(run)
        run.add_done_callback(self._runs.discard)

    async def halt(self) -> None:
        """Start nothing more; runs in progress go on (a shutdown's grace period covers them)."""
        loop, self._loop = self._loop, None
        if loop is not None:
            loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop

    async def stop(self) -> None:
        """Start nothing more, and stop the runs in progress (each records itself as interrupted)."""
        await self.halt()
        await self.idle(cancel=True)

    async def idle(self, *, cancel: bool = False) -> None:
        """Wait until the runs in progress have ended (cancelled first, with `cancel`)."""
        while self._runs:
            if cancel:
                for run in self._runs:
                    run.cancel()
            await asyncio.gather(*list(self._runs), return_exceptions=True)

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            floor = 0.0
            try:
                await self.tick()
            except Exception:
                log.exception("%s: a pass over the work due failed; trying again shortly", self.name)
                floor = RETRY_AFTER_S
            try:
                upcoming = await self.next_due()
            except Exception:
                log.exception("%s: the next due time could not be read", self.name)
                upcoming = None
            delay = POLL_S if upcoming is None else min(max(upcoming - self.clock(), 0.0), POLL_S)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(delay, floor))
